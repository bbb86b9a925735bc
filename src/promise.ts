/**
 * The plain-promise facade: the whole worker without writing Effect code.
 *
 * ```ts
 * import { Worker, FatalError, inMemory } from "effect-durable-worker/promise"
 *
 * const worker = new Worker({ concurrency: 4, shutdownTimeoutMs: 30_000 })
 * worker.step("payments.charge-card", async (input, ctx) => ({ chargeId: "ch_1" }))
 * const running = worker.run(inMemory())
 * await worker.stop()
 * await running
 * ```
 *
 * It only wraps the Effect API (`Worker`, `Step`, the transport layers).
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import { identity } from "effect/Function"
import * as Either from "effect/Either"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Schedule from "effect/Schedule"
import type * as Schema from "effect/Schema"
import * as DurableWorkflow from "./core/DurableWorkflow.js"
import * as Step from "./core/Step.js"
import * as Workflow from "./core/Workflow.js"
import type { StepResult } from "./wire/StepProtocol.js"
import type { WorkflowDecision } from "./wire/WorkflowProtocol.js"
import * as NestDurableProtocol from "./protocol/NestDurableProtocol.js"
import * as EffectWorker from "./runtime/Worker.js"
import { TaskRejected, WorkerStateError } from "./runtime/WorkerError.js"
import { messageOf } from "./core/internal/errors.js"
import { showValue } from "./core/internal/options.js"
import type * as Concurrency from "./services/Concurrency.js"
import * as InMemoryTransport from "./transport/InMemoryTransport.js"
import type { NestReply } from "./transport/InMemoryTransport.js"
import { BULLMQ_PACKAGES, MYSQL_PACKAGES, POSTGRES_PACKAGES, SQS_PACKAGES } from "./transport/internal/drivers.js"
import type * as FacadeDurableWorkflow from "./facade/durableWorkflow.js"
import type { MysqlOptions, PostgresOptions, RedisOptions, SqsOptions } from "./facade/internal/transportOptions.js"
import { lazyHandle } from "./facade/internal/lazy.js"
import { withSignals } from "./facade/internal/signals.js"
import type { CaptureHistoriesOption } from "./facade/verify.js"
import * as WorkerLogger from "./runtime/WorkerLogger.js"
import {
  type MetricValue,
  type TelemetryOptions,
  telemetryLayer,
  workerMetrics
} from "./facade/internal/observability.js"
import type { TaskEnd } from "./runtime/WorkerConfig.js"
import type { WorkerStatus } from "./seam/Transport.js"
import {
  badOption,
  inFacadeTerms,
  layerOf,
  notOneOf,
  refuseUnknown,
  settle,
  settleSync,
  type TransportHandle
} from "./facade/internal/options.js"
import type { Transport } from "./seam/Transport.js"

export {
  ActivityCancelled,
  ActivityFailed,
  activityContext,
  ChildWorkflowFailed,
  param,
  rest,
  UpdateRejected,
  WorkflowDefinitionChanged
} from "./core/DurableWorkflow.js"
export type {
  ActivityContextShape as ActivityContext,
  AsyncWorkflowContext as DurableWorkflowContext,
  Declarations as DurableWorkflowDeclarations,
  GeneratorWorkflowContext as DurableWorkflowGeneratorContext
} from "./core/DurableWorkflow.js"
export { FatalError } from "./core/FatalError.js"
export { StepAborted } from "./core/internal/interruption.js"
export type { StepContext, StepLogger } from "./core/Step.js"
export type { AsyncWorkflowContext } from "./core/Workflow.js"
export { GatherFailed, NondeterminismError, StepFailed, UnsupportedInRemoteWorkflow } from "./core/Workflow.js"
export type { StepError, StepEvent, StepResult, StepTask } from "./wire/StepProtocol.js"
export type { WorkflowCommand, WorkflowDecision, WorkflowTask } from "./wire/WorkflowProtocol.js"
export type { NestReply } from "./transport/InMemoryTransport.js"
export type { TransportHandle } from "./facade/internal/options.js"
export {
  replay as replayDurableWorkflow,
  replayQuery as replayDurableWorkflowQuery,
  replayUpdate as replayDurableWorkflowUpdate
} from "./facade/durableWorkflowReplay.js"
export { replay as replayWorkflow } from "./facade/workflowReplay.js"
export { type CaptureHistoriesOption, verifyDirectory, verifyDurableWorkflows, verifyWorkflows } from "./facade/verify.js"
export type { MetricValue, TelemetryOptions } from "./facade/internal/observability.js"
export type { LoggerLike } from "./runtime/WorkerLogger.js"
export type { TaskEnd, TaskOutcome } from "./runtime/WorkerConfig.js"
export type { WorkerStatus } from "./seam/Transport.js"
export type {
  MysqlOptions,
  PostgresOptions,
  RedisConnectionOptions,
  RedisConnectionSettings,
  RedisOptions,
  SqsClientSettings,
  SqsOptions
} from "./facade/internal/transportOptions.js"
export type { DurableWorkflowHandle, DurableWorkflowOptions } from "./facade/durableWorkflow.js"
/**
 * The errors `run`, `stop`, the constructor and the registrations reject or throw with, as classes,
 * for `instanceof` (each also has its `_tag`). A transport's config error (an unknown or invalid
 * option of `redis()`, `postgres()`, …) is its module's, exported by its entry point with the
 * transport (`BullMQTransport.BullMQConfigError` from `effect-durable-worker/bullmq`,
 * `SqlTransport.SqlConfigError`, `SqsTransport.SqsConfigError`,
 * `DurableWorkflowTransport.DurableWorkflowConfigError`); its `_tag` tells it from here too.
 */
