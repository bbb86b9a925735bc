/**
 * How a worker runs: its id, concurrency, poll and shutdown timing. Options are checked once, when
 * the worker (or this layer) is built, and a bad one fails with a {@link WorkerConfigError} that
 * names it.
 *
 * The configuration is a service with a default: a worker takes it from the environment when one
 * is provided ({@link layer}, {@link layerConfig} for `DURABLE_*` environment variables) and the
 * {@link defaults} otherwise; options given to `Worker.make` win over both.
 *
 * @since 0.2.0
 */
import * as Config from "effect/Config"
import * as ConfigError from "effect/ConfigError"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as Concurrency from "../services/Concurrency.js"
import * as Options from "../core/internal/options.js"
import * as ReplayCapture from "../core/ReplayCapture.js"

/**
 * An invalid worker option, named, with the accepted forms.
 *
 * @since 0.2.0
 * @category errors
 */
export class WorkerConfigError extends Schema.TaggedError<WorkerConfigError>()("WorkerConfigError", {
  option: Schema.String,
  message: Schema.String
}) {}

/** A unit of a duration's short form (`"500ms"`, `"30s"`, `"5m"`, `"1h"`, `"1d"`). */
type ShortUnit = "ms" | "s" | "m" | "h" | "d"

/**
 * A duration as every option of the worker and its transports takes it: anything `Duration.decode`
 * accepts (a `Duration`, a number of milliseconds, `"30 seconds"`, …), a short form of up to three
 * parts, largest unit first, each unit once (`"30s"`, `"500ms"`, `"1m30s"`, `"1h30m15s"`), or
 * `"infinity"` where an option may be unbounded. The same forms as the `DURABLE_*` variables; a value
 * below zero, and what the type cannot tell apart (`"1e3s"`, `"1m30m"`), are refused when the option
 * is checked.
 *
 * @since 0.3.0
 * @category models
 */
export type DurationOption =
  | Duration.DurationInput
  | `${number}${ShortUnit}`
  | `${number}${ShortUnit}${number}${ShortUnit}`
  | `${number}${ShortUnit}${number}${ShortUnit}${number}${ShortUnit}`
  | "infinity"
  | "Infinity"

/**
 * Worker options as a user writes them. Durations take any {@link DurationOption}: what
 * `Duration.decode` accepts (`"30 seconds"`, millis, …) and the short forms `"30s"`, `"500ms"`,
 * `"1m30s"`.
 *
 * @since 0.1.0
 * @category models
 */
