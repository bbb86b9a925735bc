/**
 * The Redis/BullMQ transport: consumes the queues the nestjs-durable engine's BullMQ transport
 * dispatches to, and answers on its results queue.
 *
 * - one subscription per registered step name on `<P>-tasks-<token>` (namespace folded into the
 *   prefix, `:` sanitised, `@partition` suffixed), with the permit taken before a job is moved to
 *   active, so unstarted jobs stay in Redis for other workers;
 * - results go to `<P>-results` as job `result` in the same script call as the acknowledgement of
 *   their task (BullMQ's own add script, then its acknowledge script, run by Redis as one script, or
 *   in the common case a fast path making the same writes: a job is never acknowledged without its
 *   result); the commands of one turn of the event loop share socket writes;
 * - registration is the descriptor and liveness keys (`EX 35`, refreshed every 10 s), removed once
 *   at deregistration;
 * - job locks are renewed while a task runs or waits; a job that failed at the infrastructure level
 *   (stalled twice, for instance) gets a synthetic retryable failed result so its run never hangs;
 * - a `cancel` on `<P>-control` interrupts that run's running steps;
 * - Redis unreachable at start fails `run` fast (after `connectTimeout`), or is waited for with
 *   `waitForBroker`; a refused password or user fails it at once with an `AuthenticationError`
 *   cause. A connection lost later is re-established by the client while the runtime retries its
 *   polls.
 *
 * @since 0.1.0
 */
import { Job, type JobJsonRaw, type JobsOptions, Queue, UnrecoverableError, type Worker as BullWorker } from "bullmq"
import * as Cause from "effect/Cause"
import * as Config from "effect/Config"
import type * as ConfigError from "effect/ConfigError"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Runtime from "effect/Runtime"
import type * as Scope from "effect/Scope"
import { Redis, type RedisOptions } from "ioredis"
import { randomBytes, randomUUID } from "node:crypto"
import { messageOf, withReason } from "../core/internal/errors.js"
import { optional, overRead } from "../core/internal/options.js"
import type { DurationOption } from "../runtime/WorkerConfig.js"
import * as Refusals from "./internal/connectErrors.js"
import { namingVariables } from "./internal/options.js"
import { passwordOf, redact, redactUrl, safeCause, type Secret } from "./internal/redact.js"
import { forEachAtOnce, waitFor } from "./internal/startup.js"
import * as NestDurableProtocol from "../protocol/NestDurableProtocol.js"
import { type NestReply, stepIdentity, turnIdentity } from "../protocol/NestDurableProtocol.js"
import * as Protocol from "../seam/Protocol.js"
import * as WorkerMetrics from "../seam/WorkerMetrics.js"
import type { StepResult } from "../wire/StepProtocol.js"
import { countLostConnections, waitingJobs } from "./bullmq/internal/backlog.js"
import { coalesceWrites } from "./bullmq/internal/coalesce.js"
import { BullMQConfigError, type Resolved, resolve, type Target } from "./bullmq/internal/config.js"
import {
  buildDescriptor,
  descriptorHash,
  heartbeatValue,
  WORKER_HEARTBEAT_INTERVAL_MS,
  WORKER_HEARTBEAT_TTL_SECONDS
} from "./bullmq/internal/descriptor.js"
import * as FailedJobs from "./bullmq/internal/failedJobs.js"
import * as Jobs from "./bullmq/internal/jobs.js"
import * as Naming from "./bullmq/internal/naming.js"
import * as Orphans from "./bullmq/internal/orphans.js"
import * as Outage from "./bullmq/internal/outage.js"
import { type Cancellations, makeCancellations } from "./internal/cancellations.js"
import {
  type Delivery,
  DeregistrationError,
  type KeepAlive,
  Poller,
  Registration,
  RegistrationError,
  Transport,
  TransportError,
  type WorkerDescription,
  type WorkerStatus
} from "../seam/Transport.js"

export { BullMQConfigError } from "./bullmq/internal/config.js"

/**
 * Options of the BullMQ transport. They are checked when the transport is built (see {@link make}):
 * an unknown key or a bad value fails with a {@link BullMQConfigError} naming it.
 *
 * @since 0.1.0
 * @category models
 */
export interface BullMQOptions {
  /**
   * `redis://[user:password@]host:port[/db]` (or `rediss://`), as a string or a `Redacted` (what
   * `Config.redacted` reads). Its password never appears in a message. Default `redis://127.0.0.1:6379`.
   */
  readonly url?: Secret | undefined
  /** ioredis options, used instead of `url` when given. Default none. */
  readonly connection?: RedisOptions | undefined
  /** Key prefix shared with the engine; not empty, no blank or quote around it, no `:`. Default `durable`. */
  readonly prefix?: string | undefined
  /** The transport namespace: renames the keyspace to `<prefix>-<namespace>` (no blank or quote around it, no `:`). Default none. */
  readonly namespace?: string | undefined
  /**
   * Isolation suffix of this worker pool: consumes `<name>@<partition>` tokens (engine namespaces).
   * Default none; not with a `namespace` (the engine dispatches no such tokens on a namespaced
   * transport); no blank or quote around it, no `:`.
   */
  readonly partition?: string | undefined
  /** BullMQ lock duration of a running job (positive); renewed at half of it. Default 30 seconds. */
  readonly lockDuration?: DurationOption | undefined
  /**
   * When set (positive), running steps publish `{runId, seq, stepId, group}` beats on `<P>-heartbeat`
   * this often. Default off.
   */
  readonly stepBeatInterval?: DurationOption | undefined
  /**
   * Further brokers of the same engine pool, by the id the engine gave each pool transport (the id
   * it stamps on every task as `transport`). The worker consumes from the main broker and from each
   * of these, and answers a task on the broker its `transport` names (else on the one it came from).
   * None may have the main broker's id. Default none.
   */
  readonly brokers?: Readonly<Record<string, BrokerTarget>> | undefined
  /** The engine's pool id of the main broker. Default `"default"` (the id of a single transport). */
  readonly brokerId?: string | undefined
  /**
   * How long one attempt at the first connection may take (positive); without `waitForBroker`, the
   * start fails after it. Default 5 seconds.
   */
  readonly connectTimeout?: DurationOption | undefined
  /**
   * Wait for a Redis that does not answer at start (logged once, retried with a backoff of up to
   * 5 s) instead of failing the start, for fleets where the worker may start first. A refused
   * password or user still fails at once. Default `false`.
   */
  readonly waitForBroker?: boolean | undefined
  /**
   * How often stalled jobs are looked for, and failed step jobs bridged to a retryable failure
   * (positive). Default 30 seconds (BullMQ's default).
   */
  readonly stalledInterval?: DurationOption | undefined
  /**
   * How many of the commands written in one turn of the event loop may share one socket write
   * (the first two of a turn always go out at once): a whole number of at least 1. Default 8; 1
   * writes every command on its own, as ioredis does.
   */
  readonly commandsPerWrite?: number | undefined
}

/**
 * Where a broker is: a `redis://` URL or ioredis options.
 *
 * @since 0.1.0
 * @category models
 */
export interface BrokerTarget {
  /** A `redis://` URL, as a string or a `Redacted`. */
  readonly url?: Secret | undefined
  readonly connection?: RedisOptions | undefined
}

const NAME = "bullmq"
/** The most jobs one poll takes in one round trip. */
const MAX_BATCH = 64
const RUN_BEAT_INTERVAL = Duration.seconds(5)

const describeTarget = (options: Target) =>
  options.connection === undefined
    ? redactUrl(options.url ?? "redis://127.0.0.1:6379")
    : `${options.connection.host ?? "127.0.0.1"}:${options.connection.port ?? 6379}`

/** The secrets of a target, masked wherever a driver's message might echo them. */
const secretsOf = (options: Target) => [passwordOf(options.url), options.connection?.password]

const transportError = (operation: string) => (cause: unknown) =>
  new TransportError({ transport: NAME, operation, message: `${operation} failed: ${messageOf(cause)}`, cause })

