import {
  ChangeMessageVisibilityCommand,
  CreateQueueCommand,
  DeleteMessageCommand,
  DeleteQueueCommand,
  ReceiveMessageCommand,
  SendMessageCommand
} from "@aws-sdk/client-sqs"
import { assert, describe, it } from "@effect/vitest"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Queue from "effect/Queue"
import * as TestClock from "effect/TestClock"
import * as Step from "../../src/core/Step.js"
import * as Worker from "../../src/runtime/Worker.js"
import * as SqsTransport from "../../src/transport/SqsTransport.js"
import * as SqsConfig from "../../src/transport/sqs/internal/config.js"
import * as Inflight from "../../src/transport/sqs/internal/inflight.js"
import * as Naming from "../../src/transport/sqs/internal/naming.js"
import { Transport } from "../../src/seam/Transport.js"
import { type RecordedCall, recordingClient, sqsPrefix, useFauxqs } from "../support/fauxqs.js"
import { captureLogs, freePort, silentServer, stepTask as task } from "../support/local.js"

const server = useFauxqs()


/** Lets forked fibers run until they block. */
const settle = Effect.repeatN(Effect.yieldNow(), 50)

/** Waits (on the wall clock: real I/O, not a timing rule) until `probe` gives a value. */
const eventually = <A>(what: string, probe: () => Promise<A | undefined>, timeoutMs = 10_000) =>
  Effect.promise(async () => {
    const deadline = Date.now() + timeoutMs
    for (;;) {
      const found = await probe()
      if (found !== undefined) return found
      if (Date.now() > deadline) throw new Error(`${what} within ${timeoutMs}ms`)
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
  })

/** A real round trip to fauxqs: anything the worker started before it has reached the client middleware. */
const roundTrip = (queue: string) => Effect.promise(() => server().counts(queue))

/**
 * A prefix, a recording client for the worker, the queues created, and helpers to send tasks and read
 * results.
 */
const fixture = (options: Omit<SqsTransport.SqsOptions, "client" | "prefix"> = {}) =>
  Effect.gen(function*() {
    const prefix = sqsPrefix()
    const calls = yield* Queue.unbounded<RecordedCall>()
    const recorder = recordingClient(server(), (call) => Queue.unsafeOffer(calls, call))
    yield* Effect.addFinalizer(() => Effect.sync(() => recorder.client.destroy()))
    const layer = SqsTransport.layer({ client: recorder.client, prefix, autoCreate: true, ...options })
    const client = server().client
    const queueUrl = (name: string) =>
      Effect.promise(async () => (await client.send(new CreateQueueCommand({ QueueName: name }))).QueueUrl!)
    const tasksQueue = (step: string) => `${prefix}-tasks-${step}`
    const resultsQueue = `${prefix}-results`
    const send = (step: string, body: unknown) =>
      Effect.flatMap(queueUrl(tasksQueue(step)), (url) =>
        Effect.promise(() =>
          client.send(new SendMessageCommand({
            QueueUrl: url,
            MessageBody: typeof body === "string" ? body : JSON.stringify(body)
          }))
        ))
    /** Receives (and deletes) the results sent so far, waiting for `count` of them. */
    const results = (count: number) =>
      Effect.flatMap(queueUrl(resultsQueue), (url) =>
        Effect.promise(async () => {
          const found: Array<Record<string, unknown>> = []
          const deadline = Date.now() + 10_000
          while (found.length < count && Date.now() < deadline) {
            const out = await client.send(
              new ReceiveMessageCommand({ QueueUrl: url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1 })
            )
            for (const m of out.Messages ?? []) {
              found.push(JSON.parse(m.Body!))
              await client.send(new DeleteMessageCommand({ QueueUrl: url, ReceiptHandle: m.ReceiptHandle! }))
            }
          }
          return found
        }))
    const callsOf = (command: string) =>
      Effect.map(Effect.sync(() => recorder.calls.filter((c) => c.command === command)), (list) => list)
    /** Waits for the next call of `command` the worker's client makes. */
    const nextCall = (command: string): Effect.Effect<RecordedCall> =>
      Effect.flatMap(Queue.take(calls), (call) => call.command === command ? Effect.succeed(call) : nextCall(command))
    const start = <E>(run: Effect.Effect<void, E, Transport>) => Effect.forkDaemon(Effect.provide(run, layer))
    return { prefix, layer, recorder, tasksQueue, resultsQueue, send, results, callsOf, nextCall, start, calls }
  })

/** A step `hold` that reports its start and finishes only when released. */
const holdStep = Effect.gen(function*() {
  const started = yield* Queue.unbounded<string>()
  const release = yield* Deferred.make<void>()
  let runs = 0
  const step = Step.make("hold", (_input: unknown, ctx) =>
    Effect.gen(function*() {
      runs++
      yield* Queue.offer(started, ctx.stepId)
      yield* Deferred.await(release)
      return "held"
    }))
  return { step, started, release, runs: () => runs }
})

/**
 * Stops a worker under the TestClock: shutdown waits (on the clock, up to a grace) for a receive its
 * stopped poll left running, so the clock is moved on until the run has ended.
 */
const stopOnTestClock = (worker: Worker.Worker, running: Fiber.RuntimeFiber<void, unknown>) =>
  Effect.gen(function*() {
    const stopping = yield* Effect.fork(Effect.zipRight(worker.stop, Fiber.join(running)))
    for (let i = 0; i < 200 && stopping.unsafePoll() === null; i++) {
      yield* settle
      yield* TestClock.adjust("100 millis")
      yield* Effect.promise(() => new Promise((resolve) => setImmediate(resolve)))
    }
    yield* Fiber.join(stopping)
  })

describe("SQS naming (pure)", () => {
  it("queue names: letters, digits, '-' and '_' only, at most 80 characters", () => {
    assert.isUndefined(Naming.queueNameProblem("durable-tasks-payments-charge_card"))
    assert.strictEqual(Naming.queueNameProblem("durable-tasks-payments.charge-card"), "it contains '.'")
    assert.strictEqual(Naming.queueNameProblem("durable-tasks-pay-charge@acme"), "it contains '@'")
    assert.strictEqual(Naming.queueNameProblem("durable-tasks-a.b@c.d"), "it contains '.', '@'")
    assert.strictEqual(Naming.queueNameProblem("x".repeat(81)), "it is 81 characters long")
    assert.strictEqual(Naming.tasksQueueName("durable", Naming.token("pay:charge", "acme")), "durable-tasks-pay-charge@acme")
    assert.strictEqual(Naming.tasksQueueName("p", Naming.token("x", "default")), "p-tasks-x")
    assert.strictEqual(Naming.resultsQueueName("p"), "p-results")
  })

  it("the receive wait is the configured wait capped by the poll timeout and by 20 s, in whole seconds", () => {
    assert.strictEqual(Naming.waitTimeSeconds(Duration.seconds(20), Duration.seconds(35)), 20)
    assert.strictEqual(Naming.waitTimeSeconds(Duration.seconds(60), Duration.seconds(35)), 20)
    assert.strictEqual(Naming.waitTimeSeconds(Duration.seconds(20), Duration.millis(5_900)), 5)
    assert.strictEqual(Naming.waitTimeSeconds(Duration.seconds(3), Duration.seconds(35)), 3)
    assert.strictEqual(Naming.waitTimeSeconds(Duration.seconds(20), Duration.millis(500)), 0)
  })

  it("visibility: whole seconds in 1..43200, extended every third by default, the interval below the timeout", () => {
    assert.deepStrictEqual(SqsConfig.visibility(Duration.seconds(60), undefined), Either.right({
      timeoutSeconds: 60,
      extendEvery: Duration.millis(20_000)
    }))
    assert.deepStrictEqual(SqsConfig.visibility(Duration.millis(1_500), undefined), Either.right({
      timeoutSeconds: 2,
      extendEvery: Duration.millis(666)
    }))
    assert.deepStrictEqual(SqsConfig.visibility(Duration.seconds(30), Duration.seconds(5)), Either.right({
      timeoutSeconds: 30,
      extendEvery: Duration.seconds(5)
    }))
    const refused = (timeout: Duration.Duration, every: Duration.Duration | undefined) =>
      Either.getOrThrowWith(Either.flip(SqsConfig.visibility(timeout, every)), () => "accepted")
    assert.strictEqual(refused(Duration.zero, undefined).option, "visibilityTimeout")
    assert.match(refused(Duration.zero, undefined).message, /visibilityTimeout must be between/)
    assert.match(refused(Duration.hours(13), undefined).message, /visibilityTimeout must be between/)
    const interval = refused(Duration.seconds(30), Duration.seconds(30))
    assert.strictEqual(interval.option, "visibilityExtendInterval")
    assert.match(interval.message, /visibilityExtendInterval must be more than 0 and less than visibilityTimeout \(30s\)/)
  })
})

describe("SQS in-flight registry (pure)", () => {
  const copy = (messageId: string, receiptHandle: string): Inflight.Copy => ({ queueUrl: "q", messageId, receiptHandle })

  it("the same message again adopts the newest receipt handle; another message for a running step is held", () => {
    const registry = Inflight.make()
    const first = registry.admit("r:0", copy("m1", "h1"))
    assert.strictEqual(first._tag, "Run")
    const again = registry.admit("r:0", copy("m1", "h2"))
    assert.deepStrictEqual(again._tag === "Duplicate" && again.sameMessage, true)
    const other = registry.admit("r:0", copy("m2", "h3"))
    assert.deepStrictEqual(other._tag === "Duplicate" && !other.sameMessage, true)
    assert.deepStrictEqual(first.held.copies.map((c) => [c.messageId, c.receiptHandle]), [["m1", "h2"], ["m2", "h3"]])
    assert.strictEqual(registry.size(), 1)
  })

  it("once the result is being sent, another message for the step is a new task; release forgets only its own entry", () => {
    const registry = Inflight.make()
    const first = registry.admit("r:0", copy("m1", "h1"))
    first.held.answering = true
    const retry = registry.admit("r:0", copy("m2", "h2"))
    assert.strictEqual(retry._tag, "Run")
    registry.release(first.held)
    assert.strictEqual(registry.size(), 1)
    assert.strictEqual(registry.admit("r:0", copy("m3", "h3"))._tag, "Duplicate")
    registry.release(retry.held)
    assert.strictEqual(registry.size(), 0)
    assert.strictEqual(registry.admit(undefined, copy("m4", "h4"))._tag, "Run")
    assert.strictEqual(registry.admit(undefined, copy("m4", "h5"))._tag, "Run")
    assert.strictEqual(registry.size(), 0)
  })
})

describe("SQS transport on fauxqs", () => {
  it.scoped("visibility is extended every visibilityExtendInterval while the step runs (TestClock)", () =>
    Effect.gen(function*() {
      const f = yield* fixture({ visibilityTimeout: "30 seconds" })
      const hold = yield* holdStep
      const worker = yield* Worker.make({ steps: [hold.step], concurrency: 2, pollTimeout: "5 seconds" })
      yield* f.send("hold", task("r1", "hold"))
      const running = yield* f.start(worker.run)
      assert.strictEqual(yield* Queue.take(hold.started), "r1:0")
      const [inflight] = (yield* Effect.promise(() => server().inspect(f.tasksQueue("hold"))))!.inflight
      // nothing before the interval (a third of 30 s)
      yield* TestClock.adjust("9999 millis")
      yield* settle
      yield* roundTrip(f.tasksQueue("hold"))
      assert.strictEqual((yield* f.callsOf("ChangeMessageVisibilityCommand")).length, 0)
      yield* TestClock.adjust("1 millis")
      const first = yield* f.nextCall("ChangeMessageVisibilityCommand")
      assert.deepStrictEqual(first.input, {
        QueueUrl: first.input.QueueUrl,
        ReceiptHandle: inflight!.receiptHandle,
        VisibilityTimeout: 30
      })
      yield* TestClock.adjust("10 seconds")
      const second = yield* f.nextCall("ChangeMessageVisibilityCommand")
      assert.strictEqual(second.input.VisibilityTimeout, 30)
      yield* Deferred.succeed(hold.release, undefined)
      const [result] = yield* f.results(1)
      assert.deepStrictEqual([result!.stepId, result!.status, result!.output], ["r1:0", "completed", "held"])
      yield* eventually("the task message deleted", async () => {
        const counts = await server().counts(f.tasksQueue("hold"))
        return counts.visible + counts.inFlight === 0 ? true : undefined
      })
      yield* stopOnTestClock(worker, running)
      assert.strictEqual(hold.runs(), 1)
    }))

  it.scopedLive("receives up to min(permits, 10) messages, waiting the configured wait capped by the poll timeout", () =>
    Effect.gen(function*() {
      const f = yield* fixture({ visibilityTimeout: "45 seconds" })
      const few = yield* Worker.make({ steps: [Step.make("s", () => Effect.succeed(1))], concurrency: 3, pollTimeout: "5 seconds" })
      const fewRun = yield* f.start(few.run)
      const small = yield* f.nextCall("ReceiveMessageCommand")
      yield* few.stop
      yield* Fiber.join(fewRun)
      assert.deepStrictEqual(
        [small.input.MaxNumberOfMessages, small.input.WaitTimeSeconds, small.input.VisibilityTimeout],
        [3, 5, 45]
      )
      assert.isUndefined(small.input.MessageAttributeNames)
      const many = yield* Worker.make({ steps: [Step.make("s", () => Effect.succeed(1))], concurrency: 64 })
      const manyRun = yield* f.start(many.run)
      const big = yield* f.nextCall("ReceiveMessageCommand")
      yield* many.stop
      yield* Fiber.join(manyRun)
      assert.deepStrictEqual([big.input.MaxNumberOfMessages, big.input.WaitTimeSeconds], [10, 20])
    }))

  it.scoped("a poll timeout under a second short-polls, then waits out the poll timeout (TestClock)", () =>
    Effect.gen(function*() {
      const f = yield* fixture()
      const worker = yield* Worker.make({ steps: [Step.make("idle", () => Effect.succeed(1))], pollTimeout: "500 millis" })
      const running = yield* f.start(worker.run)
      const first = yield* f.nextCall("ReceiveMessageCommand")
      assert.strictEqual(first.input.WaitTimeSeconds, 0)
      yield* roundTrip(f.tasksQueue("idle"))
      yield* settle
      yield* TestClock.adjust("499 millis")
      yield* settle
      yield* roundTrip(f.tasksQueue("idle"))
      assert.strictEqual((yield* f.callsOf("ReceiveMessageCommand")).length, 1)
      yield* TestClock.adjust("1 millis")
      yield* f.nextCall("ReceiveMessageCommand")
      yield* stopOnTestClock(worker, running)
    }))

  it.scopedLive("a message redelivered while its step still runs here does not run again; the newest receipt handle deletes it", () =>
    Effect.gen(function*() {
      const f = yield* fixture()
      const hold = yield* holdStep
      const worker = yield* Worker.make({ steps: [hold.step], concurrency: 4, pollTimeout: "1 second" })
      yield* f.send("hold", task("r2", "hold"))
      const running = yield* f.start(worker.run)
      yield* Queue.take(hold.started)
      const queue = f.tasksQueue("hold")
      const [before] = (yield* Effect.promise(() => server().inspect(queue)))!.inflight
      const url = yield* Effect.promise(() => server().queueUrl(queue))
      // its visibility lapses (forced here): SQS hands the same message out again
      yield* Effect.promise(() =>
        server().client.send(
          new ChangeMessageVisibilityCommand({
            QueueUrl: url,
            ReceiptHandle: before!.receiptHandle,
            VisibilityTimeout: 0
          })
        )
      )
      const after = yield* eventually("the message received a second time", async () => {
        const [entry] = (await server().inspect(queue))!.inflight
        return entry !== undefined && entry.message.approximateReceiveCount === 2 ? entry : undefined
      })
      assert.notStrictEqual(after.receiptHandle, before!.receiptHandle)
      yield* Deferred.succeed(hold.release, undefined)
      const results = yield* f.results(1)
      assert.deepStrictEqual(results.map((r) => r.stepId), ["r2:0"])
      yield* eventually("the message deleted", async () => {
        const counts = await server().counts(queue)
        return counts.visible + counts.inFlight === 0 ? true : undefined
      })
      yield* worker.stop
      yield* Fiber.join(running)
      assert.strictEqual(hold.runs(), 1)
      assert.strictEqual(yield* Queue.size(hold.started), 0)
    }))

  it.scopedLive("an extension refused for the receipt handle a redelivery replaced keeps the new copy: the answer deletes it, the step runs once", () =>
    Effect.gen(function*() {
      const f = yield* fixture({ visibilityTimeout: "3 seconds", visibilityExtendInterval: "1 second" })
      const hold = yield* holdStep
      // one extension held back (a slow network, a paused process) until the test lets it go
      let armed = false
      const heldBack = yield* Deferred.make<string>()
      const letGo = yield* Deferred.make<void>()
      const answered = yield* Deferred.make<string>()
      f.recorder.client.middlewareStack.add(
        (next, context) => async (args) => {
          const input = args.input as { ReceiptHandle?: string; VisibilityTimeout?: number }
          if (!armed || context.commandName !== "ChangeMessageVisibilityCommand" || !(input.VisibilityTimeout! > 0)) {
            return next(args)
          }
          armed = false
          Effect.runSync(Deferred.succeed(heldBack, input.ReceiptHandle!))
          await Effect.runPromise(Deferred.await(letGo))
          try {
            const out = await next(args)
            Effect.runSync(Deferred.succeed(answered, "accepted"))
            return out
          } catch (error) {
            Effect.runSync(Deferred.succeed(answered, String((error as { name?: unknown }).name)))
            throw error
          }
        },
        { step: "initialize", name: "holdOneExtension" }
      )
      const worker = yield* Worker.make({ steps: [hold.step], concurrency: 4, pollTimeout: "1 second" })
      yield* f.send("hold", task("r-race", "hold"))
      const running = yield* f.start(worker.run)
      yield* Queue.take(hold.started)
      armed = true
      const h1 = yield* Deferred.await(heldBack)
      // meanwhile its visibility lapses (forced here): SQS hands the same message out again, to this worker
      const queue = f.tasksQueue("hold")
      const url = yield* Effect.promise(() => server().queueUrl(queue))
      yield* Effect.promise(() =>
        server().client.send(new ChangeMessageVisibilityCommand({ QueueUrl: url, ReceiptHandle: h1, VisibilityTimeout: 0 }))
      )
      const h2 = (yield* eventually("the message received a second time", async () => {
        const [entry] = (await server().inspect(queue))!.inflight
        return entry !== undefined && entry.message.approximateReceiveCount === 2 ? entry : undefined
      })).receiptHandle
      assert.notStrictEqual(h2, h1)
      // the late extension, sent with h1, is refused: h1 no longer designates an in-flight copy
      yield* Deferred.succeed(letGo, undefined)
      assert.oneOf(yield* Deferred.await(answered), ["MessageNotInflight", "ReceiptHandleIsInvalid", "InvalidParameterValue"])
      yield* Deferred.succeed(hold.release, undefined)
      const results = yield* f.results(1)
      assert.deepStrictEqual(results.map((r) => [r.stepId, r.status]), [["r-race:0", "completed"]])
      yield* eventually("the message deleted", async () => {
        const counts = await server().counts(queue)
        return counts.visible + counts.inFlight === 0 ? true : undefined
      })
      // deleted through h2 by the one run's answer, not left to lapse and run again
      const deleted = (yield* f.callsOf("DeleteMessageBatchCommand"))
        .flatMap((c) => (c.input.Entries as Array<{ ReceiptHandle: string }>).map((e) => e.ReceiptHandle))
      assert.include(deleted, h2)
      yield* worker.stop
      yield* Fiber.join(running)
      assert.strictEqual(hold.runs(), 1)
    }), 20_000)

  it.scopedLive("another message for a step that runs here is held, then deleted once the one result is sent", () =>
    Effect.gen(function*() {
      const f = yield* fixture()
      const hold = yield* holdStep
      const worker = yield* Worker.make({ steps: [hold.step], concurrency: 4, pollTimeout: "1 second" })
      yield* f.send("hold", task("r3", "hold"))
      const running = yield* f.start(worker.run)
      yield* Queue.take(hold.started)
      // the engine re-dispatches the pending step (same stepId, next attempt) while it still runs here
      yield* f.send("hold", { ...task("r3", "hold"), attempt: 2 })
      yield* eventually("both messages held", async () => {
        const counts = await server().counts(f.tasksQueue("hold"))
        return counts.inFlight === 2 && counts.visible === 0 ? true : undefined
      })
      yield* Deferred.succeed(hold.release, undefined)
      const results = yield* f.results(1)
      assert.deepStrictEqual(results.map((r) => [r.stepId, r.status]), [["r3:0", "completed"]])
      yield* eventually("both messages deleted", async () => {
        const counts = await server().counts(f.tasksQueue("hold"))
        return counts.visible + counts.inFlight === 0 ? true : undefined
      })
      yield* worker.stop
      yield* Fiber.join(running)
      assert.strictEqual(hold.runs(), 1)
      assert.deepStrictEqual(yield* f.results(0), [])
    }))

  it.scopedLive("at the shutdown deadline, interrupted work and the duplicate held with it are given back at once (visibility 0)", () =>
    Effect.gen(function*() {
      const f = yield* fixture()
      const hold = yield* holdStep
      const worker = yield* Worker.make({ steps: [hold.step], concurrency: 4, pollTimeout: "1 second", shutdownTimeout: 0 })
      yield* f.send("hold", task("r4", "hold"))
      const running = yield* f.start(worker.run)
      yield* Queue.take(hold.started)
      yield* f.send("hold", task("r4", "hold"))
      yield* eventually("both messages held", async () => {
        const counts = await server().counts(f.tasksQueue("hold"))
        return counts.inFlight === 2 ? true : undefined
      })
      yield* worker.stop
      yield* Fiber.join(running)
      assert.deepStrictEqual(yield* Effect.promise(() => server().counts(f.tasksQueue("hold"))), { visible: 2, inFlight: 0 })
      // both given back; a receive left running by the stopped poll may have caught one, and gave it back too
      const releases = (yield* f.callsOf("ChangeMessageVisibilityCommand")).filter((c) => c.input.VisibilityTimeout === 0)
      assert.isAtLeast(releases.length, 2)
      assert.strictEqual(hold.runs(), 1)
    }))

  it.scopedLive("a long poll in flight at stop is waited for, so a message sent meanwhile is given back, not hidden", () =>
    Effect.gen(function*() {
      const f = yield* fixture()
      const ran = yield* Queue.unbounded<string>()
      const worker = yield* Worker.make({
        steps: [Step.make("late", (_: unknown, ctx) => Queue.offer(ran, ctx.stepId))],
        pollTimeout: "4 seconds"
      })
      const running = yield* f.start(worker.run)
      yield* f.nextCall("ReceiveMessageCommand")
      const stopping = yield* Effect.fork(Effect.zipRight(worker.stop, Fiber.join(running)))
      // past the moment an aborted receive used to be let go, within the 4 s SQS holds it open
      yield* Effect.sleep("1500 millis")
      yield* f.send("late", task("r-late", "late"))
      yield* Fiber.join(stopping)
      // SQS served the message to the receive still open; it was handed back at once (visibility 0)
      // rather than left invisible for the visibility timeout, out of reach of every other worker
      assert.deepStrictEqual(yield* Effect.promise(() => server().counts(f.tasksQueue("late"))), { visible: 1, inFlight: 0 })
      assert.strictEqual(yield* Queue.size(ran), 0, "a stopping worker starts nothing")
    }), 20_000)

  for (
    const [label, shutdownTimeout, boundMillis] of [
      ["up to its wait time and 2 s more", "30 seconds", 5_000],
      ["no longer than the worker's shutdownTimeout allows", "2 seconds", 2_000]
    ] as const
  ) {
    it.scoped(`a long poll left running at stop is waited for ${label}, then aborted (TestClock)`, () =>
      Effect.gen(function*() {
        const f = yield* fixture()
        // a receive that never comes back, whatever SQS does
        f.recorder.client.middlewareStack.add(
          (next, context) => (args) => context.commandName === "ReceiveMessageCommand" ? new Promise(() => {}) : next(args),
          { step: "initialize", name: "receivesHang" }
        )
        const worker = yield* Worker.make({ steps: [Step.make("x", () => Effect.void)], pollTimeout: "3 seconds", shutdownTimeout })
        const logs = captureLogs()
        const running = yield* f.start(Effect.provide(worker.run, Layer.merge(logs.layer, Logger.minimumLogLevel(LogLevel.Debug))))
        yield* f.nextCall("ReceiveMessageCommand")
        const stopping = yield* Effect.fork(Effect.zipRight(worker.stop, Fiber.join(running)))
        // the worker has drained and deregistered, and waits for the receive from here
        yield* eventually("the wait for the long poll", async () =>
          logs.lines.some((l) => l.startsWith(`DEBUG waiting up to ${boundMillis / 1000}s for 1 SQS long poll`)) || undefined)
        yield* settle
        yield* TestClock.adjust(boundMillis - 1)
        yield* settle
        assert.isNull(stopping.unsafePoll(), "still waiting for the long poll")
        yield* TestClock.adjust(1)
        yield* Fiber.join(stopping)
      }))
  }

  it.scoped("with a marker, a receive that brought only foreign messages is followed by a wait: 200 ms, then doubling (TestClock)", () =>
    Effect.gen(function*() {
      const f = yield* fixture({ marker: "durable" })
      const worker = yield* Worker.make({ steps: [Step.make("shared", () => Effect.void)], pollTimeout: "5 seconds" })
      yield* f.send("shared", "someone else's message")
      const queue = f.tasksQueue("shared")
      const receives = Effect.map(f.callsOf("ReceiveMessageCommand"), (calls) => calls.length)
      /** Lets the worker reach its wait: the release answered, its fibers run until they block. */
      const released = Effect.gen(function*() {
        yield* f.nextCall("ChangeMessageVisibilityCommand")
        yield* eventually("the message given back", async () => (await server().counts(queue)).visible === 1 || undefined)
        yield* roundTrip(queue)
        yield* settle
        yield* Effect.promise(() => new Promise((resolve) => setImmediate(resolve)))
        yield* settle
      })
      const running = yield* f.start(worker.run)
      yield* f.nextCall("ReceiveMessageCommand")
      for (const millis of [200, 400]) {
        yield* released
        const before = yield* receives
        yield* TestClock.adjust(millis - 1)
        yield* settle
        yield* roundTrip(queue)
        assert.strictEqual(yield* receives, before, `no receive before ${millis} ms`)
        yield* TestClock.adjust(1)
        yield* f.nextCall("ReceiveMessageCommand")
      }
      yield* released
      yield* stopOnTestClock(worker, running)
      // given back each time with visibility 0: whoever the message is for can take it at once
      const releases = yield* f.callsOf("ChangeMessageVisibilityCommand")
      assert.isTrue(releases.every((c) => c.input.VisibilityTimeout === 0))
    }))

  it.scopedLive("with a marker, one foreign message on the queue costs a few requests in 3 s, and the worker still serves its own", () =>
    Effect.gen(function*() {
      const f = yield* fixture({ marker: "durable" })
      const worker = yield* Worker.make({ steps: [Step.make("shared", () => Effect.succeed("mine"))], pollTimeout: "5 seconds" })
      yield* f.send("shared", "someone else's message")
      const running = yield* f.start(worker.run)
      yield* Effect.sleep("3 seconds")
      const receives = (yield* f.callsOf("ReceiveMessageCommand")).length
      const releases = (yield* f.callsOf("ChangeMessageVisibilityCommand")).length
      // 0, 0.2, 0.6, 1.4 and 3.0 s: about five of each (without the wait, hundreds)
      assert.isAtMost(receives, 8, `${receives} receives in 3 s`)
      assert.isAtMost(releases, 8, `${releases} releases in 3 s`)
      assert.isAtLeast(releases, 1)
      // a durable task sent meanwhile is still served
      const url = yield* Effect.promise(() => server().queueUrl(f.tasksQueue("shared")))
      yield* Effect.promise(() =>
        server().client.send(
          new SendMessageCommand({
            QueueUrl: url,
            MessageBody: JSON.stringify(task("r-mine", "shared")),
            MessageAttributes: { durable: { DataType: "String", StringValue: "1" } }
          })
        )
      )
      const [result] = yield* f.results(1)
      assert.deepStrictEqual([result!.stepId, result!.output], ["r-mine:0", "mine"])
      yield* worker.stop
      yield* Fiber.join(running)
      // the foreign message is left on the queue, visible to whoever it is for
      assert.deepStrictEqual(yield* Effect.promise(() => server().counts(f.tasksQueue("shared"))), { visible: 1, inFlight: 0 })
    }), 20_000)

  it.scopedLive("a result over 1 MiB, which SQS refuses as a whole call, is answered by a failure saying so; the task is deleted and runs once", () =>
    Effect.gen(function*() {
      // a short visibility, so that a task left undeleted would come back (and run again) within the test
      const f = yield* fixture({ visibilityTimeout: "2 seconds" })
      let runs = 0
      const worker = yield* Worker.make({
        steps: [Step.make("huge", () => Effect.sync(() => (runs++, "x".repeat(1_100_000))))],
        pollTimeout: "1 second"
      })
      yield* f.send("huge", task("r-huge", "huge"))
      const logs = captureLogs()
      const running = yield* f.start(Effect.provide(worker.run, logs.layer))
      const [result] = yield* f.results(1)
      assert.deepStrictEqual([result!.runId, result!.seq, result!.stepId, result!.status], ["r-huge", 0, "r-huge:0", "failed"])
      const error = result!.error as { message: string; code: string; retryable: boolean }
      assert.deepStrictEqual([error.code, error.retryable], ["result_too_large", false])
      assert.match(error.message, /^the completed result of step r-huge:0 is 1100\d{3} bytes of JSON, more than the SQS results queue takes \(1048576 bytes, its MaximumMessageSize\); SQS refused it \(BatchRequestTooLong: /)
      assert.match(error.message, /external storage .* return a reference/)
      assert.isUndefined(result!.output)
      yield* eventually("the task deleted", async () => {
        const counts = await server().counts(f.tasksQueue("huge"))
        return counts.visible + counts.inFlight === 0 ? true : undefined
      })
      // past the visibility timeout: nothing came back, nothing ran again, no other result
      yield* Effect.sleep("2500 millis")
      yield* worker.stop
      yield* Fiber.join(running)
      assert.strictEqual(runs, 1)
      assert.deepStrictEqual(yield* Effect.promise(() => server().counts(f.resultsQueue)), { visible: 0, inFlight: 0 })
      const errors = logs.lines.filter((l) => l.startsWith("ERROR"))
      assert.strictEqual(errors.length, 1, errors.join("\n"))
      assert.match(errors[0]!, /step r-huge:0 .*result_too_large, not retryable\) and its task deleted/)
    }), 20_000)

  it.scopedLive("a result over the results queue's MaximumMessageSize, refused per entry as InvalidParameterValue, is answered by a failure saying so, however the refusal is worded", () =>
    Effect.gen(function*() {
      const f = yield* fixture({ visibilityTimeout: "2 seconds" })
      // a results queue that takes 1 KiB (SQS's least), made before the worker resolves it
      yield* Effect.promise(() =>
        server().client.send(new CreateQueueCommand({ QueueName: f.resultsQueue, Attributes: { MaximumMessageSize: "1024" } }))
      )
      // a server that words the refusal otherwise than fauxqs and AWS (the code is SQS's own)
      f.recorder.client.middlewareStack.add(
        (next) => async (args) => {
          const out = await next(args)
          const failed = (out.output as { Failed?: Array<{ Message?: string }> }).Failed ?? []
          for (const entry of failed) entry.Message = "Message body exceeds the queue's limit."
          return out
        },
        { step: "initialize", name: "rewordRefusals" }
      )
      let runs = 0
      const worker = yield* Worker.make({
        steps: [Step.make("big", () => Effect.sync(() => (runs++, "x".repeat(2_000))))],
        pollTimeout: "1 second"
      })
      yield* f.send("big", task("r-big", "big"))
      const running = yield* f.start(worker.run)
      const [result] = yield* f.results(1)
      assert.deepStrictEqual([result!.stepId, result!.status], ["r-big:0", "failed"])
      const error = result!.error as { message: string; code: string; retryable: boolean }
      assert.deepStrictEqual([error.code, error.retryable], ["result_too_large", false])
      assert.match(error.message, /more than the SQS results queue takes \(1024 bytes, its MaximumMessageSize\); SQS refused it \(InvalidParameterValue: Message body exceeds/)
      yield* eventually("the task deleted", async () => {
        const counts = await server().counts(f.tasksQueue("big"))
        return counts.visible + counts.inFlight === 0 ? true : undefined
      })
      yield* worker.stop
      yield* Fiber.join(running)
      assert.strictEqual(runs, 1)
    }), 20_000)

  it.scopedLive("a workflow turn or an unreadable body on a step queue is rejected (deleted), and the worker goes on", () =>
    Effect.gen(function*() {
      const f = yield* fixture()
      const worker = yield* Worker.make({ steps: [Step.make("echo", (input: unknown) => Effect.succeed(input))], pollTimeout: "1 second" })
      yield* f.send("echo", { taskId: "t1", runId: "w1", workflow: "echo", history: [], group: "echo", attempt: 1 })
      yield* f.send("echo", "not json at all")
      yield* f.send("echo", task("r5", "echo", { v: 1 }))
      const running = yield* f.start(worker.run)
      const [result] = yield* f.results(1)
      assert.deepStrictEqual([result!.stepId, result!.output], ["r5:0", { v: 1 }])
      yield* eventually("all three messages gone", async () => {
        const counts = await server().counts(f.tasksQueue("echo"))
        return counts.visible + counts.inFlight === 0 ? true : undefined
      })
      yield* worker.stop
      yield* Fiber.join(running)
      assert.deepStrictEqual(yield* f.results(0), [])
    }))

  it.scopedLive("deregistration sends nothing and succeeds once; stop is single-flight", () =>
    Effect.gen(function*() {
      const f = yield* fixture()
      const worker = yield* Worker.make({ steps: [Step.make("noop", () => Effect.void)], pollTimeout: "1 second" })
      const running = yield* f.start(worker.run)
      yield* f.nextCall("ReceiveMessageCommand")
      yield* Effect.all([worker.stop, worker.stop], { concurrency: "unbounded" })
      yield* Fiber.join(running)
      yield* worker.stop
      const commands = new Set(f.recorder.calls.map((c) => c.command))
      assert.deepStrictEqual([...commands].sort(), ["CreateQueueCommand", "GetQueueUrlCommand", "ReceiveMessageCommand"])
    }))

  it.scopedLive("autoCreate: a task queue or the results queue deleted while the worker runs is created again, and work goes on", () =>
    Effect.gen(function*() {
      const f = yield* fixture()
      const echo = Step.make("echo", (input: unknown) => Effect.succeed(input))
      const worker = yield* Worker.make({ steps: [echo], pollTimeout: "1 second", pollRetryDelay: "50 millis" })
      const logs = captureLogs()
      yield* f.start(Effect.provide(worker.run, logs.layer))
      yield* f.nextCall("ReceiveMessageCommand")
      const client = server().client
      const deleteQueue = (name: string) =>
        Effect.promise(async () => client.send(new DeleteQueueCommand({ QueueUrl: await server().queueUrl(name) })))

      const created = f.nextCall("CreateQueueCommand").pipe(
        Effect.timeoutFail({ duration: "10 seconds", onTimeout: () => new Error("the worker did not create the deleted queue again") })
      )
      // the task queue: the next receive finds it gone, and the worker creates it again
      yield* deleteQueue(f.tasksQueue("echo"))
      const remade = yield* created
      assert.strictEqual(remade.input.QueueName, f.tasksQueue("echo"))
      yield* f.send("echo", task("r1", "echo", "after the task queue"))
      assert.deepStrictEqual((yield* f.results(1)).map((r) => r.output), ["after the task queue"])

      // the results queue: the reply's send finds it gone, the queue is created again, the retry delivers
      yield* deleteQueue(f.resultsQueue)
      yield* f.send("echo", task("r2", "echo", "after the results queue"))
      const again = yield* created
      assert.strictEqual(again.input.QueueName, f.resultsQueue)
      assert.deepStrictEqual((yield* f.results(1)).map((r) => r.output), ["after the results queue"])

      const warned = logs.lines.filter((line) => line.includes("was deleted while the worker ran"))
      assert.strictEqual(warned.length, 2, logs.lines.join("\n"))
      assert.match(warned[0]!, /^WARN queue "edw-\w+-tasks-echo" at .* created it again \(autoCreate\); what it held when it was deleted is gone with it$/)
      yield* worker.stop
    }))

  it.scopedLive("without autoCreate, a queue deleted while the worker runs is not created again: the polls fail until it is back", () =>
    Effect.gen(function*() {
      const f = yield* fixture({ autoCreate: false })
      // made beforehand, as the engine would
      for (const name of [f.tasksQueue("echo"), f.resultsQueue]) {
        yield* Effect.promise(() => server().client.send(new CreateQueueCommand({ QueueName: name })))
      }
      const worker = yield* Worker.make({ steps: [Step.make("echo", (input: unknown) => Effect.succeed(input))], pollTimeout: "1 second", pollRetryDelay: "50 millis" })
      yield* f.start(worker.run)
      yield* f.nextCall("ReceiveMessageCommand")
      yield* Effect.promise(async () => server().client.send(new DeleteQueueCommand({ QueueUrl: await server().queueUrl(f.tasksQueue("echo")) })))
      // two failed receives and no create in between
      yield* f.nextCall("ReceiveMessageCommand")
      yield* f.nextCall("ReceiveMessageCommand")
      assert.deepStrictEqual(yield* f.callsOf("CreateQueueCommand"), [])
      // once the engine makes it again, work goes on
      yield* f.send("echo", task("r1", "echo", "back"))
      assert.deepStrictEqual((yield* f.results(1)).map((r) => r.output), ["back"])
      yield* worker.stop
    }))

  it.live("layerConfig reads SQS_ENDPOINT, AWS_REGION, the credentials and DURABLE_PREFIX", () =>
    Effect.gen(function*() {
      const prefix = sqsPrefix()
      const worker = yield* Worker.make({ steps: [Step.make("cfg", () => Effect.succeed("configured"))], pollTimeout: "1 second" })
      const provider = ConfigProvider.fromMap(
        new Map([
          ["SQS_ENDPOINT", server().endpoint],
          ["AWS_REGION", "us-east-1"],
          ["AWS_ACCESS_KEY_ID", "test"],
          ["AWS_SECRET_ACCESS_KEY", "test"],
          ["DURABLE_PREFIX", prefix],
          ["SQS_AUTO_CREATE", "true"]
        ])
      )
      const layer = SqsTransport.layerConfig().pipe(Layer.provide(Layer.setConfigProvider(provider)))
      const client = server().client
      const url = (yield* Effect.promise(() =>
        client.send(new CreateQueueCommand({ QueueName: `${prefix}-tasks-cfg` }))
      )).QueueUrl!
      yield* Effect.promise(() => client.send(new SendMessageCommand({ QueueUrl: url, MessageBody: JSON.stringify(task("r6", "cfg")) })))
      const running = yield* Effect.forkDaemon(Effect.provide(worker.run, layer))
      const result = yield* eventually("a result", async () => {
        const out = await client.send(
          new ReceiveMessageCommand({ QueueUrl: await server().queueUrl(`${prefix}-results`).catch(() => ""), WaitTimeSeconds: 1 })
        ).catch(() => undefined)
        return out?.Messages?.[0]?.Body
      })
      assert.deepStrictEqual(JSON.parse(result).output, "configured")
      yield* worker.stop
      yield* Fiber.join(running)
    }))

  it.effect("layerConfig reads an empty AWS key as unset", () =>
    Effect.gen(function*() {
      const configOf = (env: Record<string, string>) =>
        Effect.either(Effect.provide(Transport, SqsTransport.layerConfig().pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))))))
      // empty keys given as they are would stand in front of the SDK's own lookup (a role), and be refused
      const empty = yield* configOf({ SQS_ENDPOINT: "http://127.0.0.1:1", AWS_ACCESS_KEY_ID: "", AWS_SECRET_ACCESS_KEY: "" })
      assert.isTrue(Either.isRight(empty), "built, the keys left to the SDK")
      assert.isUndefined(SqsConfig.clientConfigOf({
        endpoint: undefined,
        region: undefined,
        accessKeyId: SqsConfig.environmentKey(Redacted.make("")),
        secretAccessKey: SqsConfig.environmentKey(Redacted.make(" ")),
        sessionToken: undefined
      }).credentials, "no empty credentials in front of the SDK's own lookup")
    }))
})

