/**
 * The concurrency controller and memory admission gate of a worker.
 *
 * - Fixed (`concurrency: n`): the limit is `n`, nothing is ever gated, memory is still reported.
 * - Adaptive: a control loop ticks every `tickMs` and moves the limit inside `[min, max]` from the
 *   latency gradient, error rate, stalls, CPU and memory (collapsing to `min` in one move at the
 *   memory ceiling and growing back only after `growHeadroomTicks` ticks of headroom). A memory
 *   admission gate defers (never rejects) new steps whose projected memory would cross
 *   `ramAdmitPct`, learning a memory cost per step name from runs that ran alone.
 *
 * The runtime uses it like this:
 *
 * ```ts
 * const controller = yield* ConcurrencyController
 * const limit = yield* controller.limit // or follow controller.limitChanges
 * // per step (keep the broker lock alive while this waits):
 * yield* Effect.scoped(Effect.gen(function*() {
 *   const admission = yield* controller.admit(task.name)
 *   const result = yield* runStep(task)
 *   yield* admission.complete(result.ok)   // else the scope's exit decides ok
 * }))
 * // per workflow turn: controller.admit(undefined, { kind: "workflow" }) (counted, never gated)
 * // heartbeat: yield* controller.snapshot;  shutdown: yield* controller.beginDrain
 * ```
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import type * as Config from "effect/Config"
import type * as ConfigError from "effect/ConfigError"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as SubscriptionRef from "effect/SubscriptionRef"
import * as Concurrency from "./Concurrency.js"
import { CpuUsage } from "./CpuUsage.js"
import { ControllerCore, type Reading } from "./internal/controllerCore.js"
import * as Memory from "./Memory.js"

/**
 * A step (gated, feeds the latency window and learned costs) or a workflow turn (counted in flight,
 * never gated, costs nothing, never enters the latency window).
 *
 * @since 0.1.0
 */
export type TaskKind = "step" | "workflow"

/**
 * Why the controller moved the limit.
 *
 * @since 0.1.0
 */
export type AdjustReason = "ram_ceiling" | "cpu_ceiling" | "backpressure" | "grow" | "shrink"

/**
 * The last move of the limit: when (epoch ms), from, to and why.
 *
 * @since 0.1.0
 */
export interface LastAdjust {
  readonly at: number
  readonly from: number
  readonly to: number
  readonly reason: AdjustReason
}

/**
 * The `status.memory` block of the heartbeat. Gate fields are present only when adaptive with
 * `ramAdmission`; `stepCostBytes` whenever a cost has been learned.
 *
 * @since 0.1.0
 */
export interface MemoryStatus {
  readonly source: Memory.MemorySourceName
  readonly idleUsageBytes?: number
  readonly gate?: "open" | "deferring"
  readonly admitPct?: number
  readonly resumePct?: number
  readonly waiting?: number
  readonly deferrals?: number
  readonly headroomTicks?: number
  readonly lastDeferredAt?: number
  readonly stepCostBytes?: Readonly<Record<string, number>>
}

/**
 * The controller's part of the heartbeat `status` (a `WorkerStatus`); absent measurements are omitted.
 *
 * @since 0.1.0
 */
export interface ConcurrencyStatus {
  readonly runtime: "node"
  readonly concurrency:
    | { readonly mode: "fixed"; readonly limit: number }
    | { readonly mode: "adaptive"; readonly limit: number; readonly min: number; readonly max: number }
  readonly inFlight: number
  readonly rssBytes?: number
  readonly rssLimitBytes?: number
  readonly rssPct?: number
  readonly cpuPct?: number
  readonly throughputPerMin?: number
  readonly p95Ms?: number
  readonly lastAdjust?: LastAdjust
  readonly memory: MemoryStatus
}

