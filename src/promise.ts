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
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
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
import { unknownKey } from "./runtime/WorkerConfig.js"
import { TaskRejected } from "./runtime/WorkerError.js"
import type * as Concurrency from "./services/Concurrency.js"
import * as BullMQTransport from "./transport/BullMQTransport.js"
import * as DurableWorkflowExternalStorage from "./transport/DurableWorkflowExternalStorage.js"
import * as DurableWorkflowTransport from "./transport/DurableWorkflowTransport.js"
import * as InMemoryTransport from "./transport/InMemoryTransport.js"
import * as SqlTransport from "./transport/SqlTransport.js"
import * as SqsTransport from "./transport/SqsTransport.js"
import type { NestReply } from "./transport/InMemoryTransport.js"
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
export type { StepContext, StepLogger } from "./core/Step.js"
export type { AsyncWorkflowContext } from "./core/Workflow.js"
export { GatherFailed, NondeterminismError, StepFailed, UnsupportedInRemoteWorkflow } from "./core/Workflow.js"
export type { StepError, StepEvent, StepResult, StepTask } from "./wire/StepProtocol.js"
export type { WorkflowCommand, WorkflowDecision, WorkflowTask } from "./wire/WorkflowProtocol.js"
export type { NestReply } from "./transport/InMemoryTransport.js"
export type {
  ExternalPayloadReference,
  ExternalStorageDriver,
  PayloadMetadata,
  PromiseExternalStorageDriver,
  S3Options,
  StoredPayload
} from "./transport/DurableWorkflowExternalStorage.js"

/**
 * A broker to run a worker on: what `inMemory()`, `redis(...)` and the other transport functions
 * return.
 *
 * @since 0.1.0
 * @category models
 */
export interface TransportHandle {
  readonly layer: Layer.Layer<Transport, unknown>
}

/**
 * Options of a promise-facade worker; durations in milliseconds. An unknown key is refused.
 *
 * @since 0.1.0
 * @category models
 */
export interface WorkerOptions {
  /** The worker's instance id. Default `ts-<hostname>-<pid>-<8 hex>`, new for each worker. */
  readonly workerId?: string
  /** The build id announced to orchestrators that route by it; not blank. Default none. */
  readonly buildId?: string
  /**
   * At most this many tasks at once (fixed; default 10), or `"adaptive"` / `{ min, max, start,
   * ramCeilingPct, ... }` for the latency-gradient controller with the memory admission gate.
   */
  readonly concurrency?: Concurrency.ConcurrencyOption
  /** At most this many workflow turns at once where the transport polls them separately. Default 10. */
  readonly workflowConcurrency?: number
  /** How long one poll waits for work. Default 35,000. */
  readonly pollTimeoutMs?: number
  /** One deadline for the drain at shutdown. Default 30,000. */
  readonly shutdownTimeoutMs?: number
  /** Overrides the transport's heartbeat interval; positive. Default the transport's. */
  readonly heartbeatIntervalMs?: number
  /** How long an interrupted task may take to stop before shutdown reports it stuck. Default 5,000. */
  readonly interruptTimeoutMs?: number
  /**
   * Stop gracefully on SIGTERM/SIGINT while running (a second signal forces the stop: running work
   * is interrupted at once). Default true.
   */
  readonly handleSignals?: boolean
  /** Minimum level of the worker's own logs. Default "Info". */
  readonly logLevel?: "All" | "Trace" | "Debug" | "Info" | "Warning" | "Error" | "Fatal" | "None"
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
  readonly pollIntervalMs?: number
  /** Stop and reject with `RunUntilTimeoutError` after this long. Default none. */
  readonly timeoutMs?: number
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
  "logLevel"
]

const STEP_KEYS: ReadonlyArray<keyof StepOptions<unknown, unknown>> = ["input", "output"]

const RUN_UNTIL_KEYS: ReadonlyArray<keyof RunUntilOptions> = ["until", "pollIntervalMs", "timeoutMs"]

/**
 * The first key of `options` not in `known`, with why it is refused: the key named, with its
 * milliseconds form when that is the option meant, and the options there are.
 */