describe("SQS registration errors", () => {
  const runWith = (options: SqsTransport.SqsOptions, config: Worker.WorkerDefinition) =>
    Effect.gen(function*() {
      const worker = yield* Worker.make(config)
      return yield* Effect.provide(worker.run, SqsTransport.layer(options)).pipe(Effect.flip)
    })
  const steps = (...names: Array<string>) => names.map((name) => Step.make(name, () => Effect.void))

  it.live("a step name SQS refuses in a queue name ('.') is refused without taskQueueUrl, naming the step and the rule", () =>
    Effect.gen(function*() {
      const error = yield* runWith(
        { clientConfig: server().clientConfig, prefix: sqsPrefix(), autoCreate: true },
        { steps: steps("billing:charge.card") }
      )
      assert.strictEqual(error._tag, "RegistrationError")
      assert.match(
        error.message,
        /step "billing:charge.card" is dispatched to queue "edw-\w+-tasks-billing-charge.card", which SQS refuses \(it contains '\.'\)/
      )
      assert.match(error.message, /letters, digits, '-' and '_'/)
    }))

  it.live("workflows cannot be served over SQS", () =>
    Effect.gen(function*() {
      const Workflow = yield* Effect.promise(() => import("../../src/core/Workflow.js"))
      const error = yield* runWith(
        { clientConfig: server().clientConfig, prefix: sqsPrefix(), autoCreate: true },
        { steps: steps("a"), workflows: [Workflow.make("flow", () => Effect.succeed(1))] }
      )
      assert.strictEqual(error._tag, "RegistrationError")
      assert.match(error.message, /step tasks only .* workflow\(s\) "flow" would never run here/)
    }))

  // a queue that does not exist yet (by name or behind a taskQueueUrl) is waited for, not a failed
  // start: see test/transport/startup-sqs.test.ts

  it.live("taskQueueUrl: a group missing from the mapping fails at start", () =>
    Effect.gen(function*() {
      const prefix = sqsPrefix()
      const base = { clientConfig: server().clientConfig, prefix, autoCreate: true }
      const unmapped = yield* runWith({ ...base, taskQueueUrl: {} }, { steps: steps("pay.card") })
      assert.match(unmapped.message, /taskQueueUrl has no entry for group "pay.card" \(step "pay.card"\)/)
    }))

  it.live("an invalid visibility setting is refused at start, as a config error naming it", () =>
    Effect.gen(function*() {
      const error = yield* runWith(
        { clientConfig: server().clientConfig, visibilityTimeout: "10 seconds", visibilityExtendInterval: "10 seconds" },
        { steps: steps("v") }
      )
      assert.strictEqual(error._tag, "SqsConfigError")
      assert.strictEqual((error as SqsTransport.SqsConfigError).option, "visibilityExtendInterval")
      assert.match(error.message, /visibilityExtendInterval must be more than 0 and less than visibilityTimeout/)
    }))

  it.live("an endpoint that refuses connections fails run fast, saying what to check", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(freePort)
      const started = Date.now()
      const error = yield* runWith(
        { clientConfig: { ...server().clientConfig, endpoint: `http://127.0.0.1:${port}` } },
        { steps: steps("x") }
      )
      assert.isBelow(Date.now() - started, 5_000)
      assert.strictEqual(error._tag, "RegistrationError")
      assert.match(error.message, new RegExp(`could not reach SQS at http://127.0.0.1:${port}`))
      assert.match(error.message, /SQS_ENDPOINT/)
    }))

  it.scoped("an endpoint that never answers fails run after connectTimeout (TestClock)", () =>
    Effect.gen(function*() {
      const { port } = yield* Effect.acquireRelease(Effect.promise(silentServer), (silent) => Effect.sync(silent.close))
      const fiber = yield* Effect.fork(
        runWith(
          { clientConfig: { ...server().clientConfig, endpoint: `http://127.0.0.1:${port}` }, connectTimeout: "3 seconds" },
          { steps: steps("x") }
        )
      )
      yield* settle
      yield* TestClock.adjust("2999 millis")
      yield* settle
      assert.isNull(fiber.unsafePoll())
      yield* TestClock.adjust("1 millis")
      const exit = yield* Fiber.await(fiber)
      assert.isTrue(Exit.isSuccess(exit))
      const error = (exit as Exit.Success<Worker.RunError, never>).value
      assert.match(error.message, new RegExp(`SQS at http://127.0.0.1:${port} did not answer within 3s`))
    }))
})

