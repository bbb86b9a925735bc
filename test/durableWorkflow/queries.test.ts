import { assert, describe, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as TestClock from "effect/TestClock"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { RunUntilTimeoutError } from "../../src/runtime/WorkerError.js"
import * as Codec from "../../src/wire/DurableWorkflowCodec.js"
import {
  blob,
  counterValue,
  DurableWorkflow,
  DW,
  eventually,
  greet,
  QUEUE,
  setup,
  startWorker,
  transportLayer,
  until,
  value,
  Worker
} from "./support.js"


const counter = DurableWorkflow.make("orders.counter", (ctx) =>
  Effect.gen(function*() {
    let count = 0
    ctx.onSignal("add", (n: number) => {
      count += n
    })
    ctx.onQuery("count", (offset: number = 0) => count + offset)
    ctx.onQuery("boom", () => {
      throw new Error("query exploded")
    })
    yield* ctx.waitCondition(() => count >= 100)
    return count
  }))

describe("Durable Workflow query tasks", () => {
  it.scoped("answers a query from the replayed state: plain JSON result and Avro envelope", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const { worker } = yield* startWorker(server, { durableWorkflows: [counter] })
      const { queryTaskId } = server.enqueueQueryTask({
        workflowType: "orders.counter",
        queryName: "count",
        taskQueue: QUEUE,
        queryInput: [1],
        historyEvents: [
          { event_type: "SignalReceived", payload: { signal_name: "add", arguments: blob([5]) } },
          { event_type: "SignalReceived", payload: { signal_name: "add", arguments: blob([7]) } }
        ]
      })
      yield* until(server, () => server.completedQueryTasks.length === 1)
      const outcome = server.completedQueryTasks[0]!
      assert.strictEqual(outcome.queryTaskId, queryTaskId)
      assert.strictEqual(outcome.leaseOwner, worker.id)
      assert.strictEqual(outcome.body["result"], 13)
      assert.deepStrictEqual(value(outcome.body["result_envelope"]), 13)
      assert.strictEqual(outcome.body["query_task_attempt"], 1)
    }))

  it.scoped("a query answer the server cannot take for a moment (503 x3, then a Retry-After) is retried until it is recorded", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      yield* startWorker(server, { durableWorkflows: [counter] })
      server.failNext("queryTaskComplete", 503, undefined, 3)
      server.injectFault("queryTaskComplete", { status: 429, headers: { "Retry-After": "4" }, times: 1 })
      const { queryTaskId } = server.enqueueQueryTask({
        workflowType: "orders.counter",
        queryName: "count",
        taskQueue: QUEUE,
        queryInput: [2],
        historyEvents: [{ event_type: "SignalReceived", payload: { signal_name: "add", arguments: blob([5]) } }]
      })
      // the retry sleeps on the test clock: move it on until the answer is recorded (the caller of
      // the query waits for it; a dropped answer is not asked for again before the caller gives up)
      for (let i = 0; i < 200 && server.completedQueryTasks.length === 0; i++) {
        yield* TestClock.adjust("100 millis")
        yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 5)))
      }
      assert.deepStrictEqual(server.requestsTo("queryTaskComplete").map((r) => r.status), [503, 503, 503, 429, 200])
      assert.strictEqual(server.completedQueryTasks[0]!.queryTaskId, queryTaskId)
      assert.strictEqual(server.completedQueryTasks[0]!.body["result"], 7)
      assert.strictEqual(server.requestsTo("queryTaskFail").length, 0, "no failure reported for an answer that went through")
    }))

  it.scoped("query failures carry their reasons", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      yield* startWorker(server, { durableWorkflows: [counter] })
      server.enqueueQueryTask({ workflowType: "orders.counter", queryName: "nope", taskQueue: QUEUE })
      server.enqueueQueryTask({ workflowType: "orders.counter", queryName: "boom", taskQueue: QUEUE })
      server.enqueueQueryTask({
        workflowType: "orders.counter",
        queryName: "count",
        taskQueue: QUEUE,
        historyEvents: [{ event_type: "TimerFired", payload: {} }]
      })
      server.enqueueQueryTask({ workflowType: "orders.counter", queryName: "count", taskQueue: QUEUE, payloadCodec: "json" })
      yield* until(server, () => server.failedQueryTasks.length === 4)
      const failures = server.failedQueryTasks.map((o) => o.body["failure"] as Record<string, unknown>)
      assert.deepStrictEqual(failures[0], { reason: "rejected_unknown_query", message: "unknown query 'nope'", type: "QueryFailed" })
      assert.strictEqual(failures[1]!["reason"], "query_rejected")
      assert.strictEqual(failures[1]!["message"], "query exploded")
      assert.strictEqual(failures[2]!["reason"], "query_workflow_state_unavailable")
      assert.match(String(failures[2]!["message"]), /^workflow replay failed before query: non-deterministic/)
      assert.strictEqual(failures[3]!["reason"], "query_payload_decode_failed")
    }))

  it.scoped("an unregistered workflow type is query_workflow_type_not_registered", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      yield* startWorker(server, { steps: [greet] })
      server.enqueueQueryTask({ workflowType: "other.type", queryName: "count", taskQueue: QUEUE })
      yield* until(server, () => server.failedQueryTasks.length === 1)
      const failure = server.failedQueryTasks[0]!.body["failure"] as Record<string, unknown>
      assert.strictEqual(failure["reason"], "query_workflow_type_not_registered")
      assert.strictEqual(failure["type"], "WorkflowTypeNotRegistered")
    }))

  it.scoped("queries are answered while every workflow slot is busy", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const gate = yield* Deferred.make<void>()
      const started = yield* Deferred.make<void>()
      const blocker = DurableWorkflow.activity("block", () => Effect.zipRight(Deferred.succeed(started, undefined), Deferred.await(gate)))
      yield* startWorker(server, { steps: [blocker], durableWorkflows: [counter], workflowConcurrency: 1, concurrency: 1 })
      server.enqueueActivityTask({ activityType: "block", taskQueue: QUEUE, input: [] })
      yield* Deferred.await(started)
      server.enqueueQueryTask({ workflowType: "orders.counter", queryName: "count", taskQueue: QUEUE })
      yield* until(server, () => server.completedQueryTasks.length === 1)
      yield* Deferred.succeed(gate, undefined)
    }))
})