export interface WorkerOptions {
  /** The worker's instance id. Default `ts-<hostname>-<pid>-<8 hex>`, new for each worker. */
  readonly workerId?: string | undefined
  /** The build id announced to orchestrators that route by it. Must not be blank. */
  readonly buildId?: string | undefined
  /**
   * Step tasks (and, where they share a poller, workflow turns) at once: a number (fixed, never
   * gated; default 10), `"adaptive"`, or adaptive bounds and knobs (`{ min, max, start,
   * ramCeilingPct, ... }`): a latency-gradient controller with a memory admission gate that defers
   * (never rejects) a task while memory is short.
   */
  readonly concurrency?: Concurrency.ConcurrencyOption | undefined
  /** At most this many workflow turns at once where the transport polls them separately. Default 10. */
  readonly workflowConcurrency?: number | undefined
  /**
   * How long one poll waits for work. Default 35 seconds; must be positive (a poll that waits for
   * nothing would ask the broker again at once, for ever).
   */
  readonly pollTimeout?: DurationOption | undefined
  /**
   * One deadline for the whole drain at shutdown. Default 30 seconds; 0 interrupts the running tasks
   * at once, `Duration.infinity` waits for them however long they take.
   */
  readonly shutdownTimeout?: DurationOption | undefined
  /** Overrides the transport's heartbeat interval. Must be positive. */
  readonly heartbeatInterval?: DurationOption | undefined
  /**
   * How long an interrupted poller or task may take to stop before shutdown reports it as stuck
   * (and leaves the registration in place), and how long the deregistration may go unanswered
   * before the stop fails with a `DeregistrationError`. Default 5 seconds.
   */
  readonly interruptTimeout?: DurationOption | undefined
  /** The pause after a failed poll before the next one. Default 1 second. */
  readonly pollRetryDelay?: DurationOption | undefined
  /**
   * How often the sampled metrics (saturation, backlog, tasks deferred) are taken. Default 5
   * seconds; must be positive.
   *
   * @since 0.3.0
   */
  readonly metricsInterval?: DurationOption | undefined
  /**
   * The probe server (`/livez`, `/readyz`, optionally `/metrics`). Off by default.
   *
   * @since 0.3.0
   */
  readonly health?: HealthOptions | undefined
  /**
   * Called once for every task when it ends (answered, rejected, cancelled or given back), with its
   * name, outcome and duration. It runs on the task path: keep it quick; what it throws is logged
   * and ignored.
   *
   * @since 0.3.0
   */
  readonly onTaskEnd?: ((event: TaskEnd) => void) | undefined
  /**
   * Record a sampled share of the workflow turns this worker replays, for `verify` in CI: to a
   * directory (`{ directory, sampleRate }`, one file per run, its latest turn) or a callback
   * (`{ onCapture, sampleRate }`). Default none. Providing a `ReplayCapture` layer does the same.
   *
   * @since 0.3.0
   */
  readonly captureHistories?: ReplayCapture.CaptureHistoriesOption | undefined
}

/**
 * Options of the probe server.
 *
 * @since 0.3.0
 * @category models
 */
export interface HealthOptions {
  /** The port to listen on (0 picks a free one). */
  readonly port: number
  /** The address to listen on. Default `127.0.0.1` (use `0.0.0.0` in a container). */
  readonly host?: string | undefined
  /** Whether `/metrics` answers with the Effect metrics in Prometheus text. Default `false`. */
  readonly metrics?: boolean | undefined
  /**
   * How late the event loop may wake up before `/livez` answers 503. Default 1 second; must be
   * positive.
   */
  readonly loopDelayThreshold?: DurationOption | undefined
}

/**
 * The checked probe server options.
 *
 * @since 0.3.0
 * @category models
 */
export interface ResolvedHealth {
  readonly port: number
  readonly host: string
  readonly metrics: boolean
  readonly loopDelayThreshold: Duration.Duration
}

/**
 * How one task ended, as `onTaskEnd` is told.
 *
 * @since 0.3.0
 * @category models
 */
export interface TaskEnd {
  /** `step` or `workflow` (a workflow turn). */
  readonly kind: "step" | "workflow"
  /** The step or workflow name; `unknown` when the payload names none. */
  readonly name: string
  /** `completed`, `failed`, `rejected`, `cancelled` or `abandoned` (given back to the broker). */
  readonly outcome: TaskOutcome
  /** From taken to answered. */
  readonly durationMs: number
  /** The subscription it came from (the poller's name, e.g. `queue durable-tasks-pay`). */
  readonly poller: string
  /** The broker's id of the task. */
  readonly deliveryId: string
}

/**
 * How a task ended.
 *
 * @since 0.3.0
 * @category models
 */
export type TaskOutcome = "completed" | "failed" | "rejected" | "cancelled" | "abandoned"

/**
 * The checked configuration.
 *
 * @since 0.2.0
 * @category models
 */
