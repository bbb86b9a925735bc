import { assert, describe, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as HashMap from "effect/HashMap"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as TestClock from "effect/TestClock"
import * as DurableWorkflow from "../../src/core/DurableWorkflow.js"
import * as Step from "../../src/core/Step.js"
import * as Workflow from "../../src/core/Workflow.js"
import * as Worker from "../../src/runtime/Worker.js"
import * as Memory from "../../src/services/Memory.js"
import * as InMemory from "../../src/transport/InMemoryTransport.js"
import { captureLogs, stepTask as task } from "../support/local.js"

/** Memory readings from a test double: no file-system reads under the TestClock. */
const memory = Memory.layerTest({ usage: 100 * 1024 * 1024, limit: 1024 * 1024 * 1024 })

const resultOf = (reply: InMemory.NestReply) =>
  reply._tag === "StepResult" ? reply.result : assert.fail(`expected a step result, got ${reply._tag}`)


/** A step that sleeps for the given number of milliseconds (on the test clock) and records how it ended. */
const sleeper = (ended: Ref.Ref<ReadonlyArray<string>>) =>
  Step.make("sleep", (input: { ms: number; id: string }) =>
    Effect.sleep(input.ms).pipe(
      Effect.zipRight(Ref.update(ended, (e) => [...e, `done ${input.id}`])),
      Effect.onInterrupt(() => Ref.update(ended, (e) => [...e, `interrupted ${input.id}`])),
      Effect.as(input.id)
    ))

const setup = (options: Partial<Worker.WorkerOptions> = {}, steps: ReadonlyArray<Step.Step> = []) =>
  Effect.gen(function*() {
    const ended = yield* Ref.make<ReadonlyArray<string>>([])
    const broker = yield* InMemory.make()
    const worker = yield* Worker.make({
      steps: [sleeper(ended), ...steps],
      concurrency: 4,
      pollTimeout: "5 seconds",
      shutdownTimeout: "10 seconds",
      interruptTimeout: "2 seconds",
      ...options
    })
    // daemon fibers: a test that leaves a worker running (or stuck on purpose) must not wait for it at its end
    const start = <A, E>(effect: Effect.Effect<A, E, import("../../src/seam/Transport.js").Transport>) =>
      Effect.forkDaemon(Effect.provide(effect, Layer.merge(broker.layer, memory)))
    const ops = Effect.map(broker.journal, (entries) => entries.map((e) => e.op))
    return { broker, worker, ended, start, ops }
  })

/** Lets forked fibers run until they block. */
const settle = Effect.repeatN(Effect.yieldNow(), 50)

describe("Worker lifecycle", () => {
  it.effect("L1: registers before any poll, and takes nothing while registration is pending", () =>
    Effect.gen(function*() {
      const { broker, worker, start, ops } = yield* setup()
      yield* broker.setRegisterFault({ _tag: "Hang" })
      yield* broker.enqueue(task("r1", "sleep", { ms: 1, id: "a" }))
      yield* start(worker.run)
      yield* settle
      yield* TestClock.adjust("1 minute")
      assert.deepStrictEqual(yield* ops, ["register"])
      assert.strictEqual(yield* broker.pending, 1)
    }))

  it.effect("a stop while the registration is pending ends it: run ends, nothing deregistered, status stopped", () =>
    Effect.gen(function*() {
      const { broker, worker, start, ops } = yield* setup()
      yield* broker.setRegisterFault({ _tag: "Hang" })
      const running = yield* start(worker.run)
      yield* settle
      yield* TestClock.adjust("1 minute")
      assert.strictEqual((yield* worker.status).state, "registering")
      // a registration that ignores its interruption is waited for one interruptTimeout, then left
      const stopping = yield* Effect.fork(worker.stop)
      yield* settle
      yield* TestClock.adjust(1_999)
      assert.isNull(stopping.unsafePoll(), "the registration is still waited for")
      yield* TestClock.adjust(1)
      yield* Fiber.join(stopping)
      assert.isTrue(Exit.isSuccess(yield* Fiber.await(running)))
      assert.deepStrictEqual(yield* ops, ["register"])
      assert.strictEqual((yield* worker.status).state, "stopped")
      // whoever waits for the registration learns it will not come
      assert.isTrue(Exit.isInterrupted(yield* Effect.exit(worker.registered)))
    }))

  it.effect("a registration in flight at a stop that lands meanwhile is deregistered once; run and stop succeed", () =>
    Effect.gen(function*() {
      const { broker, worker, start, ops } = yield* setup()
      // the broker has the request, and makes the registration a second later whatever the worker does
      yield* broker.setRegisterFault({ _tag: "Late", after: "1 second" })
      const running = yield* start(worker.run)
      yield* settle
      const stopping = yield* Effect.fork(worker.stop)
      yield* settle
      assert.deepStrictEqual(yield* ops, ["register"], "nothing deregistered before the registration's answer")
      yield* TestClock.adjust("1 second")
      yield* Fiber.join(stopping)
      assert.isTrue(Exit.isSuccess(yield* Fiber.await(running)))
      assert.deepStrictEqual(yield* ops, ["register", "deregister"], "withdrawn once, and never polled")
      assert.isTrue(Option.isNone(yield* broker.registered), "no registration left behind")
      assert.strictEqual((yield* worker.status).state, "stopped")
      assert.isTrue(Exit.isInterrupted(yield* Effect.exit(worker.registered)), "the run never served as registered")
    }))

  it.effect("a registration that lands at a stop and whose deregistration fails: stop and run fail with the DeregistrationError", () =>
    Effect.gen(function*() {
      const { broker, worker, start, ops } = yield* setup()
      yield* broker.setRegisterFault({ _tag: "Late", after: "1 second" })
      yield* broker.setDeregisterFault({ _tag: "Fail", message: "403 forbidden" })
      const running = yield* start(worker.run)
      yield* settle
      const stopping = yield* Effect.fork(Effect.flip(worker.stop))
      yield* settle
      yield* TestClock.adjust("1 second")
      const fromStop = yield* Fiber.join(stopping)
      assert.strictEqual(fromStop._tag, "DeregistrationError")
      const fromRun = yield* Effect.flip(Fiber.join(running))
      assert.strictEqual(fromRun._tag, "DeregistrationError")
      assert.deepStrictEqual(yield* ops, ["register", "deregister"])
    }))

  it.effect("L1: the first poll follows a successful registration", () =>
    Effect.gen(function*() {
      const { worker, start, ops } = yield* setup()
      yield* start(worker.run)
      yield* settle
      const journal = yield* ops
      assert.strictEqual(journal[0], "register")
      assert.strictEqual(journal[1], "poll")
    }))

  it.effect("L2: a failed registration fails run with that error and never deregisters", () =>
    Effect.gen(function*() {
      const { broker, worker, start, ops } = yield* setup()
      yield* broker.setRegisterFault({ _tag: "Fail", message: "401 unauthorized" })
      const running = yield* start(worker.run)
      const exit = yield* Fiber.await(running)
      assert.isTrue(Exit.isFailure(exit))
      const error = yield* Effect.flip(Fiber.join(running))
      assert.strictEqual(error._tag, "RegistrationError")
      assert.strictEqual(error.message, "401 unauthorized")
      yield* worker.stop
      assert.deepStrictEqual(yield* ops, ["register"])
    }))

  it.effect("L3: a drain that finishes just inside the deadline completes, then deregisters", () =>
    Effect.gen(function*() {
      const { broker, worker, ended, start, ops } = yield* setup()
      const running = yield* start(worker.run)
      yield* broker.enqueue(task("r1", "sleep", { ms: 9_999, id: "a" }))
      yield* settle
      const stopping = yield* Effect.fork(worker.stop)
      yield* settle
      yield* TestClock.adjust(9_998)
      assert.deepStrictEqual(yield* Ref.get(ended), [])
      assert.isFalse((yield* ops).includes("deregister"))
      yield* TestClock.adjust(1)
      yield* Fiber.join(stopping)
      yield* Fiber.join(running)
      assert.deepStrictEqual(yield* Ref.get(ended), ["done a"])
      const journal = yield* ops
      assert.isTrue(journal.indexOf("complete") < journal.indexOf("deregister"))
      assert.strictEqual(journal.filter((op) => op === "deregister").length, 1)
      const reply = yield* broker.takeReply
      assert.strictEqual(resultOf(reply).status, "completed")
    }))

  it.effect("L3: work still running at the deadline is interrupted exactly then, and given back before deregistering", () =>
    Effect.gen(function*() {
      const { broker, worker, ended, start, ops } = yield* setup()
      yield* start(worker.run)
      yield* broker.enqueue(task("r1", "sleep", { ms: 60_000, id: "long" }))
      yield* settle
      const stopping = yield* Effect.fork(worker.stop)
      yield* settle
      yield* TestClock.adjust(9_999)
      assert.deepStrictEqual(yield* Ref.get(ended), [])
      yield* TestClock.adjust(1)
      yield* Fiber.join(stopping)
      assert.deepStrictEqual(yield* Ref.get(ended), ["interrupted long"])
      const journal = yield* ops
      assert.isFalse(journal.includes("complete"))
      assert.isTrue(journal.indexOf("abandon") < journal.indexOf("deregister"))
      assert.strictEqual(yield* broker.pending, 1)
    }))

  it.effect("L3: pollers stop first: nothing is taken after stop, queued work stays with the broker", () =>
    Effect.gen(function*() {
      const { broker, worker, start, ops } = yield* setup({ concurrency: 1 })
      yield* start(worker.run)
      yield* broker.enqueue(task("r1", "sleep", { ms: 1_000, id: "a" }))
      yield* broker.enqueue(task("r2", "sleep", { ms: 1_000, id: "b" }))
      yield* settle
      const stopping = yield* Effect.fork(worker.stop)
      yield* settle
      yield* TestClock.adjust(1_000)
      yield* Fiber.join(stopping)
      const journal = yield* ops
      assert.strictEqual(journal.filter((op) => op === "deliver").length, 1)
      assert.strictEqual(yield* broker.pending, 1)
    }))

  it.effect("L4: concurrent and repeated stop() share one shutdown, one outcome and one deregistration", () =>
    Effect.gen(function*() {
      const { broker, worker, start, ops } = yield* setup()
      const running = yield* start(worker.run)
      yield* broker.enqueue(task("r1", "sleep", { ms: 3_000, id: "a" }))
      yield* settle
      const stops = yield* Effect.all([worker.stop, worker.stop, worker.stop], { concurrency: "unbounded" }).pipe(Effect.fork)
      yield* settle
      yield* TestClock.adjust(3_000)
      yield* Fiber.join(stops)
      yield* worker.stop
      yield* Fiber.join(running)
      assert.strictEqual((yield* ops).filter((op) => op === "deregister").length, 1)
    }))

  it.effect("L4/L7: a failed deregistration reaches every stop() caller and run(), and is not retried", () =>
    Effect.gen(function*() {
      const { broker, worker, start, ops } = yield* setup()
      yield* broker.setDeregisterFault({ _tag: "Fail", message: "403 forbidden" })
      const running = yield* start(worker.run)
      yield* settle
      const [a, b] = yield* Effect.all([Effect.flip(worker.stop), Effect.flip(worker.stop)], { concurrency: 2 })
      const later = yield* Effect.flip(worker.stop)
      const fromRun = yield* Effect.flip(Fiber.join(running))
      for (const error of [a, b, later, fromRun]) {
        assert.strictEqual(error._tag, "DeregistrationError")
        assert.strictEqual(error.message, "403 forbidden")
      }
      assert.strictEqual(a, later)
      assert.strictEqual((yield* ops).filter((op) => op === "deregister").length, 1)
    }))

  it.effect("L4/L6: a deregistration that gets no answer fails the stop after interruptTimeout, not never", () =>
    Effect.gen(function*() {
      const { broker, worker, start, ops } = yield* setup()
      yield* broker.setDeregisterFault({ _tag: "Hang" })
      const running = yield* start(worker.run)
      yield* settle
      const stopping = yield* Effect.fork(Effect.flip(worker.stop))
      yield* settle
      assert.include(yield* ops, "deregister")
      yield* TestClock.adjust("1999 millis")
      assert.isNull(stopping.unsafePoll(), "still waiting for the broker, within interruptTimeout (2 s)")
      yield* TestClock.adjust("1 millis")
      const error = yield* Fiber.join(stopping)
      assert.strictEqual(error._tag, "DeregistrationError")
      assert.match(error.message, /^the deregistration got no answer within 2s \(interruptTimeout\)/)
      assert.strictEqual(yield* Effect.flip(Fiber.join(running)), error)
      assert.strictEqual((yield* ops).filter((op) => op === "deregister").length, 1)
    }))

  it.effect("L5: an external stop() ends runUntil with an interruption after accepted work drained", () =>
    Effect.gen(function*() {
      const { broker, worker, ended, start, ops } = yield* setup()
      const running = yield* start(worker.runUntil(Effect.never))
      yield* broker.enqueue(task("r1", "sleep", { ms: 2_000, id: "a" }))
      yield* settle
      const stopping = yield* Effect.fork(worker.stop)
      yield* settle
      assert.isNull(running.unsafePoll())
      yield* TestClock.adjust(2_000)
      yield* Fiber.join(stopping)
      const exit = yield* Fiber.await(running)
      assert.isTrue(Exit.isInterrupted(exit))
      assert.deepStrictEqual(yield* Ref.get(ended), ["done a"])
      const journal = yield* ops
      assert.isTrue(journal.indexOf("complete") < journal.indexOf("deregister"))
    }))

  it.effect("runUntil returns the condition's value once it holds, after a clean stop", () =>
    Effect.gen(function*() {
      const { broker, worker, start, ops } = yield* setup()
      const running = yield* start(worker.runUntil(Effect.map(broker.takeReply, (reply) => resultOf(reply).output)))
      yield* broker.enqueue(task("r1", "sleep", { ms: 10, id: "a" }))
      yield* settle
      yield* TestClock.adjust(10)
      assert.strictEqual(yield* Fiber.join(running), "a")
      assert.strictEqual((yield* ops).at(-1), "deregister")
    }))

  it.effect("runUntil stops and fails with the condition's own cause when it fails or dies, not waiting for a timeout", () =>
    Effect.gen(function*() {
      const boom = new Error("the condition broke")
      const cases: ReadonlyArray<readonly [Effect.Effect<never, "refused">, unknown]> = [
        [Effect.fail("refused" as const), "refused"],
        [Effect.die(boom), boom]
      ]
      for (const [condition, expected] of cases) {
        const { worker, start, ops } = yield* setup()
        const running = yield* start(worker.runUntil(Effect.zipRight(Effect.sleep("1 second"), condition), { timeout: "1 minute" }))
        yield* settle
        yield* TestClock.adjust("1 second")
        const exit = yield* Fiber.await(running)
        assert.isTrue(Exit.isFailure(exit) && Cause.squash(exit.cause) === expected, String(exit))
        assert.strictEqual((yield* ops).at(-1), "deregister", "stopped clean first")
      }
    }))

  it.effect("runUntil fails with RunUntilTimeoutError when the condition does not hold in time", () =>
    Effect.gen(function*() {
      const { worker, start, ops } = yield* setup()
      const running = yield* start(worker.runUntil(Effect.never, { timeout: "30 seconds" }))
      yield* settle
      yield* TestClock.adjust("30 seconds")
      const error = yield* Effect.flip(Fiber.join(running))
      assert.strictEqual(error._tag, "RunUntilTimeoutError")
      assert.include(error.message, "30000 ms")
      assert.strictEqual((yield* ops).at(-1), "deregister")
    }))

  it.effect("runUntil takes the short forms of a timeout, and refuses one below zero before anything runs", () =>
    Effect.gen(function*() {
      const { worker, start, ops } = yield* setup()
      // Duration.decode threw on "30s" (a defect), and read -5000 as no time at all
      const refused = yield* Effect.flip(Fiber.join(yield* start(worker.runUntil(Effect.never, { timeout: -5_000 }))))
      assert.strictEqual(refused._tag, "WorkerConfigError")
      assert.match(refused.message, /^runUntil's timeout must be a duration of zero or more \(.*\), got -5000$/)
      assert.deepStrictEqual(yield* ops, [], "nothing registered")
      const running = yield* start(worker.runUntil(Effect.never, { timeout: "30s" }))
      yield* settle
      yield* TestClock.adjust("30 seconds")
      assert.strictEqual((yield* Effect.flip(Fiber.join(running)))._tag, "RunUntilTimeoutError")
    }))

  it.effect("L6: a poller that cannot be stopped fails stop() by name and leaves the registration in place", () =>
    Effect.gen(function*() {
      const { broker, worker, start, ops } = yield* setup()
      yield* broker.setPollFault({ _tag: "Hang" })
      yield* start(worker.run)
      yield* settle
      const stopping = yield* Effect.fork(worker.stop)
      yield* settle
      yield* TestClock.adjust(1_999)
      assert.isNull(stopping.unsafePoll())
      yield* TestClock.adjust(1)
      const error = yield* Effect.flip(Fiber.join(stopping))
      assert.strictEqual(error._tag, "ShutdownTimeoutError")
      assert.include(error.message, "in-memory queue")
      assert.include(error.message, "registration remains active")
      assert.isFalse((yield* ops).includes("deregister"))
      assert.isTrue(Option.isSome(yield* broker.registered))
    }))

  it.effect("L6: a task that ignores interruption fails stop() by name, with no deregistration", () =>
    Effect.gen(function*() {
      const stubborn = Step.make("stubborn", () => Effect.uninterruptible(Effect.sleep("1 hour")))
      const { broker, worker, start, ops } = yield* setup({ shutdownTimeout: "1 second" }, [stubborn])
      yield* start(worker.run)
      yield* broker.enqueue(task("r9", "stubborn"))
      yield* settle
      const stopping = yield* Effect.fork(worker.stop)
      yield* settle
      yield* TestClock.adjust("3 seconds")
      const error = yield* Effect.flip(Fiber.join(stopping))
      assert.strictEqual(error._tag, "ShutdownTimeoutError")
      if (error._tag === "ShutdownTimeoutError") assert.deepStrictEqual(error.stuckTasks, ["task m1 from in-memory queue"])
      assert.isFalse((yield* ops).includes("deregister"))
    }))

  it.effect("L6: an async handler that ignores its signal fails stop() by name; its task is not given back while it runs", () =>
    Effect.gen(function*() {
      let aborted = false
      // a client call that ignores its abort: the handler goes on after the signal fires
      const deaf = Step.fromPromise("deaf", (_: unknown, ctx) => {
        ctx.signal.addEventListener("abort", () => void (aborted = true))
        return new Promise<never>(() => {})
      })
      const { broker, worker, start, ops } = yield* setup({ shutdownTimeout: "1 second" }, [deaf])
      yield* start(worker.run)
      yield* broker.enqueue(task("r9", "deaf"))
      yield* settle
      const stopping = yield* Effect.fork(worker.stop)
      yield* settle
      yield* TestClock.adjust("1 second")
      assert.isTrue(aborted, "the deadline aborts the handler's signal")
      yield* TestClock.adjust("1999 millis")
      assert.isNull(stopping.unsafePoll(), "the stop waits interruptTimeout for the handler")
      yield* TestClock.adjust("1 milli")
      const error = yield* Effect.flip(Fiber.join(stopping))
      assert.strictEqual(error._tag, "ShutdownTimeoutError")
      if (error._tag === "ShutdownTimeoutError") assert.deepStrictEqual(error.stuckTasks, ["task m1 from in-memory queue"])
      const journal = yield* ops
      assert.isFalse(journal.includes("abandon"), "a task whose handler still runs is not handed to another worker")
      assert.isFalse(journal.includes("deregister"))
    }))

  it.effect("an async handler that ends late after its abort holds the stop until it has ended; then its task goes back", () =>
    Effect.gen(function*() {
      const release = yield* Deferred.make<void>()
      let ended = false
      const slow = Step.fromPromise("slow", (_: unknown, ctx) =>
        new Promise((_resolve, reject) =>
          ctx.signal.addEventListener("abort", () =>
            // it takes a while to wind down after the abort (here: until the test lets it)
            void Effect.runPromise(Deferred.await(release)).then(() => {
              ended = true
              reject(ctx.signal.reason)
            }))
        ))
      const { broker, worker, start, ops } = yield* setup({ shutdownTimeout: "1 second" }, [slow])
      const run = yield* start(worker.run)
      yield* broker.enqueue(task("r10", "slow"))
      yield* settle
      const stopping = yield* Effect.fork(worker.stop)
      yield* settle
      yield* TestClock.adjust("1500 millis")
      assert.isNull(stopping.unsafePoll(), "the handler is still winding down")
      assert.isFalse((yield* ops).includes("abandon"), "its task is not given back before it has ended")
      yield* Deferred.succeed(release, undefined)
      yield* Effect.promise(() => new Promise((resolve) => setImmediate(resolve)))
      yield* Fiber.join(stopping)
      yield* Fiber.join(run)
      assert.isTrue(ended)
      const journal = yield* ops
      assert.isTrue(journal.indexOf("abandon") < journal.indexOf("deregister"), "given back, then deregistered")
      assert.isTrue(journal.includes("abandon"))
    }))

  it.effect("L8: a loop error is raised with the deregistration error attached as its cause", () =>
    Effect.gen(function*() {
      const { broker, worker, start } = yield* setup()
      yield* broker.setDeregisterFault({ _tag: "Fail", message: "403 forbidden" })
      yield* broker.setPollFault({ _tag: "Fail", message: "unsupported task kind", fatal: true })
      const running = yield* start(worker.run)
      yield* settle
      const error = yield* Effect.flip(Fiber.join(running))
      assert.strictEqual(error._tag, "WorkerLoopError")
      if (error._tag === "WorkerLoopError") {
        assert.include(error.message, "unsupported task kind")
        assert.strictEqual((error.cause as { _tag?: string })._tag, "DeregistrationError")
      }
      const fromStop = yield* Effect.flip(worker.stop)
      assert.strictEqual(fromStop._tag, "DeregistrationError")
    }))

  it.effect("L8: a loop error with a clean shutdown is raised alone", () =>
    Effect.gen(function*() {
      const { broker, worker, start, ops } = yield* setup()
      yield* broker.setPollFault({ _tag: "Fail", message: "boom", fatal: true })
      const running = yield* start(worker.run)
      yield* settle
      const error = yield* Effect.flip(Fiber.join(running))
      assert.strictEqual(error._tag, "WorkerLoopError")
      if (error._tag === "WorkerLoopError") assert.isUndefined(error.cause)
      assert.strictEqual((yield* ops).at(-1), "deregister")
    }))

  it.effect("L10: a worker runs once; a second run, or a run after stop, fails clearly", () =>
    Effect.gen(function*() {
      const { worker, start } = yield* setup()
      yield* start(worker.run)
      yield* settle
      const again = yield* Effect.flip(Fiber.join(yield* start(worker.run)))
      assert.strictEqual(again._tag, "WorkerStateError")
      assert.include(again.message, "already running or has already run")
      yield* worker.stop
      const afterwards = yield* Effect.flip(Fiber.join(yield* start(worker.run)))
      assert.include(afterwards.message, "already running or has already run")

      const fresh = yield* setup()
      yield* fresh.worker.stop
      const stopped = yield* Effect.flip(Fiber.join(yield* fresh.start(fresh.worker.run)))
      assert.include(stopped.message, "cannot run after stop()")
      assert.deepStrictEqual(yield* fresh.ops, [])
    }))

  it.effect("a worker given nothing to serve says so when it has registered; one with a step does not", () =>
    Effect.gen(function*() {
      const broker = yield* InMemory.make()
      const empty = yield* Worker.make({})
      const emptyLogs = captureLogs()
      yield* Effect.forkDaemon(Effect.provide(empty.run, Layer.mergeAll(broker.layer, memory, emptyLogs.layer)))
      yield* empty.registered
      assert.deepStrictEqual(emptyLogs.lines.filter((line) => line.startsWith("WARN")), [
        "WARN this worker serves nothing: it was given no steps, workflows or durable workflows, so it has no task to run " +
        "(register them before it runs)"
      ])
      yield* empty.stop
      const { start, worker } = yield* setup()
      const logs = captureLogs()
      yield* start(Effect.provide(worker.run, logs.layer))
      yield* worker.registered
      assert.deepStrictEqual(logs.lines.filter((line) => line.startsWith("WARN")), [])
      yield* worker.stop
      // its registration's line names nothing it serves, only where it polls
      assert.deepStrictEqual(emptyLogs.lines.filter((line) => line.includes(" registered on ")), [
        `INFO worker ${empty.id} registered on in-memory; polling in-memory queue`
      ])
    }))

  it.effect("a kind of handler the transport's protocol never runs is warned of by name (durable workflows on nestjs-durable)", () =>
    Effect.gen(function*() {
      const broker = yield* InMemory.make()
      const worker = yield* Worker.make({
        steps: [Step.make("charge", () => Effect.void)],
        durableWorkflows: [DurableWorkflow.make("greet", () => Effect.void)]
      })
      const logs = captureLogs()
      yield* Effect.forkDaemon(Effect.provide(worker.run, Layer.mergeAll(broker.layer, memory, logs.layer)))
      yield* worker.registered
      assert.deepStrictEqual(logs.lines.filter((line) => line.startsWith("WARN")), [
        "WARN durable workflows \"greet\" will take no task: the nestjs-durable protocol runs steps and workflows only"
      ])
      yield* worker.stop
    }))

  it.effect("the registration's line names the worker's handlers (each kind's first ten names, sorted and quoted, then how many more) and what it polls", () =>
    Effect.gen(function*() {
      const broker = yield* InMemory.make()
      const names = Array.from({ length: 12 }, (_, i) => `step-${String(12 - i).padStart(2, "0")}`)
      const worker = yield* Worker.make({
        steps: names.map((name) => Step.make(name, () => Effect.void)),
        workflows: [Workflow.make("order", () => Effect.void)]
      })
      const logs = captureLogs()
      yield* Effect.forkDaemon(Effect.provide(worker.run, Layer.mergeAll(broker.layer, memory, logs.layer)))
      yield* worker.registered
      assert.deepStrictEqual(logs.lines.filter((line) => line.includes(" registered on ")), [
        `INFO worker ${worker.id} registered on in-memory; its handlers: steps "step-01", "step-02", "step-03", "step-04", ` +
        "\"step-05\", \"step-06\", \"step-07\", \"step-08\", \"step-09\", \"step-10\" and 2 more; workflows \"order\"; " +
        "polling in-memory queue"
      ])
      yield* worker.stop
    }))

  it.effect("interrupting run() stops gracefully: drains, then deregisters", () =>
    Effect.gen(function*() {
      const { broker, worker, ended, start, ops } = yield* setup()
      const running = yield* start(worker.run)
      yield* broker.enqueue(task("r1", "sleep", { ms: 500, id: "a" }))
      yield* settle
      const interrupting = yield* Effect.fork(Fiber.interrupt(running))
      yield* settle
      yield* TestClock.adjust(500)
      const exit = yield* Fiber.join(interrupting)
      assert.isTrue(Exit.isInterrupted(exit))
      assert.deepStrictEqual(yield* Ref.get(ended), ["done a"])
      assert.strictEqual((yield* ops).at(-1), "deregister")
    }))

  it.effect("forceStop interrupts running work at once, and the log says the stop's account", () =>
    Effect.gen(function*() {
      const { broker, worker, ended, start, ops } = yield* setup()
      const logs = captureLogs()
      yield* start(Effect.provide(worker.run, logs.layer))
      yield* broker.enqueue(task("r1", "sleep", { ms: 60_000, id: "a" }))
      yield* settle
      const stopping = yield* Effect.fork(worker.stop)
      yield* settle
      yield* worker.forceStop
      yield* Fiber.join(stopping)
      assert.deepStrictEqual(yield* Ref.get(ended), ["interrupted a"])
      assert.strictEqual((yield* ops).at(-1), "deregister")
      assert.deepStrictEqual(logs.lines.filter((line) => /stop|draining|interrupting/.test(line)), [
        "INFO worker stopping: its pollers first, then the tasks it accepted, within 10s (the shutdown timeout)",
        "INFO worker draining 1 accepted task(s) within 10s",
        "WARN interrupting 1 task(s) still running at a stop made at once (forceStop, or a second signal); each is given back to its broker, to run again",
        "INFO worker stopped and deregistered"
      ])
    }))

  it.effect("a stop that does not end clean ends the log's account with why (stuck work, a failed deregistration)", () =>
    Effect.gen(function*() {
      const stubborn = Step.make("stubborn", () => Effect.uninterruptible(Effect.sleep("1 hour")))
      const stuck = yield* setup({ shutdownTimeout: "1 second" }, [stubborn])
      const stuckLogs = captureLogs()
      yield* stuck.start(Effect.provide(stuck.worker.run, stuckLogs.layer))
      yield* stuck.broker.enqueue(task("r9", "stubborn"))
      yield* settle
      const stopping = yield* Effect.fork(stuck.worker.stop)
      yield* settle
      yield* TestClock.adjust("3 seconds")
      yield* Effect.flip(Fiber.join(stopping))
      assert.match(stuckLogs.lines.at(-1)!, /^ERROR worker stop incomplete: worker shutdown timed out while stopping 1 in-flight task/)

      // a task whose handler has ended and whose answer the broker holds: the stop says so
      const held = yield* setup({ shutdownTimeout: "1 second" })
      yield* held.broker.setCompleteFault({ _tag: "Hang" })
      const heldStop = yield* held.start(held.worker.run)
      yield* held.broker.enqueue(task("r8", "sleep", { ms: 10, id: "h" }))
      yield* settle
      yield* TestClock.adjust("10 millis")
      yield* settle
      const heldStopping = yield* Effect.fork(held.worker.stop)
      yield* settle
      yield* TestClock.adjust("3 seconds")
      const heldError = yield* Effect.flip(Fiber.join(heldStopping))
      assert.strictEqual(heldError._tag, "ShutdownTimeoutError")
      assert.include(heldError.message, "(task m1 from in-memory queue, its handler ended, its answer waiting for the broker)")
      yield* Fiber.interrupt(heldStop).pipe(Effect.fork)

      // a task interrupted at the deadline whose give-back the broker holds: named as a give-back.
      // Its handler takes a second to stop, so the give-back (bounded by interruptTimeout, 5 s, from
      // when it starts) is still waiting when the stop's own 5 s for the task run out
      const slowToStop = Step.make("slowToStop", () => Effect.onInterrupt(Effect.never, () => Effect.sleep("1 second")))
      const givingBack = yield* setup({ shutdownTimeout: "1 second" }, [slowToStop])
      yield* givingBack.broker.setAbandonFault({ _tag: "Hang" })
      const givingBackRun = yield* givingBack.start(givingBack.worker.run)
      yield* givingBack.broker.enqueue(task("r7", "slowToStop"))
      yield* settle
      const givingBackStopping = yield* Effect.fork(givingBack.worker.stop)
      yield* settle
      yield* TestClock.adjust("1 second")
      yield* settle
      yield* TestClock.adjust("5 seconds")
      const givingBackError = yield* Effect.flip(Fiber.join(givingBackStopping))
      assert.strictEqual(givingBackError._tag, "ShutdownTimeoutError")
      assert.include(
        givingBackError.message,
        "(task m1 from in-memory queue, its handler stopped, its give-back waiting for the broker)"
      )
      yield* Fiber.interrupt(givingBackRun).pipe(Effect.fork)

      const refused = yield* setup()
      const refusedLogs = captureLogs()
      yield* refused.broker.setDeregisterFault({ _tag: "Fail", message: "403 forbidden" })
      yield* refused.start(Effect.provide(refused.worker.run, refusedLogs.layer))
      yield* settle
      yield* Effect.flip(refused.worker.stop)
      assert.match(refusedLogs.lines.at(-1)!, /^ERROR worker stopped, but its deregistration failed: .*403 forbidden/)
    }))
})

describe("Worker dispatch", () => {
  it.effect("never runs more than `concurrency` tasks at once, and takes no task it has no permit for", () =>
    Effect.gen(function*() {
      const running = yield* Ref.make(0)
      const peak = yield* Ref.make(0)
      const counted = Step.make("count", () =>
        Effect.acquireUseRelease(
          Ref.updateAndGet(running, (n) => n + 1).pipe(Effect.tap((n) => Ref.update(peak, (p) => Math.max(p, n)))),
          () => Effect.sleep(1_000),
          () => Ref.update(running, (n) => n - 1)
        ))
      const { broker, worker, start } = yield* setup({ concurrency: 2 }, [counted])
      for (let i = 0; i < 7; i++) yield* broker.enqueue(task(`r${i}`, "count"))
      yield* start(worker.run)
      yield* settle
      assert.strictEqual(yield* broker.pending, 5)
      for (let i = 0; i < 4; i++) {
        yield* TestClock.adjust(1_000)
        yield* settle
      }
      assert.strictEqual((yield* broker.replies).length, 7)
      assert.strictEqual(yield* Ref.get(peak), 2)
    }))

  it.effect("a transient poll error is logged and retried after pollRetryDelay; nothing is lost", () =>
    Effect.gen(function*() {
      const { broker, worker, start } = yield* setup()
      yield* broker.setPollFault({ _tag: "Fail", message: "connection reset" })
      yield* broker.enqueue(task("r1", "sleep", { ms: 1, id: "a" }))
      const running = yield* start(worker.run)
      yield* settle
      yield* broker.setPollFault(undefined)
      assert.strictEqual(yield* broker.pending, 1)
      yield* TestClock.adjust(1_000)
      yield* settle
      yield* TestClock.adjust(1)
      const reply = yield* broker.takeReply
      assert.strictEqual(resultOf(reply).output, "a")
      assert.isNull(running.unsafePoll())
    }))

  it.effect("a run of poll failures is one warning with the reason, debug lines after it, and a line when polling works again", () =>
    Effect.gen(function*() {
      const { broker, worker, start } = yield* setup({ pollRetryDelay: "1 second" })
      const logs = captureLogs()
      yield* broker.setPollFault({ _tag: "Fail", message: "connection reset" })
      yield* start(Effect.provide(worker.run, Layer.merge(logs.layer, Logger.minimumLogLevel(LogLevel.Debug))))
      yield* settle
      for (let i = 0; i < 4; i++) {
        yield* TestClock.adjust("1 second")
        yield* settle
      }
      yield* broker.setPollFault(undefined)
      yield* TestClock.adjust("1 second")
      // the poll that works again returns with this task
      yield* broker.enqueue(task("r1", "sleep", { ms: 1, id: "a" }))
      yield* settle
      const logged = logs.lines.filter((line) => line.includes("poll") && !line.includes(" registered on "))
      const poller = logged[0]!.match(/poll failed on (.+?):/)![1]
      assert.deepStrictEqual(logged, [
        `WARN poll failed on ${poller}: connection reset; retrying every 1s (until it works again, further failures are debug lines)`,
        ...[2, 3, 4, 5].map((n) => `DEBUG poll failed on ${poller} again (${n}): connection reset`),
        `INFO polling ${poller} again after 5 failed attempt(s)`
      ])
    }))

  it.effect("heartbeats every interval, the first one interval after registration, with the status", () =>
    Effect.gen(function*() {
      const { broker, worker, start, ops } = yield* setup({ heartbeatInterval: "10 seconds" })
      yield* start(worker.run)
      yield* broker.enqueue(task("r1", "sleep", { ms: 60_000, id: "a" }))
      yield* settle
      yield* TestClock.adjust(9_999)
      assert.isFalse((yield* ops).includes("heartbeat"))
      yield* TestClock.adjust(1)
      yield* TestClock.adjust(10_000)
      const beats = (yield* broker.journal).flatMap((e) => e.op === "heartbeat" ? [e.status] : [])
      assert.strictEqual(beats.length, 2)
      assert.strictEqual(beats[0]!.inFlight, 1)
      assert.deepStrictEqual(beats[0]!.concurrency, { mode: "fixed", limit: 4 })
      assert.isTrue((beats[0]!.rssBytes ?? 0) > 0)
    }))

  it.effect("heartbeats on through the drain, saying so, and stops before the deregistration", () =>
    Effect.gen(function*() {
      const { broker, worker, start, ops, ended } = yield* setup({ heartbeatInterval: "1 second", shutdownTimeout: "10 seconds" })
      yield* start(worker.run)
      yield* broker.enqueue(task("r1", "sleep", { ms: 4_500, id: "a" }))
      yield* settle
      yield* TestClock.adjust(1_500)
      const stopping = yield* Effect.fork(worker.stop)
      yield* settle
      yield* TestClock.adjust(3_000)
      yield* Fiber.join(stopping)
      assert.deepStrictEqual(yield* ended, ["done a"])
      const journal = yield* broker.journal
      const states = journal.flatMap((e) => e.op === "heartbeat" ? [e.status.state] : [])
      // one beat while running, then one a second while the task drains
      assert.deepStrictEqual(states, ["running", "draining", "draining", "draining"])
      const after = journal.map((e) => e.op).slice(journal.findIndex((e) => e.op === "complete"))
      assert.deepStrictEqual(after.filter((op) => op !== "heartbeat"), ["complete", "deregister"])
      assert.strictEqual(after.at(-1), "deregister", "no beat after the deregistration")
      yield* TestClock.adjust(5_000)
      assert.strictEqual((yield* ops).at(-1), "deregister")
    }))

  it.effect("a beat in flight at the stop is answered before the deregistration is sent", () =>
    Effect.gen(function*() {
      const { broker, worker, start, ops } = yield* setup({ heartbeatInterval: "1 second" })
      // the broker has each beat, and takes it half a second later whatever the worker does
      yield* broker.setHeartbeatFault({ _tag: "Late", after: "500 millis" })
      const running = yield* start(worker.run)
      yield* settle
      yield* TestClock.adjust("1 second")
      const stopping = yield* Effect.fork(worker.stop)
      yield* settle
      assert.isFalse((yield* ops).includes("deregister"), "not while the beat is in flight")
      yield* TestClock.adjust("500 millis")
      yield* Fiber.join(stopping)
      yield* Fiber.join(running)
      const journal = (yield* ops).filter((op) => op !== "poll")
      assert.deepStrictEqual(journal, ["register", "heartbeat", "deregister"])
      yield* TestClock.adjust("10 seconds")
      assert.strictEqual((yield* ops).at(-1), "deregister", "no beat lands after the deregistration")
    }))

  it.effect("a beat with no answer within interruptTimeout: the deregistration is not sent, and stop says why", () =>
    Effect.gen(function*() {
      const { broker, worker, start, ops } = yield* setup({ heartbeatInterval: "1 second" })
      yield* broker.setHeartbeatFault({ _tag: "Hang" })
      const running = yield* start(worker.run)
      yield* settle
      yield* TestClock.adjust("1 second")
      const stopping = yield* Effect.fork(Effect.flip(worker.stop))
      yield* settle
      yield* TestClock.adjust(1_999)
      assert.isNull(stopping.unsafePoll(), "the beat is waited for one interruptTimeout")
      yield* TestClock.adjust(1)
      const error = yield* Fiber.join(stopping)
      assert.strictEqual(error._tag, "DeregistrationError")
      assert.include(error.message, "a heartbeat sent before it got no answer within 2s (interruptTimeout)")
      assert.isFalse((yield* ops).includes("deregister"))
      assert.isTrue(Exit.isFailure(yield* Fiber.await(running)))
    }))

  it.effect("keeps a running task's lease alive at the transport's interval", () =>
    Effect.gen(function*() {
      const { broker, worker, start, ops } = yield* setup()
      yield* start(worker.run)
      yield* broker.enqueue(task("r1", "sleep", { ms: 40_000, id: "a" }))
      yield* settle
      yield* TestClock.adjust(14_999)
      assert.isFalse((yield* ops).includes("renew"))
      yield* TestClock.adjust(1)
      yield* TestClock.adjust(15_000)
      yield* TestClock.adjust(10_000)
      const journal = yield* ops
      assert.strictEqual(journal.filter((op) => op === "renew").length, 2)
      assert.strictEqual(journal.filter((op) => op === "complete").length, 1)
    }))

  it.effect("a cancelled run interrupts its running step (signal aborted) and reports no success", () =>
    Effect.gen(function*() {
      const aborted = yield* Deferred.make<void>()
      // it ignores its signal: a cancel answers at once all the same (nobody runs a cancelled run's task again)
      const waiting = Step.fromPromise("wait", (_: unknown, ctx) =>
        new Promise(() => {
          ctx.signal.addEventListener("abort", () => Deferred.unsafeDone(aborted, Exit.void))
        }))
      const { broker, worker, start } = yield* setup({}, [waiting])
      yield* start(worker.run)
      yield* broker.enqueue(task("run-x", "wait"))
      yield* settle
      yield* broker.cancel("run-x")
      yield* Deferred.await(aborted)
      const reply = yield* broker.takeReply
      assert.strictEqual(resultOf(reply).status, "failed")
      assert.deepStrictEqual(resultOf(reply).error, { message: "run run-x was cancelled", code: "cancelled", retryable: false })
    }))

  describe("a stopped task's signal says why", () => {
    /** A promise step and an Effect step that wait for their signal and keep its reason. */
    const listeners = Effect.gen(function*() {
      const reasons = yield* Ref.make<ReadonlyArray<readonly [string, unknown]>>([])
      const keep = (name: string) => (reason: unknown) => Effect.runSync(Ref.update(reasons, (r) => [...r, [name, reason] as const]))
      const promised = Step.fromPromise("promised", (_: unknown, ctx) =>
        new Promise((_resolve, reject) =>
          ctx.signal.addEventListener("abort", () => {
            keep("promised")(ctx.signal.reason)
            reject(ctx.signal.reason)
          })
        ))
      const effectful = Step.make("effectful", (_: unknown, ctx) =>
        Effect.zipRight(Effect.sync(() => ctx.signal.addEventListener("abort", () => keep("effectful")(ctx.signal.reason))), Effect.never))
      return { reasons, steps: [promised, effectful] }
    })
    const whys = (reasons: ReadonlyArray<readonly [string, unknown]>) =>
      reasons.map(([name, reason]) => {
        assert.instanceOf(reason, Step.StepAborted)
        // an AbortError as a signal aborted without a reason gives: code that checks for one still works
        assert.instanceOf(reason, DOMException)
        assert.strictEqual((reason as DOMException).name, "AbortError")
        return [name, (reason as Step.StepAborted).why, (reason as Step.StepAborted).message] as const
      }).sort()

    it.effect("cancelled: the run was cancelled", () =>
      Effect.gen(function*() {
        const { reasons, steps } = yield* listeners
        const { broker, worker, start } = yield* setup({}, steps)
        yield* start(worker.run)
        yield* broker.enqueue(task("run-p", "promised"))
        yield* broker.enqueue(task("run-e", "effectful"))
        yield* settle
        yield* broker.cancel("run-p")
        yield* broker.cancel("run-e")
        yield* settle
        assert.deepStrictEqual(whys(yield* Ref.get(reasons)), [
          ["effectful", "cancelled", "the run was cancelled while this task ran"],
          ["promised", "cancelled", "the run was cancelled while this task ran"]
        ])
      }))

    /** Two tasks running, a graceful stop asked for, then `cut` (what ends the drain early): the reasons. */
    const stoppedBy = (cut: (worker: Worker.Worker) => Effect.Effect<void, unknown>) =>
      Effect.gen(function*() {
        const { reasons, steps } = yield* listeners
        const { broker, worker, start } = yield* setup({}, steps)
        const run = yield* start(worker.run)
        yield* broker.enqueue(task("r1", "promised"))
        yield* broker.enqueue(task("r2", "effectful"))
        yield* settle
        yield* Effect.fork(worker.stop)
        yield* settle
        assert.deepStrictEqual(yield* Ref.get(reasons), [], "nothing is aborted by the stop itself")
        yield* cut(worker)
        yield* Fiber.join(run)
        return whys(yield* Ref.get(reasons))
      })

    it.effect("shutdown: the shutdown deadline passed", () =>
      Effect.gen(function*() {
        const reasons = yield* stoppedBy(() => TestClock.adjust("10 seconds"))
        assert.deepStrictEqual(reasons.map(([name, why]) => [name, why]), [["effectful", "shutdown"], ["promised", "shutdown"]])
        assert.match(reasons[0]![2], /shutdown deadline passed .* goes back to the broker/)
      }))

    it.effect("forced: the worker was stopped at once", () =>
      Effect.gen(function*() {
        const reasons = yield* stoppedBy((worker) => worker.forceStop)
        assert.deepStrictEqual(reasons.map(([name, why]) => [name, why]), [["effectful", "forced"], ["promised", "forced"]])
      }))
  })

  it.effect("bad input loses nothing: malformed tasks are answered or rejected and the worker goes on", () =>
    Effect.gen(function*() {
      const { broker, worker, start } = yield* setup()
      const logged: Array<{ readonly message: unknown; readonly annotations: Record<string, unknown> }> = []
      const logger = Logger.make(({ annotations, logLevel, message }) => {
        if (logLevel._tag === "Error") logged.push({ message, annotations: Object.fromEntries(HashMap.toEntries(annotations)) })
      })
      yield* start(Effect.provide(worker.run, Logger.replace(Logger.defaultLogger, logger)))
      yield* broker.enqueue("not a task")
      yield* broker.enqueue({ runId: "r2", seq: 0, stepId: "r2:0", name: "sleep", attempt: "one" })
      yield* broker.enqueue(task("r3", "unknown.step"))
      yield* broker.enqueue({ workflow: "pipeline", history: [], runId: "r4" })
      yield* broker.enqueue(task("r5", "sleep", { ms: 1, id: "ok" }))
      yield* settle
      yield* TestClock.adjust(1)
      const replies = yield* broker.replies
      const byRun = new Map(replies.map((r) => [resultOf(r).runId, resultOf(r)]))
      assert.strictEqual(byRun.get("r2")?.error?.code, "malformed_task")
      assert.strictEqual(byRun.get("r2")?.error?.retryable, false)
      assert.strictEqual(byRun.get("r3")?.error?.message, "no handler for unknown.step")
      assert.strictEqual(byRun.get("r5")?.output, "ok")
      const rejected = yield* broker.rejected
      assert.strictEqual(rejected.length, 2)
      assert.strictEqual(yield* broker.pending, 0)
      // one line per bad task (a logfmt line with one message= key): a task that names its run is
      // answered as failed, its line the decoder's account and the run's coordinates as fields of
      // their own; one that does not is rejected, its line the rejection's, naming the delivery
      const malformed = logged.filter((l) => String(l.message).startsWith("malformed"))
      assert.deepStrictEqual(malformed.map((l) => l.message), [["malformed step task"]])
      const r2 = malformed[0]
      assert.strictEqual(r2?.annotations.runId, "r2")
      assert.strictEqual(r2?.annotations.stepId, "r2:0")
      // each problem by its field, on one line, not the tree of the whole task's type
      assert.strictEqual(r2?.annotations.detail, "group: is missing; attempt: Expected number, actual \"one\"")
      const rejections = logged.filter((l) => String(l.message).startsWith("rejected"))
      assert.deepStrictEqual(rejections.map((l) => [l.annotations.delivery, l.message]), [
        ["m1", ["rejected a task: malformed step task: the value: Expected an object, actual \"not a task\""]],
        ["m4", ["rejected a task: malformed workflow task (check the engine and worker protocol versions): taskId: is missing"]]
      ])
      assert.strictEqual(logged.length, 2 + malformed.length, "one error line per bad task")
    }))

  it.effect("a reply that cannot be delivered is retried, then left with the broker (not lost, no crash)", () =>
    Effect.gen(function*() {
      const { broker, worker, start, ops } = yield* setup()
      const logged: Array<{ readonly message: unknown; readonly annotations: Record<string, unknown> }> = []
      const logger = Logger.make(({ annotations, message }) => {
        logged.push({ message, annotations: Object.fromEntries(HashMap.toEntries(annotations)) })
      })
      yield* broker.setCompleteFault({ _tag: "Fail", message: "broker down" })
      const running = yield* start(Effect.provide(worker.run, Logger.replace(Logger.defaultLogger, logger)))
      yield* broker.enqueue(task("r1", "sleep", { ms: 1, id: "a" }))
      yield* settle
      yield* TestClock.adjust("10 seconds")
      assert.strictEqual((yield* broker.replies).length, 0)
      assert.isFalse((yield* ops).includes("complete"))
      assert.isNull(running.unsafePoll())
      // one message per line (an error as a second one is indented JSON in logfmt), naming the task
      const replies = logged.filter((line) => String(line.message).startsWith("could not deliver the reply"))
      assert.deepStrictEqual(replies.map((line) => [line.message, line.annotations["delivery"]]), [
        [["could not deliver the reply: broker down; retrying"], "m1"],
        [["could not deliver the reply: broker down; the task stays with the broker and will be redelivered"], "m1"]
      ])
    }))

  it.effect("invalid options fail at construction, naming the option", () =>
    Effect.gen(function*() {
      const fractional = yield* Effect.flip(Worker.make({ steps: [], concurrency: 1.5 }))
      assert.strictEqual(fractional._tag, "WorkerConfigError")
      assert.include(fractional.message, "concurrency")
      const unknown = yield* Effect.flip(Worker.make({ steps: [], concurrency: { ceiling: 90 } as never }))
      assert.include(unknown.message, "ceiling")
      const blank = yield* Effect.flip(Worker.make({ steps: [], buildId: " " }))
      assert.include(blank.message, "buildId must be a non-empty string")
      const hb = yield* Effect.flip(Worker.make({ steps: [], heartbeatInterval: 0 }))
      assert.include(hb.message, "heartbeatInterval must be a positive, finite duration (")
    }))
})

describe("Worker with adaptive concurrency", () => {
  it.effect("the memory gate defers a task (never fails it, its lease kept) and the heartbeat shows the gate", () =>
    Effect.gen(function*() {
      const running = yield* Ref.make(0)
      const peak = yield* Ref.make(0)
      const heavy = Step.make("heavy", () =>
        Effect.acquireUseRelease(
          Ref.updateAndGet(running, (n) => n + 1).pipe(Effect.tap((n) => Ref.update(peak, (p) => Math.max(p, n)))),
          () => Effect.sleep("20 seconds"),
          () => Ref.update(running, (n) => n - 1)
        ))
      const broker = yield* InMemory.make()
      const worker = yield* Worker.make({
        steps: [heavy],
        concurrency: { min: 1, max: 4, start: 4 },
        heartbeatInterval: "10 seconds",
        pollTimeout: "5 seconds"
      })
      // 900 MiB of 1 GiB in use: above the admission mark, so only what runs alone is admitted
      const tight = Memory.layerTest({ usage: 900 * 1024 * 1024, limit: 1024 * 1024 * 1024 })
      yield* Effect.forkDaemon(Effect.provide(worker.run, Layer.merge(broker.layer, tight)))
      yield* broker.enqueue(task("r1", "heavy"))
      yield* broker.enqueue(task("r2", "heavy"))
      yield* settle
      assert.strictEqual(yield* broker.pending, 0) // both taken: permits were free
      assert.strictEqual(yield* Ref.get(running), 1) // but only one admitted
      yield* TestClock.adjust("10 seconds")
      const beat = (yield* broker.journal).flatMap((e) => e.op === "heartbeat" ? [e.status] : []).at(-1)!
      assert.strictEqual((beat.memory as { waiting?: number }).waiting, 1)
      assert.strictEqual((beat.concurrency as { mode: string }).mode, "adaptive")
      yield* TestClock.adjust("5 seconds")
      // the deferred task's lease was renewed while it waited
      const renewals = (yield* broker.journal).filter((e) => e.op === "renew" && e.id === "m2")
      assert.isAtLeast(renewals.length, 1)
      for (let i = 0; i < 8; i++) yield* TestClock.adjust("5 seconds")
      const replies = yield* broker.replies
      assert.strictEqual(replies.length, 2)
      assert.isTrue(replies.every((r) => resultOf(r).status === "completed"))
      assert.strictEqual(yield* Ref.get(peak), 1)
      yield* worker.stop
    }))
})