describe("runUntil", () => {
  const layerFor = (server: any) =>
    transportLayer(server, { token: undefined, workerToken: server.tokens.worker!, controlToken: server.tokens.operator! })

  it.scoped("ends on the workflow's terminal state, returns its description, and stops the worker once", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const worker = yield* Effect.orDie(Worker.make({ steps: [greet], durableWorkflows: [counter] }))
      server.putWorkflow({ workflowId: "wf-done", status: "running" })
      const running = yield* Effect.fork(
        worker.runUntil(DW.workflowTerminal("wf-done", { pollInterval: "1 second" }), { timeout: "1 minute" }).pipe(Effect.provide(layerFor(server)))
      )
      yield* until(server, () => server.requestsTo("describeWorkflow").length === 1)
      // the condition is asked from the start, beside the registration: a workflow done before the
      // worker had registered stops it unregistered (run alone, this test raced there)
      yield* worker.registered
      server.putWorkflow({ workflowId: "wf-done", status: "completed" })
      yield* TestClock.adjust("1 second")
      const description = yield* Fiber.join(running)
      assert.strictEqual(description["status"], "completed")
      assert.strictEqual(server.requestsTo("register").length, 1)
      assert.strictEqual(server.requestsTo("deregisterRegistration").length, 1)
      assert.strictEqual(server.requestsTo("describeWorkflow")[0]!.headers["x-durable-workflow-control-plane-version"], "2")
    }))

  it.scoped("workflowTerminal refuses a poll interval of no time before asking the control plane; takes the short forms", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      // Duration.decode read -1 as no pause at all, and threw on "1s"
      for (const pollInterval of [-1, 0, "soon" as never]) {
        const refused = yield* Effect.flip(DW.workflowTerminal("wf", { pollInterval }).pipe(Effect.provide(layerFor(server))))
        assert.strictEqual(refused._tag, "DurableWorkflowConfigError")
        assert.match(refused.message, /^workflowTerminal's pollInterval must be a positive duration \(/)
        assert.strictEqual(refused._tag === "DurableWorkflowConfigError" ? refused.option : undefined, "pollInterval")
      }
      assert.strictEqual(server.requestsTo("describeWorkflow").length, 0)
      server.putWorkflow({ workflowId: "wf-short", status: "completed" })
      const description = yield* DW.workflowTerminal("wf-short", { pollInterval: "1s" }).pipe(Effect.provide(layerFor(server)))
      assert.strictEqual(description["status"], "completed")
    }))

  it.scoped("times out with RunUntilTimeoutError and stops the worker", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const worker = yield* Effect.orDie(Worker.make({ steps: [greet] }))
      server.putWorkflow({ workflowId: "wf-slow", status: "running" })
      const running = yield* Effect.fork(
        worker.runUntil(DW.workflowTerminal("wf-slow"), { timeout: "5 seconds" }).pipe(Effect.provide(layerFor(server)))
      )
      yield* until(server, () => server.requestsTo("describeWorkflow").length === 1)
      yield* TestClock.adjust("5 seconds")
      const exit = yield* Fiber.await(running)
      assert.instanceOf(Cause.squash((exit as Exit.Failure<unknown, unknown>).cause), RunUntilTimeoutError)
      assert.strictEqual(server.requestsTo("deregisterRegistration").length, 1)
    }))

  it.scoped("an external stop drains the running activity, deregisters, and ends runUntil with an interruption", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const gate = yield* Deferred.make<void>()
      const started = yield* Deferred.make<void>()
      const job = DurableWorkflow.activity("job", () => Effect.zipRight(Deferred.succeed(started, undefined), Deferred.await(gate)))
      const worker = yield* Effect.orDie(Worker.make({ steps: [job] }))
      server.putWorkflow({ workflowId: "wf-x", status: "running" })
      const running = yield* Effect.fork(worker.runUntil(DW.workflowTerminal("wf-x")).pipe(Effect.provide(layerFor(server))))
      server.enqueueActivityTask({ activityType: "job", taskQueue: QUEUE, input: [] })
      yield* Deferred.await(started)
      const stopping = yield* Effect.fork(worker.stop)
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(stopping)
      const exit = yield* Fiber.await(running)
      assert.isTrue(Exit.isInterrupted(exit))
      const complete = server.requestsTo("activityTaskComplete")[0]!
      const del = server.requestsTo("deregisterRegistration")[0]!
      assert.isBelow(complete.seq, del.seq)
      const after = server.requests.length
      yield* TestClock.adjust("10 seconds")
      assert.strictEqual(server.requests.length, after, "no further requests")
    }))

  it.scoped("answers query tasks while waiting", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const worker = yield* Effect.orDie(Worker.make({ durableWorkflows: [counter] }))
      server.putWorkflow({ workflowId: "wf-q", status: "running" })
      yield* Effect.fork(worker.runUntil(DW.workflowTerminal("wf-q")).pipe(Effect.provide(layerFor(server))))
      server.enqueueQueryTask({ workflowType: "orders.counter", queryName: "count", taskQueue: QUEUE })
      yield* until(server, () => server.completedQueryTasks.length === 1)
      yield* worker.stop
    }))
})

