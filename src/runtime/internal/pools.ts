import * as Effect from "effect/Effect"
import * as Ref from "effect/Ref"
import type { Pool } from "../../seam/Protocol.js"
import type { PoolSlots } from "../../seam/Transport.js"
import type { ResolvedWorkerConfig } from "../WorkerConfig.js"
import { type Limiter, makeLimiter } from "./limiter.js"

/** One pool: its permits and how many of its tasks run now. @internal */
export interface PoolState {
  readonly pool: Pool
  readonly limiter: Limiter
  readonly running: Ref.Ref<number>
}

/**
 * The worker's concurrency pools, set up from what the protocol and the pollers declare: one per
 * pool name, sized from the worker configuration. The pools sized by `concurrency` follow the
 * controller's limit.
 *
 * @internal
 */
export interface Pools {
  /** Sets up the pools not set up yet; a pool already there keeps its state. */
  readonly declare: (pools: Iterable<Pool>) => Effect.Effect<void>
  /** The state of a declared pool (declaring it first if it is not). */
  readonly of: (pool: Pool) => Effect.Effect<PoolState>
  /** Resizes the pools sized by the worker's `concurrency`. */
  readonly resizeConcurrency: (limit: number) => Effect.Effect<void>
  readonly slots: Effect.Effect<{ readonly [pool: string]: PoolSlots }>
  /** Tasks running in every pool. */
  readonly inFlight: Effect.Effect<number>
}

/** @internal */
export const makePools = (config: ResolvedWorkerConfig): Effect.Effect<Pools> =>
  Effect.sync(() => {
    const states = new Map<string, PoolState>()
    let concurrencyLimit = config.concurrency.limit
    const sizeOf = (pool: Pool) =>
      pool.size === "concurrency"
        ? concurrencyLimit
        : pool.size === "workflowConcurrency"
        ? config.workflowConcurrency
        : Math.max(1, Math.floor(pool.size))
    const of = (pool: Pool): Effect.Effect<PoolState> =>
      Effect.suspend(() => {
        const known = states.get(pool.name)
        if (known !== undefined) return Effect.succeed(known)
        return Effect.map(
          Effect.all({ limiter: makeLimiter(sizeOf(pool)), running: Ref.make(0) }),
          ({ limiter, running }) => {
            // another fiber may have set it up meanwhile: the first one stands
            const raced = states.get(pool.name)
            if (raced !== undefined) return raced
            const state = { pool, limiter, running }
            states.set(pool.name, state)
            return state
          }
        )
      })
    return {
      declare: (pools) => Effect.forEach(pools, of, { discard: true }),
      of,
      resizeConcurrency: (limit) =>
        Effect.suspend(() => {
          concurrencyLimit = limit
          return Effect.forEach(
            Array.from(states.values()).filter((state) => state.pool.size === "concurrency"),
            (state) => state.limiter.resize(limit),
            { discard: true }
          )
        }),
      slots: Effect.suspend(() =>
        Effect.map(
          Effect.forEach(Array.from(states.values()), (state) =>
            Effect.map(
              Effect.all({ limit: state.limiter.limit, inUse: state.limiter.inUse, running: Ref.get(state.running) }),
              (slots) => [state.pool.name, slots] as const
            )),
          Object.fromEntries
        )
      ),
      inFlight: Effect.suspend(() =>
        Effect.map(
          Effect.forEach(Array.from(states.values()), (state) => Ref.get(state.running)),
          (counts) => counts.reduce((a, b) => a + b, 0)
        )
      )
    }
  })
