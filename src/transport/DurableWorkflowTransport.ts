/**
 * The Durable Workflow server transport (worker protocol 1.1 over HTTP).
 *
 * - registration: the process-wide definition-fingerprint guard (`WorkflowDefinitionChanged`), then
 *   `GET /api/cluster/info` and its compatibility check (errors start `Server compatibility error: `;
 *   declared update validators need the server's synchronous pre-accept update validation), then
 *   `POST /api/worker/register` with the workflow and activity types, definition fingerprints, command
 *   contracts, capabilities (`query_tasks`, `update_validation_tasks`, `workflow_updates`), limits, free
 *   task slots and process metrics;
 * - update validation: with validators declared, workflow polls ask for
 *   `task_kinds: ["workflow", "update_validation"]`; a validation task is answered on
 *   `/update-validation-tasks/{id}/approve` or `/reject` and shares the workflow slots;
 * - three pollers: workflow tasks (pool `workflow`), activity tasks (pool `step`) and, when the
 *   server advertises them, query tasks (pool `query`, one at a time); each long poll carries
 *   `timeout_seconds` (≤ 60), runs under an HTTP timeout 5 s longer, is retried once with the same
 *   `poll_request_id` after a timeout, and is interrupted at once when the worker stops;
 * - results: workflow-task completion with lease/attempt fencing, a definite rejection reported as a
 *   task failure; activity completion/failure; query answers. Completions and failure reports of
 *   workflow and activity tasks ride out transient errors (network, 5xx, 429) with a backoff that
 *   honours `Retry-After`, for up to half the task's remaining lease and at most 30 s;
 * - a registration the server no longer has (`worker_not_registered` on a poll or a heartbeat) is
 *   sent again, once for all the pollers and the heartbeat that found the loss; a refusal of it, or
 *   a loss again before any poll worked, ends the run; a 401/403 on a poll ends the run too;
 * - worker heartbeats at the server-advertised interval (from the register ack, then from each
 *   heartbeat reply that announces one) with `task_slots` and `process_metrics`;
 * - the worker-plane `DELETE /api/worker/registrations/{id}` at shutdown (an absent worker counts as
 *   deregistered) — separate from the control-plane {@link deregisterWorker}.
 *
 * @since 0.1.0
 */
import * as HttpClient from "@effect/platform/HttpClient"
import * as FetchHttpClient from "@effect/platform/FetchHttpClient"
import * as Clock from "effect/Clock"
import * as Config from "effect/Config"
import type * as ConfigError from "effect/ConfigError"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as FiberId from "effect/FiberId"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Predicate from "effect/Predicate"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import { randomBytes } from "node:crypto"
import { guardDefinitions } from "../core/DurableWorkflow.js"
import type { Command } from "../core/internal/durableWorkflow/replay.js"
import { withReason } from "../core/internal/errors.js"
import { unrecallable } from "../core/internal/interruption.js"
import { checkDuration, optional, overRead } from "../core/internal/options.js"
import { VERSION } from "../core/internal/version.js"
import * as DurableWorkflowProtocol from "../protocol/DurableWorkflowProtocol.js"
import type { FailureBody, TaskKind, WorkerInterceptor } from "../protocol/DurableWorkflowProtocol.js"
import { type DurationOption, WorkerConfigError, type WorkerOptions } from "../runtime/WorkerConfig.js"
import * as Protocol from "../seam/Protocol.js"
import * as Codec from "../wire/DurableWorkflowCodec.js"
import * as Client from "./durableWorkflow/internal/client.js"
import * as Compat from "./durableWorkflow/internal/compat.js"
import {
  DurableWorkflowConfigError,
  type DurableWorkflowError,
  DurableWorkflowServerError,
  reasonOf,
  ServerCompatibilityError
} from "./durableWorkflow/internal/errors.js"
import * as External from "./durableWorkflow/internal/externalStorage.js"
import * as Refusals from "./internal/connectErrors.js"
import { checks, namingVariables, show } from "./internal/options.js"
import { isSecret, redact, redactUrl, reveal, safeCause, type Secret } from "./internal/redact.js"
import { waitFor } from "./internal/startup.js"
import * as Heartbeat from "./durableWorkflow/internal/heartbeat.js"
import * as Metrics from "./durableWorkflow/internal/metrics.js"
import { makeSampler } from "./durableWorkflow/internal/processMetrics.js"
import {
  Delivery,
  DeregistrationError,
  Poller,
  Registration,
  RegistrationError,
  Transport,
  TransportError,
  type WorkerDescription,
  type WorkerStatus
} from "../seam/Transport.js"

export * from "./durableWorkflow/internal/errors.js"
export {
  ExternalPayloadIntegrityError,
  ExternalStorageError,
  type ExternalStorageDriver,
  localFilesystem,
  s3
} from "./DurableWorkflowExternalStorage.js"
export type { WorkerInterceptor } from "../protocol/DurableWorkflowProtocol.js"

/**
 * Options of the Durable Workflow transport.
 *
 * @since 0.1.0
 * @category models
 */
export interface DurableWorkflowOptions {
  /** The server root (or a managed-runtime prefix); not ending in `/api`, no query or fragment. */
  readonly baseUrl: string
  /** The shared bearer token (both planes), a string or a `Redacted`; never shown in a message. */
  readonly token?: Secret | undefined
  /** A worker-plane token; wins over `token` on the worker plane and for discovery. */
  readonly workerToken?: Secret | undefined
  /** A control-plane token; wins over `token` on the control plane. */
  readonly controlToken?: Secret | undefined
  /**
   * Wait for a server that does not answer at start (logged once, retried with a backoff of up to
   * 5 s) instead of failing the start. A refused token (HTTP 401/403) still fails at once.
   * Default `false`.
   */
  readonly waitForBroker?: boolean | undefined
  /** `X-Namespace`. Default `"default"`. */
  readonly namespace?: string | undefined
  /** The task queue the worker registers on and polls. */
  readonly taskQueue: string
  /** Worker protocol version sent in `X-Durable-Workflow-Protocol-Version`. Default `"1.1"`. */
  readonly protocolVersion?: string | undefined
  /** Control-plane version sent in `X-Durable-Workflow-Control-Plane-Version`. Default `"2"`. */
  readonly controlPlaneVersion?: string | undefined
  /** Timeout of non-poll requests. Default 60 seconds. */
  readonly requestTimeout?: DurationOption | undefined
  /**
   * Worker heartbeat interval until the server advertises one. Default 60 seconds; must be positive.
   * A positive integer `heartbeat_interval_seconds` in the register ack replaces it; one in a
   * heartbeat reply sets the wait before the following heartbeats (over the worker's own
   * `heartbeatInterval` too), until a later reply announces another.
   */
  readonly heartbeatInterval?: DurationOption | undefined
  /** Hooks around workflow tasks, activities and queries, outermost first. */
  readonly interceptors?: ReadonlyArray<WorkerInterceptor> | undefined
  /**
   * Where outbound payloads above `externalStorageThresholdBytes` go, and where inbound
   * `external_storage` references are read from (size and SHA-256 checked): a driver from
   * `DurableWorkflowExternalStorage` (`localFilesystem`, `s3`, `make` for any other store).
   */
  readonly externalStorage?: External.ExternalStorageDriver | undefined
  /** Size of a base64 blob above which it is stored externally (needs `externalStorage`). At least 1. */
  readonly externalStorageThresholdBytes?: number | undefined
  /** `sdk_version` sent at registration. */
  readonly sdkVersion?: string | undefined
}

