import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Ref from "effect/Ref"
import { totalmem } from "node:os"
import type { WorkerStatus } from "../../seam/Transport.js"
import type * as ConcurrencyController from "../../services/ConcurrencyController.js"
import type { ResolvedWorkerConfig } from "../WorkerConfig.js"
import type { Pools } from "./pools.js"

/**
 * Where a worker is in its life: built (`starting`), registering, running (polling), draining
 * (stopping), stopped, or failed (with why).
 *
 * @internal
 */
export interface Lifecycle {
  readonly state: WorkerState
  readonly failure?: string
}

/** @internal */
export type WorkerState = "starting" | "registering" | "running" | "draining" | "stopped" | "failed"

/**
 * The status published in heartbeats: the running controller's snapshot (before `run`, the fixed
 * configuration and the process's RSS) and every pool's slots.
 *
 * @internal
 */
export const makeStatus = (
  config: ResolvedWorkerConfig,
  pools: Pools,
  controller: Ref.Ref<Option.Option<ConcurrencyController.ConcurrencyController["Type"]>>,
  lifecycle: Ref.Ref<Lifecycle>
): Effect.Effect<WorkerStatus> => {
  const idle = Effect.map(pools.inFlight, (inFlight) => {
    const rssBytes = process.memoryUsage.rss()
    const rssLimitBytes = totalmem()
    return {
      runtime: "node" as const,
      concurrency: { mode: config.concurrency.mode, limit: config.concurrency.limit },
      inFlight,
      rssBytes,
      rssLimitBytes,
      rssPct: Math.round((rssBytes / rssLimitBytes) * 10_000) / 100
    }
  })
  return Effect.gen(function*() {
    const running = yield* controller.get
    const base = Option.isSome(running) ? yield* running.value.snapshot : yield* idle
    const { failure, state } = yield* lifecycle.get
    return { ...base, state, ...(failure === undefined ? {} : { failure }), slots: yield* pools.slots }
  })
}
