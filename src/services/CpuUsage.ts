/**
 * The CPU time this process has used, for the controller's `cpuPct` and `cpuCeilingPct`.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as os from "node:os"

/**
 * Cumulative CPU time (user + system) of this process in microseconds, and the number of cores it
 * is normalised by. Defaults to `process.cpuUsage()` and `os.availableParallelism()`; provide a
 * layer to replace it (tests, hosts).
 *
 * @since 0.1.0
 */
export class CpuUsage extends Context.Reference<CpuUsage>()("effect-durable-worker/CpuUsage", {
  defaultValue: () => ({
    micros: Effect.sync(() => {
      const usage = process.cpuUsage()
      return usage.user + usage.system
    }) as Effect.Effect<number | undefined>,
    cores: Math.max(1, os.availableParallelism())
  })
}) {}

/**
 * A fixed CPU reading source, e.g. for tests: `micros` is read on every tick.
 *
 * @since 0.1.0
 */
export const layer = (micros: Effect.Effect<number | undefined>, cores = 1): Layer.Layer<CpuUsage> =>
  Layer.succeed(CpuUsage, { micros, cores })