/**
 * A control-plane / discovery client for the configured server, provided by the layers with
 * {@link Transport}; {@link workflowTerminal} and {@link deregisterWorker} use it.
 *
 * @since 0.1.0
 * @category services
 */
export class DurableWorkflowClient extends Context.Tag("effect-durable-worker/DurableWorkflowClient")<
  DurableWorkflowClient,
  {
    /** One request below `/api`, on the worker or control plane, with the transport retry. */
    readonly request: (options: {
      readonly method: "GET" | "POST" | "DELETE"
      readonly path: string
      readonly body?: unknown
      readonly plane: "worker" | "control" | "discovery"
      readonly context?: string
    }) => Effect.Effect<unknown, DurableWorkflowError>
  }
>() {}

const NAME = "durable-workflow"
const SDK_VERSION = `effect-durable-worker/${VERSION}`
const AMBIGUOUS_REASONS = new Set([
  "lease_expired",
  "lease_owner_mismatch",
  "run_already_closed",
  "run_closed",
  "task_not_found",
  "task_not_leased",
  "workflow_task_attempt_mismatch"
])
const FINAL_QUERY_REASONS = new Set(["lease_expired", "query_task_not_found", "query_task_not_leased", "query_task_timed_out"])
/** Reasons that fence an update-validation answer off for good: the task outcome is `expired`. */
const FINAL_VALIDATION_REASONS = new Set([
  "duplicate_update_validation_completion",
  "stale_update_validation_completion",
  "update_validation_lease_expired",
  "update_validation_task_not_found",
  "update_validation_task_not_leased",
  "update_validator_worker_lost"
])

const hex = (bytes: number) => randomBytes(bytes).toString("hex")

/**
 * The six metric series (reference §2.11), as Effect `Metric`s: `clientRequests` /
 * `clientRequestDuration` (tags `method`, `route`, `plane`, `status_code`, `outcome`), `workerPolls` /
 * `workerPollDuration` and `workerTasks` / `workerTaskDuration` (tags `task_kind`, `task_queue`,
 * `outcome`). Read them with `Metric.value(Metric.tagged(...))` or any Effect metrics exporter.
 *
 * @since 0.1.0
 * @category metrics
 */
export const metrics = {
  clientRequests: Metrics.clientRequests,
  clientRequestDuration: Metrics.clientRequestDuration,
  workerPolls: Metrics.workerPolls,
  workerPollDuration: Metrics.workerPollDuration,
  workerTasks: Metrics.workerTasks,
  workerTaskDuration: Metrics.workerTaskDuration
} as const

/**
 * Whether a workflow-task completion error is *definite* (the server refused the commands: report a
 * task failure) rather than ambiguous (the commands may have been recorded: log only). @internal
 */
export const isDefiniteCompletionError = (error: DurableWorkflowError): boolean => {
  if (error._tag === "DurableWorkflowRequestError") return false
  if (error._tag === "DurableWorkflowServerError") {
    return error.status < 500 && error.status !== 429 && !AMBIGUOUS_REASONS.has(error.reason ?? "")
  }
  return true
}

/** Whether a query-completion error is a final rejection of the query task (outcome `expired`). */
const isFinalQueryRejection = (error: DurableWorkflowError): boolean =>
  error._tag === "DurableWorkflowServerError" && (error.status === 404 || error.status === 409) && FINAL_QUERY_REASONS.has(error.reason ?? "")

/** Whether an approve/reject error is a final (fenced) rejection of the validation task (outcome `expired`). */
const isFinalValidationRejection = (error: DurableWorkflowError): boolean => FINAL_VALIDATION_REASONS.has(reasonOf(error) ?? "")

/** JSON-safe copy of a decoded value (bigint → number or string, bytes → base64). */
const toJson = (value: unknown): unknown => {
  if (typeof value === "bigint") return Number.isSafeInteger(Number(value)) ? Number(value) : value.toString()
  if (value instanceof Uint8Array) return Buffer.from(value).toString("base64")
  if (Array.isArray(value)) return value.map(toJson)
  if (Predicate.isRecord(value)) {
    if (typeof (value as { valueOf?: unknown }).valueOf === "function" && typeof value.valueOf() === "number") return value.valueOf()
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, toJson(v)]))
  }
  return value
}

interface Resolved {
  readonly settings: Client.ClientSettings
  readonly taskQueue: string
  readonly heartbeatInterval: Duration.Duration
  readonly interceptors: ReadonlyArray<WorkerInterceptor>
  readonly externalStorage: External.ExternalStorageDriver | undefined
  readonly threshold: number | undefined
  readonly sdkVersion: string
  readonly waitForBroker: boolean
}

const OPTION_KEYS: ReadonlyArray<keyof DurableWorkflowOptions> = [
  "baseUrl",
  "token",
  "workerToken",
  "controlToken",
  "waitForBroker",
  "namespace",
  "taskQueue",
  "protocolVersion",
  "controlPlaneVersion",
  "requestTimeout",
  "heartbeatInterval",
  "interceptors",
  "externalStorage",
  "externalStorageThresholdBytes",
  "sdkVersion"
]

// options that are not an object are refused under no one option ("")
const configError = (option: string, message: string) =>
  new DurableWorkflowConfigError(option === "" ? { message } : { option, message })

const { boolean, duration, fail, integer, refuseUnknown, string } = checks("Durable Workflow", configError, "60 seconds")