describe("metrics, interceptors and external storage", () => {
  it.scoped("poll, task and client-request series with their tags", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ maxPollHoldMs: 50 })
      const queue = `metrics-${Math.random().toString(16).slice(2)}`
      yield* startWorker(server, { steps: [greet] }, { taskQueue: queue })
      server.enqueueActivityTask({ activityType: "greeting.compose", taskQueue: queue, input: ["x"] })
      yield* until(server, () => server.completedActivityTasks.length === 1)
      yield* until(server, () => server.requestsTo("activityTaskPoll").filter((r) => r.status === 200).length >= 2)
      yield* until(server, () => server.requestsTo("workflowTaskPoll").filter((r) => r.status === 200).length >= 1)
      yield* eventually(counterValue("durable_workflow_worker_tasks", { task_kind: "activity", task_queue: queue, outcome: "completed" }), (n) => n === 1)
      yield* eventually(counterValue("durable_workflow_worker_polls", { task_kind: "activity", task_queue: queue, outcome: "task" }), (n) => n >= 1)
      yield* eventually(counterValue("durable_workflow_worker_polls", { task_kind: "workflow", task_queue: queue, outcome: "empty" }), (n) => n >= 1)
      yield* eventually(
        counterValue("durable_workflow_client_requests", {
          method: "POST",
          route: "/worker/register",
          plane: "worker",
          status_code: "201",
          outcome: "ok"
        }),
        (n) => n >= 1
      )
    }))

  it.scoped("interceptors wrap activities, outermost first, and see the task and arguments", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const calls: Array<string> = []
      const tracer = (label: string): DW.WorkerInterceptor => ({
        executeActivity: (ctx, next) =>
          Effect.sync(() => calls.push(`${label} before ${ctx.activityType} ${JSON.stringify(ctx.args)}`)).pipe(
            Effect.zipRight(next),
            Effect.tap(() => Effect.sync(() => calls.push(`${label} after`)))
          ),
        executeWorkflowTask: (ctx, next) =>
          Effect.zipRight(Effect.sync(() => calls.push(`${label} workflow ${String(ctx.task["workflow_type"])}`)), next)
      })
      yield* startWorker(server, { steps: [greet], durableWorkflows: [counter] }, { interceptors: [tracer("outer"), tracer("inner")] })
      server.enqueueActivityTask({ activityType: "greeting.compose", taskQueue: QUEUE, input: ["Ada"] })
      yield* until(server, () => server.completedActivityTasks.length === 1)
      assert.deepStrictEqual(calls, ['outer before greeting.compose ["Ada"]', 'inner before greeting.compose ["Ada"]', "inner after", "outer after"])
      calls.length = 0
      server.enqueueWorkflowTask({ workflowType: "orders.counter", taskQueue: QUEUE, input: [] })
      yield* until(server, () => server.completedWorkflowTasks.length === 1)
      assert.deepStrictEqual(calls, ["outer workflow orders.counter", "inner workflow orders.counter"])
    }))

  it.scoped("payloads above the threshold go to external storage; inbound references are fetched and verified", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const root = fs.mkdtempSync(path.join(os.tmpdir(), "dw-external-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => fs.rmSync(root, { recursive: true, force: true })))
      const storage = DW.localFilesystem(root)
      const big = DurableWorkflow.activity("big.result", (n: number) => Effect.succeed("x".repeat(n)))
      yield* startWorker(server, { steps: [big] }, { externalStorage: storage, externalStorageThresholdBytes: 100 })
      server.enqueueActivityTask({ activityType: "big.result", taskQueue: QUEUE, input: [10] })
      server.enqueueActivityTask({ activityType: "big.result", taskQueue: QUEUE, input: [1000] })
      yield* until(server, () => server.completedActivityTasks.length === 2)
      const [small, large] = [...server.completedActivityTasks].sort((a, b) => JSON.stringify(a.result).length - JSON.stringify(b.result).length)
      assert.deepStrictEqual(Either.getOrThrow(small!.decodedResult!), "x".repeat(10))
      const reference = (large!.result as any)["external_storage"]
      assert.strictEqual(reference["schema"], "durable-workflow.v2.external-payload-reference.v1")
      assert.match(reference["uri"], /^file:\/\//)
      assert.match(reference["sha256"], /^[0-9a-f]{64}$/)
      const stored = fs.readFileSync(new URL(reference["uri"]), "utf8")
      assert.strictEqual(stored.length, reference["size_bytes"])
      assert.deepStrictEqual(Either.getOrThrow(Codec.decodeBlob(stored)), "x".repeat(1000))
      // inbound: an activity whose arguments are stored externally
      const echo = DurableWorkflow.activity("echo", (s: string) => Effect.succeed(s.length))
      const args = Either.getOrThrow(Codec.encodeBlob(["y".repeat(500)]))
      const put = yield* storage.put(new TextEncoder().encode(args), { sha256: require_sha(args), codec: "avro" })
      const { server: server2 } = yield* setup()
      yield* startWorker(server2, { steps: [echo] }, { externalStorage: storage, externalStorageThresholdBytes: 10_000 })
      const ref = { schema: "durable-workflow.v2.external-payload-reference.v1", uri: put.uri, sha256: require_sha(args), size_bytes: args.length, codec: "avro" }
      server2.enqueueActivityTask({ activityType: "echo", taskQueue: QUEUE, wireArguments: { codec: "avro", external_storage: ref } })
      yield* until(server2, () => server2.completedActivityTasks.length === 1)
      assert.deepStrictEqual(Either.getOrThrow(server2.completedActivityTasks[0]!.decodedResult!), 500)
      // a reference whose hash does not match is refused (non-retryable decode failure)
      server2.enqueueActivityTask({ activityType: "echo", taskQueue: QUEUE, wireArguments: { codec: "avro", external_storage: { ...ref, sha256: "0".repeat(64) } } })
      yield* until(server2, () => server2.failedActivityTasks.length === 1)
      const failure = server2.failedActivityTasks[0]!.failure
      assert.strictEqual(failure["type"], "ExternalPayloadIntegrityError")
      assert.strictEqual(failure["non_retryable"], true)
    }))
})