export { DuplicateStepError } from "./core/Step.js"
export { WorkerConfigError } from "./runtime/WorkerConfig.js"
export {
  HealthServerError,
  RunUntilTimeoutError,
  ShutdownTimeoutError,
  TaskRejected,
  WorkerLoopError,
  WorkerStateError
} from "./runtime/WorkerError.js"
export {
  AuthenticationError,
  DeregistrationError,
  PermissionError,
  RegistrationError,
  TransportError
} from "./seam/TransportError.js"
export { MissingDriverError } from "./transport/internal/drivers.js"
export { externalStorage, filesystemStorage, s3Storage } from "./facade/externalStorage.js"
export type {
  ExternalPayloadReference,
  ExternalStorageDriver,
  PayloadMetadata,
  PromiseExternalStorageDriver,
  S3Options,
  StoredPayload
} from "./transport/DurableWorkflowExternalStorage.js"

/**
 * Options of a promise-facade worker; durations in milliseconds. An unknown key is refused.
 *
 * @since 0.1.0
 * @category models
 */
export interface WorkerOptions {
  /** The worker's instance id. Default `ts-<hostname>-<pid>-<8 hex>`, new for each worker. */
  readonly workerId?: string | undefined
  /** The build id announced to orchestrators that route by it; not blank. Default none. */
  readonly buildId?: string | undefined
  /**
   * At most this many tasks at once (fixed; default 10), or `"adaptive"` / `{ min, max, start,
   * ramCeilingPct, ... }` for the latency-gradient controller with the memory admission gate.
   */
  readonly concurrency?: Concurrency.ConcurrencyOption | undefined
  /** At most this many workflow turns at once where the transport polls them separately. Default 10. */
  readonly workflowConcurrency?: number | undefined
  /** How long one poll waits for work. Default 35,000. */
  readonly pollTimeoutMs?: number | undefined
  /** One deadline for the drain at shutdown. Default 30,000. */
  readonly shutdownTimeoutMs?: number | undefined
  /** Overrides the transport's heartbeat interval; positive. Default the transport's. */
  readonly heartbeatIntervalMs?: number | undefined
  /**
   * How long an interrupted task may take to stop before shutdown reports it stuck, and how long the
   * deregistration may go unanswered before the stop fails. Default 5,000.
   */
  readonly interruptTimeoutMs?: number | undefined
  /**
   * Stop gracefully on SIGTERM/SIGINT while running (a second signal forces the stop: running work
   * is interrupted at once), then end the process (exit code 0, or 1 when a run failed) once every
   * worker of the process has drained. A signal the application listens for itself (NestJS's
   * `enableShutdownHooks()`, its own `process.on`) is left to it: call `worker.stop()` from that
   * handler. Default true.
   */
  readonly handleSignals?: boolean | undefined
  /** Minimum level of the worker's own logs. Default "Info". */
  readonly logLevel?: "All" | "Trace" | "Debug" | "Info" | "Warning" | "Error" | "Fatal" | "None" | undefined
  /**
   * Where the worker's logs go: any object with `info` (or `log`), `warn`, `error` and `debug` —
   * `console`, pino, NestJS's `Logger`. Fields (run, step, attempt, a failure's cause) follow the
   * message (pino-style loggers, with `bindings()`, get them first). Default Effect's logger (stdout).
   */
  readonly logger?: WorkerLogger.LoggerLike | undefined
  /** Told of every task as it ends: kind, name, outcome, duration, poller, delivery id. Default none. */
  readonly onTaskEnd?: ((event: TaskEnd) => void) | undefined
  /**
   * The probe server: `/livez`, `/readyz`, and `/metrics` (Prometheus text) with `metrics: true`.
   * Needs the optional peer `@effect/platform-node`. Default off.
   */
  readonly health?: {
    readonly port: number
    /** Default `127.0.0.1` (`0.0.0.0` in a container). */
    readonly host?: string | undefined
    readonly metrics?: boolean | undefined
    /** How late the event loop may wake up before `/livez` answers 503. Default 1,000. */
    readonly loopDelayThresholdMs?: number | undefined
  } | undefined
  /**
   * Record a sampled share of the workflow turns this worker replays, for `verify` in CI: to a
   * directory (`{ directory, sampleRate }`, one file per run) or a callback (`{ onCapture, sampleRate }`).
   * Default none.
   */
  readonly captureHistories?: CaptureHistoriesOption | undefined
  /** How often the saturation, backlog and slot gauges are sampled. Default 5,000. */
  readonly metricsIntervalMs?: number | undefined
  /**
   * OpenTelemetry export of the worker's spans (one per task, continuing its `traceparent`) and
   * metrics: span processors and metric readers of the OTel SDK. Default none.
   */
  readonly telemetry?: TelemetryOptions | undefined
}