/**
 * How a wait for admission ended. Anything but `admitted` means the gate was bypassed: the task
 * runs anyway (a deferred task is never failed or stranded).
 *
 * - `draining`: {@link ConcurrencyController} `beginDrain` released the waiters;
 * - `aborted`: the `abort` check of {@link AdmitOptions} returned `true`;
 * - `timed_out`: `admissionMaxWaitMs` passed.
 *
 * @since 0.1.0
 */
export type AdmissionOutcome = "admitted" | "draining" | "aborted" | "timed_out"

/**
 * A task counted in flight. Report its end with `complete` (or `release` if it never ran); if
 * neither is called, closing the admission's scope completes it with `ok` = the scope's exit
 * succeeded. Only the first report counts.
 *
 * @since 0.1.0
 */
export interface Admission {
  readonly token: number
  readonly outcome: AdmissionOutcome
  /** Whether the gate made the task wait. */
  readonly deferred: boolean
  /**
   * The task finished. Its duration is measured from admission unless given. A step's `ok` and
   * duration feed the latency window; a step that ran alone teaches the cost of its name.
   */
  readonly complete: (ok: boolean, options?: { readonly durationMs?: number | undefined }) => Effect.Effect<void>
  /** The task never ran (e.g. nothing was delivered): forget it without any sample. */
  readonly release: Effect.Effect<void>
}

/**
 * Options of {@link ConcurrencyController} `admit`.
 *
 * @since 0.1.0
 */
export interface AdmitOptions {
  /** Default `"step"`. Workflow turns are never gated. */
  readonly kind?: TaskKind | undefined
  /** Checked on every poll while deferred; `true` ends the wait with outcome `aborted`. */
  readonly abort?: Effect.Effect<boolean> | undefined
  /**
   * Whether the task takes one of the slots the limit sizes. Default `true`. `false` for a task of a
   * pool of its own (Durable Workflow workflow tasks and queries, bounded by `workflowConcurrency`
   * and one at a time): it is counted in flight but is no part of the limit's arithmetic — the
   * gate's "nothing in flight" and "at the limit", the stall and the saturation that grows the limit.
   */
  readonly limited?: boolean | undefined
}

/**
 * Options of {@link ConcurrencyController} `run`.
 *
 * @since 0.1.0
 */
export interface RunOptions<A, E> extends AdmitOptions {
  /** Whether the task counts as a success for the latency window (default: it succeeded). */
  readonly ok?: ((exit: Exit.Exit<A, E>) => boolean) | undefined
}

/**
 * The concurrency controller and memory admission gate.
 *
 * @since 0.1.0
 */
export class ConcurrencyController extends Context.Tag("effect-durable-worker/ConcurrencyController")<
  ConcurrencyController,
  {
    /** The resolved configuration. */
    readonly config: Concurrency.ResolvedConcurrency
    /** The current concurrency limit. */
    readonly limit: Effect.Effect<number>
    /** The current limit, then every change of it. */
    readonly limitChanges: Stream.Stream<number>
    /** Tasks counted in flight (steps and workflow turns). */
    readonly inFlight: Effect.Effect<number>
    /**
     * Waits until the gate admits a task with this step name (never fails; deferral is a wait),
     * then counts it in flight until it is completed or released or the scope closes.
     */
    readonly admit: (name: string | undefined, options?: AdmitOptions) => Effect.Effect<Admission, never, Scope.Scope>
    /**
     * Whether `admit` can make a task wait: only an adaptive controller with memory admission
     * gates. When it cannot, `run` counts the task without a scope or a memory read.
     */
    readonly gates: boolean
    /**
     * Counts a task in flight from now, without waiting or a scope (for a controller that does not
     * gate, see `gates`); returns the function that completes it, with whether it succeeded (a
     * second call does nothing). `limited` as in {@link AdmitOptions}.
     */
    readonly count: (
      name: string | undefined,
      kind?: "step" | "workflow",
      options?: { readonly limited?: boolean | undefined }
    ) => (ok: boolean) => void
    /**
     * Runs `effect` as one admitted task: admit, run, complete with `ok` = `options.ok` of its exit
     * (default: the effect succeeded).
     */
    readonly run: <A, E, R>(
      name: string | undefined,
      effect: Effect.Effect<A, E, R>,
      options?: RunOptions<A, E>
    ) => Effect.Effect<A, E, R>
    /** The numbers for the heartbeat status, read now. */
    readonly snapshot: Effect.Effect<ConcurrencyStatus>
    /** Shutdown has begun: every waiting task is released at once (outcome `draining`) and none waits again. */
    readonly beginDrain: Effect.Effect<void>
  }