/** An operation not tried because `broker`'s connection is away (its client would hold the commands until it is back). */
const unreachableError = (operation: string, broker: { readonly where: string; readonly client: Redis }) =>
  new TransportError({
    transport: NAME,
    operation,
    message: `${operation} was not tried: Redis at ${broker.where} is ${broker.client.status}`
  })

/**
 * The error of a first connection that failed: the server's refusal of the credentials or of a
 * command as an `AuthenticationError` / `PermissionError` cause, anything else as a connection that
 * could not be made; the server's own answer is in the message either way.
 */
const connectError = (options: Target, cause: unknown, timedOut: Duration.Duration | undefined) => {
  const secrets = secretsOf(options)
  const safe = safeCause(cause, secrets)
  const where = describeTarget(options)
  const refusal = Refusals.redis(cause)
  if (refusal !== undefined) {
    const refused = Refusals.toError(NAME, { ...refusal, answer: redact(refusal.answer, secrets) }, `Redis at ${where}`, {
      authentication: "check the user and password in REDIS_URL (or the url/connection option) against the server's " +
        "requirepass or ACL users",
      permission: "grant this Redis user the commands and keys BullMQ needs (e.g. ACL SETUSER <user> ~<prefix>* &* +@all)"
    }, safe)
    return new RegistrationError({ transport: NAME, message: refused.message, cause: refused })
  }
  // ioredis's reading of a reply that is not Redis's protocol: something else listens there
  const notRedis = /^Protocol error, got .* as reply type byte/.test(safe.message)
  // a server that took the connection and closed or reset it at Redis's first command, answering
  // nothing: another service (PostgreSQL drops a client whose first bytes are not its protocol), a
  // Redis that takes only TLS, or a proxy or container port whose Redis is not up yet
  const dropped = !notRedis && timedOut === undefined && /\bECONNRESET\b|^Connection is closed\.?$/.test(safe.message)
  const [what, further] = notRedis
    ? [
      `the server at ${where} does not speak Redis's protocol (${safe.message.replace(/\.?\s*Please report this\.?$/, "")})`,
      ", not at another service's port"
    ]
    : dropped
    ? [
      `the server at ${where} took the connection and dropped it without an answer (${safe.message})`,
      ", not at another service's port, and whether it takes only TLS (a rediss:// URL); behind a proxy or a " +
      "container's port, Redis may not be up yet (waitForBroker waits for it)"
    ]
    : [
      timedOut === undefined
        ? `could not connect to Redis at ${where} (${safe.message})`
        : `Redis at ${where} did not answer within ${Duration.format(timedOut)}`,
      ""
    ]
  return new RegistrationError({
    transport: NAME,
    message: `${what}; check that Redis is running and that REDIS_URL (or the url/connection option) points at it${further}`,
    cause: safe
  })
}

/** Whether a failed start is Redis refusing the worker (never waited out), not Redis being away. */
const isRefusal = (error: RegistrationError) =>
  typeof error.cause === "object" && error.cause !== null &&
  ["AuthenticationError", "PermissionError"].includes((error.cause as { _tag?: unknown })._tag as string)

/**
 * One attempt at the first connection. The client is acquired on its own and connected after, so
 * that `connectTimeout` can interrupt a connect that never ends (a server that accepts and never
 * answers): an acquire is uninterruptible, and a timeout inside it would wait for the connect.
 */
const connectOnce = (options: Target, connectTimeout: Duration.Duration, commandsPerWrite: number) =>
  Effect.gen(function*() {
    // ioredis rejects a failed connect with "Connection is closed."; the server's answer (WRONGPASS,
    // NOAUTH, ECONNREFUSED) comes only as an error event, so the last one is kept for the message
    let lastError: unknown
    const client = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const settings = { maxRetriesPerRequest: null, lazyConnect: true } as const
        const client = options.connection === undefined
          ? new Redis(options.url ?? "redis://127.0.0.1:6379", settings)
          : new Redis({ ...options.connection, ...settings })
        client.on("error", (error) => {
          // later connection errors surface through the commands that fail; ioredis reconnects by itself
          lastError = error
        })
        countLostConnections(client)
        coalesceWrites(client, commandsPerWrite)
        return client
      }),
      // QUIT only on a connection that is up: on one still connecting it would wait in the offline queue
      (client) =>
        client.status === "ready"
          ? Effect.promise(() => client.quit().catch(() => client.disconnect()))
          : Effect.sync(() => client.disconnect())
    )
    yield* Effect.tryPromise({ try: () => client.connect(), catch: (cause) => lastError ?? cause }).pipe(
      Effect.mapError((cause) => connectError(options, cause, undefined)),
      Effect.timeoutFail({
        duration: connectTimeout,
        // the last error the driver saw, if any, is why it is still trying
        onTimeout: () => connectError(options, lastError ?? new Error("no answer"), connectTimeout)
      }),
      // at once, not with the scope: ioredis would go on reconnecting a client given up on
      Effect.onError(() => Effect.sync(() => client.disconnect()))
    )
    return client
  })

/**
 * The first connection to a broker: one attempt, or with `waitForBroker` as many as it takes while
 * Redis does not answer (a refusal still fails at once).
 */
const connect = (options: Target, connectTimeout: Duration.Duration, commandsPerWrite: number, waitForBroker: boolean) =>
  waitForBroker
    ? waitFor(
      connectOnce(options, connectTimeout, commandsPerWrite),
      (error) => isRefusal(error) ? undefined : `Redis at ${describeTarget(options)} to answer`,
      { describe: (error) => (error.cause instanceof Error ? error.cause.message : error.message) }
    )
    : connectOnce(options, connectTimeout, commandsPerWrite)

/** A duplicate connection for blocking reads or subscriptions, closed with the scope. */
const duplicate = (client: Redis) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const copy = client.duplicate()
      copy.on("error", () => {})
      return copy
    }),
    (copy) => Effect.sync(() => copy.disconnect())
  )

/** One broker of the engine's pool: its command connection and how replies and beats reach it. */
interface Broker {
  readonly id: string
  readonly client: Redis
  /** Where its Redis is, credentials masked, for messages. */
  readonly where: string
  /**
   * A reply for a task of another broker (job `of` there, locked with `token`): encoded at once
   * (throws when it cannot be), as on the task's own broker. `send` adds its job with a record of it
   * on this Redis, in one script call, the record kept until the job is acknowledged (for
   * `Jobs.PENDING_REPLY_RECORD_MILLIS` at most): called again (an answer retried after its
   * acknowledgement failed, the reply written), or its command sent again by the client once this
   * Redis is back, however late, it finds the record and adds nothing. `acknowledged` then keeps the
   * record `keptMillis` from now, no longer.
   */
  readonly replyOnce: (reply: NestReply, of: string, token: string) => {
    readonly send: () => Promise<unknown>
    readonly acknowledged: (keptMillis: number) => void
  }
  /**
   * Adds the reply job and acknowledges the task job of `tasks` (a queue of this broker) in one
   * script call, the reply first (the transport's tests watch the order with MONITOR).
   */
  readonly answer: (
    reply: NestReply,
    tasks: BullWorker,
    job: { readonly id: string; readonly options: JobsOptions },
    token: string,
    fetchNext: boolean
  ) => Promise<Jobs.Answered>
  /**
   * Acknowledges the task job of `tasks` (a queue of this broker) whose reply went to another broker,
   * leaving the record an answer leaves: sent again once applied, it is a replay (see `Jobs.Answered`).
   */
  readonly acknowledge: (
    tasks: BullWorker,
    job: { readonly id: string; readonly options: JobsOptions },
    token: string,
    fetchNext: boolean
  ) => Promise<Jobs.Answered>
  /**
   * Publishes a step result under the claim `key` (on this broker's Redis), in one script call: while
   * `key` holds `token`, or nothing, recording the report in it for `keptMillis`. Whether it went
   * out: false when another holds `key`; true, publishing nothing, for the same call sent again once
   * its report went out.
   */
  readonly publishIfHeld: (result: StepResult, key: string, token: string, keptMillis: number) => Effect.Effect<boolean, TransportError>
  /**
   * Publishes a step result reported for a failure `of` a task queue of another broker, with a record
   * of it on this broker's Redis (`<results queue>:bridged:<of>`), in one script call, the record kept
   * for `keptMillis`: while no other `token` recorded a report of it. Whether it went out: false,
   * publishing nothing, when another recorded it; true, publishing nothing, for the same call sent
   * again once its report went out.
   */
  readonly publishOnce: (result: StepResult, of: string, token: string, keptMillis: number) => Effect.Effect<boolean, TransportError>
  /** Publishes a run or step beat on the broker's `<P>-heartbeat` channel. */
  readonly publishBeat: (message: string) => Promise<unknown>
  /**
   * Adds a workflow turn's live step event (a `stepEvent` job on `<P>-step-events`), sent in the call
   * on the connection decisions are written on, so it reaches Redis ahead of the turn's decision.
   * Throws at once when the event cannot be encoded.
   */
  readonly addStepEvent: (event: unknown) => Promise<unknown>
}

