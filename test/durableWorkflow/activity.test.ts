import { assert, describe, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Fiber from "effect/Fiber"
import * as TestClock from "effect/TestClock"
import { FatalError } from "../../src/core/FatalError.js"
import { DurableWorkflow, greet, QUEUE, setup, startWorker, until } from "./support.js"

describe("Durable Workflow activities", () => {
  it.scoped("runs an activity with its decoded arguments and completes it with an Avro result", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const { worker, running } = yield* startWorker(server, { steps: [greet] })
      const { taskId } = server.enqueueActivityTask({ activityType: "greeting.compose", taskQueue: QUEUE, input: ["Ada"] })
      yield* until(server, () => server.completedActivityTasks.length === 1)
      const completion = server.completedActivityTasks[0]!
      assert.strictEqual(completion.taskId, taskId)
      assert.strictEqual(completion.leaseOwner, worker.id)
      assert.deepStrictEqual(Either.getOrThrow(completion.decodedResult!), "hello Ada")
      yield* worker.stop
      yield* Fiber.join(running)
      assert.strictEqual(server.deregistrations.length, 1)
    }))

  it.scoped("a completion the server cannot take for a moment (503 x3) is retried until it is recorded; the activity ran once", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      let runs = 0
      const count = DurableWorkflow.activity("orders.count", () => Effect.sync(() => ++runs))
      yield* startWorker(server, { steps: [count] })
      server.failNext("activityTaskComplete", 503, undefined, 3)
      const { taskId } = server.enqueueActivityTask({ activityType: "orders.count", taskQueue: QUEUE, input: [] })
      // the retry sleeps on the test clock: move it on until the result is recorded
      for (let i = 0; i < 100 && server.completedActivityTasks.length === 0; i++) {
        yield* TestClock.adjust("100 millis")
        yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 5)))
      }
      assert.deepStrictEqual(server.requestsTo("activityTaskComplete").map((r) => r.status), [503, 503, 503, 200])
      assert.strictEqual(server.completedActivityTasks[0]!.taskId, taskId)
      assert.deepStrictEqual(Either.getOrThrow(server.completedActivityTasks[0]!.decodedResult!), 1)
      assert.strictEqual(runs, 1)
    }))

  it.scoped("a 429 completion waits the Retry-After the server sent before it is sent again", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      yield* startWorker(server, { steps: [greet] })
      server.injectFault("activityTaskComplete", { status: 429, headers: { "Retry-After": "4" }, times: 1 })
      server.enqueueActivityTask({ activityType: "greeting.compose", taskQueue: QUEUE, input: ["Ada"] })
      yield* until(server, () => server.requestsTo("activityTaskComplete").length === 1)
      yield* TestClock.adjust("3999 millis")
      yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 50)))
      assert.strictEqual(server.requestsTo("activityTaskComplete").length, 1)
      yield* TestClock.adjust("1 millis")
      yield* until(server, () => server.completedActivityTasks.length === 1)
      assert.deepStrictEqual(server.requestsTo("activityTaskComplete").map((r) => r.status), [429, 200])
    }))

  it.scoped("reports a thrown error with its type, class, integer code and stack", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      class PaymentDeclined extends Error {
        readonly code = 402
      }
      const charge = DurableWorkflow.activityFromPromise("payments.charge", async () => {
        throw new PaymentDeclined("card declined")
      })
      yield* startWorker(server, { steps: [charge] })
      server.enqueueActivityTask({ activityType: "payments.charge", taskQueue: QUEUE, input: [] })
      yield* until(server, () => server.failedActivityTasks.length === 1)
      const failure = server.failedActivityTasks[0]!.failure
      assert.strictEqual(failure["message"], "card declined")
      assert.strictEqual(failure["type"], "PaymentDeclined")
      assert.strictEqual(failure["class"], "effect-durable-worker.PaymentDeclined")
      assert.strictEqual(failure["code"], 402)
      assert.include(String(failure["stack_trace"]), "card declined")
      assert.isUndefined(failure["non_retryable"])
    }))

  it.scoped("a FatalError is reported non-retryable", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const charge = DurableWorkflow.activity("payments.charge", () => Effect.fail(new FatalError("fraud", "fraud")))
      yield* startWorker(server, { steps: [charge] })
      server.enqueueActivityTask({ activityType: "payments.charge", taskQueue: QUEUE, input: [] })
      yield* until(server, () => server.failedActivityTasks.length === 1)
      const failure = server.failedActivityTasks[0]!.failure
      assert.strictEqual(failure["non_retryable"], true)
      assert.strictEqual(failure["message"], "fraud")
    }))

  it.scoped("arguments with an unsupported codec fail non-retryably (decode_error)", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      yield* startWorker(server, { steps: [greet] })
      server.enqueueActivityTask({ activityType: "greeting.compose", taskQueue: QUEUE, payloadCodec: "json", input: ["x"] })
      yield* until(server, () => server.failedActivityTasks.length === 1)
      const decode = server.failedActivityTasks[0]!.failure
      assert.match(String(decode["message"]), /^cannot decode activity arguments with codec "json": unsupported_payload_codec/)
      assert.strictEqual(decode["non_retryable"], true)
    }))

  it.scoped("no activity registered: retryable failure naming the type", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      // no steps at all: supported_activity_types is empty, so every activity type is routed here
      yield* startWorker<never>(server, {})
      server.enqueueActivityTask({ activityType: "missing.type", taskQueue: QUEUE, input: [] })
      yield* until(server, () => server.failedActivityTasks.length === 1)
      const failure = server.failedActivityTasks[0]!.failure
      assert.strictEqual(failure["message"], "no activity registered for 'missing.type'")
      assert.isUndefined(failure["non_retryable"])
    }))

  it.scoped("heartbeat(details) is sent; a cancellation request raises ActivityCancelled, reported non-retryable", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const slow = DurableWorkflow.activity("slow.job", () =>
        Effect.gen(function*() {
          const ctx = yield* DurableWorkflow.ActivityContext
          for (let i = 0; ; i++) {
            yield* ctx.heartbeat({ step: i })
            yield* Effect.promise(() => new Promise((r) => setTimeout(r, 20)))
          }
        }))
      yield* startWorker(server, { steps: [slow] })
      const { taskId } = server.enqueueActivityTask({ activityType: "slow.job", taskQueue: QUEUE, input: [] })
      yield* until(server, () => server.activityHeartbeats.length >= 2)
      assert.deepStrictEqual(server.activityHeartbeats[0]!.body["details"], { step: 0 })
      server.requestActivityCancellation(taskId)
      yield* until(server, () => server.failedActivityTasks.length === 1)
      const failure = server.failedActivityTasks[0]!.failure
      assert.strictEqual(failure["message"], "activity cancelled")
      assert.strictEqual(failure["type"], "ActivityCancelled")
      assert.strictEqual(failure["non_retryable"], true)
    }))

  it.scoped("async activities read their context; the signal aborts on cancellation", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const seen: Array<unknown> = []
      const job = DurableWorkflow.activityFromPromise("async.job", async (a: number, b: number) => {
        const ctx = DurableWorkflow.activityContext()
        seen.push(ctx.info.activityType, ctx.info.attemptNumber, ctx.info.taskQueue)
        await ctx.heartbeatAsync({ a })
        return a + b
      })
      yield* startWorker(server, { steps: [job] })
      server.enqueueActivityTask({ activityType: "async.job", taskQueue: QUEUE, input: [2, 3] })
      yield* until(server, () => server.completedActivityTasks.length === 1)
      assert.deepStrictEqual(seen, ["async.job", 1, QUEUE])
      assert.deepStrictEqual(Either.getOrThrow(server.completedActivityTasks[0]!.decodedResult!), 5)
    }))
})

