/**
 * Which jobs of a task queue's failed set to bridge, scan after scan, and which worker bridges each.
 *
 * The failed set is scored by when a job failed, by the clock of the process that failed it (a peer
 * worker's stalled check, another host), stamped before its script reached Redis. A scan that read
 * only what failed since the previous scan by this process's clock would miss a job stamped just
 * before that scan and written just after it, and every job stamped by a host whose clock is behind.
 * So each scan reads a window reaching back beyond the previous scan by a margin, and remembers what
 * it has bridged while that is in the window, so a job is bridged once per failure, and again at
 * the next scan when its bridge failed.
 *
 * Every worker on the queue scans the same failed set, and a failure bridged twice can fail the
 * step's next attempt (a result carries no attempt, and the engine takes one for any pending step).
 * So a worker first claims a failure in Redis; the claim is short while it publishes (a worker that
 * dies meanwhile leaves the failure to another worker's scan, still in its window), is kept past
 * every window once published, and is given up when the publish failed.
 *
 * @internal
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Schedule from "effect/Schedule"
import { TASK_FAILED_RETENTION_SECONDS } from "./naming.js"

/**
 * How far behind this process's clock a failure may be stamped and still be bridged, beyond the
 * previous scan: the clock skew between hosts, and a script's way from its stamp to Redis.
 *
 * @internal
 */
export const FAILED_MARGIN = Duration.minutes(1)

/**
 * How long a worker's claim on a failure holds while it publishes the failure: within the margin,
 * so that when the worker dies with the claim, the failure is still in the window of another
 * worker's scan after the claim lapsed.
 *
 * @internal
 */
export const CLAIM_WHILE_PUBLISHING = Duration.seconds(30)

/**
 * How far back a scan every `interval` reads (millis): the margin, and beyond it what a failure
 * waits for before a worker meets it: a scan (an interval), and when the worker that claimed it died,
 * the claim's lapse and another worker's next scan (another interval).
 *
 * @internal
 */
export const reachOf = (interval: Duration.Duration): number =>
  2 * Duration.toMillis(interval) + Duration.toMillis(CLAIM_WHILE_PUBLISHING) + Duration.toMillis(FAILED_MARGIN)

/**
 * How long a published failure stays claimed, from `now`: as long as the failed set keeps the job
 * (the engine's task jobs leave it a day after they failed), whatever the scan interval of the other
 * workers on the queue (each worker has its own `stalledInterval`); longer when this worker's own
 * windows still read it then (a stamp from a clock ahead), and for at least two of them. Even a
 * worker whose clock is behind by the margin reads it no longer.
 *
 * @internal
 */
export const keptFor = (interval: Duration.Duration, failed: Failed, now: number): Duration.Duration => {
  const reach = reachOf(interval)
  const readable = Math.max(reach, Duration.toMillis(FAILED_KEPT))
  return Duration.millis(Math.max(2 * reach, failed.failedAt + readable + Duration.toMillis(FAILED_MARGIN) - now))
}

/**
 * How long the failed set keeps a task job (the engine adds them with `removeOnFail: { age: 86400 }`).
 *
 * @internal
 */
export const FAILED_KEPT = Duration.seconds(TASK_FAILED_RETENTION_SECONDS)

/** A failed job as the failed set holds it: its id and when it failed (epoch millis). */
export interface Failed {
  readonly id: string
  readonly failedAt: number
}

/** What came of bridging a failure: published (by this worker), claimed by another, or to try again. */
export type Bridged = "published" | "claimed-elsewhere" | "failed"

/**
 * What came of a publish under a claim: sent, the claim left to keep; sent with the claim kept by the
 * same call; or held back, another worker holding the claim when the publish reached Redis.
 */
export type Published = "sent" | "sent-and-kept" | "held-back"