/** What the deliveries of one task queue share. */
interface TaskQueue {
  readonly name: string
  /** The routing token the queue serves (the `group` of beats whose task names none). */
  readonly group: string
  readonly bull: BullWorker
  /** The broker the queue is on. */
  readonly home: Broker
  /** The broker a task's reply goes to: the one its `transport` names, else `home`. */
  readonly replyBroker: (data: unknown) => Broker
  readonly protocol: Protocol.Protocol<NestReply>
  readonly cancellations: Cancellations
  readonly lockMillis: number
  /** How often a running job's lock is renewed. */
  readonly renewEvery: Duration.Duration
  /** When set, running steps beat on the heartbeat channel this often. */
  readonly stepBeat: Duration.Duration | undefined
  /** The jobs its deliveries serve and the tokens with a take in flight, against which orphans are found. */
  readonly holdings: Orphans.Holdings
  /** Runs what a delivery logs outside of its task's fiber (a live step event that failed). */
  readonly runtime: Runtime.Runtime<never>
}

const noPages: Effect.Effect<ReadonlyArray<unknown>> = Effect.succeed([])
const notCancelled = Effect.succeed({ cancelRequested: false })

/**
 * A job just moved to active, locked with `token`, as a delivery; a workflow turn beats for its run
 * at once. A class rather than an object of closures: one is made for every task. It holds what the
 * task path reads of the job; BullMQ's `Job` is made only for the rare calls that need one.
 */
class JobDelivery implements Delivery<NestReply> {
  readonly keepAlive: Option.Option<KeepAlive>
  readonly onCancel: (cancel: () => void) => () => void
  /** Whether a live step event of this task failed already (only the first is logged). */
  private progressFailed = false
  /**
   * Whether an answer of this task was applied and the worker learnt it (a later answer, the failed
   * one the runtime sends for a defect once the answer went through, finds it applied).
   */
  private applied = false

  /** A job BullMQ handed over as a `Job` (the first of a serving chain). */
  static ofJob(queue: TaskQueue, job: Job, token: string): JobDelivery {
    return new JobDelivery(queue, job.id!, job.data, job.opts, job, token)
  }

  /**
   * The job an acknowledgement moved to active, with its data and options decoded (`Jobs.decodeData`,
   * `Jobs.decodeOptions`, which throw on a job that cannot be read). What throws here is a bug, not
   * the job's.
   */
  static ofNext(queue: TaskQueue, next: Jobs.NextJob, payload: unknown, options: JobsOptions, token: string): JobDelivery {
    return new JobDelivery(queue, next.id, payload, options, next.fields, token)
  }

  private constructor(
    readonly queue: TaskQueue,
    readonly jobId: string,
    readonly payload: unknown,
    readonly jobOptions: JobsOptions,
    private source: Job | JobJsonRaw,
    readonly token: string
  ) {
    const turn = turnIdentity(payload)
    const identity = turn === undefined ? stepIdentity(payload) : undefined
    // workflow turns beat for their run at once and every 5 s; steps optionally every stepBeatInterval
    const beat = turn !== undefined
      ? JSON.stringify({ runId: turn.runId, seq: 0, group: turn.group ?? queue.group })
      : identity !== undefined && queue.stepBeat !== undefined
      ? JSON.stringify({ runId: identity.runId, seq: identity.seq, stepId: identity.stepId, group: identity.group ?? queue.group })
      : undefined
    if (turn !== undefined && beat !== undefined) {
      void queue.home.publishBeat(beat).catch(() => undefined)
    }
    this.keepAlive = Option.some(
      new JobLease(this, turn === undefined ? queue.renewEvery : Duration.min(queue.renewEvery, RUN_BEAT_INTERVAL), beat)
    )
    this.onCancel = queue.cancellations.watch(turn?.runId ?? identity?.runId)
    queue.holdings.hold(jobId, token)
  }

  /** The job is no longer served by this delivery. */
  private get released(): Effect.Effect<void> {
    return Effect.sync(() => this.queue.holdings.release(this.jobId, this.token))
  }

  get id(): string {
    return `${this.queue.name}#${this.jobId}`
  }

  get protocol(): Protocol.Protocol<NestReply> {
    return this.queue.protocol
  }

  /** A job's data comes whole: there are no pages. */
  get rest(): Effect.Effect<ReadonlyArray<unknown>> {
    return noPages
  }

  /** Nothing of a job is stored elsewhere. */
  resolve(part: unknown): Effect.Effect<unknown, TransportError> {
    return Effect.succeed(part)
  }

  store(part: unknown): Effect.Effect<unknown, TransportError> {
    return Effect.succeed(part)
  }

  /** Runs are beaten for by the lease; a step's own beat never asks for a cancel (cancels come on `<P>-control`). */
  heartbeat(): Effect.Effect<{ readonly cancelRequested: boolean }, TransportError> {
    return notCancelled
  }

  /**
   * A workflow turn's live local-step event, as a `stepEvent` job on `<P>-step-events` of the broker
   * its decision goes to: sent at once, on the connection the decision is written on later, so Redis
   * has it before the decision without the turn waiting for it (one command per event, pipelined with
   * the rest). Best-effort, as the engine's own workers: an event that cannot be written is logged
   * (the first of the task, as a warning) and the turn goes on; its decision records the same steps.
   */
  progress(event: unknown): void {
    let sent: Promise<unknown>
    try {
      sent = this.queue.replyBroker(this.payload).addStepEvent(event)
    } catch (cause) {
      sent = Promise.reject(cause)
    }
    sent.then(undefined, (cause: unknown) => this.progressFailure(event, cause))
  }

  private progressFailure(event: unknown, cause: unknown): void {
    if (this.progressFailed) return
    this.progressFailed = true
    const { queue } = this
    const runId = (event as { readonly runId?: unknown } | null)?.runId
    Runtime.runFork(queue.runtime)(Effect.logWarning(withReason(
      `a live step event of run ${String(runId)} (job ${this.jobId} on ${queue.name}) could not be added to the ` +
        `step-events queue on Redis at ${queue.replyBroker(this.payload).where}; the turn goes on, ` +
        "its decision records the same steps (later events of this turn that fail are not logged)",
      cause
    )))
  }

  /** BullMQ's `Job`, made from the stored fields the first time a call needs it. */
  private get job(): Job {
    const { source } = this
    if (source instanceof Job) return source
    const job = Jobs.TaskJob.fromJSON(this.queue.bull, source, this.jobId)
    this.source = job
    return job
  }

  complete(reply: NestReply): Effect.Effect<void, TransportError> {
    return this.answer(reply, false, () => undefined)
  }

  /**
   * BullMQ's own fast path: acknowledging a job can move the next one to active, locked with the
   * same token, in the same script call.
   */
  completeAndTakeNext(reply: NestReply): Effect.Effect<Option.Option<Delivery<NestReply>>, TransportError> {
    return this.answer(reply, true, (next): Option.Option<Delivery<NestReply>> => next === undefined ? Option.none() : Option.some(next))
  }

  reject(reason: string): Effect.Effect<void, TransportError> {
    return Effect.tryPromise(() => {
      const { job } = this
      return job.moveToFailed(new Error(reason), this.token).then(() => job)
    }).pipe(
      Effect.mapError(transportError(`rejecting job ${this.jobId}`)),
      Effect.flatMap(droppedParentLog),
      Effect.ensuring(this.released)
    )
  }

