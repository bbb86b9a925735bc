import * as Effect from "effect/Effect"

/**
 * A resizable pool of concurrency permits from which a poller takes "up to n" at once.
 *
 * @internal
 */
export interface Limiter {
  /** Waits until at least one permit is free, then takes up to `max` of them. */
  readonly takeUpTo: (max: number) => Effect.Effect<number>
  readonly release: (n: number) => Effect.Effect<void>
  readonly resize: (limit: number) => Effect.Effect<void>
  readonly limit: Effect.Effect<number>
  readonly inUse: Effect.Effect<number>
}

/**
 * Two counters, read and changed only inside single effects (so no two fibers ever interleave on
 * them), and a latch that a poller finding no free permit closes and waits on; whatever frees a
 * permit (a release, a larger limit) opens it. A task's release is one counter update, not a
 * transaction: it is on the path of every task.
 *
 * @internal
 */
export const makeLimiter = (initial: number): Effect.Effect<Limiter> =>
  Effect.map(Effect.makeLatch(true), (freed) => {
    let limit = initial
    let inUse = 0
    // the waiters are woken at once, not on a later tick: a poller that frees its permit and then
    // yields (having found nothing) must find a waiting poller ahead of it, not take the permit back
    const reopen = () => {
      if (limit - inUse > 0) freed.unsafeOpen()
    }
    const takeUpTo = (max: number): Effect.Effect<number> =>
      Effect.suspend(() => {
        const free = limit - inUse
        if (free <= 0) {
          freed.unsafeClose()
          // woken by the next release or resize; another poller may have taken the permit by then
          return Effect.zipRight(freed.await, takeUpTo(max))
        }
        const n = Math.max(1, Math.min(max, free))
        inUse += n
        return Effect.succeed(n)
      })
    return {
      takeUpTo,
      release: (n) =>
        n <= 0 ? Effect.void : Effect.sync(() => {
          inUse -= n
          reopen()
        }),
      resize: (n) =>
        Effect.sync(() => {
          limit = n
          reopen()
        }),
      limit: Effect.sync(() => limit),
      inUse: Effect.sync(() => inUse)
    }
  })
