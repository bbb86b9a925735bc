/**
 * The `concurrency` option of a worker and its resolution into a complete, validated configuration.
 *
 * Accepted forms:
 *
 * - a whole number `n`: fixed concurrency `n` (values below 1 become 1). Fixed workers are never gated.
 * - `"adaptive"` (any case, surrounding blanks ignored): the adaptive controller with every default.
 * - an object of bounds and knobs: always adaptive. Keys may be camelCase or snake_case; `undefined`
 *   and `null` mean "absent".
 * - `undefined` / `null`: fixed concurrency 1 here; a worker's `concurrency` left out (or `null`)
 *   takes the worker's default instead (`WorkerConfig`: 10, or `DURABLE_CONCURRENCY`).
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"

/**
 * Knobs of the adaptive controller and its memory admission gate. Every key is optional; the
 * snake_case spelling of each key is accepted as well (see {@link ConcurrencyOption}).
 *
 * @since 0.1.0
 */
export interface AdaptiveConcurrencyOptions {
  /** Ignored when present: an object is always adaptive. Only `"adaptive"` is accepted. */
  readonly mode?: "adaptive" | undefined
  /** Lowest limit the controller may set. Default 1 (`0` also means 1). */
  readonly min?: number | undefined
  /** Highest limit the controller may set. Default 32 (`0` also means 32); raised to `min` if below it. */
  readonly max?: number | undefined
  /** Initial limit, clamped into `[min, max]`. Default `min`. */
  readonly start?: number | undefined
  /**
   * Memory use (percent of the limit) at or above which the limit collapses to `min`. Default 85.
   * Each percentage here is more than 1 up to 100: `0.85` is refused, not read as 0.85 %.
   */
  readonly ramCeilingPct?: number | undefined
  /** CPU use (percent of all cores) at or above which the limit shrinks by one. Default off. */
  readonly cpuCeilingPct?: number | undefined
  /** Interval of the control loop in milliseconds. Default 2000 (minimum 1). */
  readonly tickMs?: number | undefined
  /** Whether the memory admission gate defers new tasks. Default `true`. */
  readonly ramAdmission?: boolean | undefined
  /** Projected memory percent above which the gate starts deferring. Default 75, at most `ramCeilingPct`. */
  readonly ramAdmitPct?: number | undefined
  /** Percent the projection must fall to before a deferring gate opens again. Default 65, at most `ramAdmitPct`. */
  readonly ramResumePct?: number | undefined
  /** How often a deferred task asks the gate again, in milliseconds. Default 250 (minimum 1). */
  readonly admissionPollMs?: number | undefined
  /** Longest a task is deferred before it runs anyway, in milliseconds; 0 means no bound. Default 0. */
  readonly admissionMaxWaitMs?: number | undefined
  /** Consecutive ticks of memory headroom needed before the limit may grow again. Default 3 (minimum 1). */
  readonly growHeadroomTicks?: number | undefined
  /** Whether reclaimable page cache (`inactive_file`) is subtracted from cgroup usage. Default `true`. */
  readonly subtractPageCache?: boolean | undefined
  /** Whether per-step-name memory costs are learned and reserved. Default `true`. */
  readonly stepCostTracking?: boolean | undefined
}

/**
 * Every accepted value of the `concurrency` option.
 *
 * @since 0.1.0
 */
export type ConcurrencyOption = number | "adaptive" | AdaptiveConcurrencyOptions | null | undefined

/**
 * `"fixed"`: the limit never moves and nothing is gated. `"adaptive"`: the controller moves the
 * limit inside `[min, max]` and the memory gate may defer tasks.
 *
 * @since 0.1.0
 */
export type ConcurrencyMode = "fixed" | "adaptive"

/**
 * A fully resolved configuration. A fixed configuration carries the memory defaults too, but
 * the gate never applies to it.
 *
 * @since 0.1.0
 */
export interface ResolvedConcurrency {
  readonly mode: ConcurrencyMode
  /** The initial limit (`start` when adaptive, `n` when fixed). */
  readonly limit: number
  readonly min: number
  readonly max: number
  readonly ramCeilingPct: number
  readonly cpuCeilingPct: number | undefined
  readonly tickMs: number
  readonly ramAdmission: boolean
  readonly ramAdmitPct: number
  readonly ramResumePct: number
  readonly admissionPollMs: number
  readonly admissionMaxWaitMs: number
  readonly growHeadroomTicks: number
  readonly subtractPageCache: boolean
  readonly stepCostTracking: boolean
}

/**
 * Defaults of the adaptive knobs.
 *
 * @since 0.1.0
 */