  get abandon(): Effect.Effect<void, TransportError> {
    return Effect.tryPromise(() => this.giveBack()).pipe(
      Effect.mapError(transportError(`giving job ${this.jobId} back`)),
      Effect.ensuring(this.released)
    )
  }

  /** Moves the job back to waiting. */
  private giveBack(): Promise<unknown> {
    try {
      return this.job.moveToWait(this.token)
    } catch (cause) {
      return Promise.reject(cause)
    }
  }

  /** Extends the job's lock; fails when the lock was lost. */
  renewLock(): Effect.Effect<void, TransportError> {
    const { jobId, queue } = this
    return Effect.tryPromise(() => this.job.extendLock(this.token, queue.lockMillis)).pipe(
      Effect.mapError(transportError(`extending the lock of job ${jobId}`)),
      Effect.flatMap((renewed) =>
        renewed === 1 ? Effect.void : Effect.fail(
          new TransportError({
            transport: NAME,
            operation: "extend lock",
            message: `the lock of job ${jobId} on ${queue.name} was lost`,
            // for good: a lock that expired or went to another worker is not this worker's again
            fatal: true
          })
        )
      )
    )
  }

  /**
   * Writes the reply and acknowledges the job (moving the next one to active with it when
   * `fetchNext`), then goes on in the fiber with `then` of the next job (if one came), so whatever
   * `then` throws is a defect there. On the job's own broker both are one script call, so Redis runs
   * both or (refusing the reply, or the lock no longer this worker's) neither but the failing
   * acknowledgement: a refused answer leaves the job active under its lock, to be answered again. A
   * reply for another broker is written there before the job is acknowledged, and only while the job's
   * lock is still this worker's (so a retried answer of a job it lost writes no reply either), with a
   * record of it there for this take of the job: an answer retried after the reply was written and
   * the acknowledgement failed (the job still this worker's) acknowledges it without a second reply,
   * which the engine would take for the step's next attempt.
   *
   * An answer whose outcome the worker never learnt (the connection lost after the script was sent;
   * for a reply that went to another broker, the acknowledgement's script, which leaves the same
   * record) is sent again, by the client once it reconnects or by the runtime's retry, and the script
   * then finds its own record (see `Jobs.Answered`): nothing is written twice, the log says the answer had
   * been applied, and the job that first send took is served here, or, when this call takes no next
   * job, handed back to wait at once rather than left to its lock.
   */
  private answer<A>(reply: NestReply, fetchNext: boolean, then: (next: JobDelivery | undefined) => A) {
    const { jobId, queue: { holdings }, token } = this
    // while the answer is out it may take a next job under the token; once it settles, however (written,
    // refused, or dead before it was sent: a reply that throws as it is encoded), this job is not served
    // any more (a failed answer's job, should the retries give up, is an orphan to give back)
    return Effect.acquireUseRelease(
      Effect.sync(() => holdings.begin(token)),
      () => this.answered(reply, fetchNext, then),
      () =>
        Effect.sync(() => {
          holdings.release(jobId, token)
          holdings.end(token)
        })
    )
  }

  /** {@link answer}'s script call and what follows it, while the answer is counted in flight under the token. */
  private answered<A>(reply: NestReply, fetchNext: boolean, then: (next: JobDelivery | undefined) => A) {
    const { jobId, queue, token } = this
    const target = queue.replyBroker(this.payload)
    const job = { id: jobId, options: this.jobOptions }
    return Effect.async<A, TransportError>((resume) => {
      const failed = (cause: unknown) => resume(Effect.fail(transportError(`answering job ${jobId}`)(cause)))
      const acknowledged = ({ next: acked, replayed }: Jobs.Answered) => {
        const applied = !replayed
          ? Effect.void
          : this.applied
          // an earlier answer went through, and the worker knew it (a defect after it, say)
          ? Effect.logInfo(
            `an earlier answer to job ${jobId} on ${queue.name} had been applied; it stands, this one was not written` +
              tookPhrase(acked, fetchNext)
          )
          : Effect.logInfo(
            `the answer to job ${jobId} on ${queue.name} had been applied by an earlier send of it whose outcome the ` +
              "worker had not learnt (the connection to Redis lost meanwhile, say); it was not written again" + tookPhrase(acked, fetchNext)
          )
        this.applied = true
        if (acked !== undefined && !fetchNext) {
          return resume(Effect.zipRight(applied, Effect.map(handBack(queue, acked, token), () => then(undefined))))
        }
        let next: JobDelivery | undefined
        if (acked !== undefined) {
          let payload: unknown
          let options: JobsOptions
          try {
            payload = Jobs.decodeData(acked.fields)
            options = Jobs.decodeOptions(acked.fields.opts)
          } catch {
            // the answer went through; the job handed over with it cannot be read (a field that is
            // not JSON, or not what BullMQ reads it as)
            return resume(Effect.zipRight(applied, Effect.map(failUnreadable(queue, acked, token), () => then(undefined))))
          }
          try {
            next = JobDelivery.ofNext(queue, acked, payload, options, token)
          } catch (defect) {
            // a bug here, not the job's: the job goes back to wait, to be served (not failed as
            // unreadable, nor left to its lock), and the defect is the fiber's
            return resume(Effect.zipRight(applied, Effect.zipRight(handBack(queue, acked, token), Effect.die(defect))))
          }
        }
        const going = Effect.sync(() => then(next))
        resume(replayed ? Effect.zipRight(applied, going) : going)
      }
      // a reply for another broker is encoded here, at once, as the home broker's script call encodes
      // its own: one that cannot be is a defect (the runtime answers it once as such), not a
      // failure to write it, retried and then lost
      const elsewhere = target === queue.home
        ? undefined
        : target.replyOnce(reply, `${queue.home.id}:${queue.name}:${jobId}`, token)
      const answer = () =>
        elsewhere === undefined
          ? target.answer(reply, queue.bull, job, token, fetchNext)
          : Jobs.holdsLock(queue.bull, jobId, token)
            .then((held) => held ? elsewhere.send() : undefined)
            .then(() => queue.home.acknowledge(queue.bull, job, token, fetchNext))
            .then((acked) => {
              // every send of the reply has been answered: its record is kept as an answer's is
              elsewhere.acknowledged(Jobs.answerRecordMillis(queue.bull))
              return acked
            })
      // a parent reference BullMQ's acknowledgement could not follow is removed first (never on an
      // engine's task: it has none), and said
      const answered = Jobs.hasParentReference(this.source)
        ? Jobs.dropUnfollowableParent(queue.bull, jobId, token).then((dropped) => {
          if (dropped !== undefined) {
            Runtime.runFork(queue.runtime)(Effect.logWarning(Jobs.unfollowableParentMessage(queue.name, jobId, dropped)))
          }
          return answer()
        })
        : answer()
      answered.then(acknowledged, failed).catch((defect: unknown) => {
        // a throw after the answer went through is a bug here: a defect in the fiber, not a
        // rejection no one handles (which would end the process) and a fiber that never resumes
        resume(Effect.die(defect))
      })
    })
  }
}

/** What a replayed answer's log says of the job it took, if any (built only for a replay). */
const tookPhrase = (acked: Jobs.NextJob | undefined, fetchNext: boolean) =>
  acked === undefined ? "" : fetchNext ? `, and job ${acked.id} it took is served now` : `; job ${acked.id} it took is given back`

/**
 * Fails at once a job with a field that is not JSON (its data, its options), which came (active,
 * locked with `token`) with an acknowledgement, rather than leaving it active until it stalls: as
 * BullMQ's worker fails it when it takes such a job itself. Nothing in it can be answered: it names
 * no run.
 */