const resolve = (options: DurableWorkflowOptions): Either.Either<Resolved, DurableWorkflowConfigError> =>
  Either.gen(function*() {
    // required (from JavaScript, they can be left out): the server's URL at least
    if (options === undefined) return yield* fail("", "Durable Workflow options are required: { baseUrl, … } (the server's URL at least)")
    yield* refuseUnknown(options, OPTION_KEYS)
    for (const key of ["token", "workerToken", "controlToken"] as const) {
      const value: unknown = options[key]
      if (value === undefined) continue
      if (!isSecret(value)) return yield* fail(key, `${key} must be a string or a Redacted string`)
      // an empty token would go out as "Authorization: Bearer " and be refused as a wrong one
      if (reveal(value)!.trim() === "") return yield* fail(key, `${key} is empty: leave it out for a server without tokens`)
    }
    for (const key of ["namespace", "protocolVersion", "controlPlaneVersion"] as const) {
      const value: unknown = options[key]
      if (value !== undefined && (typeof value !== "string" || value.trim() === "" || value.trim() !== value)) {
        return yield* fail(key, `${key} must be a non-empty string without blanks around it, got ${show(value)}`)
      }
    }
    const waitForBroker = (yield* boolean("waitForBroker", options.waitForBroker)) ?? false
    const baseUrl = Client.normalizeBaseUrl(options.baseUrl)
    if (typeof baseUrl !== "string") return yield* Either.left(baseUrl)
    // required, and not blanks only
    const taskQueue = (yield* string("taskQueue", options.taskQueue)) ?? ""
    if (taskQueue.trim() === "") return yield* fail("taskQueue", `taskQueue must be a non-empty string, got ${show(options.taskQueue)}`)
    // both default to 60 seconds, null too (the shared check passes only undefined through)
    const heartbeatInterval = (yield* duration("heartbeatInterval", options.heartbeatInterval ?? undefined)) ?? Duration.seconds(60)
    // positive but, unlike the shared check, not required finite
    const timeout = yield* Either.mapLeft(
      checkDuration("requestTimeout", options.requestTimeout ?? "60 seconds", { positive: true, example: "60 seconds" }),
      (message) => configError("requestTimeout", message)
    )
    const threshold = yield* integer("externalStorageThresholdBytes", options.externalStorageThresholdBytes, 1)
    return {
      settings: {
        baseUrl,
        token: reveal(options.token),
        workerToken: reveal(options.workerToken),
        controlToken: reveal(options.controlToken),
        namespace: options.namespace ?? "default",
        protocolVersion: options.protocolVersion ?? Compat.WORKER_PROTOCOL_VERSION,
        controlPlaneVersion: options.controlPlaneVersion ?? "2",
        timeout
      },
      taskQueue,
      heartbeatInterval,
      interceptors: options.interceptors ?? [],
      externalStorage: options.externalStorage,
      threshold,
      sdkVersion: options.sdkVersion ?? SDK_VERSION,
      waitForBroker
    }
  })

const transportError = (operation: string) => (error: Error) =>
  new TransportError({ transport: NAME, operation, message: error.message, cause: error })

