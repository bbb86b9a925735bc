import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import type * as FiberId from "effect/FiberId"
import * as FiberSet from "effect/FiberSet"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Interruption from "../../core/internal/interruption.js"
import type { Registration } from "../../seam/Transport.js"
import { DeregistrationError } from "../../seam/TransportError.js"
import type * as ConcurrencyController from "../../services/ConcurrencyController.js"
import type { ResolvedWorkerConfig } from "../WorkerConfig.js"
import { ShutdownTimeoutError } from "../WorkerError.js"
import type { ShutdownError } from "../WorkerError.js"
import type { ServingLabel } from "./dispatch.js"

/** What a shutdown stops. @internal */
export interface ShutdownEnv {
  readonly config: ResolvedWorkerConfig
  readonly registration: Registration
  /** The transport's name, for a deregistration that gets no answer. */
  readonly transport: string
  readonly controller: ConcurrencyController.ConcurrencyController["Type"]
  /** The poll loops, stopped first. */
  readonly loops: FiberSet.FiberSet<never, unknown>
  /** The heartbeat and the metrics sampler: they run on through the drain, and stop before the deregistration. */
  readonly beats: FiberSet.FiberSet<never, unknown>
  /** The name each loop is reported by. */
  readonly loopNames: ReadonlyMap<Fiber.RuntimeFiber<unknown, unknown>, string>
  /** The serving fibers, with the task each is on. */
  readonly work: FiberSet.FiberSet
  readonly serving: ReadonlyMap<Fiber.RuntimeFiber<unknown, unknown>, ServingLabel>
  /** Done when the drain deadline is to be cut short (`forceStop`). */
  readonly forced: Deferred.Deferred<void>
  /** Held by each heartbeat for as long as it is in flight: the deregistration waits for it. */
  readonly beating: Effect.Semaphore
}

/**
 * The deregistration, sent once, after the heartbeat in flight (if any) has been answered: a beat
 * that reached the broker after it could mark the worker alive again (a transport that registers
 * anew a worker its broker no longer knows). Both within one `interruptTimeout`: a broker that does
 * not answer (a Redis client holds its commands while it reconnects) must not hold the stop for as
 * long as it is away; disconnected, so that not even a deregistration that ignores interruption
 * does. Its failure is logged, and returned.
 *
 * @internal
 */
export const deregister = (options: {
  readonly config: ResolvedWorkerConfig
  readonly registration: Registration
  readonly transport: string
  readonly beating?: Effect.Semaphore | undefined
}): Effect.Effect<void, DeregistrationError> =>
  Effect.gen(function*() {
    const { config, transport } = options
    const sent = yield* Ref.make(false)
    const within = Duration.format(config.interruptTimeout)
    yield* (options.beating === undefined ? Effect.void : options.beating.take(1)).pipe(
      Effect.zipRight(Ref.set(sent, true)),
      Effect.zipRight(options.registration.deregister),
      Effect.disconnect,
      Effect.timeout(config.interruptTimeout),
      Effect.catchTag("TimeoutException", () =>
        Effect.flatMap(Ref.get(sent), (deregistering) =>
          new DeregistrationError({
            transport,
            message: deregistering
              ? `the deregistration got no answer within ${within} (interruptTimeout); ` +
                "the worker's registration is left to expire on the broker"
              : `a heartbeat sent before it got no answer within ${within} (interruptTimeout), so the deregistration was not ` +
                "sent (the beat could reach the broker after it, and mark the worker alive again); the worker's registration " +
                "is left to expire on the broker"
          }))
      ),
      Effect.tapError((error) => Effect.logError(`worker stopped, but its deregistration failed: ${error.message}`))
    )
  })

/** Interrupts fibers and waits for each up to the bound; returns the labels of those still running. */
const stopFibers = (
  fibers: ReadonlyArray<Fiber.RuntimeFiber<unknown, unknown>>,
  bound: Duration.Duration,
  label: (fiber: Fiber.RuntimeFiber<unknown, unknown>) => string,
  by?: FiberId.FiberId
) =>
  Effect.gen(function*() {
    for (const fiber of fibers) yield* (by === undefined ? Fiber.interruptFork(fiber) : Fiber.interruptAsFork(fiber, by))
    const stopped = yield* Effect.forEach(
      fibers,
      (fiber) => Fiber.await(fiber).pipe(Effect.timeout(bound), Effect.option),
      { concurrency: "unbounded" }
    )
    return fibers.flatMap((fiber, i) => Option.isNone(stopped[i]!) ? [label(fiber)] : [])
  })