const failUnreadable = (queue: TaskQueue, next: Jobs.NextJob, token: string) =>
  Effect.try(() => Jobs.TaskJob.fromJSON(queue.bull, next.fields, next.id)).pipe(
    Effect.flatMap((job) => {
      const reason = job.deferredFailure ?? `job ${next.id} on ${queue.name} cannot be read`
      return Effect.zipRight(
        Effect.logError(`${reason}; failing it`),
        Effect.zipRight(Effect.tryPromise(() => job.moveToFailed(new UnrecoverableError(reason), token)), droppedParentLog(job))
      )
    }),
    Effect.catchAll((error) => Effect.logWarning(withReason(`could not fail job ${next.id} on ${queue.name}`, error)))
  )


/** Says so when failing `job` removed a parent reference BullMQ could not follow (see `Jobs.UnfollowableParent`). */
const droppedParentLog = (job: Job): Effect.Effect<void> =>
  Effect.suspend(() => {
    const dropped = job instanceof Jobs.TaskJob ? job.droppedParent : undefined
    return dropped === undefined ? Effect.void : Effect.logWarning(Jobs.unfollowableParentMessage(job.queueName, job.id!, dropped))
  })

/**
 * After each reconnect of `broker`'s connection, once the commands the client sent again have
 * settled, gives back to wait the jobs of `queues` left active under a token of this worker that no
 * delivery serves (see `Orphans`): a take of the next job applied before the connection was lost,
 * and taken again when re-sent, leaves one, which would otherwise wait out its lock and a stalled
 * check. Runs in the registration's scope.
 */
const sweepOrphansOnReconnect = (broker: Broker, queues: ReadonlyArray<TaskQueue>, tokenPrefix: string) =>
  Effect.gen(function*() {
    const sweep = (queue: TaskQueue) =>
      Effect.tryPromise(() => Orphans.findOrphans(broker.client, queue.bull, tokenPrefix, queue.holdings)).pipe(
        Effect.flatMap((orphans) =>
          Effect.forEach(orphans, (orphan) =>
            Effect.tryPromise(() => Orphans.giveBack(queue.bull, orphan)).pipe(
              Effect.flatMap((given) =>
                given
                  ? Effect.logWarning(
                    `job ${orphan.id} on ${queue.name} was active under this worker's lock with no task of it serving it ` +
                      "(taken by a command whose reply was lost with the connection); given back to wait"
                  )
                  : Effect.void
              )
            ), { discard: true })
        ),
        Effect.catchAll((error) => Effect.logWarning(withReason(`could not look for orphaned jobs on ${queue.name}`, error)))
      )
    yield* Orphans.afterEachReconnect(broker.client, Effect.forEach(queues, sweep, { discard: true }))
  })

/**
 * Gives back to wait a job an earlier send of an answer moved to active (locked with `token`) when
 * the answer that learnt of it takes no next job, so it is served by whoever polls next instead of
 * waiting out its lock.
 */
const handBack = (queue: TaskQueue, next: Jobs.NextJob, token: string) =>
  Effect.tryPromise(() => Jobs.TaskJob.fromJSON(queue.bull, next.fields, next.id).moveToWait(token)).pipe(
    Effect.catchAll((error) =>
      Effect.logWarning(withReason(`could not give job ${next.id} on ${queue.name} back`, error, "it is redelivered once its lock expires"))
    )
  )

/**
 * A running job's lease: its lock renewed (and its run's beat published, when it beats) every
 * `interval`. The beat goes whether or not the renewal worked, unless the lock is lost: a renewal
 * Redis refuses with the lock still held (a write refused at `maxmemory`, say, where a publish is
 * not) must not silence the run, or an engine with `remoteAdvanceSilenceMs` re-drives the run while
 * its turn still runs here.
 */
class JobLease implements KeepAlive {
  constructor(readonly delivery: JobDelivery, readonly interval: Duration.Duration, readonly beat: string | undefined) {}

  /** Built when due: most tasks end long before their lock is. */
  get renew(): Effect.Effect<void, TransportError> {
    const renewLock = this.delivery.renewLock()
    const beat = this.beat
    if (beat === undefined) return renewLock
    const publish = Effect.ignore(Effect.tryPromise(() => this.delivery.queue.home.publishBeat(beat)))
    return Effect.flatMap(
      Effect.exit(renewLock),
      (renewed) => Exit.isFailure(renewed) && lostForGood(renewed.cause) ? renewed : Effect.zipRight(publish, renewed)
    )
  }
}

/** Whether a renewal's failure says the lock is lost for good (no beat for a turn this worker no longer holds). */
const lostForGood = (cause: Cause.Cause<TransportError>): boolean =>
  Option.match(Cause.failureOption(cause), { onNone: () => false, onSome: (error) => error.fatal })

/** Follows `cancel` messages on `<P>-control` (malformed control messages are ignored, as every SDK does). */
const subscribeCancellations = (client: Redis, channel: string, cancellations: Cancellations) =>
  Effect.gen(function*() {
    const subscriber = yield* duplicate(client)
    subscriber.on("message", (_channel: string, text: string) => {
      try {
        const message = JSON.parse(text) as { kind?: unknown; runId?: unknown }
        if (message.kind === "cancel" && typeof message.runId === "string") cancellations.cancel(message.runId)
      } catch {
        // not a JSON control message: ignored
      }
    })
    yield* Effect.tryPromise(() => subscriber.subscribe(channel)).pipe(
      Effect.mapError((cause) =>
        new RegistrationError({ transport: NAME, message: `could not subscribe to ${channel}: ${messageOf(cause)}`, cause })
      )
    )
  })