/**
 * Builds the transport on an `HttpClient`. Fails on invalid options.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  options: DurableWorkflowOptions
): Effect.Effect<Transport["Type"], DurableWorkflowConfigError, HttpClient.HttpClient> =>
  Effect.gen(function*() {
    const resolved = yield* resolve(options)
    const client = yield* Client.make(resolved.settings)
    const cache = new External.PayloadCache()
    const protocol = DurableWorkflowProtocol.make({ interceptors: resolved.interceptors })
    const where = redactUrl(resolved.settings.baseUrl)
    const secrets = [resolved.settings.token, resolved.settings.workerToken, resolved.settings.controlToken]
    /**
     * A failed start's error: a 401 / 403 as an `AuthenticationError` / `PermissionError` cause
     * with what to check, anything else worded by `otherwise`; secrets masked, the cause made safe
     * (an HTTP error keeps its request, headers included).
     */
    /**
     * A 401 / 403 as an `AuthenticationError` / `PermissionError` saying what to check (secrets
     * masked, the cause made safe); undefined for any other error.
     */
    const refusalOf = (error: DurableWorkflowError) => {
      const status = error._tag === "DurableWorkflowUnauthorized"
        ? 401
        : error._tag === "DurableWorkflowServerError"
        ? error.status
        : undefined
      const refusal = status === undefined ? undefined : Refusals.http(status, redact(error.message, secrets))
      return refusal === undefined ? undefined : Refusals.toError(NAME, refusal, `the Durable Workflow server at ${where}`, {
        authentication: "check DURABLE_WORKFLOW_AUTH_TOKEN (or the token / workerToken option) against the server's tokens",
        permission: `check that the token may use namespace "${resolved.settings.namespace}" and the worker plane ` +
          "(a worker token, or a shared token with worker access)"
      }, safeCause(error, secrets))
    }
    const startError = (error: DurableWorkflowError, otherwise: (message: string) => string, refusedPrefix = "") => {
      const refused = refusalOf(error)
      if (refused !== undefined) {
        return new RegistrationError({ transport: NAME, message: `${refusedPrefix}${refused.message}`, cause: refused })
      }
      return new RegistrationError({
        transport: NAME,
        message: redact(otherwise(error.message), secrets),
        cause: safeCause(error, secrets)
      })
    }
    /** A call at start: with `waitForBroker`, retried while the server does not answer. */
    const atStart = <A>(call: Effect.Effect<A, DurableWorkflowError>) =>
      resolved.waitForBroker
        ? waitFor(
          call,
          (error) => error._tag === "DurableWorkflowRequestError" ? `the Durable Workflow server at ${where} to answer` : undefined,
          { describe: (error) => redact(error.message, secrets) }
        )
        : call
    const name = `${NAME} ${where} namespace ${resolved.settings.namespace} queue ${resolved.taskQueue}`
    /**
     * A failed poll (or its probe) as a `TransportError`. A refused token (401) or role (403) is
     * fatal: it is not coming back by itself (a revoked token), so the run ends through its shutdown
     * with the refusal as its cause, instead of polling once a second for ever.
     */
    const pollError = (operation: string) => (error: DurableWorkflowError) => {
      const refused = refusalOf(error)
      return refused === undefined
        ? transportError(operation)(error)
        : new TransportError({ transport: NAME, operation, message: refused.message, cause: refused, fatal: true })
    }

    const register = (description: WorkerDescription) =>
      Effect.gen(function*() {
        const workerId = description.workerId
        const taskQueue = resolved.taskQueue
        const handlers = description.handlers
        const definitions = Array.from(handlers.durableWorkflows.values())
        // the process-wide (worker id, workflow type) → fingerprint guard, before any I/O
        const guard = guardDefinitions(workerId, definitions)
        if (Either.isLeft(guard)) {
          return yield* new RegistrationError({ transport: NAME, message: guard.left.message, cause: guard.left })
        }
        const withValidators = definitions.filter((d) => d.specs.updateValidators.length > 0).map((d) => d.name)
        const withUpdates = definitions.some((d) => Object.keys(d.specs.updates).length > 0)
        const info = yield* atStart(client.request({ method: "GET", path: "/cluster/info", plane: "discovery" })).pipe(
          Effect.mapError((error) =>
            startError(error, (message) =>
              error._tag === "DurableWorkflowRequestError"
                ? `could not reach the Durable Workflow server at ${where} (${message}); check that it is running and that ` +
                  "DURABLE_WORKFLOW_SERVER_URL (or baseUrl) points at it"
                : `Server compatibility error: unable to read /api/cluster/info: ${message}`, // the SDKs' wording (fails closed)
              "Server compatibility error: unable to read /api/cluster/info: ")
          )
        )
        const server = Compat.check(info, resolved.settings.protocolVersion)
        if ("problem" in server) {
          return yield* new RegistrationError({
            transport: NAME,
            message: server.problem,
            cause: new ServerCompatibilityError({ message: server.problem })
          })
        }
        if (withValidators.length > 0 && !server.updateValidation) {
          const problem = "Server compatibility error: this worker declares update validators, but the server does not advertise " +
            "synchronous pre-accept update validation (server_capabilities.update_validation_tasks with the multiplexed " +
            "synchronous_update_validation contract); upgrade the server or remove the update validators of " +
            withValidators.join(", ")
          return yield* new RegistrationError({ transport: NAME, message: problem, cause: new ServerCompatibilityError({ message: problem }) })
        }
        /** Multiplexed workflow polls: update-validation tasks arrive with the workflow tasks. */
        const multiplexed = withValidators.length > 0
        const capabilities = [
          ...(server.queryTasks ? ["query_tasks"] : []),
          ...(multiplexed ? ["update_validation_tasks"] : []),
          ...(withUpdates ? ["workflow_updates"] : [])
        ]
        const clock = yield* Effect.clock
        const sample = makeSampler(() => clock.unsafeCurrentTimeMillis())
        const timing = Compat.pollTiming(Duration.toSeconds(description.pollTimeout), server.longPollTimeout)
        let workflowPollOutstanding = false
        /** Free slots of the pools the worker reports (the outstanding workflow poll holds one). */
        const taskSlots = (status: WorkerStatus) => {
          const workflow = status.slots?.["workflow"]
          const step = status.slots?.["step"]
          if (workflow === undefined && step === undefined) return undefined
          return {
            ...(workflow === undefined
              ? {}
              : { workflow_available: Math.max(0, workflow.limit - workflow.running - (workflowPollOutstanding ? 1 : 0)) }),
            ...(step === undefined ? {} : { activity_available: Math.max(0, step.limit - step.running) })
          }
        }
        const initial = yield* description.status
        const fingerprints = Object.fromEntries(definitions.map((d) => [d.name, d.fingerprint]))
        const contracts = Object.fromEntries(definitions.map((d) => [d.name, d.contract]))
        const slots = taskSlots(initial)
        const registerBody = {
          worker_id: workerId,
          task_queue: taskQueue,
          runtime: "typescript",
          sdk_version: resolved.sdkVersion,
          supported_workflow_types: Protocol.names(handlers.durableWorkflows),
          supported_activity_types: Protocol.names(handlers.steps),
          workflow_definition_fingerprints: fingerprints,
          workflow_command_contracts: contracts,
          ...(capabilities.length > 0 ? { capabilities } : {}),
          ...(description.buildId === undefined ? {} : { build_id: description.buildId }),
          max_concurrent_workflow_tasks: initial.slots?.["workflow"]?.limit ?? 10,
          max_concurrent_activity_tasks: initial.slots?.["step"]?.limit ?? initial.concurrency.limit,
          ...(slots === undefined ? {} : { task_slots: slots }),
          process_metrics: sample()
        }
        // what follows builds the registration; the register request that makes it is sent last (`commit`)

        /** Counts the re-registrations the server accepted: a call that began before one needs none. */
        let generation = 0
        /** Whether a poll worked since the last re-registration (true before any). */
        let pollWorkedSince = true
        /** The re-registration in flight, which every poller and the heartbeat that found the loss await. */
        let reRegistering: Deferred.Deferred<void, TransportError> | undefined
        /**
         * Held by a re-registration while it is sent; the deregistration takes it first. A request
         * sent cannot be recalled: one that reached the server after the DELETE would register the
         * worker again, a registration nobody withdraws (until pruned as stale).
         */
        const registering = yield* Effect.makeSemaphore(1)
        /** Set when the deregistration begins: no re-registration is sent from then on. */
        let withdrawn = false
        const isNotRegistered = (error: DurableWorkflowError) => reasonOf(error) === "worker_not_registered"
        const reRegisterError = (error: DurableWorkflowError) => {
          const refused = refusalOf(error)
          const operation = "register again"
          if (refused !== undefined) return new TransportError({ transport: NAME, operation, message: refused.message, cause: refused, fatal: true })
          // a server away for a moment: the next poll finds the loss again and tries again
          if (Client.isTransient(error)) return transportError(operation)(error)
          return new TransportError({
            transport: NAME,
            operation,
            message: `the server no longer has worker ${workerId}'s registration and refused to register it again: ${redact(error.message, secrets)}`,
            cause: safeCause(error, secrets),
            fatal: true
          })
        }
        /**
         * Sends the registration again after the server answered `worker_not_registered` (it pruned
         * the worker as stale, or lost its registrations): once for every poller and the heartbeat
         * that found the loss together, then they resume. `seen` is the generation the caller's
         * request went out in; a re-registration since then already healed what it found.
         *
         * Ordered before the deregistration, whoever asks for it (a poll or a beat): it holds
         * `registering` while it is sent, each request uninterruptibly (a request sent cannot be
         * recalled, and one cut on the client's side could still reach the server after the DELETE);
         * the deregistration waits for it, and none is sent once the deregistration has begun.
         */
        const reRegister = (seen: number): Effect.Effect<void, TransportError> =>
          Effect.suspend(() => {
            if (seen !== generation) return Effect.void
            if (reRegistering !== undefined) return Deferred.await(reRegistering)
            const done = Deferred.unsafeMake<void, TransportError>(FiberId.none)
            reRegistering = done
            const send = Effect.gen(function*() {
              if (withdrawn) {
                return yield* new TransportError({
                  transport: NAME,
                  operation: "register again",
                  message: `worker ${workerId} is being deregistered: its registration is not sent again`
                })
              }
              yield* Effect.logWarning(`the server no longer has the registration of worker ${workerId} (worker_not_registered); registering it again`)
              const slots = taskSlots(yield* description.status)
              const body = { ...registerBody, ...(slots === undefined ? {} : { task_slots: slots }), process_metrics: sample() }
              // the transport retry, its waits interruptible, its requests not by the caller (`unrecallable`),
              // so that requestTimeout still ends one the server does not answer
              yield* unrecallable(client.requestOnce({ method: "POST", path: "/worker/register", body, plane: "worker" })).pipe(
                Effect.retry({ schedule: Client.transportRetry, while: Client.isTransient }),
                Effect.mapError(reRegisterError)
              )
              generation += 1
              pollWorkedSince = false
              yield* Effect.logInfo(`worker ${workerId} registered again`)
            })
            return registering.withPermits(1)(send).pipe(
              // the awaiting callers learn how it ended, a stop that cut it short included
              Effect.onExit((exit) =>
                Effect.suspend(() => {
                  reRegistering = undefined
                  return Deferred.done(done, exit)
                })
              )
            )
          })

        const recordTask = (kind: TaskKind, outcome: string, startedAt: number) =>
          Effect.flatMap(Clock.currentTimeMillis, (now) =>
            Metrics.record(
              Metrics.workerTasks,
              Metrics.workerTaskDuration,
              { task_kind: kind, task_queue: taskQueue, outcome },
              (now - startedAt) / 1000
            ))

        const post = (path: string, body: unknown) => client.request({ method: "POST", path, body, plane: "worker" })

        /**
         * A completion or failure report of a task that ran, sent with {@link Client.reportRetry}
         * within `budget`; fails with the last error. The retries (and their waits) can be
         * interrupted: a worker stopped at its deadline leaves the task to its lease rather than
         * hold its stop for the server.
         */
        const report = (path: string, body: unknown, budget: Duration.Duration) =>
          Effect.interruptible(
            Effect.retry(client.requestOnce({ method: "POST", path, body, plane: "worker" }), Client.reportRetry(budget))
          ).pipe(
            Effect.onInterrupt(() => Effect.logWarning(`${path}: not sent, the worker stopped; the task is left to its lease`))
          )

        /** Completes a workflow task: a bounded retry, then a definite refusal is reported as a task failure. */
        const completeWorkflow = (taskId: string, attempt: unknown, commands: ReadonlyArray<Command>, budget: Duration.Duration) =>
          Effect.gen(function*() {
            const body = { lease_owner: workerId, workflow_task_attempt: attempt, commands }
            const sent = yield* Effect.either(report(`/worker/workflow-tasks/${taskId}/complete`, body, budget))
            if (Either.isRight(sent)) return "completed" as const
            const error = sent.left
            if (isDefiniteCompletionError(error)) {
              yield* Effect.logError(withReason("workflow task completion was refused", error, "reporting the task as failed"))
              yield* report(`/worker/workflow-tasks/${taskId}/fail`, {
                lease_owner: workerId,
                workflow_task_attempt: attempt,
                failure: {
                  message: `workflow task completion failed after commands were produced: ${error.message}`,
                  type: error._tag,
                  stack_trace: error.stack ?? ""
                }
              }, budget).pipe(Effect.catchAll((e) => Effect.logWarning(withReason("could not report the workflow task failure", e))))
              return "failed" as const
            }
            yield* Effect.logWarning(withReason("workflow task completion outcome is unknown", error, "the commands may be recorded"))
            return "completed" as const
          })

        /**
         * The history pages after the first. Unlike the SDK, which replays what came, a page that
         * cannot be fetched (after the transport retry), a page token that comes back a second time,
         * or more events than the server's `total_history_events` fail it: a replay of part of the
         * history would answer with wrong commands (an activity already done scheduled again).
         */
        const remainingHistory = (taskId: string, attempt: unknown, task: Record<string, unknown>) =>
          Effect.gen(function*() {
            const failed = (message: string, cause?: unknown) =>
              new TransportError({
                transport: NAME,
                operation: "fetch the workflow task history",
                message,
                ...(cause === undefined ? {} : { cause })
              })
            const events: Array<unknown> = []
            const firstPage = Array.isArray(task["history_events"]) ? task["history_events"].length : 0
            let total = task["total_history_events"]
            const seen = new Set<string>()
            let token = task["next_history_page_token"]
            while (typeof token === "string" && token !== "") {
              // a server that hands out a token twice would have the worker page for ever
              if (seen.has(token)) return yield* failed("the server sent the same history page token twice")
              seen.add(token)
              const page = yield* Effect.either(post(`/worker/workflow-tasks/${taskId}/history`, {
                next_history_page_token: token,
                lease_owner: workerId,
                workflow_task_attempt: attempt
              }))
              if (Either.isLeft(page)) return yield* failed(`a history page could not be fetched: ${page.left.message}`, page.left)
              const body = Predicate.isRecord(page.right) ? page.right : {}
              if (Array.isArray(body["history_events"])) events.push(...body["history_events"])
              total = body["total_history_events"] ?? total
              if (typeof total === "number" && firstPage + events.length > total) {
                return yield* failed(`the history pages hold more events (${firstPage + events.length}) than the server's total_history_events (${total})`)
              }
              token = body["next_history_page_token"]
            }
            return events
          })

        /** External-storage references of a task or history payload, replaced by their (verified) inline form. */
        const resolvePart = (part: unknown) =>
          Effect.mapError(External.resolveInbound(part, resolved.externalStorage, cache), transportError("read an external payload"))

        /** An outbound inline envelope, stored externally above the threshold. */
        const storePart = (part: unknown) =>
          Schema.is(Codec.PayloadEnvelope)(part)
            ? Effect.mapError(External.storeOutbound(part, resolved.externalStorage, resolved.threshold), transportError("store an external payload"))
            : Effect.fail(new TransportError({ transport: NAME, operation: "store an external payload", message: "not an inline payload envelope" }))

        /**
         * A delivered task. Its `complete` sends the reply to the server and records the task metric
         * with what the answer came to; it never fails (an answer that failed for good, after the
         * report retry where there is one, is logged and its task left to its lease: the runtime's
         * own reply retry would only repeat calls the server fences off). `abandon` (an interrupted
         * run) records the outcome `error` and leaves the task to its lease, or to the lease recovery
         * of the deregistration.
         */
        const delivery = (kind: TaskKind, task: Record<string, unknown>, startedAt: number): Delivery<DurableWorkflowProtocol.DurableWorkflowReply> => {
          const taskId = String(task["task_id"] ?? task["query_task_id"] ?? task["update_validation_task_id"] ?? "")
          const attemptId = task["activity_attempt_id"] ?? task["attempt_id"]
          const workflowAttempt = task["workflow_task_attempt"] ?? 1
          const queryAttempt = task["query_task_attempt"] ?? 1
          const validationAttempt = task["update_validation_attempt"] ?? 1
          const logged = (label: string, effect: Effect.Effect<unknown, DurableWorkflowError>) =>
            effect.pipe(Effect.asVoid, Effect.catchAll((error) => Effect.logWarning(withReason(`${label} failed`, error))))
          /**
           * How long a report of this task may be retried: half the lease it has left (the other
           * half is the server's, to hand it on), at most {@link Client.REPORT_RETRY_CAP}. A lease
           * that reads as over already (or none given) is a clock apart from the server's: the cap.
           */
          const reportBudget = Effect.map(Clock.currentTimeMillis, (now) => {
            const expires = typeof task["lease_expires_at"] === "string" ? Date.parse(task["lease_expires_at"]) : Number.NaN
            const left = expires - now
            return Number.isNaN(left) || left <= 0
              ? Client.REPORT_RETRY_CAP
              : Duration.min(Client.REPORT_RETRY_CAP, Duration.millis(left / 2))
          })
          const reported = (path: string, body: unknown) => Effect.flatMap(reportBudget, (budget) => report(path, body, budget))
          const failWorkflow = (failure: FailureBody) =>
            reported(`/worker/workflow-tasks/${taskId}/fail`, { lease_owner: workerId, workflow_task_attempt: workflowAttempt, failure })
          const failActivity = (failure: FailureBody) =>
            reported(`/worker/activity-tasks/${taskId}/fail`, { activity_attempt_id: attemptId, lease_owner: workerId, failure })
          // a query's and a validation's answers ride out a server away for a moment like any report:
          // a caller waits for each (a query up to DW_QUERY_TASK_TIMEOUT, 30 s by default; an update
          // until it is validated), and a query answer dropped after the transport retry's 0.3 s is
          // not asked for again in time (its task's lease, 60 s, outlasts the caller's wait)
          const failQuery = (failure: FailureBody) =>
            reported(`/worker/query-tasks/${taskId}/fail`, {
              lease_owner: workerId,
              query_task_attempt: queryAttempt,
              failure: { reason: "query_rejected", ...failure }
            })
          /** Approve/reject call: the outcome, `expired` when the server fenced the validation task off. */
          const answerValidation = (verdict: "approve" | "reject", extra: Record<string, unknown>, outcome: string) =>
            reported(`/worker/update-validation-tasks/${encodeURIComponent(taskId)}/${verdict}`, {
              lease_owner: workerId,
              update_validation_attempt: validationAttempt,
              ...extra
            }).pipe(
              Effect.as(outcome),
              Effect.catchAll((error) =>
                isFinalValidationRejection(error)
                  ? Effect.as(Effect.logInfo(withReason("the update-validation task is no longer ours", error, "its answer was not recorded")), "expired")
                  : Effect.as(Effect.logError(withReason("could not answer the update-validation task", error)), "error")
              )
            )
          const answer = DurableWorkflowProtocol.DurableWorkflowReply.$match({
            WorkflowCompleted: ({ commands }): Effect.Effect<string> =>
              Effect.flatMap(reportBudget, (budget) => completeWorkflow(taskId, workflowAttempt, commands, budget)),
            WorkflowFailed: ({ failure, outcome }) => Effect.as(logged("reporting a workflow task failure", failWorkflow(failure)), outcome),
            ActivityCompleted: ({ outcome, result }) =>
              reported(`/worker/activity-tasks/${taskId}/complete`, { activity_attempt_id: attemptId, lease_owner: workerId, result }).pipe(
                Effect.as(outcome),
                Effect.catchAll((error) => Effect.as(Effect.logError(withReason("activity completion failed", error)), "complete_error"))
              ),
            ActivityFailed: ({ failure, outcome }) => Effect.as(logged("reporting a failed activity", failActivity(failure)), outcome),
            QueryCompleted: ({ envelope, outcome, result }) =>
              reported(`/worker/query-tasks/${taskId}/complete`, {
                lease_owner: workerId,
                query_task_attempt: queryAttempt,
                result: toJson(result),
                result_envelope: envelope
              }).pipe(
                Effect.as(outcome),
                Effect.catchAll((error) => {
                  if (isFinalQueryRejection(error)) return Effect.succeed("expired")
                  return Effect.as(
                    logged(
                      "reporting a query failure",
                      failQuery({
                        message: `query result completion failed: ${error.message}`,
                        reason: reasonOf(error) ?? "query_result_completion_failed"
                      })
                    ),
                    "failed"
                  )
                })
              ),
            QueryFailed: ({ failure, outcome }) => Effect.as(logged("reporting a query failure", failQuery(failure)), outcome),
            UpdateApproved: ({ outcome }) => answerValidation("approve", {}, outcome),
            UpdateRejected: ({ failure, outcome }) => answerValidation("reject", { failure }, outcome)
          })
          return Delivery.make({
            id: `${kind} task ${String(task["task_id"] ?? task["query_task_id"] ?? task["update_validation_task_id"] ?? "?")}`,
            payload: { kind, task, workerId, taskQueue } satisfies DurableWorkflowProtocol.DurableWorkflowTask,
            protocol,
            ...(kind === "workflow" ? { rest: remainingHistory(taskId, workflowAttempt, task) } : {}),
            resolve: resolvePart,
            store: storePart,
            ...(kind === "activity"
              ? {
                heartbeat: (details: unknown) =>
                  post(`/worker/activity-tasks/${taskId}/heartbeat`, {
                    activity_attempt_id: attemptId,
                    lease_owner: workerId,
                    ...(details === undefined ? {} : { details })
                  }).pipe(
                    Effect.mapError(transportError("heartbeat an activity")),
                    Effect.map((ack) => ({ cancelRequested: Predicate.isRecord(ack) && Boolean(ack["cancel_requested"]) }))
                  )
              }
              : {}),
            complete: (reply) =>
              Effect.flatMap(answer(reply), (outcome) => recordTask(kind, outcome, startedAt)).pipe(
                Effect.annotateLogs({ taskKind: kind, taskId })
              ),
            abandon: recordTask(kind, "error", startedAt)
          })
        }

        type PolledKind = "workflow" | "activity" | "query"
        const pollPaths: Record<PolledKind, { path: string; prefix: string }> = {
          workflow: { path: "/worker/workflow-tasks/poll", prefix: "wf-poll" },
          activity: { path: "/worker/activity-tasks/poll", prefix: "activity-poll" },
          query: { path: "/worker/query-tasks/poll", prefix: "query-poll" }
        }

        /** One long poll: retried once with the same `poll_request_id` after a timeout, then empty. */
        const pollTask = (kind: PolledKind) =>
          Effect.gen(function*() {
            const { path, prefix } = pollPaths[kind]
            const body = {
              worker_id: workerId,
              task_queue: taskQueue,
              poll_request_id: `${prefix}-${hex(16)}`,
              timeout_seconds: timing.timeoutSeconds,
              ...(description.buildId === undefined ? {} : { build_id: description.buildId }),
              ...(kind === "workflow" && multiplexed ? { task_kinds: ["workflow", "update_validation"] } : {})
            }
            const isTimeout = (e: DurableWorkflowError) => e._tag === "DurableWorkflowRequestError" && e.timeout
            // the transport retry (5xx, 429, connection errors) keeps the body; a timeout is retried once below
            const once = client.requestOnce({ method: "POST", path, body, plane: "worker", timeout: Duration.seconds(timing.httpTimeout) }).pipe(
              Effect.retry({ schedule: Client.transportRetry, while: (e) => Client.isTransient(e) && !isTimeout(e) })
            )
            const answer = yield* once.pipe(
              Effect.catchIf(isTimeout, () => once),
              Effect.catchIf(isTimeout, () => Effect.succeed({ task: null, poll_status: "timeout" }))
            )
            const task = Predicate.isRecord(answer) && Predicate.isRecord(answer["task"]) ? answer["task"] : undefined
            return task
          })

        /** The kind of a task a workflow poll returned (reference §2.5 step 5); undefined when unsupported. */
        const polledKind = (task: Record<string, unknown>): TaskKind | undefined => {
          const discriminator = task["task_kind"]
          if (discriminator === "workflow" || discriminator === "update_validation") return discriminator
          if ((discriminator === undefined || discriminator === null) && !multiplexed) return "workflow"
          return undefined
        }

        const poller = (kind: PolledKind): Poller => {
          // After a failed poll the next one only asks for `/cluster/info`, which the server answers at
          // once: it holds a poll for its own timeout (30 s by default).
          const probe = Effect.interruptible(client.requestOnce({ method: "GET", path: "/cluster/info", plane: "discovery" })).pipe(
            Effect.mapError(pollError(`poll ${kind} tasks`)),
            Effect.as([])
          )
          const take = Effect.gen(function*() {
            const started = yield* Clock.currentTimeMillis
            const seen = generation
            if (kind === "workflow") workflowPollOutstanding = true
            const polled = yield* Effect.either(Effect.interruptible(pollTask(kind))).pipe(
              Effect.ensuring(Effect.sync(() => {
                if (kind === "workflow") workflowPollOutstanding = false
              }))
            )
            const seconds = ((yield* Clock.currentTimeMillis) - started) / 1000
            const record = (taskKind: TaskKind, outcome: string) =>
              Metrics.record(Metrics.workerPolls, Metrics.workerPollDuration, { task_kind: taskKind, task_queue: taskQueue, outcome }, seconds)
            if (Either.isLeft(polled)) {
              yield* record(kind, "error")
              if (isNotRegistered(polled.left)) {
                // lost again before a single poll worked: registering once more would loop
                if (seen === generation && !pollWorkedSince) {
                  return yield* new TransportError({
                    transport: NAME,
                    operation: `poll ${kind} tasks`,
                    message: `the server lost the registration of worker ${workerId} again right after it was registered again ` +
                      "(worker_not_registered); check the server's worker registrations (stale_after_seconds, a server without shared state)",
                    cause: polled.left,
                    fatal: true
                  })
                }
                yield* reRegister(seen)
                return []
              }
              return yield* Effect.fail(pollError(`poll ${kind} tasks`)(polled.left))
            }
            pollWorkedSince = true
            const task = polled.right
            if (task === undefined) {
              yield* record(kind, "empty")
              return []
            }
            const taskKind = kind === "workflow" ? polledKind(task) : kind
            if (taskKind === undefined) {
              return yield* new TransportError({
                transport: NAME,
                operation: "poll workflow tasks",
                message: "multiplexed workflow poll returned a task without a supported task.task_kind discriminator",
                fatal: true
              })
            }
            yield* record(taskKind, "task")
            return [delivery(taskKind, task, yield* Clock.currentTimeMillis)]
          })
          return Poller.make({
            name: `${kind} tasks of ${taskQueue}`,
            pool: kind === "workflow" ? protocol.pools.workflow : kind === "activity" ? protocol.pools.step : protocol.pools.query,
            poll: (_, after) => after?.failure === true ? probe : take
          })
        }

        const heartbeatBody = (status: WorkerStatus) => {
          const slots = taskSlots(status)
          return { worker_id: workerId, ...(slots === undefined ? {} : { task_slots: slots }), process_metrics: sample() }
        }

        /**
         * The DELETE of the registration, after the re-registration in flight (if any) has been
         * answered, and with none sent after it (`reRegister`). Waiting for one is interruptible: the
         * runtime bounds the deregistration by `interruptTimeout`.
         */
        const deregister = Effect.gen(function*() {
          withdrawn = true
          if (reRegistering !== undefined) {
            yield* Effect.logInfo(`worker ${workerId}'s registration is being sent again; it is deregistered once that is answered`)
          }
          // the one in flight ends first; any after it finds `withdrawn` set, and is not sent
          yield* registering.withPermits(1)(Effect.void)
          const answer = yield* Effect.either(client.request({
            method: "DELETE",
            path: `/worker/registrations/${encodeURIComponent(workerId)}`,
            plane: "worker",
            context: workerId
          }))
          if (Either.isLeft(answer)) {
            const error = answer.left
            if (error._tag === "DurableWorkflowServerError" && error.status === 404 && error.reason === "worker_not_found") {
              yield* Effect.logInfo(`worker ${workerId} was already deregistered`)
              return
            }
            return yield* new DeregistrationError({ transport: NAME, message: `deregistration of worker ${workerId} failed: ${error.message}`, cause: error })
          }
          if (!Predicate.isRecord(answer.right)) {
            const error = new DurableWorkflowServerError({
              status: 200,
              reason: "invalid_worker_deregistration_response",
              body: answer.right,
              message: "HTTP 200 invalid_worker_deregistration_response: the deregistration answer is not an object"
            })
            return yield* new DeregistrationError({ transport: NAME, message: error.message, cause: error })
          }
        })

        const registration = (ack: unknown) => Registration.make({
          pollers: [poller("workflow"), poller("activity"), ...(server.queryTasks ? [poller("query")] : [])],
          heartbeat: Option.some({
            interval: Option.getOrElse(Heartbeat.advertisedInterval(ack), () => resolved.heartbeatInterval),
            // a `heartbeat_interval_seconds` in a reply sets the cadence of the following heartbeats
            beat: (status: WorkerStatus) =>
              Effect.suspend(() => {
                const seen = generation
                return post("/worker/heartbeat", heartbeatBody(status)).pipe(
                  Effect.map(Heartbeat.advertisedInterval),
                  Effect.catchIf(isNotRegistered, () => Effect.as(reRegister(seen), Option.none())),
                  Effect.mapError((error) => error instanceof TransportError ? error : transportError("heartbeat")(error))
                )
              })
          }),
          deregister
        })
        // a register request sent is answered, and the registration it made handed over, even if a
        // stop comes meanwhile (it is then deregistered): the server registers it whatever the client does
        const send = client.request({ method: "POST", path: "/worker/register", body: registerBody, plane: "worker" })
        return yield* atStart(Registration.commit(send, registration)).pipe(
          Effect.mapError((error) => startError(error, (message) => `registration failed: ${message}`))
        )
      })

    return { name, protocol, register }
  })