/**
 * Every `interval` (the first one interval in), reads the jobs failed within {@link reachOf}
 * (`read(from)`, `from` exclusive, no upper bound: a host whose clock is ahead stamps the future),
 * and bridges each failure not bridged yet. A job failed again (its stamp moved) is bridged again;
 * one whose bridge failed, or that another worker holds a claim on (it may yet give it up), is tried
 * again at the next scan while it is in the window. Runs until interrupted; a failed read is left to
 * `read` to report.
 *
 * The window reaches back before the watch began, too: a failure is stamped by a running worker's
 * stalled check, and that worker may stop or die before its next scan (a deploy that replaces every
 * worker, the last worker of a queue), leaving the failure to a worker started after it. One that
 * was reported before holds a kept claim ({@link bridgeOnce}), so a restarted worker does not report
 * it again.
 *
 * Interrupted (the worker stops), it scans once more, for as long as `stopBudget` allows (see
 * {@link stopBudget}; zero skips it: a Redis that is away is not waited for): what failed since the
 * previous scan is reported by this worker, not left to one started within the window after it. A
 * failure stamped within the window before a start is reported; one stamped earlier is not, and
 * cannot be told from one reported already: an earlier version of this worker, or another SDK's
 * worker, reports without a claim, and reporting such a failure again would be taken by the engine
 * for a failure of the step's next attempt.
 *
 * @internal
 */
export const watchFailed = <R>(
  interval: Duration.Duration,
  read: (from: number) => Effect.Effect<ReadonlyArray<Failed>, never, R>,
  bridge: (failed: Failed) => Effect.Effect<Bridged, never, R>,
  stopBudget: Effect.Effect<Duration.Duration, never, R> = Effect.succeed(LAST_SCAN)
): Effect.Effect<never, never, R> =>
  Effect.gen(function*() {
    const reach = reachOf(interval)
    // job id → the stamp it was bridged for, while that stamp is in the window
    const bridged = new Map<string, number>()
    const scan = Effect.gen(function*() {
      const from = (yield* Clock.currentTimeMillis) - reach
      for (const [id, failedAt] of bridged) if (failedAt <= from) bridged.delete(id)
      const failed = yield* read(from)
      yield* Effect.forEach(failed, (job) =>
        bridged.get(job.id) === job.failedAt
          ? Effect.void
          : Effect.map(bridge(job), (outcome) => {
            if (outcome === "published") bridged.set(job.id, job.failedAt)
          }), { discard: true })
    })
    const watching = Effect.repeat(scan, Schedule.spaced(interval)).pipe(Effect.delay(interval), Effect.zipRight(Effect.never))
    // a stop scans once more: a failure stamped since the last scan (by this worker's own stalled
    // check, say) is otherwise left to a worker started within the window after it, and reported by
    // none when the queue has no worker for that long (a deploy or a scale to zero that stops them all)
    // in a fiber of its own, interruptible within, as `settled`: the bound has to cut the wait
    const lastScan = Effect.flatMap(stopBudget, (budget) =>
      Duration.isZero(budget)
        ? Effect.void
        : Effect.flatMap(
          Effect.forkDaemon(Effect.interruptible(scan).pipe(
            Effect.timeout(budget),
            Effect.catchAllCause((cause) =>
              Effect.logWarning(
                `the failed jobs could not be read and reported once more as the worker stopped within ${Duration.format(budget)}; ` +
                  "those failed since the previous scan are reported by a worker started within the window after them",
                cause
              )
            )
          )),
          Fiber.await
        ))
    return yield* Effect.onInterrupt(watching, () => lastScan)
  })

/**
 * How long the scan a worker makes as it stops may hold the stop: it reads the failed set and
 * bridges what it finds there, a few round trips each.
 *
 * @internal
 */
export const LAST_SCAN = Duration.seconds(1)

/**
 * One {@link LAST_SCAN} shared by the scans at a stop of every queue a worker serves, counted from
 * the first of them: each call tells what is left of it. A Redis that answers none of them holds the
 * stop once, not once per queue (the scans are made one after another, as the queues' scopes close).
 *
 * @internal
 */
export const stopBudget: Effect.Effect<Effect.Effect<Duration.Duration>> = Effect.map(
  Ref.make(Option.none<number>()),
  (end) =>
    Effect.flatMap(Clock.currentTimeMillis, (now) =>
      Ref.modify(end, (given) => {
        const at = Option.getOrElse(given, () => now + Duration.toMillis(LAST_SCAN))
        return [Duration.millis(Math.max(0, at - now)), Option.some(at)]
      }))
)