const unknownOption = (
  options: object | undefined,
  known: ReadonlyArray<string>,
  what: string
): { readonly key: string; readonly message: string } | undefined => {
  const key = options === undefined ? undefined : unknownKey(options, known)
  if (key === undefined) return undefined
  const millis = `${key}Ms`
  const hint = known.includes(millis) ? ` (durations are in milliseconds here: ${millis})` : ""
  return { key, message: `unknown ${what} option "${key}"${hint}; the options are ${known.join(", ")}` }
}

/** Throws a `TypeError` naming an unknown key of `options`. */
const refuseUnknown = (options: object | undefined, known: ReadonlyArray<string>, what: string): void => {
  const unknown = unknownOption(options, known, what)
  if (unknown !== undefined) throw new TypeError(unknown.message)
}

/** `layer()`, or, when `options` has an unknown key, a layer that fails with `error` when a run builds it. */
const refusingUnknown = <ROut, E>(
  options: object,
  known: ReadonlyArray<string>,
  what: string,
  error: (unknown: { readonly key: string; readonly message: string }) => E,
  layer: () => Layer.Layer<ROut, E>
): Layer.Layer<ROut, E> => {
  const unknown = unknownOption(options, known, what)
  return unknown === undefined ? layer() : Layer.unwrapEffect(Effect.fail(error(unknown)))
}

const toEffectOptions = (options: WorkerOptions): EffectWorker.WorkerOptions => ({
  ...(options.workerId === undefined ? {} : { workerId: options.workerId }),
  ...(options.buildId === undefined ? {} : { buildId: options.buildId }),
  ...(options.concurrency === undefined ? {} : { concurrency: options.concurrency }),
  ...(options.workflowConcurrency === undefined ? {} : { workflowConcurrency: options.workflowConcurrency }),
  ...(options.pollTimeoutMs === undefined ? {} : { pollTimeout: options.pollTimeoutMs }),
  ...(options.shutdownTimeoutMs === undefined ? {} : { shutdownTimeout: options.shutdownTimeoutMs }),
  ...(options.heartbeatIntervalMs === undefined ? {} : { heartbeatInterval: options.heartbeatIntervalMs }),
  ...(options.interruptTimeoutMs === undefined ? {} : { interruptTimeout: options.interruptTimeoutMs })
})

/** Runs an effect and settles with its value, or rejects with its error itself (not a wrapper). */
const settle = async <A, E>(effect: Effect.Effect<A, E>): Promise<A> => {
  const exit = await Effect.runPromiseExit(effect)
  if (Exit.isSuccess(exit)) return exit.value
  throw Cause.squash(exit.cause)
}

