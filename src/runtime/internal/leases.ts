import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as FiberId from "effect/FiberId"
import * as FiberSet from "effect/FiberSet"
import type * as Scope from "effect/Scope"
import * as FailureRun from "../../core/internal/failureRun.js"
import type { Delivery, KeepAlive } from "../../seam/Transport.js"

/**
 * How far a leased task has got, as its serving fiber records it: its handler running (or waiting
 * for admission), its answer on its way, or the task on its way back to the broker.
 *
 * @internal
 */
export type TaskStage = "running" | "answering" | "givingBack"

/**
 * The leases of the deliveries that run or wait for admission, kept alive by one refresher.
 *
 * @internal
 */
export interface Leases {
  /**
   * Starts keeping the delivery's lease: first renewed one interval from `now`. `task` is read, not
   * copied: once its handler has ended and it is being answered or given back, the lease is still
   * renewed (a broker away holds either), but losing it is no longer news of its own (an answer
   * says how it went; a task given back was the broker's to hand on anyway).
   */
  readonly add: (delivery: Delivery, keepAlive: KeepAlive, now: number, task: { readonly stage: TaskStage }) => void
  /** Stops keeping it (the task was answered or given back). */
  readonly remove: (delivery: Delivery) => void
}

interface Lease {
  due: number
  readonly interval: number
  readonly keepAlive: KeepAlive
  /**
   * Its renewals' failures, from the first one (none on the common path): a broker away for long
   * makes one warning per task, not one per interval.
   */
  failures?: FailureRun.FailureRun
  /**
   * A renewal is out: the next one waits for it. A client that holds its commands while the broker
   * is away would otherwise pile one renewal per interval, all answered at once when it is back.
   */
  renewing?: boolean
  /**
   * A renewal was due while the one before was still out: the next goes as soon as that one ends,
   * not an interval later, or two intervals would pass between renewals (BullMQ's whole lock).
   */
  missed?: boolean
  /** Its task, whose stage says whether its handler has ended. */
  readonly task: { readonly stage: TaskStage }
}

/**
 * One refresher fiber for every lease, rather than a timer per task: it sleeps until the earliest
 * lease is due (woken when a sooner one is added) and renews each lease once its interval has
 * passed since it was taken or last renewed. The refresher and the renewals it starts live in the
 * given scope.
 *
 * @internal
 */
export const makeLeases: Effect.Effect<Leases, never, Scope.Scope> = Effect.gen(function*() {
  const leases = new Map<Delivery, Lease>()
  const renewals = yield* FiberSet.make()
  let wakesAt = Number.POSITIVE_INFINITY
  let wake = Deferred.unsafeMake<void>(FiberId.none)

  /** The refresher runs by `at` at the latest. */
  const wakeBy = (at: number) => {
    if (at < wakesAt) {
      wakesAt = at
      Deferred.unsafeDone(wake, Exit.void)
    }
  }

  const renewalFailed = (lease: Lease, reason: string) =>
    (lease.failures ??= FailureRun.make()).failed(
      `could not extend the task's lease: ${reason}; renewing it every ${Duration.format(lease.interval)}, ` +
        "one renewal out at a time (until it works, its further failures are debug lines)",
      (n) => `could not extend the task's lease (${n} failures in a row): ${reason}`
    )

  /**
   * One renewal and what its outcome says. An outcome that arrives after the task was answered or
   * given back says nothing about it (a renewal held by a reconnecting client is answered late,
   * against a lock the answer has released). A lease the broker says is gone for good (a `fatal`
   * error: the lock, claim or visibility lost) is no longer renewed: no later try can work.
   */
  const renew = (delivery: Delivery, lease: Lease) =>
    lease.keepAlive.renew.pipe(
      Effect.matchCauseEffect({
        onSuccess: () => lease.failures === undefined || leases.get(delivery) !== lease
          ? Effect.void
          : lease.failures.worked((n) => `extended the task's lease again, after ${n} failed renewal(s)`),
        onFailure: (cause) =>
          Either.match(Cause.failureOrCause(cause), {
            onLeft: (error) => {
              if (leases.get(delivery) !== lease) {
                return Effect.logDebug(`a renewal of the task's lease failed after the task had ended: ${error.message}`)
              }
              if (error.fatal) {
                leases.delete(delivery)
                // an answer on its way meets the same loss and says so: one line for it, not two
                if (lease.task.stage !== "running") {
                  return Effect.logDebug(`the task's lease was lost while the task was being answered or given back: ${error.message}`)
                }
                return Effect.logWarning(
                  `the task's lease is lost: ${error.message}; it is no longer renewed, and the broker may refuse ` +
                    "the task's answer"
                )
              }
              return renewalFailed(lease, error.message)
            },
            // a defect in a broker's renewal is a bug: a warning every time, never lost with its fiber
            onRight: (defect) =>
              Cause.isInterruptedOnly(defect)
                ? Effect.void
                : Effect.logWarning("could not extend the task's lease", Cause.pretty(defect))
          })
      }),
      Effect.ensuring(Effect.clockWith((clock) =>
        Effect.sync(() => {
          lease.renewing = false
          if (lease.missed && leases.get(delivery) === lease) {
            lease.missed = false
            lease.due = clock.unsafeCurrentTimeMillis()
            wakeBy(lease.due)
          }
        })
      )),
      Effect.annotateLogs({ delivery: delivery.id })
    )

  const refresh = Effect.gen(function*() {
    // a fresh wake-up first, so one asked for while this pass runs (a lease added, a renewal
    // answered late) cuts the coming sleep short
    const woken = wake = Deferred.unsafeMake<void>(FiberId.none)
    const now = yield* Clock.currentTimeMillis
    // the wake-up a lease asked for stands even if that lease is gone already (short tasks end
    // before the refresher runs): one harmless early pass, rather than a pass per task
    let next = wakesAt > now ? wakesAt : Number.POSITIVE_INFINITY
    // until the pass ends, every wake-up asked for fires
    wakesAt = Number.POSITIVE_INFINITY
    for (const [delivery, lease] of leases) {
      if (lease.due <= now) {
        lease.due = now + lease.interval
        if (lease.renewing) {
          // the one before still has no answer: that is this interval's failure
          lease.missed = true
          yield* renewalFailed(lease, `no answer within ${Duration.format(lease.interval)}`).pipe(
            Effect.annotateLogs({ delivery: delivery.id })
          )
        } else {
          lease.renewing = true
          yield* FiberSet.run(renewals, renew(delivery, lease))
        }
      }
      next = Math.min(next, lease.due)
    }
    wakesAt = Math.min(next, wakesAt)
    yield* Number.isFinite(next)
      ? Effect.raceFirst(Effect.sleep(next - now), Deferred.await(woken))
      : Deferred.await(woken)
  })
  yield* Effect.forkScoped(Effect.forever(refresh))

  return {
    add: (delivery, keepAlive, now, task) => {
      const interval = Duration.toMillis(keepAlive.interval)
      leases.set(delivery, { due: now + interval, interval, keepAlive, task })
      wakeBy(now + interval)
    },
    remove: (delivery) => void leases.delete(delivery)
  }
})