/**
 * Options of a step: `Schema`s for its input and output. An unknown key is refused.
 *
 * @since 0.1.0
 * @category models
 */
export interface StepOptions<I, O> {
  /** Decodes the input before the handler runs. Default none (the input as it came). */
  readonly input?: Schema.Schema<I, any>
  /** Encodes the output before it goes on the wire. Default none (the output as returned). */
  readonly output?: Schema.Schema<O, any>
}

/**
 * When `runUntil` should stop: a promise that settles, or a predicate polled every `pollIntervalMs`.
 * An unknown key is refused.
 *
 * @since 0.1.0
 * @category models
 */
export interface RunUntilOptions {
  readonly until: PromiseLike<unknown> | (() => boolean | PromiseLike<boolean>)
  /** Default 500. */
  readonly pollIntervalMs?: number | undefined
  /** Stop and reject with `RunUntilTimeoutError` after this long. Default none. */
  readonly timeoutMs?: number | undefined
}

const WORKER_KEYS: ReadonlyArray<keyof WorkerOptions> = [
  "workerId",
  "buildId",
  "concurrency",
  "workflowConcurrency",
  "pollTimeoutMs",
  "shutdownTimeoutMs",
  "heartbeatIntervalMs",
  "interruptTimeoutMs",
  "handleSignals",
  "logLevel",
  "logger",
  "onTaskEnd",
  "health",
  "metricsIntervalMs",
  "telemetry",
  "captureHistories"
]

const LOG_LEVELS: ReadonlyArray<NonNullable<WorkerOptions["logLevel"]>> = [
  "All",
  "Trace",
  "Debug",
  "Info",
  "Warning",
  "Error",
  "Fatal",
  "None"
]

const STEP_KEYS: ReadonlyArray<keyof StepOptions<unknown, unknown>> = ["input", "output"]

const RUN_UNTIL_KEYS: ReadonlyArray<keyof RunUntilOptions> = ["until", "pollIntervalMs", "timeoutMs"]

const HEALTH_KEYS: ReadonlyArray<keyof NonNullable<WorkerOptions["health"]>> = ["port", "host", "metrics", "loopDelayThresholdMs"]

/** An unknown key of the `health` object, named as its option (`health.<key>`). */
const unknownHealthOption = (health: unknown) => {
  const unknown = typeof health === "object" && health !== null ? badOption(health, HEALTH_KEYS, "health") : undefined
  return unknown === undefined ? undefined : { key: `health.${unknown.key}`, message: unknown.message }
}

const TELEMETRY_KEYS: ReadonlyArray<keyof TelemetryOptions> = ["serviceName", "spanProcessors", "metricReaders"]

const isFunction = (value: unknown): boolean => typeof value === "function"

/**
 * What the facade's own options (those the Effect API does not check) cannot be, from JavaScript:
 * each would otherwise be taken for something else in silence — `handleSignals: "false"` as true, a
 * logger without `warn` or `error` dropping those lines, `telemetry: { spanProcessor }` (the SDK's
 * own key) exporting nothing.
 */