/** Runs a synchronous effect, throwing its error itself (not a wrapper). */
const settleSync = <A, E>(effect: Effect.Effect<A, E>): A => {
  const exit = Effect.runSyncExit(effect)
  if (Exit.isSuccess(exit)) return exit.value
  throw Cause.squash(exit.cause)
}

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

  /** Throws a `WorkerConfigError` naming the option when one is unknown or invalid. */
  constructor(options: WorkerOptions = {}) {
    this.#options = options
    // validate now, so a bad option fails where it is written rather than at run()
    const unknown = unknownOption(options, WORKER_KEYS, "Worker")
    if (unknown !== undefined) throw new EffectWorker.WorkerConfigError({ option: unknown.key, message: unknown.message })
    settleSync(EffectWorker.make({ ...toEffectOptions(options), steps: [] }))
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
    if (this.#worker !== undefined) throw new Error(`cannot register step "${name}": the worker has already started`)
    refuseUnknown(options, STEP_KEYS, `step "${name}"`)
    if (this.#steps.some((step) => step.name === name)) {
      throw new Error(`step "${name}" is registered twice; each step name must have exactly one handler`)
    }
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
    if (this.#worker !== undefined) throw new Error(`cannot register workflow "${name}": the worker has already started`)
    refuseUnknown(options, ["version"], `workflow "${name}"`)
    if (this.#workflows.some((workflow) => workflow.name === name)) {
      throw new Error(`workflow "${name}" is registered twice; each workflow name must have exactly one body`)
    }
    this.#workflows.push(Workflow.fromPromise(name, body, options))
    return this
  }

  /**
   * Registers a Durable Workflow activity: an async function of the activity's positional
   * arguments; its context (info, `heartbeat(details)`, `signal`) is `activityContext()`.
   */
  activity<Args extends Array<any>>(name: string, handler: (...args: Args) => unknown): this {
    if (this.#worker !== undefined) throw new Error(`cannot register activity "${name}": the worker has already started`)
    if (this.#steps.some((step) => step.name === name)) {
      throw new Error(`activity "${name}" is registered twice; each activity name must have exactly one handler`)
    }
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
    return this.#addDurableWorkflow(name, () => DurableWorkflow.fromAsync(name, body, declarations))
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
    return this.#addDurableWorkflow(name, () => DurableWorkflow.fromGenerator(name, body, declarations))
  }

  #addDurableWorkflow(name: string, make: () => DurableWorkflow.DurableWorkflow): this {
    if (this.#worker !== undefined) {
      throw new Error(`cannot register workflow "${name}": the worker has already started`)
    }
    if (this.#durableWorkflows.some((w) => w.name === name)) {
      throw new Error(`workflow "${name}" is registered twice; each workflow name must have exactly one body`)
    }
    const definition = make()
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
   * `cause`), or the shutdown error.
   */
  run(transport: TransportHandle): Promise<void> {
    return this.#withSignals(this.#provide(this.#build().run, transport))
  }

  /**
   * Runs until `until` settles / returns true (then stops and resolves), or `timeoutMs` passes
   * (then stops and rejects with `RunUntilTimeoutError`). An external {@link Worker.stop} makes it
   * reject with an interruption once accepted work has drained. Rejects with a `TypeError` naming
   * an unknown key of `options`, before anything runs.
   */
  runUntil(transport: TransportHandle, options: RunUntilOptions): Promise<void> {
    const unknown = unknownOption(options, RUN_UNTIL_KEYS, "runUntil")
    if (unknown !== undefined) return Promise.reject(new TypeError(unknown.message))
    const { until } = options
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
    return settle(this.#build().stop)
  }

  /** Like {@link Worker.stop}, but running work is interrupted at once. */
  async forceStop(): Promise<void> {
    await this.#runClaimed
    return settle(this.#build().forceStop)
  }

  /** Runs one task payload without a broker: a step result for a step task, a decision for a turn. */
  processTask(task: unknown): Promise<StepResult | WorkflowDecision> {
    const worker = this.#build()
    return settle(
      Effect.flatMap(NestDurableProtocol.processPayload(worker.handlers, task), (outcome) =>
        outcome._tag === "Reject"
          ? Effect.fail(new TaskRejected({ reason: outcome.reason }))
          : Effect.succeed(outcome.reply._tag === "StepResult" ? outcome.reply.result : outcome.reply.decision))
    )
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
    let claimed!: () => void
    this.#runClaimed = new Promise((resolve) => (claimed = resolve))
    // the layer is built first (connections); the run claims the worker right after, in the same step
    return Effect.zipRight(Effect.sync(() => claimed()), effect).pipe(
      Effect.provide(transport.layer),
      Effect.ensuring(Effect.sync(() => claimed())),
      Logger.withMinimumLogLevel(LogLevel.fromLiteral(this.#options.logLevel ?? "Info"))
    )
  }

  async #withSignals(effect: Effect.Effect<void, unknown>): Promise<void> {
    if (this.#options.handleSignals === false) return settle(effect)
    let received = 0
    const onSignal = (signal: NodeJS.Signals) => {
      received++
      const stopping = received === 1 ? this.stop() : this.forceStop()
      console.error(
        received === 1
          ? `[effect-durable-worker] ${signal}: stopping gracefully (send it again to interrupt running work)`
          : `[effect-durable-worker] ${signal} again: interrupting running work`
      )
      stopping.catch(() => {
        // the same outcome is reported by run()
      })
    }
    process.on("SIGTERM", onSignal)
    process.on("SIGINT", onSignal)
    try {
      return await settle(effect)
    } finally {
      process.off("SIGTERM", onSignal)
      process.off("SIGINT", onSignal)
    }
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
export const inMemory = (options?: { readonly heartbeatIntervalMs?: number }): InMemoryHandle => {
  refuseUnknown(options, ["heartbeatIntervalMs"], "inMemory()")
  const broker = Effect.runSync(
    InMemoryTransport.make(options?.heartbeatIntervalMs === undefined ? {} : { heartbeatInterval: options.heartbeatIntervalMs })
  )
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
 * Options of the Redis/BullMQ transport; durations in milliseconds. They are checked as
 * `BullMQTransport` checks its own (an unknown key included).
 *
 * @since 0.1.0
 * @category models
 */
export interface RedisOptions {
  /** A `redis://` or `rediss://` URL. Default `process.env.REDIS_URL`, else `redis://127.0.0.1:6379`. */
  readonly url?: string
  /** ioredis connection options, used instead of `url`. Default none. */
  readonly connection?: BullMQTransport.BullMQOptions["connection"]
  /** Default `durable`, as the engine's. */
  readonly prefix?: string
  /** The transport namespace (keyspace `<prefix>-<namespace>`). Default none. */
  readonly namespace?: string
  /** Serve `<name>@<partition>` tokens: the steps of runs in that engine namespace. Default none; not with `namespace`. */
  readonly partition?: string
  /** BullMQ lock duration of a running job, renewed at half of it. Default 30,000. */
  readonly lockDurationMs?: number
  /** Publish step beats on `<P>-heartbeat` this often while a step runs (engine-side `timeoutMs`). Default off. */
  readonly stepBeatIntervalMs?: number
  /** How long the first connection may take before `run` fails. Default 5,000. */
  readonly connectTimeoutMs?: number
  /** How often stalled jobs are looked for. Default 30,000. */
  readonly stalledIntervalMs?: number
  /**
   * Further brokers of the engine's transport pool, by the pool id the engine stamps on tasks as
   * `transport`; a task is answered on the broker its `transport` names. Default none.
   */
  readonly brokers?: BullMQTransport.BullMQOptions["brokers"]
  /** The engine's pool id of the main broker. Default `"default"`. */
  readonly brokerId?: string
  /** Commands of one event-loop turn that may share a socket write. Default 8; 1 turns this off. */
  readonly commandsPerWrite?: number
}

const REDIS_KEYS: ReadonlyArray<keyof RedisOptions> = [
  "url",
  "connection",
  "prefix",
  "namespace",
  "partition",
  "lockDurationMs",
  "stepBeatIntervalMs",
  "connectTimeoutMs",
  "stalledIntervalMs",
  "brokers",
  "brokerId",
  "commandsPerWrite"
]

/**
 * The Redis/BullMQ transport of the nestjs-durable engine. An unknown or invalid option makes `run`
 * reject with a `BullMQConfigError` naming it, before anything connects.
 *
 * @since 0.1.0
 * @category transports
 */
export const redis = (options: RedisOptions = {}): TransportHandle => {
  const url = options.url ?? process.env.REDIS_URL
  return {
    layer: refusingUnknown(
      options,
      REDIS_KEYS,
      "redis()",
      ({ key, message }) => new BullMQTransport.BullMQConfigError({ option: key, message }),
      () => BullMQTransport.layer({
        ...(url === undefined ? {} : { url }),
        ...(options.connection === undefined ? {} : { connection: options.connection }),
        ...(options.prefix === undefined ? {} : { prefix: options.prefix }),
        ...(options.namespace === undefined ? {} : { namespace: options.namespace }),
        ...(options.partition === undefined ? {} : { partition: options.partition }),
        ...(options.lockDurationMs === undefined ? {} : { lockDuration: options.lockDurationMs }),
        ...(options.stepBeatIntervalMs === undefined ? {} : { stepBeatInterval: options.stepBeatIntervalMs }),
        ...(options.connectTimeoutMs === undefined ? {} : { connectTimeout: options.connectTimeoutMs }),
        ...(options.stalledIntervalMs === undefined ? {} : { stalledInterval: options.stalledIntervalMs }),
        ...(options.brokers === undefined ? {} : { brokers: options.brokers }),
        ...(options.brokerId === undefined ? {} : { brokerId: options.brokerId }),
        ...(options.commandsPerWrite === undefined ? {} : { commandsPerWrite: options.commandsPerWrite })
      })
    )
  }
}

/**
 * The SQS transport of the nestjs-durable engine (`@aws-sdk/client-sqs` v3): queue names, bodies
 * and the results queue as the engine's SQS transport has them. Names the SQS rules refuse (`.`,
 * `@`) are refused at start unless `taskQueueUrl` maps them, as on the engine side. An unknown or
 * invalid option makes `run` reject with an `SqsConfigError` naming it, before any request (client
 * settings such as `endpoint` and `region` go in `clientConfig`).
 *
 * @since 0.1.0
 * @category transports
 */
export const sqs = (options: SqsTransport.SqsOptions = {}): TransportHandle => ({ layer: SqsTransport.layer(options) })

/**
 * The database transport of the nestjs-durable engine on PostgreSQL: the engine's own task and
 * result tables, claims with `FOR UPDATE SKIP LOCKED`, leases renewed while a step runs, and
 * `LISTEN/NOTIFY` wake-ups (polling as the fallback). `url` defaults to `process.env.DATABASE_URL`.
 * An unknown or invalid option makes `run` reject with an `SqlConfigError` naming it, before anything
 * connects.
 *
 * @since 0.1.0
 * @category transports
 */
export const postgres = (options: SqlTransport.PostgresOptions = {}): TransportHandle => ({
  layer: SqlTransport.layerPostgres(withDatabaseUrl(options))
})

/**
 * The database transport of the nestjs-durable engine on MySQL 8 / MariaDB: the engine's own
 * tables, claims with `FOR UPDATE SKIP LOCKED`, leases renewed while a step runs. `url` defaults to
 * `process.env.DATABASE_URL`. An unknown or invalid option makes `run` reject with an
 * `SqlConfigError` naming it, before anything connects.
 *
 * @since 0.1.0
 * @category transports
 */
export const mysql = (options: SqlTransport.MysqlOptions = {}): TransportHandle => ({
  layer: SqlTransport.layerMysql(withDatabaseUrl(options))
})

const withDatabaseUrl = <O extends { readonly url?: unknown; readonly host?: unknown }>(options: O): O =>
  options.url === undefined && options.host === undefined && process.env.DATABASE_URL !== undefined
    ? { ...options, url: process.env.DATABASE_URL }
    : options

/**
 * Options of the Durable Workflow transport; durations in milliseconds.
 *
 * @since 0.1.0
 * @category models
 */
export interface DurableWorkflowOptions {
  /** The server root (or a managed-runtime prefix); not ending in `/api`, no query or fragment. */
  readonly baseUrl: string
  /** The shared bearer token (both planes). Default none. */
  readonly token?: string
  /** A worker-plane token; wins over `token` on the worker plane. Default none. */
  readonly workerToken?: string
  /** A control-plane token; wins over `token` on the control plane. Default none. */
  readonly controlToken?: string
  /** `X-Namespace`. Default `"default"`. */
  readonly namespace?: string
  /** The task queue the worker registers on and polls. */
  readonly taskQueue: string
  /** Timeout of non-poll requests. Default 60,000. */
  readonly requestTimeoutMs?: number
  /** Worker heartbeat interval until the server advertises one; positive. Default 60,000. */
  readonly heartbeatIntervalMs?: number
  /**
   * Where payloads above `externalStorageThresholdBytes` are stored, and inbound `external_storage`
   * references are read from (size and SHA-256 checked): {@link filesystemStorage},
   * {@link s3Storage}, or {@link externalStorage} for any other store (GCS, Azure Blob, …).
   */
  readonly externalStorage?: DurableWorkflowTransport.ExternalStorageDriver
  /** Size in bytes of an encoded payload above which it goes to `externalStorage`. At least 1. */
  readonly externalStorageThresholdBytes?: number
  /** Hooks around workflow tasks, activities and queries, outermost first. Default none. */
  readonly interceptors?: ReadonlyArray<DurableWorkflowTransport.WorkerInterceptor>
}

const DURABLE_WORKFLOW_KEYS: ReadonlyArray<keyof DurableWorkflowOptions> = [
  "baseUrl",
  "token",
  "workerToken",
  "controlToken",
  "namespace",
  "taskQueue",
  "requestTimeoutMs",
  "heartbeatIntervalMs",
  "externalStorage",
  "externalStorageThresholdBytes",
  "interceptors"
]

/**
 * External payload storage on the local filesystem, for `durableWorkflow({ externalStorage })`:
 * `file://` URIs, files at `<root>/<codec>/<sha[:2]>/<sha>`.
 *
 * @since 0.1.0
 * @category external storage
 */
export const filesystemStorage = (root: string): DurableWorkflowTransport.ExternalStorageDriver =>
  DurableWorkflowExternalStorage.localFilesystem(root)

const S3_KEYS: ReadonlyArray<keyof DurableWorkflowExternalStorage.S3Options> = ["bucket", "prefix", "client", "clientConfig"]

/**
 * External payload storage on S3 or an S3-compatible server, for
 * `durableWorkflow({ externalStorage })`: objects at `<prefix>/<codec>/<sha[:2]>/<sha>`, URIs
 * `s3://<bucket>/<key>`. Needs the optional peer dependency `@aws-sdk/client-s3` (v3), imported on
 * first use. An unknown key of `options` throws a `TypeError` naming it.
 *
 * ```ts
 * durableWorkflow({
 *   baseUrl, taskQueue: "orders",
 *   externalStorage: s3Storage({ bucket: "payloads", prefix: "dw", clientConfig: { region: "eu-west-1" } }),
 *   externalStorageThresholdBytes: 256_000
 * })
 * ```
 *
 * @since 0.1.0
 * @category external storage
 */
export const s3Storage = (options: DurableWorkflowExternalStorage.S3Options): DurableWorkflowTransport.ExternalStorageDriver => {
  refuseUnknown(options, S3_KEYS, "s3Storage()")
  return DurableWorkflowExternalStorage.s3(options)
}

/**
 * External payload storage on any store, from two async functions: `put` keeps the bytes and
 * answers their URI, `get` reads them back for a reference. The worker checks size and SHA-256 of
 * what `get` answers.
 *
 * @since 0.1.0
 * @category external storage
 */
export const externalStorage = (
  driver: DurableWorkflowExternalStorage.PromiseExternalStorageDriver
): DurableWorkflowTransport.ExternalStorageDriver => DurableWorkflowExternalStorage.make(driver)

/**
 * The Durable Workflow transport, with control-plane helpers.
 *
 * @since 0.1.0
 * @category models
 */
export interface DurableWorkflowHandle extends TransportHandle {
  /** A `runUntil` predicate: true once the workflow is terminal (control plane; needs a control or shared token). */
  readonly workflowTerminal: (workflowId: string) => () => Promise<boolean>
  /** Control plane: retire a worker (`DELETE /api/workers/{id}`); never used by shutdown. */
  readonly deregisterWorker: (workerId: string) => Promise<Record<string, unknown>>
}

/**
 * A Durable Workflow server (worker protocol 1.1 over HTTP): activities, workflow tasks replayed
 * from history, query tasks. An unknown or invalid option makes `run` (and the control-plane
 * helpers) reject with a `DurableWorkflowConfigError` naming it, before any request.
 *
 * @since 0.1.0
 * @category transports
 */
export const durableWorkflow = (options: DurableWorkflowOptions): DurableWorkflowHandle => {
  const layer = refusingUnknown(
    options,
    DURABLE_WORKFLOW_KEYS,
    "durableWorkflow()",
    ({ message }) => new DurableWorkflowTransport.DurableWorkflowConfigError({ message }),
    () => DurableWorkflowTransport.layer({
      baseUrl: options.baseUrl,
      taskQueue: options.taskQueue,
      token: options.token,
      workerToken: options.workerToken,
      controlToken: options.controlToken,
      namespace: options.namespace,
      ...(options.requestTimeoutMs === undefined ? {} : { requestTimeout: options.requestTimeoutMs }),
      ...(options.heartbeatIntervalMs === undefined ? {} : { heartbeatInterval: options.heartbeatIntervalMs }),
      ...(options.externalStorage === undefined ? {} : { externalStorage: options.externalStorage }),
      ...(options.externalStorageThresholdBytes === undefined
        ? {}
        : { externalStorageThresholdBytes: options.externalStorageThresholdBytes }),
      ...(options.interceptors === undefined ? {} : { interceptors: options.interceptors })
    })
  )
  const control = <A>(effect: Effect.Effect<A, unknown, DurableWorkflowTransport.DurableWorkflowClient>) =>
    settle(Effect.provide(effect, layer))
  return {
    layer,
    workflowTerminal: (workflowId) => () =>
      control(Effect.map(DurableWorkflowTransport.describeWorkflow(workflowId), DurableWorkflowTransport.isTerminal)),
    deregisterWorker: (workerId) => control(DurableWorkflowTransport.deregisterWorker(workerId))
  }
}