/**
 * Builds the transport service. Its options are checked first: an unknown key or a bad value
 * fails with a {@link BullMQConfigError} naming the option, before anything connects.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: BullMQOptions = {}): Effect.Effect<Transport["Type"], BullMQConfigError> =>
  Effect.map(resolve(options), build)

/** The transport over checked options; connections are opened when the worker registers. */
const build = (config: Resolved): Transport["Type"] => {
  const { commandsPerWrite, connectTimeout, lockDuration, partition, prefix } = config
  const stepBeat = config.stepBeatInterval
  const renewEvery = Duration.min(Duration.divide(lockDuration, 2).pipe(Option.getOrElse(() => lockDuration)), stepBeat ?? Duration.infinity)
  const stalledInterval = Duration.toMillis(config.stalledInterval)
  const name = `bullmq ${describeTarget(config.target)} prefix ${prefix}`
  const protocol = NestDurableProtocol.make({ partition })

  const register = (worker: WorkerDescription): Effect.Effect<Registration, RegistrationError, Scope.Scope> =>
    Effect.gen(function*() {
      yield* WorkerMetrics.connectionsLostFrom(NAME)
      const runtime = yield* Effect.runtime<never>()
      const cancellations = makeCancellations()

      const steps = Protocol.names(worker.handlers.steps)
      const workflows = Protocol.names(worker.handlers.workflows)
      const tokens = Array.from(
        new Set([...steps, ...workflows].map((name) => Naming.routingToken(name, partition)))
      )
      const descriptor = buildDescriptor({
        instanceId: worker.workerId,
        steps,
        workflows,
        startedAt: worker.startedAt,
        partition,
        namespace: config.namespace
      })
      const descriptorJson = JSON.stringify(descriptor)
      const hash = descriptorHash(descriptor)
      const keys = tokens.flatMap((token) => [
        Naming.workerHeartbeatKey(prefix, token, worker.workerId),
        Naming.workerDescriptorKey(prefix, token, worker.workerId)
      ])
      const brokerById = new Map<string, Broker>()
      /** The broker a task's reply goes to: the one its `transport` names, else the one it came from. */
      const replyBroker = (home: Broker, data: unknown) => {
        const named = (data as { transport?: unknown } | null)?.transport
        return (typeof named === "string" ? brokerById.get(named) : undefined) ?? home
      }

      /**
       * A task queue on a broker's connection: its BullMQ worker, with its stalled checks running.
       * The blocking wait for jobs goes over the worker's own blocking connection (which BullMQ
       * opens with it), and takes wait only for the command connection.
       */
      const openTaskQueue = (client: Redis, outage: Outage.Outage, token: string) =>
        Effect.gen(function*() {
          const queueName = Naming.tasksQueue(prefix, token)
          const bull = yield* Effect.acquireRelease(
            Effect.sync(() =>
              new Jobs.TaskWorker(queueName, undefined, {
                connection: client,
                autorun: false,
                lockDuration: Duration.toMillis(lockDuration),
                stalledInterval,
                maxStalledCount: 1
              })
            ),
            (w) => Effect.promise(() => w.close(true).catch(() => undefined))
          )
          bull.on("error", (error) => outage.error(`BullMQ error on ${queueName}`, error))
          // its blocking connection is part of the broker's outage too (not awaited: the start does not wait for it)
          bull.waitUntilReady().then(outage.follow, () => {})
          // a job BullMQ's worker fails as it takes it: its data is not JSON, or it carries a deferred failure
          bull.on("failed", (_job, error) => Runtime.runFork(runtime)(Effect.logError(`${error.message}; failed it`)))
          yield* Effect.promise(() => bull.startStalledCheckTimer())
          return { token, queueName, bull }
        })

      // replicas may share a workerId (one DURABLE_WORKER_ID for all): a nonce per registration keeps
      // their lock tokens apart, so one's orphan sweep never takes back a job another one is running
      const tokenPrefix = `${worker.workerId}:${randomBytes(6).toString("hex")}.`
      // the failed-job bridges' scans at the stop, every queue's, share one bound
      const lastScans = yield* FailedJobs.stopBudget
      let tokenCounter = 0
      /** One subscription: a task queue of a broker, with its poller and the bridge of its failed jobs. */
      const subscribe = (
        home: Broker,
        { bull, queueName, token }: Effect.Effect.Success<ReturnType<typeof openTaskQueue>>
      ) => Effect.gen(function*() {
        const subscription = token
        // a failure goes where the task's answer would have gone: the broker its `transport` names.
        // Started once every broker is open (see `register`), not here
        const bridge = bridgeFailures(home, bull, Duration.millis(stalledInterval), worker.workerId, (data) => replyBroker(home, data), lastScans)
        const marker = bull.keys.marker!
        const blockSeconds = Math.max(0.01, Math.min(5, Duration.toSeconds(worker.pollTimeout)))

        const queue: TaskQueue = {
          holdings: new Orphans.Holdings(),
          name: queueName,
          group: subscription,
          bull,
          home,
          replyBroker: (data) => replyBroker(home, data),
          protocol,
          cancellations,
          lockMillis: Duration.toMillis(lockDuration),
          renewEvery,
          stepBeat,
          runtime
        }

        /**
         * Moves up to `max` jobs to active in one round trip, and hands them over at once. The batch
         * grows across polls (doubling while every take finds a job); after a take that found
         * nothing it is 0: the next poll waits for the queue's marker first (`ready`), then takes
         * one. A queue that trickles costs one take per poll, while a backlog is drained in growing
         * batches, each served as soon as it comes. It never blocks, so it stays uninterruptible as
         * a whole.
         */
        let batch = 1
        const fetch = (max: number) =>
          Effect.tryPromise(async () => {
            const size = Math.min(Math.max(batch, 1), max)
            // every take settles: one that fails must not strand the jobs the others moved to active
            const fetched = await Promise.allSettled(Array.from({ length: size }, async () => {
              const jobToken = `${tokenPrefix}${++tokenCounter}`
              queue.holdings.begin(jobToken)
              try {
                const job = await bull.getNextJob(jobToken, { block: false })
                return job === undefined ? undefined : JobDelivery.ofJob(queue, job, jobToken)
              } finally {
                queue.holdings.end(jobToken)
              }
            }))
            const taken: Array<JobDelivery> = []
            let failure: { readonly reason: unknown } | undefined
            for (const take of fetched) {
              if (take.status === "rejected") failure ??= { reason: take.reason }
              else if (take.value !== undefined) taken.push(take.value)
            }
            if (failure !== undefined && taken.length === 0) throw failure.reason
            batch = taken.length === size ? Math.min(size * 2, MAX_BATCH) : 0
            return { taken, failure }
          }).pipe(
            Effect.mapError(transportError(`taking jobs from ${queueName}`)),
            // some taken, one failed: the jobs taken are served, and the failure said
            Effect.flatMap(({ failure, taken }) =>
              failure === undefined ? Effect.succeed(taken) : Effect.as(
                Effect.logWarning(withReason(`taking a job from ${queueName} failed; serving the ${taken.length} taken with it`, failure.reason)),
                taken
              )
            )
          )

        const poller = Poller.make({
          name: config.brokers.length > 0 ? `queue ${queueName} on ${home.id}` : `queue ${queueName}`,
          pool: protocol.pools.step,
          backlog: waitingJobs(home.client, { wait: bull.keys.wait!, prioritized: bull.keys.prioritized! }, NAME),
          ready: Effect.suspend(() =>
            batch > 0 ? Effect.void : Effect.tryPromise(async () => {
              // the worker's blocking connection, once it is ready
              const blocking = await bull.waitUntilReady()
              return blocking.bzpopmin(marker, blockSeconds)
            }).pipe(
              Effect.asVoid,
              Effect.mapError(transportError(`waiting for jobs on ${queueName}`))
            )
          ),
          poll: fetch
        })
        return { queue, poller, bridge }
      })

      /**
       * One broker of the pool: its connection, then at once its reply writers, its control
       * subscription and its task queues; then the subscriptions over them.
       */
      const openBroker = (id: string, target: Target) =>
        Effect.gen(function*() {
          const client = yield* connect(target, connectTimeout, commandsPerWrite, config.waitForBroker)
          const outage = Outage.make(describeTarget(target), runtime)
          outage.follow(client)
          /** A reply queue, with a writer of its jobs (one name, the engine's reply job options). */
          const replyQueue = (queueName: string, jobName: string) =>
            Effect.gen(function*() {
              const queue = yield* Effect.acquireRelease(
                Effect.sync(() => new Queue(queueName, { connection: client })),
                (queue) => Effect.promise(() => queue.close())
              )
              return yield* Effect.tryPromise({
                try: () => Jobs.jobWriter(queue, jobName, Naming.resultJobOptions),
                catch: (cause) =>
                  new RegistrationError({ transport: NAME, message: `could not prepare ${queueName}: ${messageOf(cause)}`, cause })
              })
            })
          // independent round trips: a worker's start is as long as the longest, not their sum
          const [results, decisions, answerJob, , taskQueues] = yield* Effect.all([
            replyQueue(Naming.resultsQueue(prefix), Naming.JobName.result),
            replyQueue(Naming.decisionsQueue(prefix), Naming.JobName.decision),
            Effect.try({
              try: () => Jobs.jobAnswerer(client),
              catch: (cause) => new RegistrationError({ transport: NAME, message: messageOf(cause), cause })
            }),
            subscribeCancellations(client, Naming.controlChannel(prefix), cancellations),
            forEachAtOnce(tokens, (token) => openTaskQueue(client, outage, token))
          ], { concurrency: "unbounded" })
          if (!answerJob.fastPath) {
            yield* Effect.logWarning(
              `the add and acknowledge scripts of BullMQ ${answerJob.version} are not those of BullMQ ${Jobs.FAST_PATH_BULLMQ}, ` +
                "which this worker's fast answer path was written from: every task is answered through BullMQ's own scripts, " +
                "which costs Redis more per task"
            )
          }
          // The step-events queue is made when a turn first streams a local step, not at the start
          // (most turns replay without one, and a worker's start is short). Its jobs are sent on the
          // decisions' connection, ready by then: an event is in Redis before its turn's decision.
          let stepEvents: { readonly queue: Queue; readonly write: (data: unknown) => Promise<string> } | undefined
          const addStepEvent = (event: unknown) => {
            if (stepEvents === undefined) {
              const queue = new Queue(Naming.stepEventsQueue(prefix), { connection: client })
              // its own readiness and errors are of no use: every write goes through `decisions`' client
              queue.on("error", () => undefined)
              stepEvents = { queue, write: Jobs.sideWriter(decisions, queue, Naming.JobName.stepEvent, Naming.resultJobOptions) }
            }
            return stepEvents.write(event)
          }
          yield* Effect.addFinalizer(() => stepEvents === undefined ? Effect.void : Effect.promise(() => stepEvents!.queue.close()))
          /** The queue a reply goes to (step results and workflow decisions each have theirs), and its job's data. */
          const route = (reply: NestReply) =>
            reply._tag === "StepResult" ? { to: results, data: reply.result } : { to: decisions, data: reply.decision }
          const publishIfHeld = (result: StepResult, key: string, token: string, keptMillis: number) =>
            Effect.tryPromise(() => results.writeIfHeld(result, key, token, keptMillis)).pipe(
              Effect.map((id) => id !== undefined),
              Effect.mapError(transportError(`publishing to ${results.queue.name}`))
            )
          const broker: Broker = {
            id,
            client,
            where: describeTarget(target),
            replyOnce: (reply, of, token) => {
              const { data, to } = route(reply)
              const write = to.prepareIfHeld(data)
              // beside the reply queue's keys; no one else writes it, so the add only runs while it holds nothing
              const record = `${to.queue.keys[""]}answered:${of}:${token}`
              return {
                send: () => write(record, token, Jobs.PENDING_REPLY_RECORD_MILLIS),
                // sent after the add on the same connection; one lost is the day's keep
                acknowledged: (keptMillis) => void client.pexpire(record, keptMillis).catch(() => undefined)
              }
            },
            answer: (reply, tasks, job, token, fetchNext) => {
              const { data, to } = route(reply)
              return answerJob(to, data, tasks, job, token, fetchNext)
            },
            acknowledge: answerJob.acknowledge,
            publishIfHeld,
            // beside the results queue's keys; no one else writes it, so the add only runs while it holds nothing
            publishOnce: (result, of, token, keptMillis) =>
              publishIfHeld(result, `${results.queue.keys[""]}bridged:${of}`, token, keptMillis),
            publishBeat: (message: string) => client.publish(Naming.heartbeatChannel(prefix), message),
            addStepEvent
          }
          const subscriptions = yield* Effect.forEach(taskQueues, (opened) => subscribe(broker, opened))
          return { broker, subscriptions }
        })
      const opened = yield* forEachAtOnce(
        [[config.brokerId, config.target] as const, ...config.brokers],
        ([id, target]) => openBroker(id, target)
      )
      const brokers = opened.map(({ broker }) => broker)
      for (const broker of brokers) brokerById.set(broker.id, broker)
      const subscriptions = opened.flatMap((broker) => broker.subscriptions)
      // The failed-job bridges start once every broker is open, so that their scans at the stop (a
      // finalizer, run in the reverse order of their scope's) come before any broker's connection is
      // closed: a queue's failure may be reported on another broker (its task's `transport`), whose
      // connection, opened after the queue's bridge started (a broker waited for with
      // `waitForBroker`), was closed before that scan, and the report failed. Left to the scan of a
      // worker started within the window after it, it was lost when none was (every worker stopped).
      yield* Effect.forEach(subscriptions, ({ bridge }) => bridge, { discard: true })
      const pollers = subscriptions.map(({ poller }) => poller)
      const taskQueues = subscriptions.map(({ queue }) => queue)

      const writeBeat = (broker: Broker, value: string) => {
        const multi = broker.client.multi()
        for (const token of tokens) {
          multi.set(Naming.workerHeartbeatKey(prefix, token, worker.workerId), value, "EX", WORKER_HEARTBEAT_TTL_SECONDS)
          multi.set(Naming.workerDescriptorKey(prefix, token, worker.workerId), descriptorJson, "EX", WORKER_HEARTBEAT_TTL_SECONDS)
        }
        return multi.exec()
      }
      // the runtime sends one beat at a time: a broker's silence must not outlast the interval
      // between beats (the runtime's `heartbeatInterval`), so half the time since the previous beat
      // (the announcement, the first time) is waited for at most
      let previousBeat: number | undefined
      /** The announcement at registration: written to every broker, or the registration fails. */
      const announce = (status: WorkerStatus) =>
        Effect.tryPromise(() => {
          const value = heartbeatValue({ ts: Date.now(), status, descriptorHash: hash })
          return Promise.all(brokers.map((broker) => writeBeat(broker, value)))
        }).pipe(
          Effect.mapError(transportError("writing the worker heartbeat")),
          Effect.zipLeft(Effect.map(Clock.currentTimeMillis, (now) => (previousBeat = now)))
        )
      // each broker's beat still unanswered, since when and for how long it was waited for: a broker
      // that does not answer (its client holds the commands) holds its own beats only, and the
      // others' keys are still written every interval, so they do not expire while the worker serves
      // their queues; readiness hears of it through `unreachable`
      const unanswered = new Map<Broker, { readonly since: number; readonly bound: Duration.Duration }>()
      const beat = (status: WorkerStatus): Effect.Effect<Option.Option<Duration.Duration>, TransportError> =>
        Effect.flatMap(Clock.currentTimeMillis, (now) => {
          const bound = Duration.millis(Math.max(50, Math.round((now - (previousBeat ?? now - WORKER_HEARTBEAT_INTERVAL_MS)) / 2)))
          previousBeat = now
          const value = heartbeatValue({ ts: Date.now(), status, descriptorHash: hash })
          return Effect.forEach(brokers.filter((broker) => !unanswered.has(broker)), (broker) => {
            unanswered.set(broker, { since: now, bound })
            const written = writeBeat(broker, value).finally(() => unanswered.delete(broker))
            return Effect.tryPromise(() => written).pipe(
              Effect.mapError(transportError(`writing the worker heartbeat to Redis at ${broker.where}`)),
              Effect.timeoutOption(bound),
              Effect.flatMap(Option.match({
                onNone: () =>
                  Effect.logWarning(
                    `Redis at ${broker.where} did not answer the worker heartbeat within ${Duration.format(bound)}; ` +
                      "its heartbeats wait until it answers, the other brokers' go on"
                  ),
                onSome: () => Effect.void
              }))
            )
          }, { concurrency: "unbounded", discard: true }).pipe(Effect.as(Option.none<Duration.Duration>()))
        })

      for (const broker of brokers) {
        yield* sweepOrphansOnReconnect(broker, taskQueues.filter((queue) => queue.home === broker), tokenPrefix)
      }

      // announce the worker only once every subscription is in place; keys written are withdrawn by
      // a stop that came meanwhile (`commit`)
      const announced = Effect.flatMap(worker.status, announce).pipe(
        Effect.mapError((e) => new RegistrationError({ transport: NAME, message: e.message, cause: e }))
      )
      return yield* Registration.commit(announced, (): Registration => ({
        pollers,
        heartbeat: Option.some({ interval: Duration.millis(WORKER_HEARTBEAT_INTERVAL_MS), beat }),
        // the client holds its commands while it reconnects (no failure to see): its state tells;
        // a connected Redis that does not answer (paused, overloaded), the beats it leaves waiting
        unreachable: Effect.map(Clock.currentTimeMillis, (now) => {
          const away = brokers.find(({ client }) => client.status !== "ready")
          if (away !== undefined) return Option.some(`Redis at ${away.where} is ${away.client.status}`)
          for (const [broker, { bound, since }] of unanswered) {
            if (now - since >= Duration.toMillis(bound)) {
              return Option.some(`Redis at ${broker.where} did not answer the worker heartbeat within ${Duration.format(bound)}`)
            }
          }
          return Option.none()
        }),
        // on a broker whose connection is away, not tried: the keys expire by themselves; a worker
        // that serves nothing wrote none (and DEL of no key is an error)
        deregister: keys.length === 0 ? Effect.void : Effect.partition(
          brokers,
          (broker) =>
            broker.client.status === "ready"
              ? Effect.tryPromise({ try: () => broker.client.del(...keys), catch: transportError("deleting the worker's keys") })
              : Effect.fail(unreachableError("deleting the worker's keys", broker)),
          { concurrency: "unbounded" }
        ).pipe(
          Effect.flatMap(([failed]) =>
            failed.length === 0 ? Effect.void : Effect.fail(
              new DeregistrationError({
                transport: NAME,
                message: `could not delete the worker's descriptor and heartbeat keys (${failed.map((e) => e.message).join("; ")}); ` +
                  `they expire by themselves within ${WORKER_HEARTBEAT_TTL_SECONDS} s`,
                cause: failed[0]
              })
            )
          )
        )
      }))
    })

  return { name, protocol, register }
}