describe("Durable Workflow activities under adaptive concurrency", () => {
  it.scoped("an activity runs while a workflow task runs: workflow tasks have slots of their own, not the activities'", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const entered = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      // a workflow task that stays in flight until the test lets it go
      const held = DurableWorkflow.make("orders.held", (ctx) =>
        Deferred.succeed(entered, undefined).pipe(
          Effect.zipRight(Deferred.await(release)),
          Effect.zipRight(ctx.activity<string>("greeting.compose", ["Ada"]))
        ))
      // start = min = 1: one activity slot, which the workflow task must not take
      yield* startWorker(server, { steps: [greet], durableWorkflows: [held], concurrency: "adaptive" })
      server.enqueueWorkflowTask({ workflowType: "orders.held", taskQueue: QUEUE, input: [] })
      yield* Deferred.await(entered)
      server.enqueueActivityTask({ activityType: "greeting.compose", taskQueue: QUEUE, input: ["Grace"] })
      const ran = yield* Effect.promise(() =>
        server.waitUntil(() => server.completedActivityTasks.length === 1, 5_000).then(() => true, () => false)
      )
      yield* Deferred.succeed(release, undefined)
      assert.isTrue(ran, "the activity waited at the memory gate for the workflow task to end")
      yield* until(server, () => server.completedWorkflowTasks.length === 1)
    }))
})

describe("Durable Workflow activity results", () => {
  it.scoped("a result with no Avro representation fails the attempt non-retryably", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const bad = DurableWorkflow.activity("bad.result", () => Effect.succeed({ when: new Date(0) }))
      yield* startWorker(server, { steps: [bad] })
      server.enqueueActivityTask({ activityType: "bad.result", taskQueue: QUEUE, input: [] })
      yield* until(server, () => server.failedActivityTasks.length === 1)
      const failure = server.failedActivityTasks[0]!.failure
      assert.match(String(failure["message"]), /^the result of activity "bad\.result" cannot be encoded by the Durable Workflow codec: .* at \$\.when \(unsupported_value_type\)$/)
      assert.strictEqual(failure["type"], "unserializable_output")
      assert.strictEqual(failure["non_retryable"], true)
    }))
})
