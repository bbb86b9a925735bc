import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import type * as Fiber from "effect/Fiber"
import * as FiberSet from "effect/FiberSet"
import * as Option from "effect/Option"
import * as Scope from "effect/Scope"
import { messageOf, withReason } from "../../core/internal/errors.js"
import type { Handlers, Outcome, TaskLabel } from "../../seam/Protocol.js"
import type { Delivery, PollAfter, Poller, TransportError } from "../../seam/Transport.js"
import type * as ConcurrencyController from "../../services/ConcurrencyController.js"
import type { ResolvedWorkerConfig, TaskOutcome } from "../WorkerConfig.js"
import { WorkerLoopError } from "../WorkerError.js"
import { watchCancel } from "./cancellation.js"
import type { Leases, TaskStage } from "./leases.js"
import type { Pools } from "./pools.js"
import type { Reachability } from "./reachability.js"
import { replyRetry } from "./replyRetry.js"
import { taskSeries } from "./taskMetrics.js"

/** Which task a serving fiber is on, for shutdown's report of what could not be stopped. @internal */
export interface ServingLabel {
  readonly poller: string
  delivery: Delivery
  /**
   * How far its task has got: its handler running, its answer on its way, or the task on its way
   * back to the broker (interrupted, or ended without an outcome). A broker away holds the last two;
   * the task's lease reads it too.
   */
  stage: TaskStage
}

/** What the dispatcher works with. @internal */
export interface DispatchEnv<R> {
  readonly config: ResolvedWorkerConfig
  readonly handlers: Handlers<R>
  readonly pools: Pools
  readonly leases: Leases
  readonly controller: ConcurrencyController.ConcurrencyController["Type"]
  /** Done once the worker is stopping: no next task is taken with an answer from then on. */
  readonly stopping: Deferred.Deferred<void>
  /** Serving fibers and the task each is on. */
  readonly serving: Map<Fiber.RuntimeFiber<unknown, unknown>, ServingLabel>
  /** Told of a poll that failed, and of the first that worked after it, for readiness. */
  readonly reachability: Reachability
}

/** Logs about one delivery carry its id (annotated here rather than on the whole task path). */
const aboutDelivery = (delivery: Delivery) => Effect.annotateLogs("delivery", delivery.id)

/** What a poll is told of the previous one (shared: a poll allocates nothing for it). */
const AFTER_SUCCESS: PollAfter = { failure: false }
const AFTER_FAILURE: PollAfter = { failure: true }

/** What `count` is told of a task of a pool of its own (shared: the task path allocates nothing for it). */
const NOT_LIMITED = { limited: false } as const

/** Runs a task's processing, the one interruptible part of the task path, to its exit. */
const interruptibleExit = <A, R>(effect: Effect.Effect<A, never, R>) => Effect.exit(Effect.interruptible(effect))

/**
 * The task path: a poll loop per poller takes permits, polls, and serves each delivery in a fiber
 * of its own under its permit — lease kept, processed under the controller, answered — going on with
 * the next task the transport hands over with an answer.
 *
 * @internal
 */