export interface ResolvedWorkerConfig {
  /** The configured id; `undefined` gives each worker a fresh default id. */
  readonly workerId: string | undefined
  readonly buildId: string | undefined
  readonly concurrency: Concurrency.ResolvedConcurrency
  /** The `concurrency` option as given (the controller is built from it). */
  readonly concurrencyOption: Concurrency.ConcurrencyOption
  readonly workflowConcurrency: number
  readonly pollTimeout: Duration.Duration
  readonly shutdownTimeout: Duration.Duration
  readonly heartbeatInterval: Duration.Duration | undefined
  readonly interruptTimeout: Duration.Duration
  readonly pollRetryDelay: Duration.Duration
  readonly metricsInterval: Duration.Duration
  readonly health: ResolvedHealth | undefined
  readonly onTaskEnd: ((event: TaskEnd) => void) | undefined
  readonly captureHistories: ReplayCapture.CaptureHistoriesOption | undefined
}

const KEYS: ReadonlyArray<keyof WorkerOptions> = [
  "workerId",
  "buildId",
  "concurrency",
  "workflowConcurrency",
  "pollTimeout",
  "shutdownTimeout",
  "heartbeatInterval",
  "interruptTimeout",
  "pollRetryDelay",
  "metricsInterval",
  "health",
  "onTaskEnd",
  "captureHistories"
]

/**
 * The defaults: fixed concurrency 10, 10 workflow turns, 35 s polls, a 30 s shutdown deadline, 5 s
 * to stop an interrupted task, 1 s between failed polls, the transport's heartbeat interval, sampled
 * metrics every 5 s, no probe server, no `onTaskEnd`.
 *
 * @since 0.2.0
 * @category defaults
 */
export const defaults: ResolvedWorkerConfig = {
  workerId: undefined,
  buildId: undefined,
  concurrency: Either.getOrThrow(Concurrency.resolveEither(10)),
  concurrencyOption: 10,
  workflowConcurrency: 10,
  pollTimeout: Duration.seconds(35),
  shutdownTimeout: Duration.seconds(30),
  heartbeatInterval: undefined,
  interruptTimeout: Duration.seconds(5),
  pollRetryDelay: Duration.seconds(1),
  metricsInterval: Duration.seconds(5),
  health: undefined,
  onTaskEnd: undefined,
  captureHistories: undefined
}

const HEALTH_KEYS = ["port", "host", "metrics", "loopDelayThreshold"]
const CAPTURE_KEYS = ["directory", "onCapture", "sampleRate", "queueCapacity"]

/**
 * The worker configuration in the environment; {@link defaults} when none is provided.
 *
 * @since 0.2.0
 * @category services
 */
export class WorkerConfig extends Context.Reference<WorkerConfig>()("effect-durable-worker/WorkerConfig", {
  defaultValue: () => defaults
}) {}

const fail = (option: string, message: string) => Either.left(new WorkerConfigError({ option, message }))

const nonBlank = (option: string, value: unknown) =>
  value === undefined
    ? Either.right(undefined)
    : typeof value === "string" && value.trim() !== ""
    ? Either.right(value)
    : fail(option, `${option} must be a non-empty string when provided, got ${JSON.stringify(value)}`)

const positiveInt = (option: string, value: unknown, fallback: number) =>
  value === undefined
    ? Either.right(fallback)
    : Number.isInteger(value) && (value as number) >= 1
    ? Either.right(value as number)
    : fail(option, `${option} must be an integer of at least 1, got ${Options.showValue(value)}`)

const duration = <F extends Duration.Duration | undefined>(
  option: string,
  value: unknown,
  fallback: F,
  rule?: Options.DurationRule
): Either.Either<Duration.Duration | F, WorkerConfigError> =>
  value === undefined
    ? Either.right(fallback)
    : Either.mapLeft(Options.checkDuration(option, value, rule), (message) => new WorkerConfigError({ option, message }))

const positive = (option: string, value: unknown, fallback: Duration.Duration) => duration(option, value, fallback, { positive: true })