>() {}

const unreadableUsage: Memory.MemorySample = { bytes: undefined, source: "unavailable" }
const unknownLimit: Memory.MemoryLimitSample = { bytes: undefined, source: "unavailable" }

/**
 * Builds the controller and starts its control loop in the current scope.
 *
 * @since 0.1.0
 */
export const make = (
  option: Concurrency.ConcurrencyOption
): Effect.Effect<
  ConcurrencyController["Type"],
  Concurrency.ConcurrencyOptionError,
  Scope.Scope
> =>
  Effect.gen(function*() {
    const config = yield* Concurrency.resolve(option)
    const source = yield* Memory.MemorySource
    const memoryLimit = yield* Memory.MemoryLimit
    const cpu = yield* CpuUsage
    const core = new ControllerCore(config)
    const clock = yield* Effect.clock
    const limitRef = yield* SubscriptionRef.make(core.limit)
    const drained = yield* Deferred.make<void>()

    const read: Effect.Effect<Reading> = Effect.all([
      source.sample({ subtractPageCache: config.subtractPageCache }).pipe(
        Effect.catchAllDefect(() => Effect.succeed(unreadableUsage))
      ),
      memoryLimit.limit.pipe(Effect.catchAllDefect(() => Effect.succeed(unknownLimit))),
      source.peak.pipe(Effect.catchAllDefect(() => Effect.succeed(undefined)))
    ]).pipe(
      Effect.map(([usage, limit, peak]) => ({
        usage: usage.bytes,
        source: usage.source,
        limitBytes: limit.bytes,
        peak
      }))
    )

    const makeAdmission = (
      token: number,
      outcome: AdmissionOutcome,
      deferred: boolean,
      startedAt: number
    ): Admission => {
      let done = false
      const finish = (f: (r: Reading, now: number) => void): Effect.Effect<void> =>
        Effect.uninterruptible(Effect.suspend(() => {
          if (done) return Effect.void
          done = true
          return Effect.flatMap(reading, (r) => Effect.map(Clock.currentTimeMillis, (now) => f(r, now)))
        }))
      return {
        token,
        outcome,
        deferred,
        complete: (ok, options) =>
          finish((r, now) => core.settle(token, options?.durationMs ?? Math.max(0, now - startedAt), ok, r, now)),
        release: Effect.sync(() => {
          if (done) return
          done = true
          core.release(token)
        })
      }
    }

    // Only a gating controller reads memory on the task path (B.7 reads it per admission); a fixed
    // or non-gating one uses the reading of its last tick, so no task waits on file reads.
    const gated = config.mode === "adaptive" && config.ramAdmission
    let latest: Reading = { usage: undefined, source: unreadableUsage.source, limitBytes: undefined, peak: undefined }
    const remember = (r: Reading) => {
      latest = r
      return r
    }
    const reading: Effect.Effect<Reading> = gated ? Effect.map(read, remember) : Effect.sync(() => latest)
    const readNow = Effect.zip(reading, Clock.currentTimeMillis)

    // Counts a task in flight and ties it to the scope. Called synchronously inside an
    // uninterruptible region, right after the gate's decision, so the decision and the count are
    // one atomic step and an interruption can never leave a task counted forever.
    const enter = (
      name: string | undefined,
      kind: TaskKind,
      limited: boolean,
      outcome: AdmissionOutcome,
      deferred: boolean,
      r: Reading,
      now: number
    ): Effect.Effect<Admission, never, Scope.Scope> => {
      const admission = makeAdmission(core.start(name, kind, r, limited), outcome, deferred, now)
      return Effect.as(Effect.addFinalizer((exit) => admission.complete(Exit.isSuccess(exit))), admission)
    }

    /** Asks the gate once (workflow turns always pass); `undefined` when it refuses. */
    const attempt = (name: string | undefined, kind: TaskKind, limited: boolean, deferred: boolean) =>
      Effect.flatMap(readNow, ([r, now]) =>
        Effect.uninterruptible(Effect.suspend(() =>
          kind !== "step" || core.tryAdmit(name, r)
            ? enter(name, kind, limited, "admitted", deferred, r, now)
            : Effect.succeed(undefined)
        )))

    /** Lets a deferred step through without the gate (it runs anyway). */
    const bypass = (name: string | undefined, limited: boolean, outcome: AdmissionOutcome) =>
      Effect.flatMap(readNow, ([r, now]) =>
        Effect.uninterruptible(Effect.suspend(() => enter(name, "step", limited, outcome, true, r, now))))

    const pollMs = config.admissionPollMs
    const waitForAdmission = (
      name: string | undefined,
      limited: boolean,
      abort: Effect.Effect<boolean> | undefined,
      deadline: number | undefined
    ): Effect.Effect<Admission, never, Scope.Scope> =>
      Effect.gen(function*() {
        while (true) {
          if (core.draining) return yield* bypass(name, limited, "draining")
          if (abort !== undefined && (yield* abort.pipe(Effect.catchAllDefect(() => Effect.succeed(false))))) {
            return yield* bypass(name, limited, "aborted")
          }
          const now = yield* Clock.currentTimeMillis
          if (deadline !== undefined && now >= deadline) return yield* bypass(name, limited, "timed_out")
          const sleepMs = deadline === undefined ? pollMs : Math.min(pollMs, deadline - now)
          yield* Effect.raceFirst(Effect.sleep(sleepMs), Deferred.await(drained))
          if (core.draining) continue
          const admission = yield* attempt(name, "step", limited, true)
          if (admission !== undefined) return admission
        }
      })

    const admit = (name: string | undefined, options: AdmitOptions = {}) =>
      Effect.gen(function*() {
        const kind = options.kind ?? "step"
        const limited = options.limited ?? true
        const first = yield* attempt(name, kind, limited, false)
        if (first !== undefined) return first
        const now = yield* Clock.currentTimeMillis
        yield* Effect.sync(() => {
          core.waiting += 1
          core.deferrals += 1
          core.lastDeferredAt = now
        })
        const deadline = config.admissionMaxWaitMs > 0 ? now + config.admissionMaxWaitMs : undefined
        return yield* waitForAdmission(name, limited, options.abort, deadline).pipe(
          Effect.ensuring(Effect.sync(() => {
            core.waiting = Math.max(0, core.waiting - 1)
          }))
        )
      })

    // CPU percent of all cores between two ticks; the first tick has no reading.
    let previousCpu: { readonly micros: number; readonly at: number } | undefined
    let cpuPct: number | undefined
    const measureCpu = (micros: number | undefined, now: number): number | undefined => {
      if (micros === undefined) {
        previousCpu = undefined
        return (cpuPct = undefined)
      }
      if (previousCpu !== undefined && now > previousCpu.at) {
        cpuPct = ((micros - previousCpu.micros) / ((now - previousCpu.at) * 1000 * cpu.cores)) * 100
      }
      if (previousCpu === undefined || now > previousCpu.at) previousCpu = { micros, at: now }
      return cpuPct
    }

    const tick = Effect.gen(function*() {
      const r = remember(yield* read)
      const micros = yield* cpu.micros.pipe(Effect.catchAllDefect(() => Effect.succeed(undefined)))
      const now = yield* Clock.currentTimeMillis
      const adjust = core.tick(r, measureCpu(micros, now), now)
      if (adjust !== undefined) yield* SubscriptionRef.set(limitRef, adjust.to)
    }).pipe(
      // a defect as the line's cause: one field with its stack, not a second message
      Effect.catchAllDefect((defect) => Effect.logWarning("concurrency controller tick failed", Cause.die(defect)))
    )
    yield* Effect.sleep(config.tickMs).pipe(Effect.zipRight(tick), Effect.forever, Effect.forkScoped)

    // nothing to wait for: count the task from the last tick's reading
    const count = (
      name: string | undefined,
      kind: "step" | "workflow" = "step",
      options?: { readonly limited?: boolean | undefined }
    ) => {
      const startedAt = clock.unsafeCurrentTimeMillis()
      const token = core.start(name, kind, latest, options?.limited ?? true)
      return (ok: boolean) => {
        const now = clock.unsafeCurrentTimeMillis()
        core.settle(token, Math.max(0, now - startedAt), ok, latest, now)
      }
    }

    return ConcurrencyController.of({
      config,
      limit: SubscriptionRef.get(limitRef),
      limitChanges: limitRef.changes.pipe(Stream.changes),
      inFlight: Effect.sync(() => core.inFlight),
      admit,
      gates: gated,
      run: (name, effect, options) => {
        const ok = options?.ok ?? Exit.isSuccess
        if (gated) {
          return Effect.acquireUseRelease(
            Scope.make(),
            (scope) =>
              Effect.flatMap(Scope.extend(admit(name, options), scope), (admission) =>
                Effect.onExit(effect, (exit) => admission.complete(ok(exit)))),
            Scope.close
          )
        }
        return Effect.suspend(() => {
          const done = count(name, options?.kind, options)
          return Effect.onExit(effect, (exit) => Effect.sync(() => done(ok(exit))))
        })
      },
      count,
      snapshot: Effect.map(read, (r) => core.snapshot(r)),
      beginDrain: Effect.suspend(() => {
        core.draining = true
        return Deferred.succeed(drained, undefined)
      }).pipe(Effect.asVoid)
    })
  })