const facadeOption = (options: WorkerOptions): { readonly option: string; readonly message: string } | undefined => {
  const { handleSignals, logger, telemetry } = options
  if (handleSignals !== undefined && typeof handleSignals !== "boolean") {
    return { option: "handleSignals", message: `handleSignals must be true or false, got ${showValue(handleSignals)}` }
  }
  if (logger !== undefined) {
    // info (or log) and debug are optional: their lines go to warn, then
    const target = logger as unknown as Record<string, unknown> | null
    const missing = typeof target !== "object" || target === null
      ? ["warn", "error"]
      : ["warn", "error"].filter((method) => !isFunction(target[method]))
    if (missing.length > 0) {
      return {
        option: "logger",
        message: `logger must have the methods warn and error (and info or log), as console, pino and NestJS's Logger do; ${
          typeof target === "object" && target !== null ? `it has no ${missing.join(", no ")}` : `got ${showValue(logger)}`
        }`
      }
    }
  }
  if (telemetry !== undefined) {
    if (typeof telemetry !== "object" || telemetry === null) {
      return { option: "telemetry", message: `telemetry must be an object such as { spanProcessors: [...] }, got ${showValue(telemetry)}` }
    }
    const unknown = badOption(telemetry, TELEMETRY_KEYS, "telemetry")
    if (unknown !== undefined) return { option: `telemetry.${unknown.key}`, message: unknown.message }
    for (const key of ["spanProcessors", "metricReaders"] as const) {
      if (telemetry[key] !== undefined && !Array.isArray(telemetry[key])) {
        return { option: `telemetry.${key}`, message: `telemetry.${key} must be an array, got ${showValue(telemetry[key])}` }
      }
    }
  }
  return undefined
}

const toEffectOptions = (options: WorkerOptions): EffectWorker.WorkerOptions => ({
  ...(options.workerId === undefined ? {} : { workerId: options.workerId }),
  ...(options.buildId === undefined ? {} : { buildId: options.buildId }),
  ...(options.concurrency === undefined ? {} : { concurrency: options.concurrency }),
  ...(options.workflowConcurrency === undefined ? {} : { workflowConcurrency: options.workflowConcurrency }),
  ...(options.pollTimeoutMs === undefined ? {} : { pollTimeout: options.pollTimeoutMs }),
  ...(options.shutdownTimeoutMs === undefined ? {} : { shutdownTimeout: options.shutdownTimeoutMs }),
  ...(options.heartbeatIntervalMs === undefined ? {} : { heartbeatInterval: options.heartbeatIntervalMs }),
  ...(options.interruptTimeoutMs === undefined ? {} : { interruptTimeout: options.interruptTimeoutMs }),
  ...(options.onTaskEnd === undefined ? {} : { onTaskEnd: options.onTaskEnd }),
  ...(options.metricsIntervalMs === undefined ? {} : { metricsInterval: options.metricsIntervalMs }),
  ...(options.captureHistories === undefined ? {} : { captureHistories: options.captureHistories }),
  // anything but an object goes as given, for the Effect API to refuse it as it is
  ...(options.health === undefined ? {} : typeof options.health !== "object" || options.health === null ? {
    health: options.health as never
  } : {
    health: {
      port: options.health.port,
      ...(options.health.host === undefined ? {} : { host: options.health.host }),
      ...(options.health.metrics === undefined ? {} : { metrics: options.health.metrics }),
      ...(options.health.loopDelayThresholdMs === undefined ? {} : { loopDelayThreshold: options.health.loopDelayThresholdMs })
    }
  })
})

/**
 * A worker. Register steps with {@link Worker.step}, then {@link Worker.run} it on a transport.
 *
 * @since 0.1.0
 * @category constructors
 */
export class Worker {
  readonly #options: WorkerOptions
  readonly #steps: Array<Step.Step> = []
  readonly #workflows: Array<Workflow.Workflow> = []
  readonly #durableWorkflows: Array<DurableWorkflow.DurableWorkflow> = []
  #worker: EffectWorker.Worker | undefined
  /** Settles once a requested run has claimed the worker (or failed before), so a stop() issued
   * right after run() applies to that run instead of preventing it. */
  #runClaimed: Promise<void> = Promise.resolve()
  /** Why a run failed before it claimed the worker (its transport could not be built): the worker
   * then reports `failed` with it, as a failure after the claim would, and runs no more. */
  #startFailure: string | undefined
  /** Why a later run is refused at once, without building its transport: a worker runs once. */
  #refusal: WorkerStateError["reason"] | undefined

  /** Throws a `WorkerConfigError` naming the option when one is unknown or invalid. */
  constructor(options: WorkerOptions = {}) {
    this.#options = options
    // validate now, so a bad option fails where it is written rather than at run()
    const unknown = badOption(options, WORKER_KEYS, "Worker") ?? unknownHealthOption(options.health)
    if (unknown !== undefined) throw new EffectWorker.WorkerConfigError({ option: unknown.key, message: unknown.message })
    // the type names the levels; from JavaScript anything comes, and Effect would crash on it at the first log
    const level = options.logLevel === undefined ? undefined : notOneOf(options.logLevel, LOG_LEVELS, "logLevel")
    if (level !== undefined) throw new EffectWorker.WorkerConfigError({ option: "logLevel", message: level })
    const refused = facadeOption(options)
    if (refused !== undefined) throw new EffectWorker.WorkerConfigError(refused)
    settleSync(Effect.mapError(
      EffectWorker.make({ ...toEffectOptions(options), steps: [] }),
      (error) => inFacadeTerms(inFacadeTerms(error, WORKER_KEYS), HEALTH_KEYS, "health.")
    ))
  }