export const defaults = {
  min: 1,
  max: 32,
  ramCeilingPct: 85,
  tickMs: 2000,
  ramAdmission: true,
  ramAdmitPct: 75,
  ramResumePct: 65,
  admissionPollMs: 250,
  admissionMaxWaitMs: 0,
  growHeadroomTicks: 3,
  subtractPageCache: true,
  stepCostTracking: true
} as const

const ACCEPTED_FORMS =
  `expected a whole number (fixed concurrency), "adaptive", or an object of adaptive knobs ` +
  `{ min, max, start, ramCeilingPct, cpuCeilingPct, tickMs, ramAdmission, ramAdmitPct, ramResumePct, ` +
  `admissionPollMs, admissionMaxWaitMs, growHeadroomTicks, subtractPageCache, stepCostTracking }`

/**
 * The `concurrency` option (or one of its keys) has a value the worker cannot use.
 *
 * @since 0.1.0
 */
export class ConcurrencyOptionError extends Schema.TaggedError<ConcurrencyOptionError>()(
  "ConcurrencyOptionError",
  {
    /** The option path, e.g. `concurrency` or `concurrency.ramAdmitPct`. */
    option: Schema.String,
    /** What was given, rendered for the message. */
    received: Schema.String,
    /** What the option accepts. */
    expected: Schema.String
  }
) {
  override get message(): string {
    return `Invalid ${this.option}: got ${this.received}; ${this.expected}`
  }
}

const render = (value: unknown): string => {
  if (typeof value === "string") return JSON.stringify(value)
  if (typeof value === "number" || typeof value === "boolean" || value === null || value === undefined) {
    return String(value)
  }
  if (Array.isArray(value)) return "an array"
  return `a value of type ${typeof value}`
}

type KeySpec =
  | { readonly kind: "int"; readonly minimum: number }
  | { readonly kind: "pct" }
  | { readonly kind: "bool" }

const KEYS: ReadonlyArray<readonly [camel: keyof AdaptiveConcurrencyOptions & string, snake: string, spec: KeySpec]> = [
  ["min", "min", { kind: "int", minimum: 0 }],
  ["max", "max", { kind: "int", minimum: 0 }],
  ["start", "start", { kind: "int", minimum: 0 }],
  ["ramCeilingPct", "ram_ceiling_pct", { kind: "pct" }],
  ["cpuCeilingPct", "cpu_ceiling_pct", { kind: "pct" }],
  ["tickMs", "tick_ms", { kind: "int", minimum: Number.NEGATIVE_INFINITY }],
  ["ramAdmission", "ram_admission", { kind: "bool" }],
  ["ramAdmitPct", "ram_admit_pct", { kind: "pct" }],
  ["ramResumePct", "ram_resume_pct", { kind: "pct" }],
  ["admissionPollMs", "admission_poll_ms", { kind: "int", minimum: Number.NEGATIVE_INFINITY }],
  ["admissionMaxWaitMs", "admission_max_wait_ms", { kind: "int", minimum: Number.NEGATIVE_INFINITY }],
  ["growHeadroomTicks", "grow_headroom_ticks", { kind: "int", minimum: Number.NEGATIVE_INFINITY }],
  ["subtractPageCache", "subtract_page_cache", { kind: "bool" }],
  ["stepCostTracking", "step_cost_tracking", { kind: "bool" }]
]

const KNOWN_KEYS = new Set<string>(["mode", ...KEYS.flatMap(([camel, snake]) => [camel, snake])])

const describeSpec = (spec: KeySpec): string => {
  switch (spec.kind) {
    case "int":
      return spec.minimum === 0 ? "expected a whole number >= 0" : "expected a whole number"
    case "pct":
      return "expected a percentage more than 1 up to 100 (85 for 85 %; 0.85 would be 0.85 %, which nearly every reading exceeds)"
    case "bool":
      return "expected true or false"
  }
}

const fixed = (n: number): ResolvedConcurrency => ({
  mode: "fixed",
  limit: n,
  min: n,
  max: n,
  ramCeilingPct: defaults.ramCeilingPct,
  cpuCeilingPct: undefined,
  tickMs: defaults.tickMs,
  ramAdmission: defaults.ramAdmission,
  ramAdmitPct: defaults.ramAdmitPct,
  ramResumePct: defaults.ramResumePct,
  admissionPollMs: defaults.admissionPollMs,
  admissionMaxWaitMs: defaults.admissionMaxWaitMs,
  growHeadroomTicks: defaults.growHeadroomTicks,
  subtractPageCache: defaults.subtractPageCache,
  stepCostTracking: defaults.stepCostTracking
})