const clientService = (options: DurableWorkflowOptions) =>
  Effect.gen(function*() {
    const resolved = yield* resolve(options)
    const client = yield* Client.make(resolved.settings)
    return { request: client.request }
  })

/**
 * The transport and its {@link DurableWorkflowClient}, on the `HttpClient` of the environment.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerWithoutHttpClient = (
  options: DurableWorkflowOptions
): Layer.Layer<Transport | DurableWorkflowClient, DurableWorkflowConfigError, HttpClient.HttpClient> =>
  Layer.merge(Layer.effect(Transport, make(options)), Layer.effect(DurableWorkflowClient, clientService(options)))

/**
 * The transport and its {@link DurableWorkflowClient} over the platform's `fetch` client (Node's own
 * `fetch`: no HTTP driver to install). {@link layerWithoutHttpClient} takes any other `HttpClient`.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: DurableWorkflowOptions): Layer.Layer<Transport | DurableWorkflowClient, DurableWorkflowConfigError> =>
  layerWithoutHttpClient(options).pipe(Layer.provide(FetchHttpClient.layer))

/** The variables {@link layerConfig} reads, by the option each gives. */
const VARIABLES = {
  baseUrl: "DURABLE_WORKFLOW_SERVER_URL",
  namespace: "DURABLE_WORKFLOW_NAMESPACE",
  token: "DURABLE_WORKFLOW_AUTH_TOKEN",
  protocolVersion: "DURABLE_WORKFLOW_WORKER_PROTOCOL_VERSION",
  controlPlaneVersion: "DURABLE_WORKFLOW_CONTROL_PLANE_VERSION"
} as const