/**
 * The shutdown (L3, L6): stop every poller, then wait for accepted work within the one
 * `shutdownTimeout` deadline, interrupt what still runs at it, stop the heartbeat (which told the
 * broker the worker was draining meanwhile), then deregister — unless something could not be
 * stopped, which fails the shutdown by name and leaves the registration in place.
 *
 * @internal
 */
export const shutdown = (env: ShutdownEnv): Effect.Effect<void, ShutdownError> =>
  Effect.gen(function*() {
    const { config, serving, work } = env
    const deadline = (yield* Clock.currentTimeMillis) + Duration.toMillis(config.shutdownTimeout)
    yield* Effect.logInfo(
      `worker stopping: its pollers first, then the tasks it accepted, within ${Duration.format(config.shutdownTimeout)} ` +
        "(the shutdown timeout)"
    )
    yield* env.controller.beginDrain
    const stuckPollers = yield* stopFibers(
      Array.from(env.loops),
      config.interruptTimeout,
      (fiber) => env.loopNames.get(fiber) ?? "a worker loop"
    )
    // counted once the pollers have stopped: a poll that was taking tasks hands them over first
    const remaining = Math.max(0, deadline - (yield* Clock.currentTimeMillis))
    // to a tenth of a second: the milliseconds the pollers took are noise to whoever reads it
    const left = Duration.format(Duration.millis(Math.round(remaining / 100) * 100))
    yield* Effect.logInfo(`worker draining ${yield* FiberSet.size(work)} accepted task(s) within ${left}`)
    const drained = yield* FiberSet.awaitEmpty(work).pipe(
      Effect.as(true),
      Effect.raceFirst(Effect.as(Effect.sleep(remaining), false)),
      Effect.raceFirst(Effect.as(Deferred.await(env.forced), false))
    )
    const leftover = Array.from(work)
    // the tasks' signals say why they were stopped: the deadline, or a stop made at once
    const forced = yield* Deferred.isDone(env.forced)
    if (!drained && leftover.length > 0) {
      yield* Effect.logWarning(
        `interrupting ${leftover.length} task(s) still running ${
          forced ? "at a stop made at once (forceStop, or a second signal)" : "at the shutdown deadline"
        }; each is given back to its broker, to run again`
      )
    }
    const by = forced ? Interruption.byForcedStop : Interruption.byDeadline
    // the tasks still running and the heartbeat stop under one bound: the worst case stays the
    // deadline, one interruptTimeout for them and one for the deregistration
    const [stuckTasks, stuckBeats] = yield* Effect.all([
      stopFibers(leftover, config.interruptTimeout, (fiber) => {
        const label = serving.get(fiber)
        if (label === undefined) return "a task"
        const task = `task ${label.delivery.id} from ${label.poller}`
        // a task whose handler is done and which a broker away holds is no handler to look into
        switch (label.stage) {
          case "running":
            return task
          case "answering":
            return `${task}, its handler ended, its answer waiting for the broker`
          case "givingBack":
            return `${task}, its handler stopped, its give-back waiting for the broker`
        }
      }, by),
      stopFibers(
        Array.from(env.beats),
        config.interruptTimeout,
        (fiber) => env.loopNames.get(fiber) ?? "a worker loop"
      )
    ], { concurrency: "unbounded" })
    if (stuckPollers.length > 0 || stuckTasks.length > 0 || stuckBeats.length > 0) {
      const stuck = new ShutdownTimeoutError({ stuckPollers: [...stuckPollers, ...stuckBeats], stuckTasks })
      // the log's account of the stop ends with why it did not end clean, as a clean one ends with its line
      yield* Effect.logError(`worker stop incomplete: ${stuck.message}`)
      return yield* stuck
    }
    yield* deregister({ config, registration: env.registration, transport: env.transport, beating: env.beating })
    yield* Effect.logInfo("worker stopped and deregistered")
  })