  /** The worker's instance id. */
  get id(): string {
    return this.#build().id
  }

  /**
   * Registers a step handler under the name the engine dispatches (`task.name`); throws a
   * `TypeError` naming an unknown key of `options`.
   */
  step<I = any, O = unknown>(
    name: string,
    handler: (input: I, ctx: Step.StepContext) => Promise<O> | O,
    options?: StepOptions<I, O>
  ): this {
    this.#refuse("step", name, handler, this.#steps)
    refuseUnknown(options, STEP_KEYS, `step "${name}"`)
    this.#steps.push(Step.fromPromise(name, handler, options))
    return this
  }

  /**
   * Registers a coordinator-driven workflow: the engine sends its history each turn, the body is
   * replayed deterministically and the commands it produced go back as a decision. The body may only
   * await `ctx` operations (`ctx.step`, `ctx.sleep`, `ctx.waitForSignal`, `ctx.child`, `ctx.gather`,
   * `ctx.now`, `ctx.sideEffect`, …) and what is built on them. `options.version` (default none)
   * versions the body; an unknown key of `options` throws a `TypeError` naming it.
   */
  workflow<I = any, O = unknown>(
    name: string,
    body: (ctx: Workflow.AsyncWorkflowContext, input: I) => O | PromiseLike<O>,
    options?: { readonly version?: string }
  ): this {
    this.#refuse("workflow", name, body, this.#workflows)
    refuseUnknown(options, ["version"], `workflow "${name}"`)
    this.#workflows.push(Workflow.fromPromise(name, body, options))
    return this
  }

  /**
   * Registers a Durable Workflow activity: an async function of the activity's positional
   * arguments; its context (info, `heartbeat(details)`, `signal`) is `activityContext()`.
   */
  activity<Args extends Array<any>>(name: string, handler: (...args: Args) => unknown): this {
    this.#refuse("activity", name, handler, this.#steps)
    this.#steps.push(DurableWorkflow.activityFromPromise(name, handler))
    return this
  }

  /**
   * Registers a Durable Workflow workflow whose body is an async function awaiting `ctx`
   * operations. `declarations` (signals, queries, updates with their parameters — see `param` —
   * and `updateValidators`) type the `ctx.on…` handlers and are advertised to the server. With an
   * explicit `workerId`, a changed definition of a workflow type this process already registered
   * under that id throws `WorkflowDefinitionChanged` here (restart the process to change it).
   */
  durableWorkflow<Args extends Array<any>, const D extends DurableWorkflow.Declarations = {}>(
    name: string,
    body: (ctx: DurableWorkflow.AsyncWorkflowContext<D>, ...args: Args) => Promise<unknown>,
    declarations?: D
  ): this {
    this.#refuse("workflow", name, body, this.#durableWorkflows, "durable workflow")
    return this.#addDurableWorkflow(DurableWorkflow.fromAsync(name, body, declarations))
  }

  /** Registers a Durable Workflow workflow whose body is a generator yielding `ctx` operations (`declarations` as for {@link Worker.durableWorkflow}). */
  durableWorkflowGenerator<Args extends Array<any>, const D extends DurableWorkflow.Declarations = {}>(
    name: string,
    body: (
      ctx: DurableWorkflow.GeneratorWorkflowContext<D>,
      ...args: Args
    ) => Generator<DurableWorkflow.Op | ReadonlyArray<DurableWorkflow.Op>, unknown, any>,
    declarations?: D
  ): this {
    this.#refuse("workflow", name, body, this.#durableWorkflows, "durable workflow")
    return this.#addDurableWorkflow(DurableWorkflow.fromGenerator(name, body, declarations))
  }