/**
 * The controller for a `concurrency` option (fixed or adaptive), with its control loop running
 * for the life of the layer.
 *
 * @since 0.1.0
 */
export const layer = (
  option: Concurrency.ConcurrencyOption
): Layer.Layer<ConcurrencyController, Concurrency.ConcurrencyOptionError> =>
  Layer.scoped(ConcurrencyController, make(option))

/**
 * A fixed-concurrency controller: the limit is `n` (at least 1) and `admit` never waits; memory is
 * still reported.
 *
 * @since 0.1.0
 */
export const layerFixed = (
  n: number
): Layer.Layer<ConcurrencyController, Concurrency.ConcurrencyOptionError> =>
  layer(n)

/**
 * An adaptive controller with these knobs (every default when omitted).
 *
 * @since 0.1.0
 */
export const layerAdaptive = (
  options: Concurrency.AdaptiveConcurrencyOptions = {}
): Layer.Layer<ConcurrencyController, Concurrency.ConcurrencyOptionError> =>
  layer(options)

/**
 * The controller for a `concurrency` option read from configuration.
 *
 * @since 0.1.0
 */
export const layerConfig = (
  config: Config.Config<Concurrency.ConcurrencyOption>
): Layer.Layer<
  ConcurrencyController,
  ConfigError.ConfigError | Concurrency.ConcurrencyOptionError
> => Layer.scoped(ConcurrencyController, Effect.flatMap(config, make))

/**
 * The controller over the fake memory of {@link Memory.layerTest}, which it also provides (with
 * its {@link Memory.MemoryTest} controls).
 *
 * @since 0.1.0
 */
export const layerTest = (
  option: Concurrency.ConcurrencyOption,
  memory: Memory.MemoryTestOptions = {}
): Layer.Layer<
  ConcurrencyController | Memory.MemorySource | Memory.MemoryLimit | Memory.MemoryTest,
  Concurrency.ConcurrencyOptionError
> => layer(option).pipe(Layer.provideMerge(Memory.layerTest(memory)))