const health = (value: unknown, fallback: ResolvedHealth | undefined) =>
  Either.gen(function*() {
    if (value === undefined) return fallback
    if (typeof value !== "object" || value === null) {
      return yield* fail("health", `health must be an object such as { port: 8080 }, got ${Options.showValue(value)}`)
    }
    const unknown = Options.unknownOption(value, HEALTH_KEYS, "health")
    if (unknown !== undefined) return yield* fail(`health.${unknown.key}`, unknown.message)
    const options = value as HealthOptions
    if (!Number.isInteger(options.port) || options.port < 0 || options.port > 65535) {
      return yield* fail("health.port", `health.port must be an integer from 0 to 65535, got ${Options.showValue(options.port)}`)
    }
    if (options.metrics !== undefined && typeof options.metrics !== "boolean") {
      return yield* fail("health.metrics", `health.metrics must be a boolean, got ${Options.showValue(options.metrics)}`)
    }
    return {
      port: options.port,
      host: (yield* nonBlank("health.host", options.host)) ?? "127.0.0.1",
      metrics: options.metrics ?? false,
      loopDelayThreshold: yield* positive("health.loopDelayThreshold", options.loopDelayThreshold, Duration.seconds(1))
    }
  })

/**
 * Checks options over a base configuration (the {@link defaults} unless given): every option given
 * replaces the base's; an unknown key is refused, named.
 *
 * @since 0.2.0
 * @category constructors
 */
export const resolve = (
  options: WorkerOptions,
  base: ResolvedWorkerConfig = defaults
): Either.Either<ResolvedWorkerConfig, WorkerConfigError> =>
  Either.gen(function*() {
    // here, not only in Worker.make: WorkerConfig.layer({ shutdownTimeoutMs }) built the defaults
    const unknown = Options.unknownOption(options, KEYS, "worker")
    if (unknown !== undefined) return yield* fail(unknown.key, unknown.message)
    // finite: the orchestrator takes a worker that never beats for a dead one
    const heartbeatInterval = yield* duration("heartbeatInterval", options.heartbeatInterval, base.heartbeatInterval, {
      positive: true,
      finite: true
    })
    // `null` (which the option's type admits, meaning "absent") is not given, as `undefined` is: the
    // environment's or the default limit, not the resolver's fixed 1 beside the default's controller
    const concurrencyGiven = options.concurrency ?? undefined
    const concurrency = concurrencyGiven === undefined
      ? Either.right(base.concurrency)
      : Either.mapLeft(
        Concurrency.resolveEither(concurrencyGiven),
        (error) => new WorkerConfigError({ option: error.option, message: error.message })
      )
    return {
      workerId: (yield* nonBlank("workerId", options.workerId)) ?? base.workerId,
      buildId: (yield* nonBlank("buildId", options.buildId)) ?? base.buildId,
      concurrency: yield* concurrency,
      concurrencyOption: concurrencyGiven ?? base.concurrencyOption,
      workflowConcurrency: yield* positiveInt("workflowConcurrency", options.workflowConcurrency, base.workflowConcurrency),
      pollTimeout: yield* positive("pollTimeout", options.pollTimeout, base.pollTimeout),
      shutdownTimeout: yield* duration("shutdownTimeout", options.shutdownTimeout, base.shutdownTimeout),
      heartbeatInterval,
      interruptTimeout: yield* duration("interruptTimeout", options.interruptTimeout, base.interruptTimeout),
      pollRetryDelay: yield* duration("pollRetryDelay", options.pollRetryDelay, base.pollRetryDelay),
      metricsInterval: yield* positive("metricsInterval", options.metricsInterval, base.metricsInterval),
      health: yield* health(options.health, base.health),
      onTaskEnd: options.onTaskEnd === undefined
        ? base.onTaskEnd
        : typeof options.onTaskEnd === "function"
        ? options.onTaskEnd
        : yield* fail("onTaskEnd", `onTaskEnd must be a function, got ${typeof options.onTaskEnd}`),
      captureHistories: options.captureHistories === undefined
        ? base.captureHistories
        : yield* capture(options.captureHistories)
    }
  })

/**
 * Checks the `captureHistories` option: a directory or a callback, a sample rate from 0 to 1 and a
 * queue capacity of at least 1.
 */