/**
 * Publishes a synthetic retryable failure for step jobs that reach BullMQ's failed state (stalled
 * more than allowed, or failed by a peer's infrastructure), so the engine's pending checkpoint never
 * hangs. It looks at the queue's failed set (scored by when the job failed) every `interval`, which
 * costs one range read rather than following every job event; which jobs each read bridges is
 * {@link FailedJobs.watchFailed}'s rule, and which worker bridges each {@link FailedJobs.bridgeOnce}'s:
 * every worker on the queue reads the same set, and a failure reported twice could fail the step's
 * next attempt. A failure is reported on the broker the task's answer would go to (`replyTo`); on
 * `home`, the queue's own, under this worker's claim, in the same script call: while it holds, or
 * lapsed with no one taking it; on another broker, with a record of the report written there in the
 * same script call: unless another worker's report is recorded.
 */
const bridgeFailures = (
  home: Broker,
  tasks: Jobs.TaskWorker,
  interval: Duration.Duration,
  workerId: string,
  replyTo: (data: unknown) => Broker,
  stopBudget: Effect.Effect<Duration.Duration>
) =>
  Effect.gen(function*() {
    const { client } = home
    const queueName = tasks.name
    // beside the queue's failed set, one key per failure (its stamp: a job failed again is claimed anew)
    const claimKey = ({ failedAt, id }: FailedJobs.Failed) => `${tasks.keys.failed}:bridged:${id}:${failedAt}`
    // this bridge's own: a worker id may be shared (DURABLE_WORKER_ID across replicas)
    const token = `${workerId}:${randomUUID()}`
    // Redis takes whole milliseconds only
    const ttl = (duration: Duration.Duration) => Math.ceil(Duration.toMillis(duration))
    const claims: FailedJobs.Claims<never> = {
      claim: (failed, duration) =>
        Effect.map(
          Effect.tryPromise(() => client.set(claimKey(failed), token, "PX", ttl(duration), "NX")),
          (reply) => reply === "OK"
        ),
      keep: (failed, duration) => Effect.tryPromise(() => client.eval(KEEP_CLAIM, 1, claimKey(failed), token, ttl(duration))),
      release: (failed) => Effect.tryPromise(() => client.eval(RELEASE_CLAIM, 1, claimKey(failed), token))
    }
    const publishFailure = (failed: FailedJobs.Failed) =>
      Effect.gen(function*() {
        const { id } = failed
        const job = yield* Effect.tryPromise(() => Jobs.TaskJob.fromId(tasks, id))
        const identity = stepIdentity(job?.data)
        // nothing to report: the claim is kept, so no worker reads it again
        if (job === undefined || identity === undefined) return "sent" as const
        const result: StepResult = {
          runId: identity.runId,
          seq: identity.seq,
          stepId: identity.stepId,
          status: "failed",
          error: { message: `remote step worker failed: ${job.failedReason}`, retryable: true }
        }
        const reported = Effect.logWarning(`job ${id} on ${queueName} failed (${job.failedReason}); reported a retryable failure`)
        const to = replyTo(job.data)
        const kept = ttl(FailedJobs.keptFor(interval, failed, yield* Clock.currentTimeMillis))
        if (to !== home) {
          // on another Redis than the claim's, the report is written with a record of it there, kept
          // as long as a kept claim: one sent again by the client after a lost connection, one held
          // up past its claim while another worker reported the failure, one sent again by a scan
          // after its outcome was lost, finds it and writes nothing; the claim is kept either way
          // (the failure is reported), so the scans leave it
          if (!(yield* to.publishOnce(result, `${home.id}:${queueName}:${id}:${failed.failedAt}`, token, kept))) {
            yield* Effect.logDebug(`job ${id} on ${queueName} failed; another worker reported it on broker ${to.id} already, so not sent again`)
            return "sent" as const
          }
          return yield* Effect.as(reported, "sent" as const)
        }
        // on the claim's own Redis the claim is checked where the report is written, and the report
        // recorded in it for as long as a kept claim lasts (the keep itself): one held up past its
        // claim (a lost connection, the command sent again once it is back) is not written when
        // another worker took the claim meanwhile, and is written once however often and however
        // late it is sent
        if (!(yield* to.publishIfHeld(result, claimKey(failed), token, kept))) {
          yield* Effect.logDebug(`job ${id} on ${queueName} failed; its report was held up past this worker's claim, so not sent`)
          return "held-back" as const
        }
        return yield* Effect.as(reported, "sent-and-kept" as const)
      })
    const bridgeOnce = FailedJobs.bridgeOnce(interval, claims, publishFailure)
    const bridge = (failed: FailedJobs.Failed) =>
      bridgeOnce(failed).pipe(
        Effect.catchAllCause((cause) =>
          Effect.as(
            Effect.logWarning(`could not bridge failed job ${failed.id} on ${queueName}; trying again at the next scan`, cause),
            "failed" as const
          )
        )
      )
    const read = (from: number) =>
      Effect.tryPromise(() => client.zrangebyscore(tasks.keys.failed!, `(${from}`, "+inf", "WITHSCORES")).pipe(
        Effect.map((flat) => {
          const failed: Array<FailedJobs.Failed> = []
          for (let i = 0; i + 1 < flat.length; i += 2) failed.push({ id: flat[i]!, failedAt: Number(flat[i + 1]) })
          return failed
        }),
        Effect.catchAll((error) =>
          Effect.as(Effect.logWarning(withReason(`could not read the failed jobs of ${queueName}`, error)), [])
        )
      )
    // the scan at the stop waits for no Redis that is away (its commands would wait for the reconnect)
    const atStop = Effect.suspend(() => client.status === "ready" ? stopBudget : Effect.succeed(Duration.zero))
    yield* Effect.forkScoped(FailedJobs.watchFailed(interval, read, bridge, atStop))
  })

