import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as Ref from "effect/Ref"
import type { Pool } from "../../seam/Protocol.js"
import type { PoolSlots } from "../../seam/Transport.js"
import * as WorkerMetrics from "../../seam/WorkerMetrics.js"
import type { ResolvedWorkerConfig } from "../WorkerConfig.js"
import { type Limiter, makeLimiter } from "./limiter.js"

/** One pool: its permits and how many of its tasks run now. @internal */
export interface PoolState {
  readonly pool: Pool
  readonly limiter: Limiter
  readonly running: Ref.Ref<number>
  /** A task of this pool started / ended (counted in `running` and its gauge). */
  readonly enter: Effect.Effect<void>
  readonly leave: Effect.Effect<void>
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
  /**
   * Every pool's limit and use. `inUse` counts the permits held by tasks only: a poll waiting for
   * work holds permits for what it may take, but an idle pool is not busy.
   */
  readonly slots: Effect.Effect<{ readonly [pool: string]: PoolSlots }>
  /** Tasks running in every pool. */
  readonly inFlight: Effect.Effect<number>
}

/** @internal */
export const makePools = (config: ResolvedWorkerConfig): Effect.Effect<Pools> =>
  Effect.sync(() => {
    const states = new Map<string, PoolState>()
    const gauges = new Map<string, Metric.Metric.Gauge<number>>()
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
            const inFlight = WorkerMetrics.inFlight.pipe(Metric.tagged("pool", pool.name))
            const slots = WorkerMetrics.slots.pipe(Metric.tagged("pool", pool.name))
            const set = (n: number) => Effect.sync(() => inFlight.unsafeUpdate(n, []))
            const state: PoolState = {
              pool,
              limiter,
              running,
              enter: Effect.flatMap(Ref.updateAndGet(running, (n) => n + 1), set),
              leave: Effect.flatMap(Ref.updateAndGet(running, (n) => n - 1), set)
            }
            states.set(pool.name, state)
            gauges.set(pool.name, slots)
            slots.unsafeUpdate(sizeOf(pool), [])
            inFlight.unsafeUpdate(0, [])
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
            (state) =>
              Effect.zipRight(state.limiter.resize(limit), Effect.sync(() => gauges.get(state.pool.name)?.unsafeUpdate(limit, []))),
            { discard: true }
          )
        }),
      slots: Effect.suspend(() =>
        Effect.map(
          Effect.forEach(Array.from(states.values()), (state) =>
            Effect.map(
              Effect.all({ limit: state.limiter.limit, running: Ref.get(state.running) }),
              ({ limit, running }) => [state.pool.name, { limit, inUse: running, running }] as const
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
