/**
 * Where the worker's memory numbers come from: {@link MemorySource} (current use, the numerator)
 * and {@link MemoryLimit} (the limit, the denominator), with live layers reading cgroup/procfs
 * files under a configurable root and a test double driven by {@link MemoryTest}.
 *
 * @since 0.1.0
 */
import * as FileSystem from "@effect/platform/FileSystem"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Ref from "effect/Ref"
import * as os from "node:os"
import * as Cgroup from "./internal/cgroup.js"
import * as NodeFiles from "./internal/nodeFiles.js"

/**
 * The source of a usage sample, most precise first. `custom` is any injected source (tests, hosts);
 * `rusage_maxrss_peak` is a peak that never falls and is used only as a last resort.
 *
 * @since 0.1.0
 */
export type MemorySourceName = Cgroup.UsageSourceName | "custom"

/**
 * One reading of the current memory use. `bytes` is `undefined` when nothing could be read.
 *
 * @since 0.1.0
 */
export interface MemorySample {
  readonly bytes: number | undefined
  readonly source: MemorySourceName
}

/**
 * Options of one usage read.
 *
 * @since 0.1.0
 */
export interface SampleOptions {
  /** Subtract reclaimable page cache (`inactive_file`) from cgroup usage. Default `true`. */
  readonly subtractPageCache?: boolean | undefined
}

/**
 * The live services over Node's file system, built on first use and shared by the process: what
 * {@link MemorySource} and {@link MemoryLimit} are when the environment provides neither.
 */
let liveServices: Effect.Effect<{ readonly source: MemorySource["Type"]; readonly limit: MemoryLimit["Type"] }> | undefined
const live = () => liveServices ??= Effect.runSync(Effect.cached(Effect.provide(make(), NodeFiles.layer)))

/**
 * The current memory use of this worker: the working set of its cgroup (usage minus reclaimable
 * `inactive_file`), else its resident set, never a peak unless nothing else is readable. The live
 * reading (cgroup and procfs files read through Node's file system) unless a layer provides another.
 *
 * @since 0.1.0
 */
export class MemorySource extends Context.Reference<MemorySource>()("effect-durable-worker/MemorySource", {
  defaultValue: (): {
    /** Reads current use; never fails (an unreadable source gives `bytes: undefined`). */
    readonly sample: (options?: SampleOptions) => Effect.Effect<MemorySample>
    /** The process's peak resident set in bytes since it started (used to catch short-lived allocations). */
    readonly peak: Effect.Effect<number | undefined>
  } => ({
    sample: (options) => Effect.flatMap(live(), ({ source }) => source.sample(options)),
    peak: Effect.flatMap(live(), ({ source }) => source.peak)
  })
}) {}

/**
 * The source of a limit: `custom` for any injected limit.
 *
 * @since 0.1.0
 */
export type MemoryLimitSourceName = Cgroup.LimitSourceName | "custom"

/**
 * The memory limit in bytes (`undefined` when unknown) and where it came from.
 *
 * @since 0.1.0
 */
export interface MemoryLimitSample {
  readonly bytes: number | undefined
  readonly source: MemoryLimitSourceName
}

/**
 * The memory limit of this worker: the cgroup limit, else the host's total memory. The live
 * reading unless a layer provides another.
 *
 * @since 0.1.0
 */
export class MemoryLimit extends Context.Reference<MemoryLimit>()("effect-durable-worker/MemoryLimit", {
  defaultValue: (): {
    /** Reads the limit; never fails. */
    readonly limit: Effect.Effect<MemoryLimitSample>
  } => ({ limit: Effect.flatMap(live(), ({ limit }) => limit.limit) })
}) {}

/**
 * Options of the live layers.
 *
 * @since 0.1.0
 */
export interface MemoryOptions {
  /** File-system root under which `proc/self/…` and `sys/fs/cgroup/…` are read. Default `/`. */
  readonly root?: string | undefined
  /** The process peak in bytes. Default `process.resourceUsage().maxRSS × 1024`. */
  readonly processPeak?: Effect.Effect<number | undefined> | undefined
  /** The host's total memory in bytes. Default `os.totalmem()`. */
  readonly hostTotal?: Effect.Effect<number | undefined> | undefined
}

/**
 * The process's peak resident set in bytes, from `process.resourceUsage().maxRSS` (KiB).
 *
 * @since 0.1.0
 */
export const processPeak: Effect.Effect<number | undefined> = Effect.sync(() => process.resourceUsage().maxRSS * 1024)

/**
 * The host's total memory in bytes, from `os.totalmem()`.
 *
 * @since 0.1.0
 */
export const hostTotal: Effect.Effect<number | undefined> = Effect.sync(() => os.totalmem())

/**
 * Builds both live services over a file system: resolves the cgroup directories once, reads usage
 * on every sample, and reads the limit once (lazily) and caches it.
 *
 * @since 0.1.0
 */
export const make = (
  options: MemoryOptions = {}
): Effect.Effect<
  { readonly source: MemorySource["Type"]; readonly limit: MemoryLimit["Type"] },
  never,
  FileSystem.FileSystem
> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const root = options.root ?? "/"
    const peak = (options.processPeak ?? processPeak).pipe(Effect.catchAllDefect(() => Effect.succeed(undefined)))
    const dirs = yield* Effect.cached(Cgroup.resolveDirs(fs, root))
    const limit = yield* Effect.cached(
      Effect.flatMap(dirs, (d) => Cgroup.readLimit(fs, d, options.hostTotal ?? hostTotal))
    )
    return {
      source: MemorySource.of({
        sample: (sampleOptions) =>
          Effect.flatMap(dirs, (d) => Cgroup.readUsage(fs, root, d, sampleOptions?.subtractPageCache ?? true, peak)),
        peak
      }),
      limit: MemoryLimit.of({ limit })
    }
  })

/**
 * Live {@link MemorySource} and {@link MemoryLimit} over the layer's `FileSystem`.
 *
 * @since 0.1.0
 */
export const layerFileSystem = (
  options: MemoryOptions = {}
): Layer.Layer<MemorySource | MemoryLimit, never, FileSystem.FileSystem> =>
  Layer.effectContext(
    Effect.map(make(options), ({ limit, source }) => Context.make(MemorySource, source).pipe(Context.add(MemoryLimit, limit)))
  )

/**
 * Live {@link MemorySource} and {@link MemoryLimit} reading the real files through Node's file system.
 *
 * @since 0.1.0
 */
export const layer = (options: MemoryOptions = {}): Layer.Layer<MemorySource | MemoryLimit> =>
  layerFileSystem(options).pipe(Layer.provide(NodeFiles.layer))

/**
 * Controls of the test double: set what the fake sources return next.
 *
 * @since 0.1.0
 */
export class MemoryTest extends Context.Tag("effect-durable-worker/MemoryTest")<MemoryTest, {
  /** Sets the current use (`undefined`: unreadable). */
  readonly setUsage: (bytes: number | undefined) => Effect.Effect<void>
  /** Adds to the current use (no effect while it is unreadable). */
  readonly addUsage: (delta: number) => Effect.Effect<void>
  /** Sets the process peak (`undefined`: unreadable). */
  readonly setPeak: (bytes: number | undefined) => Effect.Effect<void>
  /** Sets the limit (`undefined`: unknown). */
  readonly setLimit: (bytes: number | undefined) => Effect.Effect<void>
  /** Makes reads of usage, peak, both or neither die with a defect, as a broken reader would. */
  readonly breakReads: (which: "usage" | "peak" | "both" | "none") => Effect.Effect<void>
}>() {}

/**
 * Initial values of the test double.
 *
 * @since 0.1.0
 */
export interface MemoryTestOptions {
  readonly usage?: number | undefined
  readonly limit?: number | undefined
  readonly peak?: number | undefined
}

/**
 * A fake {@link MemorySource} (source `custom`) and {@link MemoryLimit} whose values are set through
 * {@link MemoryTest}. The peak defaults to following the highest usage ever set, like a real peak.
 *
 * @since 0.1.0
 */
export const layerTest = (
  initial: MemoryTestOptions = {}
): Layer.Layer<MemorySource | MemoryLimit | MemoryTest> =>
  Layer.effectContext(
    Effect.gen(function*() {
      const usage = yield* Ref.make(initial.usage)
      const peak = yield* Ref.make(initial.peak ?? initial.usage)
      const limit = yield* Ref.make(initial.limit)
      const broken = yield* Ref.make<"usage" | "peak" | "both" | "none">("none")
      const guard = <A>(which: "usage" | "peak", read: Effect.Effect<A>): Effect.Effect<A> =>
        Effect.flatMap(
          Ref.get(broken),
          (b) => (b === which || b === "both" ? Effect.dieMessage(`MemoryTest: broken ${which} reader`) : read)
        )
      const setUsage = (bytes: number | undefined) =>
        Effect.zipRight(
          Ref.set(usage, bytes),
          Ref.update(peak, (p) => (bytes === undefined ? p : Math.max(p ?? 0, bytes)))
        )
      return Context.make(
        MemorySource,
        MemorySource.of({
          sample: () => guard("usage", Effect.map(Ref.get(usage), (bytes) => ({ bytes, source: "custom" as const }))),
          peak: guard("peak", Ref.get(peak))
        })
      ).pipe(
        Context.add(MemoryLimit, MemoryLimit.of({ limit: Effect.map(Ref.get(limit), (bytes) => ({ bytes, source: "custom" as const })) })),
        Context.add(
          MemoryTest,
          MemoryTest.of({
            setUsage,
            addUsage: (delta) =>
              Effect.flatMap(Ref.get(usage), (u) => (u === undefined ? Effect.void : setUsage(u + delta))),
            setPeak: (bytes) => Ref.set(peak, bytes),
            setLimit: (bytes) => Ref.set(limit, bytes),
            breakReads: (which) => Ref.set(broken, which)
          })
        )
      )
    })
  )