export const makeDispatcher = <R>(env: DispatchEnv<R>) => {
  const { config, controller, handlers, leases, pools, reachability, serving, stopping } = env
  const series = taskSeries()

  /**
   * Tells `onTaskEnd` (if any) how a task ended; what the hook throws is logged, never the task's
   * problem. Goes on with `next` (an effect only when there is a warning to log first).
   */
  const taskEnded = <A>(
    delivery: Delivery,
    poller: string,
    label: TaskLabel,
    outcome: TaskOutcome,
    durationMs: number,
    next: A
  ): Effect.Effect<A> => {
    const hook = config.onTaskEnd
    series.ended(label, outcome, durationMs)
    if (hook === undefined) return Effect.succeed(next)
    try {
      hook({ kind: label.kind, name: label.name ?? "unknown", outcome, durationMs, poller, deliveryId: delivery.id })
      return Effect.succeed(next)
    } catch (error) {
      return Effect.as(Effect.logWarning(withReason("onTaskEnd threw", error, "ignored")), next)
    }
  }

  /** Sends a reply (or the rejection), retrying a failed send a few times; never fails. */
  const answer = (delivery: Delivery, outcome: Outcome<unknown>) => {
    const send = outcome._tag === "Reply"
      ? delivery.complete(outcome.reply)
      : Effect.zipRight(
        Effect.logError(withReason("rejected a task", outcome.reason)).pipe(aboutDelivery(delivery)),
        delivery.reject(outcome.reason)
      )
    return retried(delivery, send, () => send, undefined)
  }

  /**
   * A first attempt, then (built only when it failed) the retries of `again`, after which the answer
   * is `otherwise`; never fails. What it logs names `delivery`.
   */
  const retried = <A>(
    delivery: Delivery,
    first: Effect.Effect<A, TransportError>,
    again: () => Effect.Effect<unknown, TransportError>,
    otherwise: A
  ): Effect.Effect<A> =>
    // a handler of failures only, which a first attempt that succeeds passes without a step (where
    // `catchAll` adds one); the second handler wraps the retries only
    Effect.catchAllCause(first, (cause) =>
      Either.match(Cause.failureOrCause(cause), {
        onLeft: (error) =>
          Effect.logWarning(withReason("could not deliver the reply", error, "retrying")).pipe(
            Effect.zipRight(series.replyRetried),
            Effect.zipRight(Effect.retry(again(), replyRetry)),
            Effect.as(otherwise),
            Effect.catchAll((error) =>
              Effect.as(
                Effect.zipRight(
                  series.replyLost,
                  Effect.logError(withReason("could not deliver the reply", error, "the task stays with the broker and will be redelivered"))
                ),
                otherwise
              )
            ),
            // which task's reply it was: its delivery, as every other line about a task says
            aboutDelivery(delivery)
          ),
        onRight: Effect.failCause
      }))

  /**
   * Answers a task and, unless the worker is stopping, lets the transport hand over the next task
   * of the same subscription in the same round trip (the permit stays with this fiber).
   */
  const answerTakingNext = (delivery: Delivery, outcome: Outcome<unknown>): Effect.Effect<Option.Option<Delivery>> => {
    if (outcome._tag === "Reject") return Effect.as(answer(delivery, outcome), Option.none())
    const reply = outcome.reply
    return Effect.flatMap(Deferred.isDone(stopping), (stop) =>
      stop
        ? Effect.as(answer(delivery, outcome), Option.none())
        : retried<Option.Option<Delivery>>(delivery, delivery.completeAndTakeNext(reply), () => delivery.complete(reply), Option.none()))
  }

  /**
   * Processes a delivery under the concurrency controller, interruptibly, to its exit: a gating
   * controller admits it first (a deferred task waits here, its lease kept alive); one that does
   * not gate counts it around the processing. The controller learns from how long it ran and
   * whether it succeeded.
   */
  const processed = (delivery: Delivery, label: TaskLabel, limited: boolean): Effect.Effect<Exit.Exit<Outcome<unknown>>, never, R> => {
    const process = delivery.protocol.process(handlers, delivery)
    const name = label.kind === "workflow" ? undefined : label.name
    const ok = (exit: Exit.Exit<Outcome<unknown>>) => Exit.isSuccess(exit) && exit.value._tag === "Reply" && exit.value.ok
    if (controller.gates) {
      // `controller.run`, spelled out so that a deferral by the gate is counted
      return interruptibleExit(Effect.acquireUseRelease(
        Scope.make(),
        (scope) =>
          Effect.flatMap(Scope.extend(controller.admit(name, { kind: label.kind, limited }), scope), (admission) =>
            Effect.zipRight(
              admission.deferred ? series.deferred(name) : Effect.void,
              Effect.onExit(process, (exit) => admission.complete(ok(exit)))
            )),
        (scope, exit) => Scope.close(scope, exit)
      ))
    }
    // nothing to wait for: counted around the processing, with no interruption handler of its own
    const done = controller.count(name, label.kind, limited ? undefined : NOT_LIMITED)
    return Effect.matchCause(Effect.interruptible(process), {
      onFailure: (cause) => {
        done(false)
        return Exit.failCause(cause)
      },
      onSuccess: (outcome) => {
        const exit = Exit.succeed(outcome)
        done(ok(exit))
        return exit
      }
    })
  }

  /**
   * Gives a task back to its broker within `interruptTimeout`. One that cannot be given back is a
   * warning, never silent: the broker hands the task on when its lease runs out, and a give-back
   * that does not answer must not hold the serving fiber (and its permit) for as long as the broker
   * is away. The serving fiber is uninterruptible here, so a timeout alone would wait for the
   * give-back it gave up on: disconnected and interruptible, the give-back is left to finish in
   * the background (a broker that answers late still gets the task back early).
   */
  const giveBack = (delivery: Delivery, what: string) =>
    delivery.abandon.pipe(
      Effect.disconnect,
      Effect.interruptible,
      Effect.timeoutFail({
        duration: config.interruptTimeout,
        onTimeout: () => `no answer within ${Duration.format(config.interruptTimeout)} (interruptTimeout)`
      }),
      Effect.catchAll((error) => Effect.logWarning(withReason(`could not give ${what} back`, error))),
      aboutDelivery(delivery)
    )

  /**
   * The protocol's failed answer for a task that died of a defect (see `Protocol.crashed`), if it
   * has one: a task given back instead would die the same way wherever it is delivered next, taken
   * and given back for as long as the broker keeps it.
   */
  const crashedReply = (delivery: Delivery, cause: Cause.Cause<unknown>): Option.Option<unknown> => {
    const crashed = delivery.protocol.crashed
    if (crashed === undefined) return Option.none()
    let message: string
    try {
      message = messageOf(Cause.squash(cause))
    } catch {
      message = "a defect that cannot be shown"
    }
    return crashed(delivery.payload, message)
  }

  /**
   * A delivery whose processing ended without an outcome and without a `crashed` answer: answered
   * as cancelled (`reply`, the protocol's answer to a cancelled run, if it has one), or given back.
   */
  const unanswered = (delivery: Delivery, exit: Exit.Failure<unknown, never>, reply: Option.Option<unknown>) =>
    Effect.gen(function*() {
      if (Option.isSome(reply)) {
        yield* Effect.logInfo("run cancelled: its running task was interrupted").pipe(aboutDelivery(delivery))
        yield* answer(delivery, { _tag: "Reply", reply: reply.value, ok: false })
      } else if (Exit.isInterrupted(exit)) {
        yield* giveBack(delivery, "an interrupted task")
      } else {
        yield* Effect.logError("a task ended without an outcome; giving it back", Cause.pretty(exit.cause)).pipe(
          aboutDelivery(delivery)
        )
        yield* giveBack(delivery, "the task")
      }
    })

  /**
   * Runs one delivery under the caller's permit, in the serving fiber itself: keeps its lease
   * alive until it is answered, processes it, answers, and returns the next delivery the transport handed over, if any.
   * A cancel of its run interrupts this fiber while the task is processing; the task is then
   * answered as cancelled and the fiber ends (its permit goes back to the poller). Interrupted
   * otherwise (shutdown deadline), it gives the task back.
   */
  const serveOne = (
    delivery: Delivery,
    self: Fiber.RuntimeFiber<unknown, unknown>,
    clock: Clock.Clock,
    serving: ServingLabel,
    limited: boolean
  ): Effect.Effect<Option.Option<Delivery>, never, R> =>
    Effect.suspend(() => {
      const poller = serving.poller
      serving.delivery = delivery
      serving.stage = "running"
      const startedAt = clock.unsafeCurrentTimeMillis()
      const label = delivery.protocol.label(delivery.payload)
      series.started(label)
      if (Option.isSome(delivery.keepAlive)) leases.add(delivery, delivery.keepAlive.value, startedAt, serving)
      const watch = watchCancel(delivery, self)
      let outcome: TaskOutcome = "abandoned"
      // a task that died is answered failed once: a defect in sending that answer gives it back
      let crashAnswered = false
      const answerCrashed = (failure: unknown, what: string, cause: Cause.Cause<unknown>) => {
        crashAnswered = true
        serving.stage = "answering"
        outcome = "failed"
        return Effect.logError(`${what}; answering it failed (not giving it back to die again)`, Cause.pretty(cause)).pipe(
          Effect.zipRight(answer(delivery, { _tag: "Reply", reply: failure, ok: false })),
          aboutDelivery(delivery),
          Effect.as(Option.none<Delivery>())
        )
      }
      const givenBack = (defect: unknown) =>
        Effect.logError("a defect while answering a task; giving it back", Cause.pretty(Cause.die(defect))).pipe(
          Effect.zipRight(Effect.sync(() => {
            outcome = "abandoned"
            serving.stage = "givingBack"
          })),
          Effect.zipRight(giveBack(delivery, "the task")),
          aboutDelivery(delivery),
          Effect.as(Option.none<Delivery>())
        )
      // the lease is kept until the task is answered or given back, so reply retries cannot outlast it
      const answered = (exit: Exit.Exit<Outcome<unknown>>): Effect.Effect<Option.Option<Delivery>> => {
        const cancelled = watch.end()
        if (Exit.isSuccess(exit)) {
          serving.stage = "answering"
          outcome = exit.value._tag === "Reject" ? "rejected" : exit.value.ok ? "completed" : "failed"
          // a cancel that raced the end of processing leaves this fiber interrupted: answer, stop here
          return cancelled ? Effect.as(answer(delivery, exit.value), Option.none()) : answerTakingNext(delivery, exit.value)
        }
        const cancelledReply = cancelled ? delivery.protocol.cancelled(delivery.payload) : Option.none()
        if (Option.isNone(cancelledReply) && !Exit.isInterrupted(exit)) {
          const failure = crashedReply(delivery, exit.cause)
          if (Option.isSome(failure)) return answerCrashed(failure.value, "its processing died of a defect", exit.cause)
        }
        serving.stage = Option.isSome(cancelledReply) ? "answering" : "givingBack"
        if (Option.isSome(cancelledReply)) outcome = "cancelled"
        return Effect.as(unanswered(delivery, exit, cancelledReply), Option.none())
      }
      return Effect.flatMap(processed(delivery, label, limited), (exit) =>
        answered(exit).pipe(
          // a defect while answering (a transport that throws) must not end the fiber silently: the
          // task is answered failed where its protocol says how (what could not be sent may be the
          // answer itself), else given back, still under its lease; logged with its identity
          Effect.catchAllDefect((defect) => {
            const failure = crashAnswered ? Option.none() : crashedReply(delivery, Cause.die(defect))
            return Option.isSome(failure)
              ? Effect.catchAllDefect(answerCrashed(failure.value, "a defect while answering a task", Cause.die(defect)), givenBack)
              : givenBack(defect)
          }),
          // uninterruptible and defects caught: success is the only way out, so no finalizer is needed
          Effect.flatMap((next) => {
            leases.remove(delivery)
            return taskEnded(delivery, poller, label, outcome, clock.unsafeCurrentTimeMillis() - startedAt, next)
          })
        ))
    })

  /**
   * Serves deliveries one after another under one permit, as long as the transport hands them
   * over. Uninterruptible but for the processing itself.
   */
  const serveDeliveries = (first: Delivery, poller: Poller) =>
    Effect.clockWith((clock) =>
      Effect.withFiberRuntime<void, never, R>((self) => {
        const label: ServingLabel = { poller: poller.name, delivery: first, stage: "running" }
        serving.set(self, label)
        // only a task of a pool the controller's limit sizes counts against that limit
        const limited = poller.pool.size === "concurrency"
        const serveFrom = (delivery: Delivery): Effect.Effect<void, never, R> =>
          Effect.flatMap(
            serveOne(delivery, self, clock, label, limited),
            (next) => Option.isNone(next) ? Effect.void : serveFrom(next.value)
          )
        return Effect.uninterruptible(serveFrom(first)).pipe(Effect.ensuring(Effect.sync(() => serving.delete(self))))
      })
    )

  /** One poll with up to `max` permits of the poller's pool, told how the previous one went; how many tasks it took. */
  const pollOnce = (poller: Poller, work: FiberSet.FiberSet, max: number, after: PollAfter) =>
    Effect.flatMap(pools.of(poller.pool), ({ enter, leave, limiter }) =>
      Effect.uninterruptibleMask((restore) =>
        Effect.gen(function*() {
          yield* restore(poller.ready)
          const taken = yield* restore(limiter.takeUpTo(max))
          // not restored: a poll is interruptible only where it says so (while it waits and has
          // taken nothing), so the tasks it took are always handed over
          const started = yield* Clock.currentTimeMillis
          const polled = yield* Effect.exit(poller.poll(taken, after))
          const seconds = ((yield* Clock.currentTimeMillis) - started) / 1000
          if (Exit.isFailure(polled)) {
            if (!Exit.isInterrupted(polled)) series.polled(poller.name, "error", seconds)
            yield* limiter.release(taken)
            return yield* Effect.failCause(polled.cause)
          }
          const deliveries = polled.value
          series.polled(poller.name, deliveries.length > 0 ? "tasks" : "empty", seconds)
          yield* limiter.release(taken - deliveries.length)
          for (const delivery of deliveries) {
            yield* enter
            yield* FiberSet.run(
              work,
              serveDeliveries(delivery, poller).pipe(
                Effect.ensuring(Effect.zipRight(limiter.release(1), leave))
              )
            )
          }
          return deliveries.length
        })
      )
    )

  /**
   * Polls until interrupted; a transient poll failure is retried after a pause. The first failure
   * of a run of them is a warning with its reason, the rest are debug lines (a broker away for an
   * hour must not write a warning a second), and the first poll that works again says so.
   */
  const pollLoop = (poller: Poller, work: FiberSet.FiberSet, shared: boolean): Effect.Effect<never, WorkerLoopError, R> => {
    // A poller that shares its pool with others (one per step name) and found nothing last time polls
    // with one permit, not every free one: an idle subscription's long poll (SQS waits up to 20 s)
    // must not hold the permits a busy one needs. Once it finds work, it takes every free permit
    // again. Alone on its pool, it always takes them all.
    const idle = shared ? 1 : Number.MAX_SAFE_INTEGER
    const retrying = `retrying every ${Duration.format(config.pollRetryDelay)}`
    const loop = (max: number, failures: number): Effect.Effect<never, TransportError, R> =>
      pollOnce(poller, work, max, failures === 0 ? AFTER_SUCCESS : AFTER_FAILURE).pipe(
        // one that found nothing lets a poller waiting for a permit have it before it asks again
        Effect.flatMap((taken) => {
          const next = taken > 0 ? Effect.succeed(Number.MAX_SAFE_INTEGER) : Effect.as(Effect.yieldNow(), idle)
          return failures === 0
            ? next
            : Effect.logInfo(`polling ${poller.name} again after ${failures} failed attempt(s)`).pipe(
              Effect.zipRight(reachability.pollWorked(poller.name)),
              Effect.zipRight(next)
            )
        }),
        Effect.map((next) => ({ next, failures: 0 })),
        Effect.catchIf(
          (error: TransportError) => !error.fatal,
          (error) => {
            const reason = messageOf(error)
            return reachability.pollFailed(poller.name, reason).pipe(
              Effect.zipRight(
                failures === 0
                  ? Effect.logWarning(`poll failed on ${poller.name}: ${reason}; ${retrying} (until it works again, further failures are debug lines)`)
                  : Effect.logDebug(`poll failed on ${poller.name} again (${failures + 1}): ${reason}`)
              ),
              Effect.zipRight(Effect.sleep(config.pollRetryDelay)),
              Effect.as({ next: idle, failures: failures + 1 })
            )
          }
        ),
        Effect.flatMap((state) => loop(state.next, state.failures))
      )
    return asLoop(
      poller.name,
      // every span a task makes (the step's, a turn's) names the subscription it came from: set once
      // here, the serving fibers forked by the loop inherit it
      Effect.annotateSpans(loop(idle, 0), "durable.queue", poller.name)
    )
  }

  return { pollLoop, countersAtZero: series.atZero(handlers) }
}

/**
 * A worker loop (a poller, the heartbeat, the metrics sampler) whose end, by a failure or a defect,
 * is a {@link WorkerLoopError} naming it, which ends the run through its shutdown.
 *
 * @internal
 */
export const asLoop = <R>(name: string, loop: Effect.Effect<never, unknown, R>): Effect.Effect<never, WorkerLoopError, R> =>
  Effect.catchAllCause(loop, (cause) => {
    const failed = Effect.fail(new WorkerLoopError({ poller: name, reason: Cause.squash(cause) }))
    // a defect is a bug: its stack is logged here, as the error that ends the run carries only its message
    return Cause.isDie(cause)
      ? Effect.zipRight(Effect.logError(`worker loop ${name} died of a defect`, cause), failed)
      : failed
  })