const capture = (option: ReplayCapture.CaptureHistoriesOption) =>
  Either.gen(function*() {
    if (typeof option !== "object" || option === null) {
      return yield* fail("captureHistories", `captureHistories must be { directory } or { onCapture }, got ${Options.showValue(option)}`)
    }
    const { directory, onCapture } = option as unknown as Partial<Record<string, unknown>>
    // a mistyped sampleRate would otherwise record every turn, unnoticed
    const unknown = Options.unknownOption(option, CAPTURE_KEYS, "captureHistories")
    if (unknown !== undefined) return yield* fail(`captureHistories.${unknown.key}`, unknown.message)
    if ((directory === undefined) === (onCapture === undefined)) {
      return yield* fail("captureHistories", "captureHistories needs exactly one of directory (a path) and onCapture (a function)")
    }
    if (directory !== undefined && (typeof directory !== "string" || directory.trim() === "")) {
      return yield* fail("captureHistories.directory", "captureHistories.directory must be a non-empty path")
    }
    if (onCapture !== undefined && typeof onCapture !== "function") {
      return yield* fail("captureHistories.onCapture", `captureHistories.onCapture must be a function, got ${typeof onCapture}`)
    }
    // the sample rate and queue capacity as the capture layers check them
    yield* Either.mapLeft(
      ReplayCapture.checkOptions(option),
      (error) => new WorkerConfigError({ option: `captureHistories.${error.option}`, message: `captureHistories.${error.message}` })
    )
    return option
  })

/**
 * Refuses keys that are not options of `known`, naming the first one (the promise facade and the
 * transports check their option objects with it).
 *
 * @since 0.2.0
 * @category utils
 */
export const unknownKey: (options: object, known: ReadonlyArray<string>) => string | undefined = Options.unknownKey

/**
 * The names of {@link WorkerOptions}.
 *
 * @since 0.2.0
 * @category utils
 */
export const optionNames: ReadonlyArray<string> = KEYS

/**
 * A layer with these options over the {@link defaults}.
 *
 * @since 0.2.0
 * @category layers
 */
export const layer = (options: WorkerOptions = {}): Layer.Layer<WorkerConfig, WorkerConfigError> =>
  Layer.effect(WorkerConfig, resolve(options))

/** The variable {@link config} reads each option from, by the option's name. */
const VARIABLES = {
  workerId: "DURABLE_WORKER_ID",
  buildId: "DURABLE_BUILD_ID",
  concurrency: "DURABLE_CONCURRENCY",
  workflowConcurrency: "DURABLE_WORKFLOW_CONCURRENCY",
  pollTimeout: "DURABLE_POLL_TIMEOUT",
  shutdownTimeout: "DURABLE_SHUTDOWN_TIMEOUT",
  heartbeatInterval: "DURABLE_HEARTBEAT_INTERVAL",
  interruptTimeout: "DURABLE_INTERRUPT_TIMEOUT",
  pollRetryDelay: "DURABLE_POLL_RETRY_DELAY",
  metricsInterval: "DURABLE_METRICS_INTERVAL",
  "health.port": "DURABLE_HEALTH_PORT",
  "health.host": "DURABLE_HEALTH_HOST",
  "health.metrics": "DURABLE_HEALTH_METRICS"
} as const

/**
 * The options read from the environment, each optional: `DURABLE_WORKER_ID`, `DURABLE_BUILD_ID`,
 * `DURABLE_CONCURRENCY` (a number or `adaptive`), `DURABLE_WORKFLOW_CONCURRENCY`,
 * `DURABLE_POLL_TIMEOUT`, `DURABLE_SHUTDOWN_TIMEOUT`, `DURABLE_HEARTBEAT_INTERVAL`,
 * `DURABLE_INTERRUPT_TIMEOUT`, `DURABLE_POLL_RETRY_DELAY`, `DURABLE_METRICS_INTERVAL` (durations such
 * as `30 seconds` or `30s`), `DURABLE_HEALTH_PORT` (turns the probe server on), with
 * `DURABLE_HEALTH_HOST` (default `127.0.0.1`; `0.0.0.0` in a container, for the kubelet) and
 * `DURABLE_HEALTH_METRICS` (`true` serves `/metrics`).
 *
 * @since 0.2.0
 * @category config
 */