/** Holds a claim for ARGV[2] ms more, if ARGV[1] (this worker) holds it, with the report it sent recorded or not. */
const KEEP_CLAIM = `local holder = redis.call("GET", KEYS[1])
if holder == ARGV[1] or (holder and string.sub(holder, 1, #ARGV[1] + 6) == ARGV[1] .. ":sent:") then
  return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0`

/** Gives up a claim, if ARGV[1] (this worker) holds it and sent nothing under it (a sent report is never given up). */
const RELEASE_CLAIM = `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`

/**
 * The transport as a layer; building it fails with a {@link BullMQConfigError} when an option is
 * unknown or invalid, before anything connects.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: BullMQOptions = {}): Layer.Layer<Transport, BullMQConfigError> =>
  Layer.effect(Transport, make(options))

/** The variables {@link layerConfig} reads, by the option each gives. */
const VARIABLES = {
  url: "REDIS_URL",
  prefix: "DURABLE_PREFIX",
  namespace: "DURABLE_NAMESPACE",
  partition: "DURABLE_PARTITION"
} as const

/**
 * The transport configured from the environment: `REDIS_URL` (default `redis://127.0.0.1:6379`; read
 * as a `Redacted`, so its password stays out of logs),
 * `DURABLE_PREFIX` (default `durable`), `DURABLE_NAMESPACE`, `DURABLE_PARTITION`. Explicit options
 * win over the environment; the result is checked as {@link layer} checks its options.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (options: BullMQOptions = {}): Layer.Layer<Transport, ConfigError.ConfigError | BullMQConfigError> =>
  Layer.effect(
    Transport,
    Effect.flatMap(
      Config.all({
        url: optional(Config.redacted(VARIABLES.url)),
        prefix: optional(Config.string(VARIABLES.prefix)),
        namespace: optional(Config.string(VARIABLES.namespace)),
        partition: optional(Config.string(VARIABLES.partition))
      }),
      (env) =>
        make(overRead(env, options)).pipe(
          Effect.mapError(namingVariables(VARIABLES, env, options, (option, message) => new BullMQConfigError({ option, message })))
        )
    )
  )
