import { assert, describe, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Ref from "effect/Ref"
import * as TestClock from "effect/TestClock"
import { Step, Transport, Worker } from "../../src/index.js"
import * as Memory from "../../src/services/Memory.js"
import { stepTask } from "../support/local.js"
import { scriptedTransport } from "../support/scriptedTransport.js"

const memory = Memory.layerTest({ usage: 1, limit: 1024 })

/**
 * A one-queue transport whose deliveries die where `dies` says, recording what the worker did; its
 * give-back works, fails or never answers, as `giveBack` says.
 */
const faulty = (
  dies: "complete" | "completeResult" | "renew" | "process" | "processWithoutCrashed",
  giveBack: "works" | "fails" | "hangs" = "works"
) =>
  Effect.gen(function*() {
    const queue = yield* Queue.unbounded<unknown>()
    const done = yield* Ref.make<ReadonlyArray<string>>([])
    const replies: Array<unknown> = []
    const record = (op: string) => Ref.update(done, (ops) => [...ops, op])
    const layer = scriptedTransport("faulty", {
      poll: (protocol) => () =>
        Effect.map(Effect.interruptible(Queue.take(queue)), (payload) => [
          Transport.Delivery.make({
            id: "d1",
            payload,
            // a protocol whose processing dies: a bug of the worker's, not a handler's throw
            protocol: dies === "process"
              ? { ...protocol, process: () => Effect.dieMessage("decoder exploded") }
              : dies === "processWithoutCrashed"
              ? { ...protocol, process: () => Effect.dieMessage("decoder exploded"), crashed: undefined }
              : protocol,
            keepAlive: Option.some({
              interval: Duration.millis(100),
              renew: dies === "renew" ? Effect.zipRight(record("renew"), Effect.dieMessage("renew exploded")) : record("renew")
            }),
            complete: (reply) =>
              Effect.zipRight(
                Effect.zipRight(record("complete"), Effect.sync(() => replies.push(reply))),
                // "completeResult": only the handler's result cannot be sent (a value the encoding chokes on)
                dies === "complete" || (dies === "completeResult" && (reply as StepReply).result.status === "completed")
                  ? Effect.dieMessage("cannot encode")
                  : Effect.void
              ),
            abandon: Effect.zipRight(
              record("abandon"),
              giveBack === "fails"
                ? Effect.fail(new Transport.TransportError({ transport: "faulty", operation: "abandon", message: "refused" }))
                : giveBack === "hangs"
                ? Effect.never
                : Effect.void
            )
          })
        ])
    })
    return { queue, done, layer, replies: replies as ReadonlyArray<StepReply> }
  })

/** What the scripted transport's nestjs-durable protocol answers a step with. */
interface StepReply {
  readonly result: { readonly status: string; readonly error?: { readonly message: string; readonly code?: string; readonly retryable?: boolean } }
}

describe("a defect on the task path", () => {
  it.effect("while answering, the answer cannot be sent: the task is answered failed once (worker_defect), not given back to die again", () =>
    Effect.gen(function*() {
      const logs: Array<{ level: string; message: string }> = []
      const logger = Logger.make(({ logLevel, message }) => logs.push({ level: logLevel.label, message: String(message) }))
      const { done, layer, queue, replies } = yield* faulty("completeResult")
      const worker = yield* Worker.make({ steps: [Step.make("s", () => Effect.succeed(1))] })
      yield* Effect.forkDaemon(
        Effect.provide(worker.run, Layer.mergeAll(layer, memory, Logger.replace(Logger.defaultLogger, logger)))
      )
      yield* worker.registered
      yield* Queue.offer(queue, stepTask("r1", "s", {}))
      yield* Ref.get(done).pipe(Effect.repeat({ until: (ops) => ops.length === 2 }))
      assert.deepStrictEqual(yield* Ref.get(done), ["complete", "complete"])
      const failed = replies[1]!.result
      assert.strictEqual(failed.status, "failed")
      assert.strictEqual(failed.error?.code, "worker_defect")
      assert.isTrue(failed.error?.retryable, "the engine retries it as its attempts allow")
      assert.include(failed.error?.message, "cannot encode")
      const logged = logs.find((l) => l.message.includes("a defect while answering a task; answering it failed"))
      assert.strictEqual(logged?.level, "ERROR")
      assert.strictEqual((yield* worker.status).state, "running", "the worker goes on")
      yield* worker.stop
      assert.isFalse((yield* Ref.get(done)).includes("abandon"))
    }))

  it.effect("while answering, the failed answer cannot be sent either: logged at error level with the task's id, the task given back, the worker goes on", () =>
    Effect.gen(function*() {
      const logs: Array<{ level: string; message: string }> = []
      const logger = Logger.make(({ logLevel, message }) => logs.push({ level: logLevel.label, message: String(message) }))
      const { done, layer, queue } = yield* faulty("complete")
      const worker = yield* Worker.make({ steps: [Step.make("s", () => Effect.succeed(1))] })
      yield* Effect.forkDaemon(
        Effect.provide(worker.run, Layer.mergeAll(layer, memory, Logger.replace(Logger.defaultLogger, logger)))
      )
      yield* worker.registered
      yield* Queue.offer(queue, stepTask("r1", "s", {}))
      yield* Ref.get(done).pipe(Effect.repeat({ until: (ops) => ops.includes("abandon") }))
      // the result, then its failed answer once, then the give-back
      assert.deepStrictEqual(yield* Ref.get(done), ["complete", "complete", "abandon"])
      const logged = logs.find((l) => l.message.includes("a defect while answering a task; giving it back"))
      assert.isDefined(logged)
      assert.strictEqual(logged!.level, "ERROR")
      assert.strictEqual((yield* worker.status).state, "running", "the worker goes on")
      yield* worker.stop
    }))

  it.effect("in processing: the task is answered failed (worker_defect) rather than given back; a protocol with no such answer gives it back", () =>
    Effect.gen(function*() {
      const { done, layer, queue, replies } = yield* faulty("process")
      const worker = yield* Worker.make({ steps: [Step.make("s", () => Effect.succeed(1))] })
      yield* Effect.forkDaemon(Effect.provide(worker.run, Layer.mergeAll(layer, memory, Logger.remove(Logger.defaultLogger))))
      yield* worker.registered
      yield* Queue.offer(queue, stepTask("r1", "s", {}))
      yield* Ref.get(done).pipe(Effect.repeat({ until: (ops) => ops.length === 1 }))
      assert.deepStrictEqual(yield* Ref.get(done), ["complete"])
      assert.strictEqual(replies[0]!.result.status, "failed")
      assert.strictEqual(replies[0]!.result.error?.code, "worker_defect")
      assert.include(replies[0]!.result.error?.message, "decoder exploded")
      yield* worker.stop

      const without = yield* faulty("processWithoutCrashed")
      const other = yield* Worker.make({ steps: [Step.make("s", () => Effect.succeed(1))] })
      yield* Effect.forkDaemon(Effect.provide(other.run, Layer.mergeAll(without.layer, memory, Logger.remove(Logger.defaultLogger))))
      yield* other.registered
      yield* Queue.offer(without.queue, stepTask("r1", "s", {}))
      yield* Ref.get(without.done).pipe(Effect.repeat({ until: (ops) => ops.length === 1 }))
      assert.deepStrictEqual(yield* Ref.get(without.done), ["abandon"])
      yield* other.stop
    }))

  it.effect("while answering, a give-back that fails or never answers: a warning saying so, the fiber and its permit freed", () =>
    Effect.gen(function*() {
      for (const giveBack of ["fails", "hangs"] as const) {
        const warnings: Array<string> = []
        const logger = Logger.make(({ logLevel, message }) => {
          if (logLevel.label === "WARN") warnings.push(String(message))
        })
        const { done, layer, queue } = yield* faulty("complete", giveBack)
        const worker = yield* Worker.make({ steps: [Step.make("s", () => Effect.succeed(1))], concurrency: 1 })
        yield* Effect.forkDaemon(
          Effect.provide(worker.run, Layer.mergeAll(layer, memory, Logger.replace(Logger.defaultLogger, logger)))
        )
        yield* worker.registered
        yield* Queue.offer(queue, stepTask("r1", "s", {}))
        yield* Ref.get(done).pipe(Effect.repeat({ until: (ops) => ops.includes("abandon") }))
        // within interruptTimeout (5 s by default), not for as long as the broker is away
        yield* TestClock.adjust("5 seconds")
        yield* Effect.repeat(Effect.sync(() => warnings.length), { until: (n) => n > 0 })
        assert.deepStrictEqual(warnings, [
          giveBack === "fails" ? "could not give the task back: refused" : "could not give the task back: no answer within 5s (interruptTimeout)"
        ])
        // the permit (concurrency 1) is free again: the next task is served (and dies the same way)
        yield* Queue.offer(queue, stepTask("r2", "s", {}))
        yield* Ref.get(done).pipe(Effect.repeat({ until: (ops) => ops.filter((op) => op === "abandon").length === 2 }))
        yield* TestClock.adjust("5 seconds")
        // nothing left stuck: the stop ends clean
        yield* worker.stop
      }
    }))

  it.effect("while renewing a lease: logged, and the lease is still renewed on its interval", () =>
    Effect.gen(function*() {
      const warnings: Array<string> = []
      const logger = Logger.make(({ logLevel, message }) => {
        if (logLevel.label === "WARN") warnings.push(String(message))
      })
      const { done, layer, queue } = yield* faulty("renew")
      const worker = yield* Worker.make({ steps: [Step.make("s", () => Effect.sleep("350 millis"))] })
      yield* Effect.forkDaemon(
        Effect.provide(worker.run, Layer.mergeAll(layer, memory, Logger.replace(Logger.defaultLogger, logger)))
      )
      yield* worker.registered
      yield* Queue.offer(queue, stepTask("r1", "s", {}))
      yield* TestClock.adjust("1 millis")
      yield* TestClock.adjust("350 millis")
      const ops = yield* Ref.get(done).pipe(Effect.repeat({ until: (o) => o.includes("complete") }))
      assert.deepStrictEqual(ops, ["renew", "renew", "renew", "complete"])
      assert.strictEqual(warnings.filter((w) => w.includes("could not extend the task's lease")).length, 3)
      yield* worker.stop
    }))

  it.effect("in a poll: logged once with its stack, and the run fails with WorkerLoopError", () =>
    Effect.gen(function*() {
      const errors: Array<{ message: string; cause: string }> = []
      const logger = Logger.make(({ cause, logLevel, message }) => {
        if (logLevel.label === "ERROR") {
          errors.push({ message: Array.isArray(message) ? message.join(" ") : String(message), cause: Cause.pretty(cause) })
        }
      })
      const buggy = scriptedTransport("buggy", {
        poll: () => () => Effect.zipRight(Effect.sleep("1 second"), Effect.sync(() => JSON.parse("{")))
      })
      const worker = yield* Worker.make({})
      const run = yield* Effect.fork(Effect.provide(worker.run, Layer.mergeAll(buggy, memory, Logger.replace(Logger.defaultLogger, logger))))
      yield* worker.registered
      yield* TestClock.adjust("1 second")
      const exit = yield* Fiber.await(run)
      assert.isTrue(Exit.isFailure(exit))
      const error = Exit.isFailure(exit) ? Cause.squash(exit.cause) : undefined
      assert.instanceOf(error, Worker.WorkerLoopError)
      assert.deepStrictEqual(errors.map((line) => line.message), ["worker loop buggy queue died of a defect"])
      assert.include(errors[0]!.cause, "SyntaxError")
      assert.include(errors[0]!.cause, "defects.test.ts", "the stack points at the bug")
    }))
  for (const loop of ["metrics", "heartbeat"] as const) {
    it.effect(`in the ${loop === "metrics" ? "metrics sampler (a transport's backlog read)" : "heartbeat (a transport's beat)"}: the run fails with WorkerLoopError naming it, after a shutdown that deregistered once`, () =>
      Effect.gen(function*() {
        const calls = yield* Ref.make<ReadonlyArray<string>>([])
        const record = (call: string) => Ref.update(calls, (all) => [...all, call])
        let reads = 0
        const buggy = scriptedTransport("buggy", {
          poll: () => () => Effect.zipRight(record("poll"), Effect.interruptible(Effect.never)),
          // the first read works, the next one meets the bug
          ...(loop === "metrics"
            ? { backlog: Effect.suspend(() => ++reads > 1 ? Effect.dieMessage("backlog exploded") : Effect.succeed(Option.some(0))) }
            : {
              heartbeat: Option.some({
                interval: Duration.seconds(1),
                beat: () => Effect.suspend(() => ++reads > 1 ? Effect.dieMessage("beat exploded") : Effect.succeedNone)
              })
            }),
          deregister: record("deregister")
        })
        const worker = yield* Worker.make({ metricsInterval: "1 second" })
        const run = yield* Effect.fork(Effect.provide(worker.run, Layer.mergeAll(buggy, memory, Logger.remove(Logger.defaultLogger))))
        yield* worker.registered
        yield* TestClock.adjust("2 seconds")
        const exit = yield* Fiber.await(run)
        const error = Exit.isFailure(exit) ? Cause.squash(exit.cause) : undefined
        assert.instanceOf(error, Worker.WorkerLoopError)
        assert.strictEqual((error as Worker.WorkerLoopError).poller, loop)
        assert.include((error as Worker.WorkerLoopError).message, `${loop === "metrics" ? "backlog" : "beat"} exploded`)
        assert.deepStrictEqual(yield* Ref.get(calls), ["poll", "deregister"], "the poller stopped, then one deregistration")
        assert.strictEqual((yield* worker.status).state, "failed")
        // a stop after the run ended does not wait for ever
        yield* worker.stop
      }))
  }
})