export const config: Config.Config<WorkerOptions> = Config.all({
  workerId: Options.optional(Config.string(VARIABLES.workerId)),
  buildId: Options.optional(Config.string(VARIABLES.buildId)),
  concurrency: Options.optional(
    Config.mapOrFail(
      Config.string(VARIABLES.concurrency),
      // "adaptive" in any case, as the option takes it; a number as every whole-number variable
      (text): Either.Either<number | "adaptive", ConfigError.ConfigError> =>
        text.trim().toLowerCase() === "adaptive"
          ? Either.right("adaptive")
          : Options.wholeNumber(text, 1, Number.MAX_SAFE_INTEGER, ' or "adaptive"')
    )
  ),
  workflowConcurrency: Options.optional(Options.wholeNumberConfig(VARIABLES.workflowConcurrency, 1)),
  pollTimeout: Options.optional(Options.durationConfig(VARIABLES.pollTimeout)),
  shutdownTimeout: Options.optional(Options.durationConfig(VARIABLES.shutdownTimeout)),
  heartbeatInterval: Options.optional(Options.durationConfig(VARIABLES.heartbeatInterval)),
  interruptTimeout: Options.optional(Options.durationConfig(VARIABLES.interruptTimeout)),
  pollRetryDelay: Options.optional(Options.durationConfig(VARIABLES.pollRetryDelay)),
  metricsInterval: Options.optional(Options.durationConfig(VARIABLES.metricsInterval)),
  health: Config.mapOrFail(
    Config.all({
      port: Options.optional(Options.wholeNumberConfig(VARIABLES["health.port"], 0, 65_535)),
      host: Options.optional(Config.string(VARIABLES["health.host"])),
      metrics: Options.optional(Config.boolean(VARIABLES["health.metrics"]))
    }),
    ({ port, ...rest }): Either.Either<HealthOptions | undefined, ConfigError.ConfigError> => {
      if (port !== undefined) return Either.right(Options.definedOnly({ port, ...rest }))
      // a host or /metrics asked for without the port that turns the server on would be ignored
      const without = ([["health.host", rest.host], ["health.metrics", rest.metrics]] as const)
        .filter(([, value]) => value !== undefined).map(([option]) => VARIABLES[option])
      return without.length === 0
        ? Either.right(undefined)
        : Either.left(ConfigError.InvalidData(
          [VARIABLES["health.port"]],
          `${without.join(" and ")} set without ${VARIABLES["health.port"]}, which turns the probe server on: set the port too`
        ))
    }
  )
}).pipe(Config.map(Options.definedOnly))

/**
 * A layer with the options read from `source` (the environment's {@link config} by default); the
 * options given here win over it.
 *
 * @since 0.2.0
 * @category layers
 */
export const layerConfig = (
  options: WorkerOptions = {},
  source: Config.Config<WorkerOptions> = config
): Layer.Layer<WorkerConfig, WorkerConfigError | ConfigError.ConfigError> =>
  Layer.effect(
    WorkerConfig,
    Effect.flatMap(source, (read) =>
      Either.mapLeft(resolve(Options.overRead(read, options)), (error) => {
        // refused as read from the environment: the message names the variable the operator set
        const top = error.option.split(".")[0]!
        const variable = (VARIABLES as Readonly<Record<string, string>>)[error.option]
        return variable !== undefined && top in read && (options as Readonly<Record<string, unknown>>)[top] === undefined
          ? new WorkerConfigError({ option: error.option, message: `${variable}: ${error.message}` })
          : error
      }))
  )