  /**
   * Throws unless a `kind` named `name` with `handler` can be registered now: a name, a function, a
   * worker not started yet, a name not taken (else a `DuplicateStepError`, as from the Effect API).
   * From JavaScript, `step("a")` would otherwise fail every task of "a" as retryable, for ever.
   */
  #refuse(
    kind: "step" | "workflow" | "activity",
    name: unknown,
    handler: unknown,
    registered: ReadonlyArray<{ readonly name: string }>,
    registeredAs: Step.DuplicateStepError["kind"] = kind
  ): void {
    if (typeof name !== "string" || name === "") {
      throw new TypeError(`a ${kind} needs a name, a non-empty string; got ${typeof name === "string" ? "\"\"" : typeof name}`)
    }
    if (typeof handler !== "function") {
      throw new TypeError(`${kind} "${name}" needs its ${kind === "workflow" ? "body" : "handler"}, a function; got ${typeof handler}`)
    }
    if (this.#worker !== undefined) throw new Error(`cannot register ${kind} "${name}": the worker has already started`)
    if (registered.some((other) => other.name === name)) throw new Step.DuplicateStepError({ kind: registeredAs, registeredName: name })
  }

  #addDurableWorkflow(definition: DurableWorkflow.DurableWorkflow): this {
    if (this.#options.workerId !== undefined) {
      const guarded = DurableWorkflow.guardDefinitions(this.#options.workerId, [definition])
      if (Either.isLeft(guarded)) throw guarded.left
    }
    this.#durableWorkflows.push(definition)
    return this
  }

  /**
   * Registers, then takes and runs tasks until {@link Worker.stop} (or SIGTERM/SIGINT), drains and
   * deregisters. Rejects with the transport's config error (an unknown or invalid option of the
   * transport function), the registration error, a worker-loop error (with any shutdown error as its
   * `cause`), or the shutdown error. A worker runs once: after a failed run, even one that failed
   * before connecting (a config error, a missing driver, a broker that does not answer), `status()`
   * reports `failed` with the reason and a second `run` rejects with a `WorkerStateError`.
   */
  run(transport: TransportHandle): Promise<void> {
    return this.#withSignals(this.#provide(this.#build().run, transport))
  }

  /**
   * Runs until `until` settles / returns true (then stops and resolves), `until` throws or rejects
   * (then stops and rejects with that error), or `timeoutMs` passes (then stops and rejects with
   * `RunUntilTimeoutError`). An external {@link Worker.stop} makes it
   * reject with an interruption once accepted work has drained. Rejects with a `TypeError` naming
   * an unknown key of `options`, before anything runs.
   */
  runUntil(transport: TransportHandle, options: RunUntilOptions): Promise<void> {
    const unknown = badOption(options, RUN_UNTIL_KEYS, "runUntil")
    if (unknown !== undefined) return Promise.reject(new TypeError(unknown.message))
    const { until } = options
    // anything else would be awaited as a value already there: the worker stopped at once
    if (typeof until !== "function" && typeof (until as { then?: unknown } | null)?.then !== "function") {
      return Promise.reject(
        new TypeError(`runUntil's until must be a function (asked every pollIntervalMs) or a promise, got ${showValue(until)}`)
      )
    }
    if (options.pollIntervalMs === 0) {
      return Promise.reject(new TypeError("runUntil's pollIntervalMs must be more than 0: until() would be asked without a pause"))
    }
    const condition = typeof until === "function"
      ? Effect.promise(async () => until()).pipe(
        Effect.repeat({ until: (done) => done, schedule: Schedule.spaced(options.pollIntervalMs ?? 500) })
      )
      : Effect.promise(() => Promise.resolve(until))
    return this.#withSignals(
      this.#provide(
        Effect.asVoid(
          this.#build().runUntil(
            condition,
            options.timeoutMs === undefined ? undefined : { timeout: options.timeoutMs }
          )
        ),
        transport
      )
    )
  }

  /**
   * Stops the worker: pollers first, then accepted work drains within `shutdownTimeoutMs`, then one
   * deregistration. Single-flight: every call shares one outcome; rejects with the deregistration
   * error, if any.
   */
  async stop(): Promise<void> {
    await this.#runClaimed
    // a start that failed left nothing running and nothing registered
    if (this.#startFailure !== undefined) return
    return settle(this.#build().stop)
  }

  /**
   * Like {@link Worker.stop}, but running work is interrupted at once. A handler that ignores its
   * signal is waited for up to `interruptTimeoutMs`, then named: the stop rejects with a
   * `ShutdownTimeoutError` and its task is not given back while it may still run.
   */
  async forceStop(): Promise<void> {
    await this.#runClaimed
    if (this.#startFailure !== undefined) return
    return settle(this.#build().forceStop)
  }

  /** Where the worker is in its life (`state`, and `failure` once it failed), its concurrency and slots per pool, as heartbeats report it. */
  status(): Promise<WorkerStatus> {
    return settle(Effect.map(this.#build().status, (status) =>
      this.#startFailure === undefined ? status : { ...status, state: "failed" as const, failure: this.#startFailure }))
  }

  /** The worker metrics of this process (`durable_worker_*`, as the README lists them), as plain values. */
  metrics(): Promise<ReadonlyArray<MetricValue>> {
    return settle(workerMetrics("durable_worker_"))
  }

  /** Runs one task payload without a broker: a step result for a step task, a decision for a turn. */
  processTask(task: unknown): Promise<StepResult | WorkflowDecision> {
    const worker = this.#build()
    return settle(this.#observed(
      Effect.flatMap(NestDurableProtocol.processPayload(worker.handlers, task), (outcome) =>
        outcome._tag === "Reject"
          ? Effect.fail(new TaskRejected({ reason: outcome.reason }))
          : Effect.succeed(outcome.reply._tag === "StepResult" ? outcome.reply.result : outcome.reply.decision))
    ))
  }

  #build(): EffectWorker.Worker {
    this.#worker ??= settleSync(
      EffectWorker.make({
        ...toEffectOptions(this.#options),
        steps: this.#steps,
        workflows: this.#workflows,
        durableWorkflows: this.#durableWorkflows
      })
    )
    return this.#worker
  }

  #provide<A, E>(effect: Effect.Effect<A, E, Transport>, transport: TransportHandle): Effect.Effect<A, unknown> {
    // refused before its transport is built: a failure of that build must not pass for the run's own
    // (its stop and status would then take the live run for a failed start)
    if (this.#refusal !== undefined) return Effect.fail(new WorkerStateError({ reason: this.#refusal }))
    this.#refusal = "already-running"
    let claimed!: () => void
    let reached = false
    this.#runClaimed = new Promise((resolve) => (claimed = resolve))
    // the layer is built first (connections); the run claims the worker right after, in the same step
    const { telemetry } = this.#options
    return this.#observed(Effect.zipRight(Effect.sync(() => (reached = true, claimed())), effect).pipe(
      Effect.provide(layerOf(transport)),
      // telemetry outlives the run's spans: the SDK flushes when its layer closes, after the drain
      telemetry === undefined ? identity : Effect.provide(telemetryLayer(telemetry)),
      Effect.tapErrorCause((cause) =>
        Effect.sync(() => {
          if (!reached && !Cause.isInterruptedOnly(cause)) this.#startFailure = messageOf(Cause.squash(cause))
          // a stop before the run refused it: so it refuses every later run
          const refused = Cause.squash(cause)
          if (refused instanceof WorkerStateError && refused.reason === "stopped") this.#refusal = "stopped"
        })
      ),
      Effect.ensuring(Effect.sync(() => claimed()))
    ))
  }

  /** `effect` logging through the `logger` and `logLevel` options. */
  #observed<A, E>(effect: Effect.Effect<A, E>): Effect.Effect<A, E> {
    const { logger } = this.#options
    return effect.pipe(
      logger === undefined ? identity : Effect.provide(WorkerLogger.layer(logger)),
      Logger.withMinimumLogLevel(LogLevel.fromLiteral(this.#options.logLevel ?? "Info"))
    )
  }

  #withSignals(effect: Effect.Effect<void, unknown>): Promise<void> {
    if (this.#options.handleSignals === false) return settle(effect)
    return withSignals({
      stop: () => this.stop(),
      forceStop: () => this.forceStop(),
      log: (level, message) =>
        Effect.runSync(this.#observed(level === "Info" ? Effect.logInfo(message) : Effect.logWarning(message)))
    }, () => settle(effect))
  }
}

/**
 * The in-memory broker as a transport handle, with promise controls to feed it tasks and read the
 * replies (tests, demos).
 *
 * @since 0.1.0
 * @category models
 */
export interface InMemoryHandle extends TransportHandle {
  readonly enqueue: (task: unknown) => Promise<void>
  readonly takeReply: () => Promise<NestReply>
  readonly replies: () => Promise<ReadonlyArray<NestReply>>
  readonly pending: () => Promise<number>
  readonly cancel: (runId: string) => Promise<void>
  /** The Effect broker behind this handle, with its fault switches. */
  readonly broker: InMemoryTransport.InMemoryBroker
}

/**
 * An in-process transport: no server needed. `heartbeatIntervalMs` defaults to 10,000; an unknown
 * key throws a `TypeError` naming it.
 *
 * @since 0.1.0
 * @category transports
 */
export const inMemory = (options?: { readonly heartbeatIntervalMs?: number | undefined }): InMemoryHandle => {
  refuseUnknown(options, ["heartbeatIntervalMs"], "inMemory()")
  const broker = settleSync(Effect.mapError(
    InMemoryTransport.make(options?.heartbeatIntervalMs === undefined ? {} : { heartbeatInterval: options.heartbeatIntervalMs }),
    (error) => inFacadeTerms(error, ["heartbeatIntervalMs"])
  ))
  return {
    broker,
    layer: broker.layer,
    enqueue: (task) => Effect.runPromise(broker.enqueue(task)),
    takeReply: () => Effect.runPromise(broker.takeReply),
    replies: () => Effect.runPromise(broker.replies),
    pending: () => Effect.runPromise(broker.pending),
    cancel: (runId) => Effect.runPromise(broker.cancel(runId))
  }
}

/**
 * The Redis/BullMQ transport of the nestjs-durable engine (also `redis` in
 * `effect-durable-worker/bullmq`). Its drivers, `bullmq` and `ioredis`, are loaded when a run starts:
 * when they are not installed, `run` rejects with a `MissingDriverError` that names them. An unknown
 * or invalid option makes `run` reject with a `BullMQConfigError` naming it, before anything connects.
 *
 * @since 0.1.0
 * @category transports
 */
export const redis = (options: RedisOptions = {}): TransportHandle =>
  lazyHandle(() => import("./facade/bullmq.js"), BULLMQ_PACKAGES, "Redis/BullMQ", (module) => module.redis(options))

/**
 * The SQS transport of the nestjs-durable engine (also `sqs` in `effect-durable-worker/sqs`), on
 * `@aws-sdk/client-sqs` v3, loaded when a run starts (a `MissingDriverError` names it when it is not
 * installed). Queue names, bodies and the results queue are the engine's SQS transport's; names the
 * SQS rules refuse (`.`, `@`) are refused at start unless `taskQueueUrl` maps them. An unknown or
 * invalid option makes `run` reject with an `SqsConfigError` naming it, before any request (client
 * settings such as `endpoint` and `region` go in `clientConfig`).
 *
 * @since 0.1.0
 * @category transports
 */
export const sqs = (options: SqsOptions = {}): TransportHandle =>
  lazyHandle(() => import("./facade/sqs.js"), SQS_PACKAGES, "SQS", (module) => module.sqs(options))

/**
 * The database transport of the nestjs-durable engine on PostgreSQL (also `postgres` in
 * `effect-durable-worker/postgres`): the engine's own tables, claims with `FOR UPDATE SKIP LOCKED`,
 * leases renewed while a step runs, `LISTEN/NOTIFY` wake-ups. `url` defaults to
 * `process.env.DATABASE_URL`. Its drivers (`pg`, `@effect/sql`, `@effect/sql-pg`,
 * `@effect/experimental`) are loaded when a run starts; a `MissingDriverError` names the missing ones.
 *
 * @since 0.1.0
 * @category transports
 */
export const postgres = (options: PostgresOptions = {}): TransportHandle =>
  lazyHandle(() => import("./facade/postgres.js"), POSTGRES_PACKAGES, "PostgreSQL", (module) => module.postgres(options))

/**
 * The database transport of the nestjs-durable engine on MySQL 8 / MariaDB (also `mysql` in
 * `effect-durable-worker/mysql`). `url` defaults to `process.env.DATABASE_URL`. Its drivers
 * (`mysql2`, `@effect/sql`, `@effect/sql-mysql2`, `@effect/experimental`) are loaded when a run
 * starts; a `MissingDriverError` names the missing ones.
 *
 * @since 0.1.0
 * @category transports
 */
export const mysql = (options: MysqlOptions = {}): TransportHandle =>
  lazyHandle(() => import("./facade/mysql.js"), MYSQL_PACKAGES, "MySQL/MariaDB", (module) => module.mysql(options))

/**
 * A Durable Workflow server (worker protocol 1.1 over HTTP; also `durableWorkflow` in
 * `effect-durable-worker/durable-workflow`): activities, workflow tasks replayed from history, query
 * tasks, with control-plane helpers. Loaded when first used. An unknown or invalid option makes
 * `run` (and the control-plane helpers) reject with a `DurableWorkflowConfigError` naming it.
 *
 * @since 0.1.0
 * @category transports
 */
export const durableWorkflow = (options: FacadeDurableWorkflow.DurableWorkflowOptions): FacadeDurableWorkflow.DurableWorkflowHandle => {
  let loaded: Promise<FacadeDurableWorkflow.DurableWorkflowHandle> | undefined
  const handle = () => (loaded ??= import("./facade/durableWorkflow.js").then((module) => module.durableWorkflow(options)))
  return {
    ...lazyHandle(handle, [], "Durable Workflow", (loadedHandle) => loadedHandle),
    workflowTerminal: (workflowId) => async () => (await handle()).workflowTerminal(workflowId)(),
    deregisterWorker: async (workerId) => (await handle()).deregisterWorker(workerId)
  }
}