/**
 * Like {@link layer}, with the server URL, namespace and token from `DURABLE_WORKFLOW_SERVER_URL`,
 * `DURABLE_WORKFLOW_NAMESPACE` (default `default`) and `DURABLE_WORKFLOW_AUTH_TOKEN` (optional, read as
 * a `Redacted`)
 * unless given in `options`; `DURABLE_WORKFLOW_WORKER_PROTOCOL_VERSION` and
 * `DURABLE_WORKFLOW_CONTROL_PLANE_VERSION` override the version headers.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (
  options: Omit<DurableWorkflowOptions, "baseUrl"> & { readonly baseUrl?: string | undefined }
): Layer.Layer<Transport | DurableWorkflowClient, DurableWorkflowConfigError | ConfigError.ConfigError> =>
  Layer.unwrapEffect(
    Effect.gen(function*() {
      // refused as layer() refuses them, before a missing variable is
      if (!Predicate.isRecord(options)) return layer(options)
      const read = {
        baseUrl: yield* optional(Config.string(VARIABLES.baseUrl)),
        namespace: yield* optional(Config.string(VARIABLES.namespace)),
        // an empty variable (an env file's `DURABLE_WORKFLOW_AUTH_TOKEN=`) is unset, as an empty AWS key is
        token: Option.getOrUndefined(
          Option.filter(yield* Config.option(Config.redacted(VARIABLES.token)), (t) => Redacted.value(t).trim() !== "")
        ),
        protocolVersion: yield* optional(Config.string(VARIABLES.protocolVersion)),
        controlPlaneVersion: yield* optional(Config.string(VARIABLES.controlPlaneVersion))
      }
      // the server's URL is required: from the options, else the variable
      const baseUrl = options.baseUrl ?? read.baseUrl ?? (yield* Config.string(VARIABLES.baseUrl))
      return layer({ ...overRead(read, options), baseUrl }).pipe(
        Layer.mapError(namingVariables(VARIABLES, read, options, (option, message) => new DurableWorkflowConfigError({ option, message })))
      )
    })
  )

/**
 * The statuses a workflow run ends in.
 *
 * @since 0.1.0
 * @category constants
 */
