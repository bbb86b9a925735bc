import * as Effect from "effect/Effect"
import * as STM from "effect/STM"
import * as TRef from "effect/TRef"

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

/** @internal */
export const makeLimiter = (initial: number): Effect.Effect<Limiter> =>
  Effect.gen(function*() {
    const limit = yield* TRef.make(initial)
    const inUse = yield* TRef.make(0)
    return {
      takeUpTo: (max) =>
        STM.gen(function*() {
          const free = (yield* TRef.get(limit)) - (yield* TRef.get(inUse))
          if (free <= 0) return yield* STM.retry
          const n = Math.max(1, Math.min(max, free))
          yield* TRef.update(inUse, (used) => used + n)
          return n
        }).pipe(STM.commit),
      release: (n) => n <= 0 ? Effect.void : STM.commit(TRef.update(inUse, (used) => used - n)),
      resize: (n) => STM.commit(TRef.set(limit, n)),
      limit: STM.commit(TRef.get(limit)),
      inUse: STM.commit(TRef.get(inUse))
    }
  })
