/**
 * The SQL transport's release of claims whose outcome is unknown.
 *
 * A claim whose statement failed may have been committed all the same: the connection was lost
 * after the server ran it and before its answer came (a backend killed, a network cut). Its rows
 * would then be held by a claim no delivery serves until the lease runs out. They are released by
 * that claim (unique to the failed statement, so nothing served is touched) as soon as the database
 * answers again, in the background. One fiber releases every such claim in one statement: a
 * database away for minutes fails a poll every `pollRetryDelay`, and each claim retrying on its own
 * would multiply the attempts and the log lines. A claim still not released after a lease is let go:
 * its rows, if any, are claimable again anyway. When it was not committed, nothing holds that claim:
 * a no-op.
 *
 * A single row of a claim whose give-back failed (a row claimed alongside a completion that no
 * completion took) is released the same way, by its step id and claim: the claim's other rows are
 * being served.
 *
 * @internal
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Queue from "effect/Queue"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"

/**
 * How often the release of a claim of unknown outcome is tried again while the database is away.
 *
 * @internal
 */
export const RELEASE_RETRY = Duration.millis(250)

/**
 * Starts the releaser in the scope (interrupted, not awaited, when it closes: a stop must not wait
 * for a database that is away); the returned function hands it a claim of unknown outcome. Every
 * claim waiting is released by one call of `release` (the rows it released), tried again every
 * {@link RELEASE_RETRY} while it fails with an error that is not a refusal; a claim is let go at the
 * first try a `lease` or more after it was handed over (said in one debug line, once a try gets
 * through); a refusal gives up on every claim waiting, with a warning.
 *
 * @internal
 */
export const make = <E>(options: {
  readonly lease: Duration.Duration
  /** The tasks table, named in the log lines. */
  readonly tasks: string
  /**
   * Releases the rows held by these claims, and these single rows of a claim, in one statement; the
   * number of rows released.
   */
  readonly release: (claims: ReadonlyArray<string>, rows: ReadonlyArray<HeldRow>) => Effect.Effect<number, E>
  /** Whether the database refused the release: trying again does not change that. */
  readonly isRefusal: (error: E) => boolean
}): Effect.Effect<(claim: string, stepId?: string) => Effect.Effect<void>, never, Scope.Scope> =>
  Effect.gen(function*() {
    const { isRefusal, lease, release, tasks } = options
    /**
     * What waits to be released, by key (a claim, or a claim and a step id for a single row of it) →
     * the claim, the row's step id if it is one, and when it was handed over (ms).
     */
    const waiting = new Map<string, { readonly claim: string; readonly stepId: string | undefined; readonly at: number }>()
    const claimLost = yield* Queue.sliding<void>(1)
    /** How many claims were let go since it was last said (said once the tries end, not at each). */
    let letGo = 0
    /** One try at releasing the claims waiting; fails while the database does not answer. */
    const releaseWaiting = Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      for (const [key, { at }] of waiting) {
        if (now - at < Duration.toMillis(lease)) continue
        waiting.delete(key)
        letGo++
      }
      const tried = Array.from(waiting)
      const claims: Array<string> = []
      const rows: Array<HeldRow> = []
      for (const [, { claim, stepId }] of tried) {
        if (stepId === undefined) claims.push(claim)
        else rows.push({ claim, stepId })
      }
      const released = tried.length === 0 ? 0 : yield* release(claims, rows)
      for (const [key] of tried) waiting.delete(key)
      if (letGo > 0) {
        yield* Effect.logDebug(
          `let go ${letGo} claim(s) of unknown outcome on ${tasks} unreleased: the database did not answer ` +
            "within a lease, after which their tasks, if any, are claimable anyway"
        )
        letGo = 0
      }
      if (released > 0) {
        yield* Effect.logWarning(
          (claims.length === 1
            ? "a claim whose outcome was lost with the connection had been committed; its"
            : `of ${claims.length} claims whose outcome was lost with the connection, some had been committed; their`) +
            ` ${released} task(s) in ${tasks} were released for the next poll instead of waiting out the lease`
        )
      }
    })
    const releaseAll = releaseWaiting.pipe(
      // tried again, unlogged, while the database is away (the failed polls say so already); a
      // refusal does not change by trying again
      Effect.retry({ schedule: Schedule.spaced(RELEASE_RETRY), while: (error) => !isRefusal(error) }),
      // what cannot be released waits out the lease; the releaser goes on for the claims to come
      Effect.catchAllCause((cause) =>
        Cause.isInterruptedOnly(cause) ? Effect.failCause(cause) : Effect.zipRight(
          Effect.sync(() => waiting.clear()),
          Effect.logWarning(
            `could not release the claims of unknown outcome on ${tasks}; their tasks, if any, are claimable once the lease passes`,
            Cause.pretty(cause)
          )
        )
      )
    )
    yield* Queue.take(claimLost).pipe(
      Effect.zipRight(releaseAll),
      Effect.forever,
      // closing the registration (a stop) must not wait for a database that is away
      Effect.interruptible,
      Effect.forkScoped
    )
    return (claim: string, stepId?: string): Effect.Effect<void> =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        waiting.set(stepId === undefined ? claim : `${claim}\u0000${stepId}`, { claim, stepId, at: now })
        return Effect.asVoid(Queue.offer(claimLost, undefined))
      })
  })

/**
 * One row of a claim, released by itself: the claim's other rows are served.
 *
 * @internal
 */
export interface HeldRow {
  readonly claim: string
  readonly stepId: string
}