export const terminalStatuses: ReadonlySet<string> = new Set(["completed", "failed", "terminated", "canceled", "cancelled"])

/**
 * Describes a workflow once (control plane `GET /api/workflows/{id}`); a 404 is
 * `DurableWorkflowNotFound`.
 *
 * @since 0.1.0
 * @category control-plane
 */
export const describeWorkflow = (
  workflowId: string
): Effect.Effect<Record<string, unknown>, DurableWorkflowError, DurableWorkflowClient> =>
  Effect.flatMap(DurableWorkflowClient, (client) =>
    Effect.map(
      client.request({ method: "GET", path: `/workflows/${encodeURIComponent(workflowId)}`, plane: "control", context: `workflow ${workflowId}` }),
      (body) => (Predicate.isRecord(body) ? body : {})
    ))

/**
 * Whether a workflow description is in a terminal state.
 *
 * @since 0.1.0
 * @category control-plane
 */
export const isTerminal = (description: Record<string, unknown>): boolean =>
  terminalStatuses.has(String(description["status"] ?? "").toLowerCase())

/**
 * Polls the control plane (`GET /api/workflows/{id}`) every `pollInterval` (default 0.5 s) until the
 * workflow is in a terminal state, and returns its description — the `until` of
 * `worker.runUntil(DurableWorkflowTransport.workflowTerminal(id), { timeout })`. Needs a control
 * (or shared) token.
 *
 * @since 0.1.0
 * @category run-until
 */
