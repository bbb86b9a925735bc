/**
 * Which jobs of a task queue's failed set to bridge, scan after scan.
 *
 * The failed set is scored by when a job failed, by the clock of the process that failed it (a peer
 * worker's stalled check, another host), stamped before its script reached Redis. A scan that read
 * only what failed since the previous scan by this process's clock would miss a job stamped just
 * before that scan and written just after it, and every job stamped by a host whose clock is behind.
 * So each scan reads a window reaching back one interval and a margin, and remembers what it has
 * bridged while that is in the window, so a job is bridged once per failure, and again at the next
 * scan when its bridge failed.
 *
 * @internal
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"

/**
 * How far behind this process's clock a failure may be stamped and still be bridged, beyond one
 * interval: the clock skew between hosts, and a script's way from its stamp to Redis.
 *
 * @internal
 */
export const FAILED_MARGIN = Duration.minutes(1)

/** A failed job as the failed set holds it: its id and when it failed (epoch millis). */
export interface Failed {
  readonly id: string
  readonly failedAt: number
}

/**
 * Every `interval` (the first one interval in), reads the jobs failed from `interval` + {@link
 * FAILED_MARGIN} ago onwards (`read(from)`, `from` exclusive, no upper bound: a host whose clock is
 * ahead stamps the future), but nothing stamped before the watch began, and bridges each failure not
 * bridged yet. A job failed again (its stamp moved) is bridged again; one whose bridge failed
 * (`bridge` answering `false`) is tried again at the next scan while it is in the window. Runs until
 * interrupted; a failed read is left to `read` to report.
 *
 * What failed before the watch began was failed by a worker running then (a stalled check runs in
 * the workers), whose own bridge reports it: a restarted worker reporting it again could fail the
 * step's next attempt, which the engine would take the stale failure for.
 *
 * @internal
 */
export const watchFailed = <R>(
  interval: Duration.Duration,
  read: (from: number) => Effect.Effect<ReadonlyArray<Failed>, never, R>,
  bridge: (id: string) => Effect.Effect<boolean, never, R>
): Effect.Effect<never, never, R> =>
  Effect.gen(function*() {
    const began = yield* Clock.currentTimeMillis
    const reach = Duration.toMillis(interval) + Duration.toMillis(FAILED_MARGIN)
    // job id → the stamp it was bridged for, while that stamp is in the window
    const bridged = new Map<string, number>()
    const scan = Effect.gen(function*() {
      const from = Math.max((yield* Clock.currentTimeMillis) - reach, began)
      for (const [id, failedAt] of bridged) if (failedAt <= from) bridged.delete(id)
      const failed = yield* read(from)
      yield* Effect.forEach(failed, ({ failedAt, id }) =>
        bridged.get(id) === failedAt
          ? Effect.void
          : Effect.map(bridge(id), (done) => {
            if (done) bridged.set(id, failedAt)
          }), { discard: true })
    })
    return yield* Effect.repeat(scan, Schedule.spaced(interval)).pipe(Effect.delay(interval), Effect.zipRight(Effect.never))
  })