/** The claims on failures, in Redis (`SET NX PX`), by a token of this worker. @internal */
export interface Claims<R> {
  /** Claims `failed` for `ttl`: whether this worker holds it now. */
  readonly claim: (failed: Failed, ttl: Duration.Duration) => Effect.Effect<boolean, unknown, R>
  /** Holds the claim this worker has on `failed` for `ttl` from now. */
  readonly keep: (failed: Failed, ttl: Duration.Duration) => Effect.Effect<void, unknown, R>
  /** Gives up the claim on `failed`, if this worker still holds it. */
  readonly release: (failed: Failed) => Effect.Effect<void, unknown, R>
}

/**
 * Bridges a failure once among the workers: claims it, publishes it, then keeps the claim past every
 * window (or gives it up when the publish failed, for the next scan of any worker). Once published,
 * the claim is kept even when the worker is stopping meanwhile (within {@link SETTLE_CLAIM}). A
 * claim that could not be kept or given up lapses on its own within {@link CLAIM_WHILE_PUBLISHING}.
 *
 * `publish` says whether the failure went out, and whether it kept the claim itself ({@link Published}).
 * Held back (it was held up past the claim, by a lost connection or a slow network, and the claim
 * lapsed and was taken), nothing is kept or given up: the other worker bridges it. On the claim's own
 * Redis, the transport's publish checks the claim in the same script call, takes it again when it
 * lapsed with no one taking it, and records the report in it for as long as it is kept, so that the
 * same call sent again, however late, does not publish twice. On another Redis than the claim's (a
 * task whose answer goes to another broker), the publish records the report there in the same script
 * call, and writes nothing when a report of the failure is recorded already (the same call sent
 * again, or another worker's, published while this one was held up past its claim, or before a scan
 * sent it again after its outcome was lost): it says "sent" then too, the failure being reported, and
 * the claim is kept.
 *
 * @internal
 */
export const bridgeOnce = <R, R2>(
  interval: Duration.Duration,
  claims: Claims<R>,
  publish: (failed: Failed) => Effect.Effect<Published, unknown, R2>
) =>
(failed: Failed): Effect.Effect<Bridged, unknown, R | R2> =>
  Effect.flatMap(claims.claim(failed, CLAIM_WHILE_PUBLISHING), (held) =>
    !held
      ? Effect.succeed<Bridged>("claimed-elsewhere")
      : publish(failed).pipe(
        Effect.onExit((exit) =>
          Exit.isSuccess(exit)
            ? exit.value === "sent"
              ? Effect.flatMap(Clock.currentTimeMillis, (now) =>
                settled(claims.keep(failed, keptFor(interval, failed, now)), `could not keep the claim on failed job ${failed.id}`))
              : Effect.void
            : Exit.isInterrupted(exit)
            // whether it went out is not known: the claim lapses, and a scan after it bridges the failure
            ? Effect.void
            : settled(claims.release(failed), `could not give up the claim on failed job ${failed.id}`)
        ),
        Effect.map((published): Bridged => published === "held-back" ? "claimed-elsewhere" : "published")
      ))

/**
 * How long keeping or giving up a claim may hold a stop: it runs on even when the worker is stopping,
 * and a claim left as it is lapses on its own.
 *
 * @internal
 */
export const SETTLE_CLAIM = Duration.seconds(1)

/**
 * Keeps or gives up a claim within {@link SETTLE_CLAIM}, waited for even when the worker is stopping:
 * in a fiber of its own, which a stop does not interrupt (it would interrupt a child at once); a
 * failure is logged (the claim lapses on its own: another worker may bridge the failure again).
 */
const settled = <R>(effect: Effect.Effect<void, unknown, R>, failure: string): Effect.Effect<void, never, R> =>
  Effect.flatMap(
    // interruptible within: a fiber forked by a finalizer is not, and the bound has to cut the wait
    Effect.forkDaemon(
      Effect.interruptible(effect).pipe(
        Effect.timeoutFail({ duration: SETTLE_CLAIM, onTimeout: () => `no answer within ${Duration.format(SETTLE_CLAIM)}` }),
        Effect.catchAllCause((cause) => Effect.logWarning(`${failure}; it lapses on its own`, cause))
      )
    ),
    Fiber.await
  )