export const workflowTerminal = (
  workflowId: string,
  options: { readonly pollInterval?: DurationOption } = {}
): Effect.Effect<Record<string, unknown>, DurableWorkflowError, DurableWorkflowClient> =>
  Effect.gen(function*() {
    // Duration.decode would read -1 as no pause (the control plane asked without one) and throw on "1s"
    const interval = yield* Either.mapLeft(
      checkDuration("workflowTerminal's pollInterval", options.pollInterval ?? "500 millis", { positive: true, example: "1 second" }),
      (message) => new DurableWorkflowConfigError({ option: "pollInterval", message })
    )
    const client = yield* DurableWorkflowClient
    const describeOnce = Effect.provideService(describeWorkflow(workflowId), DurableWorkflowClient, client)
    const loop: Effect.Effect<Record<string, unknown>, DurableWorkflowError> = Effect.flatMap(describeOnce, (description) =>
      isTerminal(description)
        ? Effect.succeed(description)
        : Effect.zipRight(Effect.sleep(interval), Effect.suspend(() => loop)))
    return yield* loop
  })

/**
 * The control-plane "retire worker" (`DELETE /api/workers/{id}`, role admin): an operator action,
 * never sent by a worker's own shutdown (which uses the worker-plane deregistration).
 *
 * @since 0.1.0
 * @category control-plane
 */
export const deregisterWorker = (
  workerId: string
): Effect.Effect<Record<string, unknown>, DurableWorkflowError, DurableWorkflowClient> =>
  Effect.gen(function*() {
    const client = yield* DurableWorkflowClient
    const body = yield* client.request({ method: "DELETE", path: `/workers/${encodeURIComponent(workerId)}`, plane: "control", context: workerId })
    if (!Predicate.isRecord(body)) {
      return yield* new DurableWorkflowServerError({
        status: 200,
        reason: "invalid_worker_response",
        body,
        message: "HTTP 200 invalid_worker_response: the answer is not an object"
      })
    }
    return body
  })

/**
 * Worker options in the Durable Workflow SDK's terms, validated with its messages and mapped to
 * the runtime's {@link WorkerOptions}: `maxConcurrentWorkflowTasks` / `maxConcurrentActivityTasks`
 * (default 10 each), `buildId`, `workerId`, `pollTimeout` (35 s), `shutdownTimeout` (30 s).
 *
 * @since 0.1.0
 * @category options
 */
export const workerOptions = (options: {
  readonly workerId?: string
  readonly buildId?: string
  readonly maxConcurrentWorkflowTasks?: number
  readonly maxConcurrentActivityTasks?: number
  readonly pollTimeout?: DurationOption
  readonly shutdownTimeout?: DurationOption
}): Either.Either<WorkerOptions, WorkerConfigError> => {
  if (options.buildId !== undefined && (typeof options.buildId !== "string" || options.buildId.trim() === "")) {
    return Either.left(new WorkerConfigError({ option: "buildId", message: "build_id must be a non-empty string when provided" }))
  }
  for (const [field, value] of [
    ["max_concurrent_workflow_tasks", options.maxConcurrentWorkflowTasks],
    ["max_concurrent_activity_tasks", options.maxConcurrentActivityTasks]
  ] as const) {
    if (value !== undefined && (!Number.isInteger(value) || value < 1)) {
      return Either.left(new WorkerConfigError({ option: field, message: `${field} must be at least 1` }))
    }
  }
  return Either.right({
    ...(options.workerId === undefined ? {} : { workerId: options.workerId }),
    ...(options.buildId === undefined ? {} : { buildId: options.buildId }),
    workflowConcurrency: options.maxConcurrentWorkflowTasks ?? 10,
    concurrency: options.maxConcurrentActivityTasks ?? 10,
    pollTimeout: options.pollTimeout ?? "35 seconds",
    shutdownTimeout: options.shutdownTimeout ?? "30 seconds"
  })
}