describe("external storage of workflow command payloads", () => {
  it.scoped("large activity arguments and workflow results in commands are stored externally", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const root = fs.mkdtempSync(path.join(os.tmpdir(), "dw-external-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => fs.rmSync(root, { recursive: true, force: true })))
      const wf = DurableWorkflow.make("orders.big", (ctx) =>
        Effect.gen(function*() {
          const small = yield* ctx.sideEffect(() => "s")
          return yield* ctx.activity("big", ["z".repeat(1000), small])
        }))
      yield* startWorker(server, { durableWorkflows: [wf] }, { externalStorage: DW.localFilesystem(root), externalStorageThresholdBytes: 200 })
      server.enqueueWorkflowTask({ workflowType: "orders.big", taskQueue: QUEUE, input: [] })
      yield* until(server, () => server.completedWorkflowTasks.length === 1)
      const [sideEffect, schedule] = server.completedWorkflowTasks[0]!.commands
      assert.strictEqual(sideEffect!["result"], blob("s"), "small payloads stay inline")
      const reference = (schedule!["arguments"] as any)["external_storage"]
      assert.strictEqual(reference["codec"], "avro")
      const stored = fs.readFileSync(new URL(reference["uri"]), "utf8")
      assert.deepStrictEqual(Either.getOrThrow(Codec.decodeBlob(stored)), ["z".repeat(1000), "s"])
    }))
})

import { createHash } from "node:crypto"
const require_sha = (text: string) => createHash("sha256").update(text).digest("hex")
