/**
 * `activityContext().heartbeatAsync` of async activities: it rejects with the error itself
 * (`ActivityCancelled`), runs in the activity's fiber's context and stops with the activity.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as HashMap from "effect/HashMap"
import * as Logger from "effect/Logger"
import * as Option from "effect/Option"
import * as TestClock from "effect/TestClock"
import { abortSignal, StepAborted } from "../../src/core/internal/interruption.js"
import type * as Step from "../../src/core/Step.js"
import { DurableWorkflow, QUEUE, setup, startWorker, until } from "./support.js"

/** A service of the worker the heartbeat looks for. */
class Region extends Context.Tag("test/heartbeatAsync/Region")<Region, string>() {}

/** A promise that `open()` resolves. */
const gate = () => {
  let open = () => {}
  const opened = new Promise<void>((resolve) => (open = resolve))
  return { opened, open: () => open() }
}

const rejectionOf = (promise: Promise<unknown>): Promise<unknown> => promise.then(() => "resolved", (error) => error)

/** Step context a transport gives an async activity: `heartbeat` is the test's own. */
const stepContextWith = (heartbeat: DurableWorkflow.ActivityContextShape["heartbeat"]) => {
  const controller = new AbortController()
  const activity: DurableWorkflow.ActivityContextShape = {
    info: {
      taskId: "t-1",
      activityType: "probe",
      activityAttemptId: "a-1",
      attemptNumber: 1,
      taskQueue: QUEUE,
      workerId: "w-1",
      workflowId: undefined,
      runId: undefined
    },
    heartbeat,
    isCancelled: () => false,
    signal: controller.signal
  }
  const stepCtx = {
    [DurableWorkflow.activityContextKey]: activity,
    [abortSignal]: (reason: StepAborted) => controller.abort(reason)
  } as unknown as Step.StepContext
  return { stepCtx, signal: controller.signal }
}

describe("heartbeatAsync", () => {
  it.scoped("after the server asked to cancel, it rejects with ActivityCancelled itself (and again once cancelled)", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const started = gate()
      const cancelRequested = gate()
      const seen: Array<unknown> = []
      const job = DurableWorkflow.activityFromPromise("async.cancellable", async () => {
        const ctx = DurableWorkflow.activityContext()
        started.open()
        await cancelRequested.opened
        seen.push(await rejectionOf(ctx.heartbeatAsync({ step: 1 })))
        seen.push(await rejectionOf(ctx.heartbeatAsync({ step: 2 })))
        seen.push(ctx.isCancelled(), ctx.signal.aborted)
        throw seen[0]
      })
      yield* startWorker(server, { steps: [job] })
      const { taskId } = server.enqueueActivityTask({ activityType: "async.cancellable", taskQueue: QUEUE, input: [] })
      yield* Effect.promise(() => started.opened)
      server.requestActivityCancellation(taskId)
      cancelRequested.open()
      yield* until(server, () => server.failedActivityTasks.length === 1)
      const [first, second, cancelled, aborted] = seen
      assert.instanceOf(first, DurableWorkflow.ActivityCancelled)
      assert.strictEqual((first as DurableWorkflow.ActivityCancelled)._tag, "ActivityCancelled")
      assert.instanceOf(second, DurableWorkflow.ActivityCancelled)
      assert.strictEqual(cancelled, true)
      assert.strictEqual(aborted, true)
      assert.deepStrictEqual(server.activityHeartbeats[0]!.body["details"], { step: 1 })
      assert.lengthOf(server.activityHeartbeats, 1, "once cancelled, a heartbeat sends nothing")
      const failure = server.failedActivityTasks[0]!.failure
      assert.strictEqual(failure["type"], "ActivityCancelled")
      assert.strictEqual(failure["message"], "activity cancelled")
    }))

  it.effect("runs in the activity's fiber: its services, logger, log annotations and Clock", () =>
    Effect.gen(function*() {
      const lines: Array<readonly [unknown, unknown]> = []
      const logger = Logger.replace(
        Logger.defaultLogger,
        Logger.make(({ annotations, message }) => void lines.push([message, HashMap.get(annotations, "activity").pipe(Option.getOrUndefined)]))
      )
      const seen: Array<unknown> = []
      const { stepCtx } = stepContextWith((details) =>
        Effect.gen(function*() {
          seen.push(details, Option.getOrUndefined(yield* Effect.serviceOption(Region)), yield* Effect.clockWith((clock) => clock.currentTimeMillis))
          yield* Effect.logInfo("heartbeat sent")
        }))
      const job = DurableWorkflow.activityFromPromise("probe", async () => {
        await DurableWorkflow.activityContext().heartbeatAsync({ step: 1 })
        return "done"
      })
      yield* TestClock.setTime(1_234)
      const result = yield* job.run([], stepCtx).pipe(
        Effect.annotateLogs("activity", "probe#1"),
        Effect.provideService(Region, "eu-west"),
        Effect.provide(logger)
      )
      assert.strictEqual(result, "done")
      assert.deepStrictEqual(seen, [{ step: 1 }, "eu-west", 1_234])
      assert.deepStrictEqual(lines, [[["heartbeat sent"], "probe#1"]])
    }))

  it.live("a heartbeat under way stops when the activity is aborted, rejecting with the signal's reason", () =>
    Effect.gen(function*() {
      const pending = gate()
      let interrupted = false
      const { signal, stepCtx } = stepContextWith(() =>
        Effect.zipRight(Effect.sync(() => pending.open()), Effect.never).pipe(Effect.onInterrupt(() => Effect.sync(() => (interrupted = true))))
      )
      const rejected = gate()
      let rejection: unknown
      const job = DurableWorkflow.activityFromPromise("probe", async () => {
        rejection = await rejectionOf(DurableWorkflow.activityContext().heartbeatAsync())
        rejected.open()
      })
      const running = yield* Effect.fork(job.run([], stepCtx))
      yield* Effect.promise(() => pending.opened)
      yield* Fiber.interrupt(running)
      yield* Effect.promise(() => rejected.opened).pipe(Effect.timeoutFail({ duration: "2 seconds", onTimeout: () => new Error("heartbeatAsync did not stop") }))
      assert.isTrue(signal.aborted)
      assert.isTrue(interrupted, "the heartbeat's fiber was interrupted")
      assert.instanceOf(rejection, StepAborted)
      assert.strictEqual(rejection, signal.reason)
    }))
})