const resolveObject = (
  input: Readonly<Record<string, unknown>>
): Either.Either<ResolvedConcurrency, ConcurrencyOptionError> => {
  for (const key of Object.keys(input)) {
    if (!KNOWN_KEYS.has(key)) {
      return Either.left(
        new ConcurrencyOptionError({
          option: `concurrency.${key}`,
          received: "an unknown key",
          expected: ACCEPTED_FORMS + " (snake_case spellings are accepted too)"
        })
      )
    }
  }
  const mode = input["mode"]
  if (mode !== undefined && mode !== null && mode !== "adaptive") {
    return Either.left(
      new ConcurrencyOptionError({
        option: "concurrency.mode",
        received: render(mode),
        expected: `an object is always adaptive, so mode may only be "adaptive"; use a whole number for fixed concurrency`
      })
    )
  }
  const values: Record<string, number | boolean | undefined> = {}
  for (const [camel, snake, spec] of KEYS) {
    const raw = input[camel] ?? input[snake]
    if (raw === undefined || raw === null) continue
    const ok = spec.kind === "bool"
      ? typeof raw === "boolean"
      : spec.kind === "pct"
      // up to 1 is a fraction meant as a percentage, or 0: either holds the limit at min for good
      ? typeof raw === "number" && Number.isFinite(raw) && raw > 1 && raw <= 100
      : typeof raw === "number" && Number.isInteger(raw) && raw >= spec.minimum
    if (!ok) {
      const given = input[camel] !== undefined && input[camel] !== null ? camel : snake
      return Either.left(
        new ConcurrencyOptionError({
          option: `concurrency.${given}`,
          received: render(raw),
          expected: describeSpec(spec)
        })
      )
    }
    values[camel] = raw as number | boolean
  }
  const num = (key: string): number | undefined => values[key] as number | undefined
  const bool = (key: string, fallback: boolean): boolean => (values[key] as boolean | undefined) ?? fallback

  const min = num("min") || defaults.min
  const max = Math.max(min, num("max") || defaults.max)
  const start = Math.min(max, Math.max(min, num("start") ?? min))
  const ramCeilingPct = num("ramCeilingPct") ?? defaults.ramCeilingPct
  const ramAdmitPct = Math.min(ramCeilingPct, num("ramAdmitPct") ?? defaults.ramAdmitPct)
  const ramResumePct = Math.min(ramAdmitPct, num("ramResumePct") ?? defaults.ramResumePct)
  return Either.right({
    mode: "adaptive",
    limit: start,
    min,
    max,
    ramCeilingPct,
    cpuCeilingPct: num("cpuCeilingPct"),
    tickMs: Math.max(1, num("tickMs") ?? defaults.tickMs),
    ramAdmission: bool("ramAdmission", defaults.ramAdmission),
    ramAdmitPct,
    ramResumePct,
    admissionPollMs: Math.max(1, num("admissionPollMs") ?? defaults.admissionPollMs),
    admissionMaxWaitMs: Math.max(0, num("admissionMaxWaitMs") ?? defaults.admissionMaxWaitMs),
    growHeadroomTicks: Math.max(1, num("growHeadroomTicks") ?? defaults.growHeadroomTicks),
    subtractPageCache: bool("subtractPageCache", defaults.subtractPageCache),
    stepCostTracking: bool("stepCostTracking", defaults.stepCostTracking)
  })
}

/**
 * Resolves a `concurrency` option, synchronously, into a {@link ResolvedConcurrency} or a
 * {@link ConcurrencyOptionError} naming the offending option and the accepted forms.
 *
 * @since 0.1.0
 */
export const resolveEither = (input: unknown): Either.Either<ResolvedConcurrency, ConcurrencyOptionError> => {
  if (input === undefined || input === null) return Either.right(fixed(1))
  if (typeof input === "number") {
    if (!Number.isInteger(input)) {
      return Either.left(
        new ConcurrencyOptionError({ option: "concurrency", received: render(input), expected: ACCEPTED_FORMS })
      )
    }
    return Either.right(fixed(Math.max(1, input)))
  }
  if (typeof input === "string") {
    if (input.trim().toLowerCase() === "adaptive") return resolveObject({})
    return Either.left(
      new ConcurrencyOptionError({ option: "concurrency", received: render(input), expected: ACCEPTED_FORMS })
    )
  }
  if (typeof input === "object" && !Array.isArray(input)) {
    return resolveObject(input as Readonly<Record<string, unknown>>)
  }
  return Either.left(
    new ConcurrencyOptionError({ option: "concurrency", received: render(input), expected: ACCEPTED_FORMS })
  )
}

/**
 * Resolves a `concurrency` option; fails with a {@link ConcurrencyOptionError} on an invalid value.
 *
 * @since 0.1.0
 */
export const resolve = (input: unknown): Effect.Effect<ResolvedConcurrency, ConcurrencyOptionError> =>
  Either.match(resolveEither(input), { onLeft: Effect.fail, onRight: Effect.succeed })
