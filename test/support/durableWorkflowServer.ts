/**
 * A Durable Workflow server for tests: real HTTP on 127.0.0.1, the worker plane of protocol 1.1
 * (`/api/worker/*`), discovery (`GET /api/cluster/info`) and the control-plane routes a worker
 * touches (`/api/workers…`, `GET /api/workflows/{id}`), written from
 * `reference/durable-workflow-worker-protocol.md` §1.
 *
 * On the wire it follows the server: the check order (payload limits → authentication → role →
 * protocol version → namespace → validation → ownership), the worker envelope (`protocol_version`,
 * `server_capabilities`, `X-Durable-Workflow-Protocol-Version`) on every worker-plane response, the
 * error bodies and status codes, long polls, leases with attempt fencing and `poll_request_id`
 * idempotency. Storage is in memory and there is no workflow engine: tests put tasks in with
 * `enqueue*` and read what workers sent back (`completedWorkflowTasks`, …).
 *
 * Update validation (newer servers, `updateValidation: true`): the synchronous pre-accept contract is
 * advertised; update-validation tasks go to multiplexed workflow polls (`task_kinds`) of workers that
 * registered `update_validation_tasks` and list the update in their contract's `update_validators`;
 * `/update-validation-tasks/{id}/approve|reject` check validation, then ownership, refusing with the
 * final reasons (`update_validation_task_not_found`, `update_validation_task_not_leased`,
 * `duplicate_update_validation_completion`, `update_validator_worker_lost` for another lease owner,
 * `stale_update_validation_completion` for another attempt, `update_validation_lease_expired`). The
 * exact refusal bodies are this server's: the reference names the reasons, not the bodies.
 *
 * Deliberate differences from a production server, all in the tester's favour:
 * - a long poll ends early (without leasing) when its client disconnects;
 * - the hold time of a long poll is `min(timeout_seconds, longPollTimeoutSeconds)`, optionally capped
 *   by `maxPollHoldMs` so tests stay fast;
 * - lease clocks use `Date.now() + advanceTime(...)` offsets, so expiry is testable without waiting;
 * - responses are never compressed.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type * as Scope from "effect/Scope"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import * as Codec from "../../src/wire/DurableWorkflowCodec.js"

// ---------------------------------------------------------------------------------------------
// Public types
// ---------------------------------------------------------------------------------------------

/** Every route the server knows, by name (fault injection and the request log use these). */
export type RouteName =
  | "clusterInfo"
  | "register"
  | "heartbeat"
  | "workflowTaskPoll"
  | "workflowTaskHistory"
  | "workflowTaskComplete"
  | "workflowTaskFail"
  | "workflowTaskHeartbeat"
  | "activityTaskPoll"
  | "activityTaskComplete"
  | "activityTaskFail"
  | "activityTaskHeartbeat"
  | "queryTaskPoll"
  | "queryTaskComplete"
  | "queryTaskFail"
  | "updateValidationApprove"
  | "updateValidationReject"
  | "deregisterRegistration"
  | "controlListWorkers"
  | "controlDescribeWorker"
  | "controlDeregisterWorker"
  | "describeWorkflow"

/** A role a bearer token grants. */
export type Role = "worker" | "operator" | "admin"

/** Options of {@link start}; every field has a default. */
export interface DurableWorkflowServerOptions {
  /** Bearer tokens per role, or `"none"` (no authentication, every role). Default worker-token / operator-token / admin-token. */
  readonly auth?: { readonly worker?: string; readonly operator?: string; readonly admin?: string } | "none"
  /** Namespaces that exist. Default `["default"]`. */
  readonly namespaces?: ReadonlyArray<string>
  /** Namespace used when a request has no `X-Namespace`. Default `"default"`. */
  readonly defaultNamespace?: string
  /** Advertised worker protocol version. Default `"1.1"`. */
  readonly protocolVersion?: string
  /**
   * How the request's `X-Durable-Workflow-Protocol-Version` is accepted: `"exact"` (the local
   * server) or `"same-major-minor-lte"` (the newer contract). Default `"same-major-minor-lte"`.
   */
  readonly protocolVersionAcceptance?: "exact" | "same-major-minor-lte"
  /** `server_capabilities.long_poll_timeout` and the longest a poll is held, seconds. Default 30. */
  readonly longPollTimeoutSeconds?: number
  /** Test-only cap on how long a poll is held, milliseconds. Default: no cap. */
  readonly maxPollHoldMs?: number
  /** Lease lengths, seconds. Defaults 60 (workflow), 300 (activity), 60 (query). */
  readonly workflowTaskLeaseSeconds?: number
  readonly activityTaskLeaseSeconds?: number
  readonly queryTaskLeaseSeconds?: number
  /** `server.limits.max_payload_bytes`. Default 2 MiB. */
  readonly maxPayloadBytes?: number
  /** Default history page size (500) and its maximum (1000). */
  readonly historyPageSize?: number
  readonly historyPageSizeMax?: number
  /** Runtimes `register` accepts. Default `php, python, typescript, go, java` (the local server's rule). */
  readonly allowedRuntimes?: ReadonlyArray<string>
  /** Whether query tasks are advertised (`server_capabilities.query_tasks`). Default true. */
  readonly queryTasks?: boolean
  /**
   * Whether synchronous pre-accept update validation is advertised (`update_validation_tasks` and
   * the multiplexed `synchronous_update_validation` contract, reference §2.3 step 4). Default false.
   */
  readonly updateValidation?: boolean
  /** Lease of an update-validation task, seconds. Default 30. */
  readonly updateValidationLeaseSeconds?: number
  /** `heartbeat_interval_seconds` returned by register/heartbeat (newer servers). Default: not sent. */
  readonly heartbeatIntervalSeconds?: number
  /**
   * `heartbeat_interval_seconds` returned by heartbeat replies only, when it should differ from the
   * register ack's; change it later with {@link DurableWorkflowServer.announceHeartbeatInterval}.
   * Default: `heartbeatIntervalSeconds`.
   */
  readonly heartbeatReplyIntervalSeconds?: number
  /** Extra or replacement `server_capabilities` entries. */
  readonly serverCapabilities?: Record<string, unknown>
  /** Replaces or edits the `/api/cluster/info` document (e.g. to make the server incompatible). */
  readonly clusterInfo?: ClusterInfoOverride
  /** Whether a failed workflow task is re-queued as a new task with the next attempt. Default true. */
  readonly retryFailedWorkflowTasks?: boolean
}

/** A replacement cluster-info document, or a function editing the default one. */
export type ClusterInfoOverride = Record<string, unknown> | ((defaults: Record<string, any>) => unknown)

/** One request as received, in arrival order. */
export interface RecordedRequest {
  readonly seq: number
  readonly method: string
  /** Path and query exactly as sent (still percent-encoded). */
  readonly path: string
  readonly route: RouteName | undefined
  /** Header names lower-cased. */
  readonly headers: Readonly<Record<string, string>>
  /** Parsed JSON body; `undefined` when there was none or it was not JSON. */
  readonly body: unknown
  readonly rawBody: string
  readonly receivedAt: number
  /** Status sent back (`undefined` while pending or when the connection was dropped). */
  readonly status: number | undefined
  readonly responseBody: unknown
  /** The client went away before the response was sent. */
  readonly aborted: boolean
}

/**
 * A canned response (or delay, or dropped connection) for the next calls to a route. Faults apply
 * after the payload-limit checks and before authentication; queued faults for a route are used in
 * order, each for its `times` calls.
 */
export interface Fault {
  /** Status to answer with; omit to only delay the real response. */
  readonly status?: number
  /** Body; default the standard body for 401/403/404/409/412/429/5xx. */
  readonly body?: unknown
  readonly headers?: Readonly<Record<string, string>>
  /** Wait this long first. */
  readonly delayMs?: number
  /** Drop the connection without answering (a network error for the client). */
  readonly destroy?: boolean
  /** How many calls it applies to. Default 1. */
  readonly times?: number
  /** Merge the worker envelope into the body on worker-plane routes. Default true. */
  readonly envelope?: boolean
}

/** A workflow task to enqueue. */
export interface WorkflowTaskInput {
  /** Task id; default generated (`workflow-task-<n>`). */
  readonly taskId?: string
  readonly workflowType: string
  readonly taskQueue: string
  readonly namespace?: string
  readonly workflowId?: string
  readonly runId?: string
  /** Start input, encoded as one Avro `arguments` envelope of this list. */
  readonly input?: ReadonlyArray<unknown>
  /** Put on the wire verbatim as `arguments` instead of `input`. */
  readonly wireArguments?: unknown
  /** `payload_codec` of the task. Default `"avro"`. */
  readonly payloadCodec?: string | null
  /** History events; `sequence` is assigned (1, 2, …) when absent. */
  readonly historyEvents?: ReadonlyArray<Record<string, unknown>>
  /** `compatibility` (a build id): only workers registered with it may take the task. */
  readonly buildId?: string
  /** Makes it an accepted-update task: `workflow_update_id` (and the update resume context). */
  readonly updateId?: string
  /** Extra task fields (resume context, `task_kind`, …); a field set to `undefined` is removed. */
  readonly extra?: Record<string, unknown>
}

/**
 * What a task answered from a replayed run (a query or an update validation) is enqueued with: the
 * run, the workflow's arguments and the history the worker replays.
 */
export interface ReplayTaskInput {
  readonly workflowType: string
  readonly taskQueue: string
  readonly namespace?: string
  readonly workflowId?: string
  readonly runId?: string
  readonly workflowInput?: ReadonlyArray<unknown>
  readonly wireWorkflowArguments?: unknown
  readonly payloadCodec?: string | null
  readonly historyEvents?: ReadonlyArray<Record<string, unknown>>
  readonly extra?: Record<string, unknown>
}

/** An update-validation task to enqueue (handed out by multiplexed workflow polls). */
export interface UpdateValidationTaskInput extends ReplayTaskInput {
  /** Id; default generated (`update-validation-<n>`). */
  readonly updateValidationTaskId?: string
  readonly updateName: string
  readonly updateInput?: ReadonlyArray<unknown>
  readonly wireUpdateArguments?: unknown
}

/** An approval or rejection of an update-validation task. */
export interface UpdateValidationOutcome {
  readonly updateValidationTaskId: string
  readonly workflowId: string
  readonly updateName: string
  readonly attempt: number
  readonly leaseOwner: string
  readonly outcome: "approved" | "rejected"
  readonly body: Record<string, unknown>
}

/** An activity task to enqueue. */
export interface ActivityTaskInput {
  /** Task id; default generated (`activity-task-<n>`). */
  readonly taskId?: string
  /** `activity_attempt_id` of the first attempt; default generated. */
  readonly attemptId?: string
  readonly activityType: string
  readonly taskQueue: string
  readonly namespace?: string
  readonly workflowId?: string
  readonly runId?: string
  /** Arguments, encoded as one Avro envelope of this list. */
  readonly input?: ReadonlyArray<unknown>
  readonly wireArguments?: unknown
  readonly payloadCodec?: string | null
  readonly retryPolicy?: Record<string, unknown>
  readonly buildId?: string
  readonly extra?: Record<string, unknown>
}

/** A query task to enqueue. */
export interface QueryTaskInput extends ReplayTaskInput {
  /** Query task id; default generated (`query-task-<n>`). */
  readonly queryTaskId?: string
  readonly queryName: string
  readonly queryInput?: ReadonlyArray<unknown>
  readonly wireQueryArguments?: unknown
}

/** A worker registration as the server holds it. */
export interface WorkerRegistration {
  readonly workerId: string
  readonly namespace: string
  readonly taskQueue: string
  readonly runtime: string | null
  readonly sdkVersion: string | null
  readonly buildId: string | null
  readonly supportedWorkflowTypes: ReadonlyArray<string>
  readonly supportedActivityTypes: ReadonlyArray<string>
  readonly fingerprints: Readonly<Record<string, string>>
  readonly maxConcurrentWorkflowTasks: number
  readonly maxConcurrentActivityTasks: number
  readonly status: "active" | "draining"
  readonly registeredAt: number
  readonly lastHeartbeatAt: number
  /** The last register body, verbatim (unknown fields included). */
  readonly registerBody: Record<string, unknown>
  /** Every heartbeat body received for it, in order. */
  readonly heartbeats: ReadonlyArray<Record<string, unknown>>
}

/** A workflow task's state. */
export interface WorkflowTaskState {
  readonly taskId: string
  readonly namespace: string
  readonly taskQueue: string
  readonly workflowId: string
  readonly runId: string
  readonly workflowType: string
  readonly status: "ready" | "leased" | "completed" | "failed"
  readonly attempt: number
  readonly leaseOwner: string | null
  readonly leaseExpiresAt: number | null
}

/** A reported workflow-task completion. */
export interface WorkflowTaskCompletion {
  readonly taskId: string
  readonly workflowId: string
  readonly runId: string
  readonly attempt: number
  readonly leaseOwner: string
  readonly commands: ReadonlyArray<Record<string, unknown>>
  readonly body: Record<string, unknown>
}

/** A reported workflow-task failure. */
export interface WorkflowTaskFailure {
  readonly taskId: string
  readonly workflowId: string
  readonly runId: string
  readonly attempt: number
  readonly leaseOwner: string
  readonly failure: Record<string, unknown>
  readonly nextTaskId: string | null
}

/** A reported activity completion, with its result decoded when it was an inline Avro envelope. */
export interface ActivityCompletion {
  readonly taskId: string
  readonly workflowId: string
  readonly runId: string
  readonly activityType: string
  readonly activityAttemptId: string
  readonly leaseOwner: string
  readonly result: unknown
  readonly decodedResult: Either.Either<Codec.Value, Codec.PayloadDecodeError> | undefined
  readonly body: Record<string, unknown>
}

/** A reported activity failure. */
export interface ActivityFailure {
  readonly taskId: string
  readonly workflowId: string
  readonly runId: string
  readonly activityType: string
  readonly activityAttemptId: string
  readonly leaseOwner: string
  readonly failure: Record<string, unknown>
}

/** A query-task result or failure. */
export interface QueryTaskOutcome {
  readonly queryTaskId: string
  readonly workflowId: string
  readonly runId: string
  readonly queryName: string
  readonly attempt: number
  readonly leaseOwner: string
  readonly body: Record<string, unknown>
}

/**
 * What workers did, as it happens: emitted synchronously after the server's state changed and before
 * the response is sent, so a listener can script an orchestrator (e.g. enqueue the next workflow task
 * when an activity completes).
 */
export type ServerEvent =
  | { readonly _tag: "WorkerRegistered"; readonly registration: WorkerRegistration }
  | { readonly _tag: "WorkerDeregistered"; readonly workerId: string; readonly namespace: string; readonly recoveredWorkflowTaskCount: number }
  | { readonly _tag: "WorkflowTaskCompleted"; readonly completion: WorkflowTaskCompletion }
  | { readonly _tag: "WorkflowTaskFailed"; readonly failure: WorkflowTaskFailure }
  | { readonly _tag: "ActivityTaskCompleted"; readonly completion: ActivityCompletion }
  | { readonly _tag: "ActivityTaskFailed"; readonly failure: ActivityFailure }
  | { readonly _tag: "QueryTaskCompleted"; readonly outcome: QueryTaskOutcome }
  | { readonly _tag: "QueryTaskFailed"; readonly outcome: QueryTaskOutcome }
  | { readonly _tag: "UpdateValidated"; readonly outcome: UpdateValidationOutcome }

/** The running server and its test API. */
export interface DurableWorkflowServer {
  /** `http://127.0.0.1:<port>` (no `/api`; every route lives under `/api`). */
  readonly url: string
  readonly port: number
  readonly options: Required<Pick<DurableWorkflowServerOptions, "protocolVersion" | "defaultNamespace">>
  /** The token of each role (`undefined` with `auth: "none"`). */
  readonly tokens: { readonly worker: string | undefined; readonly operator: string | undefined; readonly admin: string | undefined }

  /** Every request received so far, in order. */
  readonly requests: ReadonlyArray<RecordedRequest>
  /** The requests to one route, in order. */
  requestsTo(route: RouteName): ReadonlyArray<RecordedRequest>
  /** Forgets the request log. */
  clearRequests(): void
  /** Resolves with the first request (already received or future) matching, or rejects after `timeoutMs` (default 5000). */
  waitForRequest(predicate: (request: RecordedRequest) => boolean, timeoutMs?: number): Promise<RecordedRequest>
  /** Resolves once `check()` holds (re-checked on every server event), or rejects after `timeoutMs` (default 5000). */
  waitUntil(check: () => boolean, timeoutMs?: number): Promise<void>
  /** Long polls being held right now, per route. */
  heldPolls(route: "workflowTaskPoll" | "activityTaskPoll" | "queryTaskPoll"): number

  /** Answers the next `fault.times` calls to `route` with the fault. */
  injectFault(route: RouteName, fault: Fault): void
  /** Shorthand: the next `times` calls to `route` answer `status` (with the standard body unless given). */
  failNext(route: RouteName, status: number, body?: unknown, times?: number): void
  /** Removes every pending fault. */
  clearFaults(): void
  /**
   * What later heartbeat replies carry as `heartbeat_interval_seconds` (with `stale_after_seconds`);
   * any JSON value, so a test can send one a worker must ignore; `undefined` omits both fields.
   */
  announceHeartbeatInterval(seconds: unknown): void
  /** Subscribes to {@link ServerEvent}s; returns the unsubscribe function. */
  onEvent(listener: (event: ServerEvent) => void): () => void

  /** Replaces the cluster-info document (or edits the default one). */
  setClusterInfo(override: ClusterInfoOverride | undefined): void
  /** The cluster-info document currently served. */
  clusterInfo(): unknown
  /** Moves the server's lease clock forward. */
  advanceTime(ms: number): void
  /** The server's clock (epoch ms). */
  now(): number

  enqueueWorkflowTask(input: WorkflowTaskInput): { readonly taskId: string; readonly workflowId: string; readonly runId: string }
  enqueueActivityTask(input: ActivityTaskInput): { readonly taskId: string; readonly workflowId: string; readonly runId: string }
  enqueueQueryTask(input: QueryTaskInput): { readonly queryTaskId: string; readonly workflowId: string; readonly runId: string }
  enqueueUpdateValidationTask(
    input: UpdateValidationTaskInput
  ): { readonly updateValidationTaskId: string; readonly workflowId: string; readonly runId: string }
  /** An update-validation task's state (`ready`, `leased`, `approved`, `rejected`), attempt and lease. */
  updateValidationTask(id: string): { readonly status: string; readonly attempt: number; readonly leaseOwner: string | null } | undefined
  /** Marks an activity task as cancellation-requested (seen by its next heartbeat). */
  requestActivityCancellation(taskId: string): void
  /** Closes a workflow run (`cancelled`, `terminated`, `completed`, `failed`). */
  closeRun(workflowId: string, status: "cancelled" | "terminated" | "completed" | "failed"): void
  /** Makes a workflow known to `GET /api/workflows/{id}` (or updates it). */
  putWorkflow(workflow: { readonly workflowId: string; readonly runId?: string; readonly workflowType?: string; readonly status?: string; readonly namespace?: string; readonly taskQueue?: string; readonly extra?: Record<string, unknown> }): void
  /** Adds a registration directly (as if registered earlier). */
  putRegistration(registration: { readonly workerId: string; readonly taskQueue: string; readonly namespace?: string; readonly runtime?: string; readonly buildId?: string; readonly status?: "active" | "draining" }): void
  /**
   * Forgets a registration, as a server that pruned a stale worker or lost its state does: the
   * worker's next polls answer 412 and its heartbeats 404 `worker_not_registered`.
   */
  removeRegistration(workerId: string, namespace?: string): void

  readonly registrations: ReadonlyMap<string, WorkerRegistration>
  registration(workerId: string, namespace?: string): WorkerRegistration | undefined
  /** Worker-plane deregistrations received, in order (worker id, namespace, recovered task count). */
  readonly deregistrations: ReadonlyArray<{ readonly workerId: string; readonly namespace: string; readonly recoveredWorkflowTaskCount: number }>
  workflowTask(taskId: string): WorkflowTaskState | undefined
  readonly workflowTasks: ReadonlyArray<WorkflowTaskState>
  readonly completedWorkflowTasks: ReadonlyArray<WorkflowTaskCompletion>
  readonly failedWorkflowTasks: ReadonlyArray<WorkflowTaskFailure>
  readonly completedActivityTasks: ReadonlyArray<ActivityCompletion>
  readonly failedActivityTasks: ReadonlyArray<ActivityFailure>
  readonly activityHeartbeats: ReadonlyArray<{ readonly taskId: string; readonly body: Record<string, unknown> }>
  readonly completedQueryTasks: ReadonlyArray<QueryTaskOutcome>
  readonly failedQueryTasks: ReadonlyArray<QueryTaskOutcome>
  /** Update-validation answers, in order. */
  readonly updateValidations: ReadonlyArray<UpdateValidationOutcome>

  /** Stops listening, drops open connections (held polls included). Idempotent. */
  stop(): Promise<void>
}

// ---------------------------------------------------------------------------------------------
// Constants of the protocol
// ---------------------------------------------------------------------------------------------

/** Header names. */
export const HeaderNames = {
  protocolVersion: "x-durable-workflow-protocol-version",
  controlPlaneVersion: "x-durable-workflow-control-plane-version",
  namespace: "x-namespace"
} as const

const terminalCommands = ["complete_workflow", "fail_workflow", "continue_as_new"] as const
const nonTerminalCommands = [
  "schedule_activity",
  "start_timer",
  "start_child_workflow",
  "complete_update",
  "fail_update",
  "record_side_effect",
  "record_version_marker",
  "upsert_search_attributes",
  "open_condition_wait"
] as const

const defaultRuntimes = ["php", "python", "typescript", "go", "java"]

// ---------------------------------------------------------------------------------------------
// Internal state
// ---------------------------------------------------------------------------------------------

interface MutableRequest {
  seq: number
  method: string
  path: string
  route: RouteName | undefined
  headers: Record<string, string>
  body: unknown
  rawBody: string
  receivedAt: number
  status: number | undefined
  responseBody: unknown
  aborted: boolean
}

interface Run {
  workflowId: string
  runId: string
  workflowType: string
  namespace: string
  taskQueue: string
  status: string
  closedReason: string | null
  closedAt: number | null
  result: unknown
  extra: Record<string, unknown>
}

interface WorkflowTask {
  taskId: string
  namespace: string
  taskQueue: string
  run: Run
  workflowType: string
  payloadCodec: unknown
  arguments: unknown
  history: Array<Record<string, unknown>>
  compatibility: string | null
  extra: Record<string, unknown>
  status: "ready" | "leased" | "completed" | "failed"
  attempt: number
  leaseOwner: string | null
  leaseExpiresAt: number | null
  createdAt: number
}

interface ActivityTask {
  taskId: string
  namespace: string
  taskQueue: string
  run: Run
  activityType: string
  payloadCodec: unknown
  arguments: unknown
  retryPolicy: Record<string, unknown> | null
  compatibility: string | null
  extra: Record<string, unknown>
  status: "ready" | "leased" | "completed" | "failed"
  attemptNumber: number
  attemptId: string | null
  firstAttemptId: string | null
  leaseOwner: string | null
  leaseExpiresAt: number | null
  cancelRequested: boolean
  lastHeartbeatAt: number | null
}

/** What query and update-validation tasks hold alike (see {@link ReplayTaskInput}), lease included. */
interface ReplayTask {
  namespace: string
  taskQueue: string
  run: Run
  workflowType: string
  payloadCodec: unknown
  workflowArguments: unknown
  history: Array<Record<string, unknown>>
  extra: Record<string, unknown>
  attempt: number
  leaseOwner: string | null
  leaseExpiresAt: number | null
}

interface QueryTask extends ReplayTask {
  queryTaskId: string
  queryName: string
  queryArguments: unknown
  status: "pending" | "leased" | "completed" | "failed"
}

interface ValidationTask extends ReplayTask {
  id: string
  updateName: string
  updateArguments: unknown
  status: "ready" | "leased" | "approved" | "rejected"
}

interface Registration {
  workerId: string
  namespace: string
  taskQueue: string
  runtime: string | null
  sdkVersion: string | null
  buildId: string | null
  supportedWorkflowTypes: Array<string>
  supportedActivityTypes: Array<string>
  fingerprints: Record<string, string>
  maxConcurrentWorkflowTasks: number
  maxConcurrentActivityTasks: number
  status: "active" | "draining"
  registeredAt: number
  lastHeartbeatAt: number
  registerBody: Record<string, unknown>
  heartbeats: Array<Record<string, unknown>>
}

interface Reply {
  status: number
  body: unknown
  headers?: Record<string, string>
}

type PollKind = "workflowTaskPoll" | "activityTaskPoll" | "queryTaskPoll"

interface Context {
  request: MutableRequest
  route: RouteName
  params: ReadonlyArray<string>
  body: Record<string, unknown>
  namespace: string
  role: Role | undefined
  req: http.IncomingMessage
  res: http.ServerResponse
}

/**
 * The `server_capabilities` entries that advertise synchronous pre-accept update validation
 * (reference §2.3 step 4) with multiplexed workflow polls: what `updateValidation: true` adds.
 */
export const updateValidationCapabilities = {
  update_validation_tasks: true,
  synchronous_update_validation: {
    supported: true,
    acceptance_boundary: "validator_approved",
    worker_capability: "update_validation_tasks",
    workflow_contract_field: "update_validators",
    task_poll: {
      strategy: "multiplexed",
      endpoint: "/worker/workflow-tasks/poll",
      request_field: "task_kinds",
      response_discriminator: "task.task_kind",
      task_kinds: ["workflow", "update_validation"]
    }
  }
} as const

const workerRoutes = new Set<RouteName>([
  "register",
  "heartbeat",
  "workflowTaskPoll",
  "workflowTaskHistory",
  "workflowTaskComplete",
  "workflowTaskFail",
  "workflowTaskHeartbeat",
  "activityTaskPoll",
  "activityTaskComplete",
  "activityTaskFail",
  "activityTaskHeartbeat",
  "queryTaskPoll",
  "queryTaskComplete",
  "queryTaskFail",
  "updateValidationApprove",
  "updateValidationReject",
  "deregisterRegistration"
])
const controlRoutes = new Set<RouteName>(["controlListWorkers", "controlDescribeWorker", "controlDeregisterWorker", "describeWorkflow"])

const routeTable: ReadonlyArray<{ method: string; pattern: RegExp; route: RouteName }> = [
  { method: "GET", pattern: /^\/api\/cluster\/info$/, route: "clusterInfo" },
  { method: "POST", pattern: /^\/api\/worker\/register$/, route: "register" },
  { method: "POST", pattern: /^\/api\/worker\/heartbeat$/, route: "heartbeat" },
  { method: "POST", pattern: /^\/api\/worker\/workflow-tasks\/poll$/, route: "workflowTaskPoll" },
  { method: "POST", pattern: /^\/api\/worker\/workflow-tasks\/([^/]+)\/history$/, route: "workflowTaskHistory" },
  { method: "POST", pattern: /^\/api\/worker\/workflow-tasks\/([^/]+)\/complete$/, route: "workflowTaskComplete" },
  { method: "POST", pattern: /^\/api\/worker\/workflow-tasks\/([^/]+)\/fail$/, route: "workflowTaskFail" },
  { method: "POST", pattern: /^\/api\/worker\/workflow-tasks\/([^/]+)\/heartbeat$/, route: "workflowTaskHeartbeat" },
  { method: "POST", pattern: /^\/api\/worker\/activity-tasks\/poll$/, route: "activityTaskPoll" },
  { method: "POST", pattern: /^\/api\/worker\/activity-tasks\/([^/]+)\/complete$/, route: "activityTaskComplete" },
  { method: "POST", pattern: /^\/api\/worker\/activity-tasks\/([^/]+)\/fail$/, route: "activityTaskFail" },
  { method: "POST", pattern: /^\/api\/worker\/activity-tasks\/([^/]+)\/heartbeat$/, route: "activityTaskHeartbeat" },
  { method: "POST", pattern: /^\/api\/worker\/query-tasks\/poll$/, route: "queryTaskPoll" },
  { method: "POST", pattern: /^\/api\/worker\/query-tasks\/([^/]+)\/complete$/, route: "queryTaskComplete" },
  { method: "POST", pattern: /^\/api\/worker\/query-tasks\/([^/]+)\/fail$/, route: "queryTaskFail" },
  { method: "POST", pattern: /^\/api\/worker\/update-validation-tasks\/([^/]+)\/approve$/, route: "updateValidationApprove" },
  { method: "POST", pattern: /^\/api\/worker\/update-validation-tasks\/([^/]+)\/reject$/, route: "updateValidationReject" },
  { method: "DELETE", pattern: /^\/api\/worker\/registrations\/([^/]+)$/, route: "deregisterRegistration" },
  { method: "GET", pattern: /^\/api\/workers$/, route: "controlListWorkers" },
  { method: "GET", pattern: /^\/api\/workers\/([^/]+)$/, route: "controlDescribeWorker" },
  { method: "DELETE", pattern: /^\/api\/workers\/([^/]+)$/, route: "controlDeregisterWorker" },
  { method: "GET", pattern: /^\/api\/workflows\/([^/]+)$/, route: "describeWorkflow" }
]

const rolesFor = (route: RouteName): ReadonlyArray<Role> => {
  if (route === "clusterInfo") return ["worker", "operator", "admin"]
  if (workerRoutes.has(route)) return ["worker"]
  if (route === "controlDeregisterWorker") return ["admin"]
  return ["operator", "admin"]
}

const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString())

const ulid = (): string => {
  const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
  let out = ""
  let time = Date.now()
  for (let i = 0; i < 10; i++) {
    out = alphabet[time % 32] + out
    time = Math.floor(time / 32)
  }
  for (let i = 0; i < 16; i++) out += alphabet[Math.floor(Math.random() * 32)]
  return out
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const statusText = (status: number): string => http.STATUS_CODES[status] ?? "Error"

// ---------------------------------------------------------------------------------------------
// Validation (Laravel-like messages: `{ field: ["The field field is required."] }`)
// ---------------------------------------------------------------------------------------------

class Validator {
  readonly errors: Record<string, Array<string>> = {}
  constructor(readonly body: Record<string, unknown>) {}

  private add(field: string, message: string): void {
    ;(this.errors[field] ??= []).push(message)
  }
  private label(field: string): string {
    return field.replace(/_/g, " ")
  }
  private value(field: string): unknown {
    let node: unknown = this.body
    for (const part of field.split(".")) node = isRecord(node) ? node[part] : Array.isArray(node) ? node[Number(part)] : undefined
    return node
  }

  required(field: string): boolean {
    const value = this.value(field)
    if (value === undefined || value === null || value === "" || (Array.isArray(value) && value.length === 0)) {
      this.add(field, `The ${this.label(field)} field is required.`)
      return false
    }
    return true
  }
  string(field: string, options: { required?: boolean; max?: number } = {}): void {
    const value = this.value(field)
    if (value === undefined || value === null) {
      if (options.required) this.required(field)
      return
    }
    if (typeof value !== "string") return this.add(field, `The ${this.label(field)} field must be a string.`)
    if (options.required && value === "") return void this.required(field)
    if (options.max !== undefined && value.length > options.max) {
      this.add(field, `The ${this.label(field)} field must not be greater than ${options.max} characters.`)
    }
  }
  integer(field: string, options: { required?: boolean; min?: number; max?: number } = {}): void {
    const value = this.value(field)
    if (value === undefined || value === null) {
      if (options.required) this.required(field)
      return
    }
    if (typeof value !== "number" || !Number.isInteger(value)) return this.add(field, `The ${this.label(field)} field must be an integer.`)
    if (options.min !== undefined && value < options.min) this.add(field, `The ${this.label(field)} field must be at least ${options.min}.`)
    if (options.max !== undefined && value > options.max) {
      this.add(field, `The ${this.label(field)} field must not be greater than ${options.max}.`)
    }
  }
  stringArray(field: string): void {
    const value = this.value(field)
    if (value === undefined || value === null) return
    if (!Array.isArray(value)) return this.add(field, `The ${this.label(field)} field must be an array.`)
    value.forEach((item, i) => {
      if (typeof item !== "string") this.add(`${field}.${i}`, `The ${field}.${i} field must be a string.`)
    })
  }
  object(field: string, options: { required?: boolean } = {}): void {
    const value = this.value(field)
    if (value === undefined || value === null) {
      if (options.required) this.required(field)
      return
    }
    if (!isRecord(value)) this.add(field, `The ${this.label(field)} field must be an array.`)
  }
  inList(field: string, allowed: ReadonlyArray<string>): void {
    const value = this.value(field)
    if (value === undefined || value === null) return
    if (typeof value !== "string" || !allowed.includes(value)) this.add(field, `The selected ${this.label(field)} is invalid.`)
  }
  custom(field: string, message: string): void {
    this.add(field, message)
  }
  get failed(): boolean {
    return Object.keys(this.errors).length > 0
  }
}

// ---------------------------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------------------------

/** Starts a server on 127.0.0.1 with an ephemeral port. */
export const start = async (options: DurableWorkflowServerOptions = {}): Promise<DurableWorkflowServer> => {
  const protocolVersion = options.protocolVersion ?? "1.1"
  const acceptance = options.protocolVersionAcceptance ?? "same-major-minor-lte"
  const defaultNamespace = options.defaultNamespace ?? "default"
  const namespaces = new Set(options.namespaces ?? [defaultNamespace])
  const longPollTimeoutSeconds = options.longPollTimeoutSeconds ?? 30
  let heartbeatReplyInterval: unknown = options.heartbeatReplyIntervalSeconds ?? options.heartbeatIntervalSeconds
  const workflowLeaseMs = (options.workflowTaskLeaseSeconds ?? 60) * 1000
  const activityLeaseMs = (options.activityTaskLeaseSeconds ?? 300) * 1000
  const queryLeaseMs = (options.queryTaskLeaseSeconds ?? 60) * 1000
  const validationLeaseMs = (options.updateValidationLeaseSeconds ?? 30) * 1000
  const maxPayloadBytes = options.maxPayloadBytes ?? 2 * 1024 * 1024
  const historyPageSize = options.historyPageSize ?? 500
  const historyPageSizeMax = options.historyPageSizeMax ?? 1000
  const allowedRuntimes = options.allowedRuntimes ?? defaultRuntimes
  const retryFailedWorkflowTasks = options.retryFailedWorkflowTasks ?? true
  const tokens =
    options.auth === "none"
      ? { worker: undefined, operator: undefined, admin: undefined }
      : {
        worker: options.auth?.worker ?? "worker-token",
        operator: options.auth?.operator ?? "operator-token",
        admin: options.auth?.admin ?? "admin-token"
      }

  let clockOffset = 0
  const now = (): number => Date.now() + clockOffset
  let counter = 0
  const nextId = (prefix: string): string => `${prefix}-${++counter}`

  const requests: Array<MutableRequest> = []
  const faults = new Map<RouteName, Array<Fault & { remaining: number }>>()
  let clusterInfoOverride: ClusterInfoOverride | undefined = options.clusterInfo

  const runs = new Map<string, Run>()
  const workflowTasks = new Map<string, WorkflowTask>()
  const activityTasks = new Map<string, ActivityTask>()
  const activityAttempts = new Map<string, { taskId: string; current: boolean }>()
  const queryTasks = new Map<string, QueryTask>()
  const validationTasks = new Map<string, ValidationTask>()
  const updateValidations: Array<UpdateValidationOutcome> = []
  const registrations = new Map<string, Registration>()
  const pollCache = new Map<string, string>()
  const deregistrations: Array<{ workerId: string; namespace: string; recoveredWorkflowTaskCount: number }> = []
  const completedWorkflowTasks: Array<WorkflowTaskCompletion> = []
  const failedWorkflowTasks: Array<WorkflowTaskFailure> = []
  const completedActivityTasks: Array<ActivityCompletion> = []
  const failedActivityTasks: Array<ActivityFailure> = []
  const activityHeartbeats: Array<{ taskId: string; body: Record<string, unknown> }> = []
  const completedQueryTasks: Array<QueryTaskOutcome> = []
  const failedQueryTasks: Array<QueryTaskOutcome> = []
  const held: Record<PollKind, number> = { workflowTaskPoll: 0, activityTaskPoll: 0, queryTaskPoll: 0 }

  // Every state change wakes pollers and `waitUntil` checks.
  const listeners = new Set<() => void>()
  const eventListeners = new Set<(event: ServerEvent) => void>()
  const emit = (event: ServerEvent): void => {
    for (const listener of [...eventListeners]) listener(event)
  }
  const changed = (): void => {
    for (const listener of [...listeners]) listener()
  }

  const regKey = (namespace: string, workerId: string): string => `${namespace}\u0000${workerId}`

  const serverCapabilities = (): Record<string, unknown> => ({
    long_poll_timeout: longPollTimeoutSeconds,
    supported_workflow_task_commands: [...terminalCommands, ...nonTerminalCommands],
    workflow_task_poll_request_idempotency: true,
    history_page_size_default: historyPageSize,
    history_page_size_max: historyPageSizeMax,
    query_tasks: options.queryTasks ?? true,
    activity_retry_policy: true,
    activity_timeouts: true,
    child_workflow_retry_policy: true,
    child_workflow_timeouts: true,
    parent_close_policy: true,
    non_retryable_failures: true,
    response_compression: [],
    history_compression: { supported_encodings: ["gzip", "deflate"], compression_threshold: 50 },
    ...(options.updateValidation ? updateValidationCapabilities : {}),
    ...options.serverCapabilities
  })

  const defaultClusterInfo = (): Record<string, any> => ({
    server_id: "durable-workflow-test-server",
    version: "2.0.0",
    default_namespace: defaultNamespace,
    supported_sdk_versions: {},
    capabilities: { query_tasks: options.queryTasks ?? true },
    worker_fleet: {},
    task_repair: {},
    limits: { max_payload_bytes: maxPayloadBytes },
    structural_limits: {},
    client_compatibility: {},
    auth_composition_contract: {
      schema: "durable-workflow.v2.auth-composition.contract",
      version: 1,
      precedence: ["explicit", "environment", "profile", "default"],
      canonical_environment: {
        server_url: "DURABLE_WORKFLOW_SERVER_URL",
        namespace: "DURABLE_WORKFLOW_NAMESPACE",
        auth_token: "DURABLE_WORKFLOW_AUTH_TOKEN",
        tls_verify: "DURABLE_WORKFLOW_TLS_VERIFY",
        profile: "DW_ENV"
      },
      auth_material: {
        token: { status: "supported", redacted: true },
        mtls: { status: "reserved" },
        signed_headers: { status: "reserved" }
      },
      effective_config: { required_fields: ["server_url", "namespace", "profile", "auth", "tls", "identity"] },
      redaction: { never_echo: ["bearer_tokens", "private_keys", "raw_authorization_headers"] }
    },
    control_plane: {
      version: "2",
      header: "X-Durable-Workflow-Control-Plane-Version",
      response_contract: { schema: "durable-workflow.v2.control-plane-response.contract", version: 1 },
      request_contract: { schema: "durable-workflow.v2.control-plane-request.contract", version: 1 }
    },
    worker_protocol: { version: protocolVersion, server_capabilities: serverCapabilities() },
    bridge_adapter_outcome_contract: {}
  })

  const clusterInfo = (): unknown => {
    if (clusterInfoOverride === undefined) return defaultClusterInfo()
    if (typeof clusterInfoOverride === "function") return clusterInfoOverride(defaultClusterInfo())
    return clusterInfoOverride
  }

  // ---- responses -------------------------------------------------------------------------

  const workerEnvelope = (body: unknown): unknown => {
    if (!isRecord(body)) return body
    const out: Record<string, unknown> = { ...body }
    if (!("protocol_version" in out)) out["protocol_version"] = protocolVersion
    if (!("server_capabilities" in out)) out["server_capabilities"] = serverCapabilities()
    return out
  }

  const isWorkerPath = (path: string): boolean => path.startsWith("/api/worker/") || path === "/api/worker"

  const send = (ctx: { request: MutableRequest; res: http.ServerResponse; worker: boolean; control: boolean }, reply: Reply): void => {
    const { res, request } = ctx
    if (res.writableEnded || res.destroyed) return
    const body = ctx.worker ? workerEnvelope(reply.body) : reply.body
    const text = JSON.stringify(body)
    const headers: Record<string, string> = { "content-type": "application/json", ...reply.headers }
    if (ctx.worker) headers[HeaderNames.protocolVersion] = protocolVersion
    if (ctx.control) headers[HeaderNames.controlPlaneVersion] = "2"
    request.status = reply.status
    request.responseBody = body
    res.writeHead(reply.status, headers)
    res.end(text)
    changed()
  }

  const standardBody = (status: number, route: RouteName | undefined): Record<string, unknown> => {
    switch (status) {
      case 401:
        return { reason: "unauthorized", message: "Invalid or missing authentication token." }
      case 403:
        return {
          reason: "forbidden",
          message: "This token is not allowed to call this route.",
          role: "admin",
          allowed_roles: route === undefined ? [] : rolesFor(route)
        }
      case 404:
        return { reason: "not_found", message: "Not found." }
      case 409:
        return { reason: "conflict", message: "Conflict." }
      case 412:
        return { reason: "worker_not_registered", error: "Worker is not registered. Call POST /worker/register first." }
      case 429:
        return { reason: "too_many_requests", message: "Too many requests." }
      default:
        return status >= 500 ? { reason: "server_error", message: statusText(status) } : { message: statusText(status) }
    }
  }

  // ---- checks ----------------------------------------------------------------------------

  const versionProblem = (requested: string | undefined): Reply | undefined => {
    const remediation = `Send X-Durable-Workflow-Protocol-Version: ${protocolVersion}.`
    if (requested === undefined || requested === "") {
      return {
        status: 400,
        body: {
          reason: "missing_protocol_version",
          error: "Missing X-Durable-Workflow-Protocol-Version header.",
          supported_version: protocolVersion,
          requested_version: null,
          remediation
        }
      }
    }
    let ok = requested === protocolVersion
    if (!ok && acceptance === "same-major-minor-lte") {
      const parse = (v: string) => /^(\d+)\.(\d+)$/.exec(v)
      const [req, adv] = [parse(requested), parse(protocolVersion)]
      ok = req !== null && adv !== null && req[1] === adv[1] && Number(req[2]) <= Number(adv[2])
    }
    if (ok) return undefined
    return {
      status: 400,
      body: {
        reason: "unsupported_protocol_version",
        error: `Unsupported worker protocol version [${requested}].`,
        supported_version: protocolVersion,
        requested_version: requested,
        remediation
      }
    }
  }

  const validationFailed = (errors: Record<string, Array<string>>): Reply => {
    const first = Object.values(errors)[0]?.[0] ?? "The given data was invalid."
    const more = Object.values(errors).flat().length - 1
    return {
      status: 422,
      body: {
        reason: "validation_failed",
        message: more > 0 ? `${first} (and ${more} more error${more > 1 ? "s" : ""})` : first,
        errors,
        validation_errors: errors
      }
    }
  }

  const resolveRegisteredWorker = (ctx: Context, v: Validator): Registration | Reply => {
    v.string("worker_id", { required: true, max: 255 })
    v.string("task_queue", { required: true, max: 255 })
    v.string("build_id", { max: 255 })
    v.integer("timeout_seconds", { min: 0, max: 60 })
    v.string("poll_request_id", { max: 255 })
    v.integer("history_page_size", { min: 1, max: historyPageSizeMax })
    if (v.failed) return validationFailed(v.errors)
    const workerId = ctx.body["worker_id"] as string
    const registration = registrations.get(regKey(ctx.namespace, workerId))
    if (registration === undefined) {
      return {
        status: 412,
        body: {
          reason: "worker_not_registered",
          error: "Worker is not registered. Call POST /worker/register first.",
          worker_id: workerId
        }
      }
    }
    const taskQueue = ctx.body["task_queue"] as string
    if (registration.taskQueue !== taskQueue) {
      return {
        status: 409,
        body: {
          reason: "task_queue_mismatch",
          error: "The poll task queue does not match the worker registration.",
          worker_id: workerId,
          registered_task_queue: registration.taskQueue,
          requested_task_queue: taskQueue
        }
      }
    }
    const buildId = ctx.body["build_id"]
    if (typeof buildId === "string" && buildId !== "" && buildId !== registration.buildId) {
      return {
        status: 409,
        body: {
          reason: "build_id_mismatch",
          error: "The poll build id does not match the worker registration.",
          worker_id: workerId,
          registered_build_id: registration.buildId,
          requested_build_id: buildId
        }
      }
    }
    return registration
  }

  // ---- task payloads ---------------------------------------------------------------------

  const encodeInput = (input: ReadonlyArray<unknown> | undefined, wire: unknown, hasWire: boolean): unknown => {
    if (hasWire) return wire
    if (input === undefined) return null
    return Either.getOrThrowWith(Codec.encodeEnvelope(input), (error) => new Error(error.message))
  }

  const sequenceHistory = (events: ReadonlyArray<Record<string, unknown>> | undefined): Array<Record<string, unknown>> =>
    (events ?? []).map((event, i) => ({
      id: event["id"] ?? `event-${i + 1}`,
      sequence: event["sequence"] ?? i + 1,
      ...event
    }))

  const ensureRun = (
    workflowId: string | undefined,
    runId: string | undefined,
    workflowType: string,
    namespace: string,
    taskQueue: string
  ): Run => {
    const id = workflowId ?? nextId("workflow")
    const existing = runs.get(id)
    if (existing !== undefined && (runId === undefined || existing.runId === runId)) return existing
    const run: Run = {
      workflowId: id,
      runId: runId ?? nextId("run"),
      workflowType,
      namespace,
      taskQueue,
      status: "running",
      closedReason: null,
      closedAt: null,
      result: null,
      extra: {}
    }
    runs.set(id, run)
    return run
  }

  /** The fields a query or update-validation task takes from its input; not yet leased, first attempt. */
  const replayTask = (input: ReplayTaskInput): ReplayTask => {
    const namespace = input.namespace ?? defaultNamespace
    return {
      namespace,
      taskQueue: input.taskQueue,
      run: ensureRun(input.workflowId, input.runId, input.workflowType, namespace, input.taskQueue),
      workflowType: input.workflowType,
      payloadCodec: input.payloadCodec === undefined ? "avro" : input.payloadCodec,
      workflowArguments: encodeInput(input.workflowInput, input.wireWorkflowArguments, "wireWorkflowArguments" in input),
      history: sequenceHistory(input.historyEvents),
      extra: input.extra ?? {},
      attempt: 1,
      leaseOwner: null,
      leaseExpiresAt: null
    }
  }

  const applyExtra = (target: Record<string, unknown>, extra: Record<string, unknown>): Record<string, unknown> => {
    for (const [key, value] of Object.entries(extra)) {
      if (value === undefined) delete target[key]
      else target[key] = value
    }
    return target
  }

  const encodePageToken = (afterSequence: number): string => Buffer.from(String(afterSequence)).toString("base64")
  const decodePageToken = (token: unknown): number | undefined => {
    if (typeof token !== "string" || !/^[A-Za-z0-9+/]+={0,2}$/.test(token)) return undefined
    const text = Buffer.from(token, "base64").toString("utf8")
    return /^\d+$/.test(text) ? Number(text) : undefined
  }

  const historyPage = (task: WorkflowTask, afterSequence: number, pageSize: number) => {
    const remaining = task.history.filter((event) => Number(event["sequence"]) > afterSequence)
    const page = remaining.slice(0, pageSize)
    const more = remaining.length > page.length
    const last = page.length > 0 ? Number(page[page.length - 1]!["sequence"]) : afterSequence
    return { events: page, next: more ? encodePageToken(last) : null }
  }

  const workflowTaskPayload = (task: WorkflowTask, pageSize: number, multiplexed: boolean): Record<string, unknown> => {
    const page = historyPage(task, 0, pageSize)
    const last = task.history.length > 0 ? Number(task.history[task.history.length - 1]!["sequence"]) : 0
    const payload: Record<string, unknown> = {
      task_id: task.taskId,
      workflow_id: task.run.workflowId,
      run_id: task.run.runId,
      workflow_task_attempt: task.attempt,
      workflow_type: task.workflowType,
      payload_codec: task.payloadCodec,
      arguments: task.arguments,
      run_status: task.run.status,
      last_history_sequence: last,
      history_events: page.events,
      task_queue: task.taskQueue,
      connection: null,
      compatibility: task.compatibility,
      lease_owner: task.leaseOwner,
      lease_expires_at: iso(task.leaseExpiresAt),
      total_history_events: task.history.length,
      next_history_page_token: page.next,
      workflow_wait_kind: null,
      open_wait_id: null,
      resume_source_kind: null,
      resume_source_id: null,
      workflow_update_id: null,
      workflow_signal_id: null,
      workflow_command_id: null,
      signal_name: null,
      signal_wait_id: null,
      activity_execution_id: null,
      activity_attempt_id: null,
      activity_type: null,
      child_call_id: null,
      child_workflow_run_id: null,
      workflow_sequence: null,
      workflow_event_type: null,
      timer_id: null,
      condition_wait_id: null,
      condition_key: null,
      condition_definition_fingerprint: null
    }
    if (multiplexed) payload["task_kind"] = "workflow"
    return applyExtra(payload, task.extra)
  }

  const activityTaskPayload = (task: ActivityTask): Record<string, unknown> => {
    const deadline = (seconds: unknown) => (typeof seconds === "number" ? iso(now() + seconds * 1000) : null)
    const policy = task.retryPolicy ?? {}
    const payload: Record<string, unknown> = {
      task_id: task.taskId,
      workflow_id: task.run.workflowId,
      run_id: task.run.runId,
      activity_execution_id: `${task.taskId}-execution`,
      activity_attempt_id: task.attemptId,
      attempt_number: task.attemptNumber,
      activity_type: task.activityType,
      payload_codec: task.payloadCodec,
      arguments: task.arguments,
      retry_policy: task.retryPolicy,
      task_queue: task.taskQueue,
      connection: null,
      lease_owner: task.leaseOwner,
      lease_expires_at: iso(task.leaseExpiresAt),
      deadlines: {
        schedule_to_start: deadline(policy["schedule_to_start_timeout"]),
        start_to_close: deadline(policy["start_to_close_timeout"]),
        schedule_to_close: deadline(policy["schedule_to_close_timeout"]),
        heartbeat: deadline(policy["heartbeat_timeout"])
      },
      external_executor: null
    }
    // The activity poll response drops null fields.
    for (const [key, value] of Object.entries(payload)) if (value === null) delete payload[key]
    return applyExtra(payload, task.extra)
  }

  const queryTaskPayload = (task: QueryTask): Record<string, unknown> => {
    const last = task.history.length > 0 ? Number(task.history[task.history.length - 1]!["sequence"]) : 0
    const payload: Record<string, unknown> = {
      query_task_id: task.queryTaskId,
      query_task_attempt: task.attempt,
      workflow_id: task.run.workflowId,
      run_id: task.run.runId,
      workflow_type: task.workflowType,
      query_name: task.queryName,
      payload_codec: task.payloadCodec,
      workflow_arguments: task.workflowArguments,
      query_arguments: task.queryArguments,
      run_status: task.run.status,
      last_history_sequence: last,
      history_events: task.history.map((event) => ({
        id: event["id"],
        sequence: event["sequence"],
        event_type: event["event_type"],
        payload: event["payload"] ?? null,
        workflow_task_id: event["workflow_task_id"] ?? null,
        workflow_command_id: event["workflow_command_id"] ?? null,
        recorded_at: event["recorded_at"] ?? null
      })),
      task_queue: task.taskQueue,
      lease_owner: task.leaseOwner,
      lease_expires_at: iso(task.leaseExpiresAt)
    }
    return applyExtra(payload, task.extra)
  }

  const validationTaskPayload = (task: ValidationTask): Record<string, unknown> => {
    const history = task.history.map((event) => ({ ...event }))
    return applyExtra({
      task_kind: "update_validation",
      update_validation_task_id: task.id,
      update_validation_attempt: task.attempt,
      workflow_id: task.run.workflowId,
      run_id: task.run.runId,
      workflow_type: task.workflowType,
      update_name: task.updateName,
      payload_codec: task.payloadCodec,
      workflow_arguments: task.workflowArguments,
      update_arguments: task.updateArguments,
      history_events: history,
      history_export: { history_events: history, payloads: { codec: task.payloadCodec } },
      task_queue: task.taskQueue,
      lease_owner: task.leaseOwner,
      lease_expires_at: iso(task.leaseExpiresAt)
    }, task.extra)
  }

  // ---- claiming --------------------------------------------------------------------------

  /** Whether a registration may take validation tasks of a type: the capability and the type's declared validator. */
  const validatesFor = (registration: Registration, task: ValidationTask): boolean => {
    const capabilities = registration.registerBody["capabilities"]
    if (!Array.isArray(capabilities) || !capabilities.includes("update_validation_tasks")) return false
    const contracts = registration.registerBody["workflow_command_contracts"]
    const contract = isRecord(contracts) ? contracts[task.workflowType] : undefined
    return isRecord(contract) && Array.isArray(contract["update_validators"]) && contract["update_validators"].includes(task.updateName)
  }

  /**
   * Leases the first task of the registration's namespace and queue that is ready, or whose lease
   * expired (a new attempt), and that `eligible` allows.
   */
  const claimReleasable = <T extends WorkflowTask | ValidationTask>(
    tasks: Map<string, T>,
    registration: Registration,
    leaseMs: number,
    eligible: (task: T) => boolean
  ): T | undefined => {
    for (const task of tasks.values()) {
      const expired = task.status === "leased" && task.leaseExpiresAt !== null && task.leaseExpiresAt <= now()
      if (task.status !== "ready" && !expired) continue
      if (task.namespace !== registration.namespace || task.taskQueue !== registration.taskQueue) continue
      if (!eligible(task)) continue
      if (expired) task.attempt += 1
      task.status = "leased"
      task.leaseOwner = registration.workerId
      task.leaseExpiresAt = now() + leaseMs
      return task
    }
    return undefined
  }

  const claimValidationTask = (registration: Registration): ValidationTask | undefined =>
    claimReleasable(validationTasks, registration, validationLeaseMs, (task) => validatesFor(registration, task))

  const matchesBuild = (compatibility: string | null, registration: Registration): boolean =>
    compatibility === null || compatibility === registration.buildId

  const claimWorkflowTask = (registration: Registration): WorkflowTask | undefined =>
    claimReleasable(workflowTasks, registration, workflowLeaseMs, (task) =>
      matchesBuild(task.compatibility, registration) &&
      (registration.supportedWorkflowTypes.length === 0 || registration.supportedWorkflowTypes.includes(task.workflowType)))

  const claimActivityTask = (registration: Registration): ActivityTask | undefined => {
    for (const task of activityTasks.values()) {
      const expired = task.status === "leased" && task.leaseExpiresAt !== null && task.leaseExpiresAt <= now()
      if (task.status !== "ready" && !expired) continue
      if (task.namespace !== registration.namespace || task.taskQueue !== registration.taskQueue) continue
      if (!matchesBuild(task.compatibility, registration)) continue
      if (registration.supportedActivityTypes.length > 0 && !registration.supportedActivityTypes.includes(task.activityType)) continue
      if (task.attemptId !== null) {
        activityAttempts.set(task.attemptId, { taskId: task.taskId, current: false })
        task.attemptNumber += 1
      }
      task.attemptId = task.attemptId === null && task.firstAttemptId !== null ? task.firstAttemptId : nextId("activity-attempt")
      activityAttempts.set(task.attemptId, { taskId: task.taskId, current: true })
      task.status = "leased"
      task.leaseOwner = registration.workerId
      task.leaseExpiresAt = now() + activityLeaseMs
      return task
    }
    return undefined
  }

  const claimQueryTask = (registration: Registration): QueryTask | undefined => {
    for (const task of queryTasks.values()) {
      if (task.status !== "pending") continue
      if (task.namespace !== registration.namespace || task.taskQueue !== registration.taskQueue) continue
      if (registration.supportedWorkflowTypes.length > 0 && !registration.supportedWorkflowTypes.includes(task.workflowType)) continue
      task.status = "leased"
      task.leaseOwner = registration.workerId
      task.leaseExpiresAt = now() + queryLeaseMs
      return task
    }
    return undefined
  }

  /** Holds a poll until `claim` yields something, the hold time passes or the client leaves. */
  const longPoll = <A>(ctx: Context, kind: PollKind, claim: () => A | undefined): Promise<A | undefined | "aborted"> => {
    const first = claim()
    if (first !== undefined) return Promise.resolve(first)
    const requested = ctx.body["timeout_seconds"]
    let holdMs = (typeof requested === "number" ? Math.min(requested, longPollTimeoutSeconds) : longPollTimeoutSeconds) * 1000
    if (options.maxPollHoldMs !== undefined) holdMs = Math.min(holdMs, options.maxPollHoldMs)
    if (holdMs <= 0) return Promise.resolve(undefined)
    return new Promise((resolve) => {
      let done = false
      held[kind] += 1
      const finish = (value: A | undefined | "aborted") => {
        if (done) return
        done = true
        held[kind] -= 1
        clearTimeout(timer)
        listeners.delete(retry)
        ctx.res.off("close", onClose)
        resolve(value)
        changed()
      }
      const retry = () => {
        if (done) return
        const claimed = claim()
        if (claimed !== undefined) finish(claimed)
      }
      const onClose = () => finish("aborted")
      const timer = setTimeout(() => finish(undefined), holdMs)
      listeners.add(retry)
      ctx.res.on("close", onClose)
      changed()
    })
  }

  // ---- ownership guards ------------------------------------------------------------------

  const guardWorkflowTask = (taskId: string, body: Record<string, unknown>): WorkflowTask | Reply => {
    const attempt = body["workflow_task_attempt"]
    const task = workflowTasks.get(taskId)
    if (task === undefined) {
      return {
        status: 404,
        body: { reason: "task_not_found", error: "Workflow task not found.", task_id: taskId, workflow_task_attempt: attempt }
      }
    }
    const base = { task_id: taskId, workflow_task_attempt: attempt }
    if (task.status !== "leased") {
      return { status: 409, body: { ...base, reason: "task_not_leased", error: "Workflow task is not leased." } }
    }
    if (task.leaseOwner !== body["lease_owner"]) {
      return {
        status: 409,
        body: { ...base, reason: "lease_owner_mismatch", error: "Workflow task is leased by another worker.", lease_owner: task.leaseOwner }
      }
    }
    if (task.attempt !== attempt) {
      return {
        status: 409,
        body: {
          ...base,
          reason: "workflow_task_attempt_mismatch",
          error: "Workflow task attempt does not match the active lease.",
          current_attempt: task.attempt
        }
      }
    }
    if (task.leaseExpiresAt !== null && task.leaseExpiresAt <= now()) {
      const reply: Reply = {
        status: 409,
        body: {
          ...base,
          reason: "lease_expired",
          error: "Workflow task lease has expired.",
          task_status: "leased",
          lease_owner: task.leaseOwner,
          lease_expires_at: iso(task.leaseExpiresAt)
        }
      }
      // Lease recovery: the task becomes claimable again with the next attempt.
      task.status = "ready"
      task.attempt += 1
      task.leaseOwner = null
      task.leaseExpiresAt = null
      changed()
      return reply
    }
    if (task.run.status !== "running") {
      return {
        status: 409,
        body: {
          ...base,
          reason: "run_closed",
          error: "Workflow run is closed.",
          stop_reason: `run_${task.run.status}`,
          cancel_requested: task.run.status === "cancelled",
          can_continue: false,
          run_status: task.run.status,
          run_closed_reason: task.run.closedReason,
          run_closed_at: iso(task.run.closedAt),
          task_status: task.status,
          lease_owner: task.leaseOwner,
          lease_expires_at: iso(task.leaseExpiresAt)
        }
      }
    }
    return task
  }

  const guardActivityAttempt = (taskId: string, body: Record<string, unknown>): ActivityTask | Reply => {
    const attemptId = body["activity_attempt_id"]
    const task = activityTasks.get(taskId)
    if (task === undefined) {
      return { status: 404, body: { reason: "task_not_found", error: "Activity task not found.", task_id: taskId } }
    }
    const attempt = typeof attemptId === "string" ? activityAttempts.get(attemptId) : undefined
    if (attempt === undefined) {
      return {
        status: 404,
        body: { reason: "attempt_not_found", error: "Activity attempt not found.", task_id: taskId, activity_attempt_id: attemptId }
      }
    }
    if (attempt.taskId !== taskId) {
      return {
        status: 409,
        body: { reason: "task_mismatch", error: "Activity attempt belongs to another task.", task_id: taskId, activity_attempt_id: attemptId }
      }
    }
    if (!attempt.current || task.leaseOwner !== body["lease_owner"]) {
      return {
        status: 409,
        body: {
          reason: "lease_owner_mismatch",
          error: "Activity attempt is leased by another worker.",
          task_id: taskId,
          activity_attempt_id: attemptId,
          lease_owner: task.leaseOwner
        }
      }
    }
    return task
  }

  const activityStopped = (task: ActivityTask, body: Record<string, unknown>): Reply | undefined => {
    if (task.run.status !== "cancelled" && task.run.status !== "terminated") return undefined
    return {
      status: 409,
      body: {
        task_id: task.taskId,
        activity_attempt_id: body["activity_attempt_id"],
        outcome: "ignored",
        recorded: false,
        reason: `run_${task.run.status}`,
        error: `Workflow run was ${task.run.status}.`,
        cancel_requested: true,
        can_continue: false,
        run_status: task.run.status,
        run_closed_reason: task.run.closedReason,
        run_closed_at: iso(task.run.closedAt),
        activity_status: task.status,
        attempt_status: task.status,
        task_status: task.status,
        lease_owner: task.leaseOwner,
        lease_expires_at: iso(task.leaseExpiresAt),
        next_task_id: null
      }
    }
  }

  /**
   * The lease checks of an answer to a query or update-validation task, in order: the task is
   * leased, by the answering owner, at the answered attempt, and the lease has not expired. The first
   * that fails, with the fields its refusal carries; each task kind words the refusals its own way.
   */
  const leaseRefusal = (
    task: ReplayTask & { readonly status: string },
    body: Record<string, unknown>,
    attempt: unknown
  ): { readonly failed: "leased" | "owner" | "attempt" | "expiry"; readonly extra: Record<string, unknown> } | undefined => {
    if (task.status !== "leased") return { failed: "leased", extra: {} }
    if (task.leaseOwner !== body["lease_owner"]) return { failed: "owner", extra: { lease_owner: task.leaseOwner } }
    if (task.attempt !== attempt) return { failed: "attempt", extra: { current_attempt: task.attempt } }
    if (task.leaseExpiresAt !== null && task.leaseExpiresAt <= now()) {
      return { failed: "expiry", extra: { lease_expires_at: iso(task.leaseExpiresAt) } }
    }
    return undefined
  }

  /** Reason and message of each {@link leaseRefusal}, for query tasks. */
  const queryLeaseRefusals = {
    leased: ["query_task_not_leased", "Query task is not leased."],
    owner: ["lease_owner_mismatch", "Query task is leased by another worker."],
    attempt: ["query_task_attempt_mismatch", "Query task attempt does not match the lease."],
    expiry: ["lease_expired", "Query task lease has expired."]
  } as const

  /** Reason and message of each {@link leaseRefusal}, for update-validation tasks. */
  const validationLeaseRefusals = {
    leased: ["update_validation_task_not_leased", "Update validation task is not leased."],
    owner: ["update_validator_worker_lost", "Update validation task is leased by another worker."],
    attempt: ["stale_update_validation_completion", "Update validation attempt does not match the lease."],
    expiry: ["update_validation_lease_expired", "Update validation lease has expired."]
  } as const

  const guardQueryTask = (queryTaskId: string, body: Record<string, unknown>): QueryTask | Reply => {
    const attempt = body["query_task_attempt"]
    const rejected = (status: number, reason: string, message: string, extra: Record<string, unknown> = {}): Reply => ({
      status,
      body: { query_task_id: queryTaskId, query_task_attempt: attempt, outcome: "rejected", reason, message, status, ...extra }
    })
    const task = queryTasks.get(queryTaskId)
    if (task === undefined) return rejected(404, "query_task_not_found", "Query task not found.")
    const refusal = leaseRefusal(task, body, attempt)
    if (refusal === undefined) return task
    const [reason, message] = queryLeaseRefusals[refusal.failed]
    return rejected(409, reason, message, refusal.extra)
  }

  // Tasks and registrations have a string `status`; only a reply has a numeric one.
  const isReply = (value: unknown): value is Reply => isRecord(value) && typeof value["status"] === "number"

  const queryOutcome = (task: QueryTask, body: Record<string, unknown>): QueryTaskOutcome => ({
    queryTaskId: task.queryTaskId,
    workflowId: task.run.workflowId,
    runId: task.run.runId,
    queryName: task.queryName,
    attempt: task.attempt,
    leaseOwner: task.leaseOwner!,
    body
  })

  /** Ownership of an update-validation answer; every refusal is final for the worker (`retryable: false`). */
  const guardValidationTask = (id: string, body: Record<string, unknown>): ValidationTask | Reply => {
    const attempt = body["update_validation_attempt"]
    const refuse = (status: number, reason: string, message: string, extra: Record<string, unknown> = {}): Reply => ({
      status,
      body: { reason, message, update_validation_task_id: id, update_validation_attempt: attempt, retryable: false, ...extra }
    })
    const task = validationTasks.get(id)
    if (task === undefined) return refuse(404, "update_validation_task_not_found", "Update validation task not found.")
    if (task.status === "approved" || task.status === "rejected") {
      return refuse(409, "duplicate_update_validation_completion", "Update validation task was already answered.", { outcome: task.status })
    }
    const refusal = leaseRefusal(task, body, attempt)
    if (refusal === undefined) return task
    const [reason, message] = validationLeaseRefusals[refusal.failed]
    return refuse(409, reason, message, refusal.extra)
  }

  const answerValidation = (ctx: Context, outcome: "approved" | "rejected"): Reply => {
    const v = new Validator(ctx.body)
    v.string("lease_owner", { required: true })
    v.integer("update_validation_attempt", { required: true, min: 1 })
    if (outcome === "rejected") {
      v.object("failure", { required: true })
      v.string("failure.message", { required: true })
      v.string("failure.reason", { required: true })
      v.inList("failure.reason", ["update_validator_rejected", "update_validation_worker_failed"])
      v.string("failure.type")
      v.string("failure.stack_trace")
      v.object("failure.validation_errors")
    }
    if (v.failed) return validationFailed(v.errors)
    const guarded = guardValidationTask(ctx.params[0]!, ctx.body)
    if (isReply(guarded)) return guarded
    guarded.status = outcome
    const recorded: UpdateValidationOutcome = {
      updateValidationTaskId: guarded.id,
      workflowId: guarded.run.workflowId,
      updateName: guarded.updateName,
      attempt: guarded.attempt,
      leaseOwner: guarded.leaseOwner!,
      outcome,
      body: ctx.body
    }
    updateValidations.push(recorded)
    emit({ _tag: "UpdateValidated", outcome: recorded })
    changed()
    return {
      status: 200,
      body: { update_validation_task_id: guarded.id, update_validation_attempt: guarded.attempt, outcome, recorded: true }
    }
  }

  // ---- handlers --------------------------------------------------------------------------

  const handlers: Record<RouteName, (ctx: Context) => Reply | Promise<Reply>> = {
    clusterInfo: () => ({ status: 200, body: clusterInfo() }),

    register: (ctx) => {
      const v = new Validator(ctx.body)
      v.string("worker_id", { max: 255 })
      v.string("task_queue", { required: true, max: 255 })
      v.string("runtime", { max: 32 })
      v.inList("runtime", allowedRuntimes)
      v.string("sdk_version", { max: 64 })
      v.string("build_id", { max: 255 })
      v.stringArray("supported_workflow_types")
      v.stringArray("supported_activity_types")
      v.object("workflow_definition_fingerprints")
      const fingerprints = ctx.body["workflow_definition_fingerprints"]
      if (isRecord(fingerprints)) {
        for (const [type, value] of Object.entries(fingerprints)) {
          if (typeof value !== "string" || value.length > 255) {
            v.custom(`workflow_definition_fingerprints.${type}`, `The workflow_definition_fingerprints.${type} field must be a string of at most 255 characters.`)
          }
        }
      }
      v.integer("max_concurrent_workflow_tasks", { min: 1 })
      v.integer("max_concurrent_activity_tasks", { min: 1 })
      v.object("workflow_command_contracts")
      v.stringArray("capabilities")
      const capabilityList = ctx.body["capabilities"]
      if (Array.isArray(capabilityList)) {
        capabilityList.forEach((capability, i) => {
          if (!["query_tasks", "update_validation_tasks", "workflow_updates"].includes(String(capability))) {
            v.custom(`capabilities.${i}`, `The selected capabilities.${i} is invalid.`)
          }
        })
      }
      if (v.failed) return validationFailed(v.errors)

      const body = ctx.body
      const workerId = typeof body["worker_id"] === "string" && body["worker_id"] !== "" ? body["worker_id"] : ulid()
      const key = regKey(ctx.namespace, workerId)
      const previous = registrations.get(key)
      const workflowTypes = (body["supported_workflow_types"] as Array<string> | undefined) ?? []
      const advertised = isRecord(fingerprints) ? (fingerprints as Record<string, string>) : {}
      if (previous !== undefined && previous.status === "active") {
        for (const [type, fingerprint] of Object.entries(advertised)) {
          const stored = previous.fingerprints[type]
          if (stored !== undefined && stored !== fingerprint) {
            return {
              status: 409,
              body: {
                reason: "workflow_definition_changed",
                error: `Workflow definition for [${type}] changed while worker [${workerId}] is registered.`,
                workflow_type: type,
                remediation: "Restart the worker with a new worker_id or wait for the registration to go stale before changing a workflow definition."
              }
            }
          }
        }
      }
      const preserved: Record<string, string> = {}
      if (previous !== undefined) {
        for (const [type, fingerprint] of Object.entries(previous.fingerprints)) {
          if (workflowTypes.includes(type)) preserved[type] = fingerprint
        }
      }
      const registration: Registration = {
        workerId,
        namespace: ctx.namespace,
        taskQueue: body["task_queue"] as string,
        runtime: (body["runtime"] as string | undefined) ?? null,
        sdkVersion: (body["sdk_version"] as string | undefined) ?? null,
        buildId: (body["build_id"] as string | undefined) ?? null,
        supportedWorkflowTypes: workflowTypes,
        supportedActivityTypes: (body["supported_activity_types"] as Array<string> | undefined) ?? [],
        fingerprints: { ...preserved, ...advertised },
        maxConcurrentWorkflowTasks: (body["max_concurrent_workflow_tasks"] as number | undefined) ?? 100,
        maxConcurrentActivityTasks: (body["max_concurrent_activity_tasks"] as number | undefined) ?? 100,
        status: previous?.status === "draining" ? "draining" : "active",
        registeredAt: previous?.registeredAt ?? now(),
        lastHeartbeatAt: now(),
        registerBody: body,
        heartbeats: previous?.heartbeats ?? []
      }
      registrations.set(key, registration)
      emit({ _tag: "WorkerRegistered", registration })
      const reply: Record<string, unknown> = {
        worker_id: workerId,
        task_queue: registration.taskQueue,
        runtime: registration.runtime,
        status: registration.status,
        registered: true
      }
      if (options.heartbeatIntervalSeconds !== undefined) reply["heartbeat_interval_seconds"] = options.heartbeatIntervalSeconds
      return { status: 201, body: reply }
    },

    heartbeat: (ctx) => {
      const v = new Validator(ctx.body)
      v.string("worker_id", { required: true, max: 255 })
      v.object("task_slots")
      v.object("process_metrics")
      v.integer("heartbeat_interval_seconds", { min: 1 })
      if (v.failed) return validationFailed(v.errors)
      const workerId = ctx.body["worker_id"] as string
      const registration = registrations.get(regKey(ctx.namespace, workerId))
      if (registration === undefined) {
        return {
          status: 404,
          body: { reason: "worker_not_registered", error: "Worker is not registered.", worker_id: workerId }
        }
      }
      registration.lastHeartbeatAt = now()
      registration.heartbeats.push(ctx.body)
      const reply: Record<string, unknown> = { worker_id: workerId, acknowledged: true, retention: {} }
      if (heartbeatReplyInterval !== undefined) {
        reply["heartbeat_interval_seconds"] = heartbeatReplyInterval
        reply["stale_after_seconds"] = Math.max(2 * longPollTimeoutSeconds, 60)
      }
      return { status: 200, body: reply }
    },

    workflowTaskPoll: async (ctx) => {
      const v = new Validator(ctx.body)
      const kinds = ctx.body["task_kinds"]
      if (kinds !== undefined && kinds !== null) {
        if (!Array.isArray(kinds) || kinds.length === 0 || kinds.some((k) => k !== "workflow" && k !== "update_validation")) {
          v.custom("task_kinds", "The selected task kinds is invalid.")
        }
      }
      const resolved = resolveRegisteredWorker(ctx, v)
      if (isReply(resolved)) return resolved
      const registration = resolved
      const pageSizeRaw = ctx.body["history_page_size"]
      const pageSize = typeof pageSizeRaw === "number" ? pageSizeRaw : historyPageSize
      const multiplexed = Array.isArray(kinds)
      const pollRequestId = ctx.body["poll_request_id"]
      if (typeof pollRequestId === "string" && pollRequestId !== "") {
        const cachedId = pollCache.get(`${registration.namespace}\u0000${pollRequestId}`)
        const cached = cachedId === undefined ? undefined : workflowTasks.get(cachedId)
        if (
          cached !== undefined && cached.status === "leased" && cached.leaseOwner === registration.workerId &&
          cached.leaseExpiresAt !== null && cached.leaseExpiresAt > now()
        ) {
          return { status: 200, body: { task: workflowTaskPayload(cached, pageSize, multiplexed), poll_status: "leased" } }
        }
      }
      if (registration.status === "draining") {
        return { status: 200, body: { task: null, poll_status: "draining", drain_reason: "build_id_drained" } }
      }
      const validations = multiplexed && (kinds as Array<unknown>).includes("update_validation")
      const workflows = !multiplexed || (kinds as Array<unknown>).includes("workflow")
      // validations first: their callers wait synchronously
      const claimed = await longPoll<WorkflowTask | ValidationTask>(ctx, "workflowTaskPoll", () =>
        (validations ? claimValidationTask(registration) : undefined) ?? (workflows ? claimWorkflowTask(registration) : undefined))
      if (claimed === "aborted") return { status: 499, body: null }
      if (claimed === undefined) {
        return { status: 200, body: { task: null, poll_status: ctx.body["timeout_seconds"] === 0 ? "empty" : "timeout" } }
      }
      if ("updateName" in claimed) {
        changed()
        return { status: 200, body: { task: validationTaskPayload(claimed), poll_status: "leased" } }
      }
      if (typeof pollRequestId === "string" && pollRequestId !== "") {
        pollCache.set(`${registration.namespace}\u0000${pollRequestId}`, claimed.taskId)
      }
      changed()
      return { status: 200, body: { task: workflowTaskPayload(claimed, pageSize, multiplexed), poll_status: "leased" } }
    },

    workflowTaskHistory: (ctx) => {
      const v = new Validator(ctx.body)
      v.string("lease_owner", { required: true })
      v.integer("workflow_task_attempt", { required: true, min: 1 })
      v.integer("history_page_size", { min: 1, max: historyPageSizeMax })
      if (v.failed) return validationFailed(v.errors)
      const guarded = guardWorkflowTask(ctx.params[0]!, ctx.body)
      if (isReply(guarded)) return guarded
      const token = ctx.body["next_history_page_token"]
      let after = 0
      if (token !== undefined && token !== null) {
        const decoded = decodePageToken(token)
        if (decoded === undefined) {
          return { status: 400, body: { reason: "invalid_page_token", error: "The history page token is invalid.", task_id: guarded.taskId } }
        }
        after = decoded
      }
      const sizeRaw = ctx.body["history_page_size"]
      const page = historyPage(guarded, after, typeof sizeRaw === "number" ? sizeRaw : historyPageSize)
      return {
        status: 200,
        body: {
          task_id: guarded.taskId,
          workflow_task_attempt: guarded.attempt,
          history_events: page.events,
          total_history_events: guarded.history.length,
          next_history_page_token: page.next
        }
      }
    },

    workflowTaskComplete: (ctx) => {
      const v = new Validator(ctx.body)
      v.string("lease_owner", { required: true })
      v.integer("workflow_task_attempt", { required: true, min: 1 })
      const commands = ctx.body["commands"]
      if (v.required("commands") && !Array.isArray(commands)) v.custom("commands", "The commands field must be an array.")
      if (Array.isArray(commands)) validateCommands(v, commands)
      if (v.failed) return validationFailed(v.errors)
      const guarded = guardWorkflowTask(ctx.params[0]!, ctx.body)
      if (isReply(guarded)) return guarded
      const task = guarded
      const list = commands as Array<Record<string, unknown>>
      task.status = "completed"
      const completion: WorkflowTaskCompletion = {
        taskId: task.taskId,
        workflowId: task.run.workflowId,
        runId: task.run.runId,
        attempt: task.attempt,
        leaseOwner: task.leaseOwner!,
        commands: list,
        body: ctx.body
      }
      completedWorkflowTasks.push(completion)
      for (const command of list) {
        if (command["type"] === "complete_workflow") {
          task.run.status = "completed"
          task.run.result = command["result"] ?? null
        } else if (command["type"] === "fail_workflow") {
          task.run.status = "failed"
          task.run.result = { message: command["message"] }
        } else if (command["type"] === "continue_as_new") {
          task.run.status = "continued"
        }
        if (task.run.status !== "running") task.run.closedAt = now()
      }
      task.leaseExpiresAt = null
      emit({ _tag: "WorkflowTaskCompleted", completion })
      changed()
      return {
        status: 200,
        body: {
          task_id: task.taskId,
          workflow_task_attempt: task.attempt,
          outcome: "completed",
          recorded: true,
          run_id: task.run.runId,
          run_status: task.run.status,
          created_task_ids: [],
          reason: null
        }
      }
    },

    workflowTaskFail: (ctx) => {
      const v = new Validator(ctx.body)
      v.string("lease_owner", { required: true })
      v.integer("workflow_task_attempt", { required: true, min: 1 })
      v.object("failure", { required: true })
      v.string("failure.message", { required: true })
      v.string("failure.type")
      v.string("failure.stack_trace")
      if (v.failed) return validationFailed(v.errors)
      const guarded = guardWorkflowTask(ctx.params[0]!, ctx.body)
      if (isReply(guarded)) return guarded
      const task = guarded
      task.status = "failed"
      let nextTaskId: string | null = null
      if (retryFailedWorkflowTasks) {
        nextTaskId = nextId("workflow-task")
        workflowTasks.set(nextTaskId, {
          ...task,
          taskId: nextTaskId,
          status: "ready",
          attempt: task.attempt + 1,
          leaseOwner: null,
          leaseExpiresAt: null,
          createdAt: now()
        })
      }
      const failure: WorkflowTaskFailure = {
        taskId: task.taskId,
        workflowId: task.run.workflowId,
        runId: task.run.runId,
        attempt: task.attempt,
        leaseOwner: task.leaseOwner!,
        failure: ctx.body["failure"] as Record<string, unknown>,
        nextTaskId
      }
      failedWorkflowTasks.push(failure)
      task.leaseExpiresAt = null
      emit({ _tag: "WorkflowTaskFailed", failure })
      changed()
      return {
        status: 200,
        body: {
          task_id: task.taskId,
          workflow_task_attempt: task.attempt,
          outcome: "failed",
          recorded: true,
          reason: null,
          next_task_id: nextTaskId
        }
      }
    },

    workflowTaskHeartbeat: (ctx) => {
      const v = new Validator(ctx.body)
      v.string("lease_owner", { required: true })
      v.integer("workflow_task_attempt", { required: true, min: 1 })
      if (v.failed) return validationFailed(v.errors)
      const guarded = guardWorkflowTask(ctx.params[0]!, ctx.body)
      if (isReply(guarded)) return guarded
      guarded.leaseExpiresAt = now() + workflowLeaseMs
      changed()
      return {
        status: 200,
        body: {
          task_id: guarded.taskId,
          workflow_task_attempt: guarded.attempt,
          renewed: true,
          lease_expires_at: iso(guarded.leaseExpiresAt),
          run_status: guarded.run.status,
          task_status: guarded.status,
          reason: null
        }
      }
    },

    activityTaskPoll: async (ctx) => {
      const resolved = resolveRegisteredWorker(ctx, new Validator(ctx.body))
      if (isReply(resolved)) return resolved
      const registration = resolved
      const claimed = await longPoll(ctx, "activityTaskPoll", () => claimActivityTask(registration))
      if (claimed === "aborted") return { status: 499, body: null }
      if (claimed === undefined) return { status: 200, body: { task: null } }
      changed()
      return { status: 200, body: { task: activityTaskPayload(claimed) } }
    },

    activityTaskComplete: (ctx) => {
      const v = new Validator(ctx.body)
      v.string("activity_attempt_id", { required: true })
      v.string("lease_owner", { required: true })
      if (v.failed) return validationFailed(v.errors)
      const guarded = guardActivityAttempt(ctx.params[0]!, ctx.body)
      if (isReply(guarded)) return guarded
      const stopped = activityStopped(guarded, ctx.body)
      if (stopped !== undefined) return stopped
      const task = guarded
      task.status = "completed"
      const result = ctx.body["result"]
      const completion: ActivityCompletion = {
        taskId: task.taskId,
        workflowId: task.run.workflowId,
        runId: task.run.runId,
        activityType: task.activityType,
        activityAttemptId: task.attemptId!,
        leaseOwner: task.leaseOwner!,
        result,
        decodedResult:
          isRecord(result) && typeof result["codec"] === "string" && typeof result["blob"] === "string"
            ? Codec.decodeEnvelope({ codec: result["codec"], blob: result["blob"] })
            : undefined,
        body: ctx.body
      }
      completedActivityTasks.push(completion)
      emit({ _tag: "ActivityTaskCompleted", completion })
      changed()
      return {
        status: 200,
        body: {
          task_id: task.taskId,
          activity_attempt_id: task.attemptId,
          outcome: "completed",
          recorded: true,
          reason: null,
          next_task_id: null
        }
      }
    },

    activityTaskFail: (ctx) => {
      const v = new Validator(ctx.body)
      v.string("activity_attempt_id", { required: true })
      v.string("lease_owner", { required: true })
      v.object("failure", { required: true })
      v.string("failure.message", { required: true })
      v.string("failure.type")
      v.string("failure.class")
      v.integer("failure.code")
      v.string("failure.stack_trace")
      v.inList("failure.kind", [
        "application",
        "timeout",
        "cancellation",
        "malformed_output",
        "handler_crash",
        "decode_failure",
        "unsupported_payload"
      ])
      const nonRetryable = isRecord(ctx.body["failure"]) ? ctx.body["failure"]["non_retryable"] : undefined
      if (nonRetryable !== undefined && typeof nonRetryable !== "boolean") {
        v.custom("failure.non_retryable", "The failure.non retryable field must be true or false.")
      }
      if (v.failed) return validationFailed(v.errors)
      const guarded = guardActivityAttempt(ctx.params[0]!, ctx.body)
      if (isReply(guarded)) return guarded
      const stopped = activityStopped(guarded, ctx.body)
      if (stopped !== undefined) return stopped
      const task = guarded
      task.status = "failed"
      const failure: ActivityFailure = {
        taskId: task.taskId,
        workflowId: task.run.workflowId,
        runId: task.run.runId,
        activityType: task.activityType,
        activityAttemptId: task.attemptId!,
        leaseOwner: task.leaseOwner!,
        failure: ctx.body["failure"] as Record<string, unknown>
      }
      failedActivityTasks.push(failure)
      emit({ _tag: "ActivityTaskFailed", failure })
      changed()
      return {
        status: 200,
        body: {
          task_id: task.taskId,
          activity_attempt_id: task.attemptId,
          outcome: "failed",
          recorded: true,
          reason: null,
          next_task_id: null
        }
      }
    },

    activityTaskHeartbeat: (ctx) => {
      const v = new Validator(ctx.body)
      v.string("activity_attempt_id", { required: true })
      v.string("lease_owner", { required: true })
      v.object("details")
      v.string("message")
      v.string("unit")
      if (v.failed) return validationFailed(v.errors)
      const guarded = guardActivityAttempt(ctx.params[0]!, ctx.body)
      if (isReply(guarded)) return guarded
      const task = guarded
      const closed = task.run.status === "cancelled" || task.run.status === "terminated"
      activityHeartbeats.push({ taskId: task.taskId, body: ctx.body })
      if (!closed) {
        task.lastHeartbeatAt = now()
        task.leaseExpiresAt = now() + activityLeaseMs
      }
      changed()
      return {
        status: 200,
        body: {
          task_id: task.taskId,
          activity_attempt_id: task.attemptId,
          lease_owner: task.leaseOwner,
          cancel_requested: task.cancelRequested || closed,
          can_continue: !(task.cancelRequested || closed),
          reason: closed ? `run_${task.run.status}` : null,
          run_closed_reason: task.run.closedReason,
          run_closed_at: iso(task.run.closedAt),
          heartbeat_recorded: !closed,
          lease_expires_at: iso(task.leaseExpiresAt),
          last_heartbeat_at: iso(task.lastHeartbeatAt)
        }
      }
    },

    queryTaskPoll: async (ctx) => {
      const resolved = resolveRegisteredWorker(ctx, new Validator(ctx.body))
      if (isReply(resolved)) return resolved
      const registration = resolved
      const claimed = await longPoll(ctx, "queryTaskPoll", () => claimQueryTask(registration))
      if (claimed === "aborted") return { status: 499, body: null }
      if (claimed === undefined) return { status: 200, body: { task: null } }
      changed()
      return { status: 200, body: { task: queryTaskPayload(claimed) } }
    },

    queryTaskComplete: (ctx) => {
      const v = new Validator(ctx.body)
      v.string("lease_owner", { required: true })
      v.integer("query_task_attempt", { required: true, min: 1 })
      v.object("result_envelope", { required: true })
      v.string("result_envelope.codec")
      v.string("result_envelope.blob", { required: true })
      if (v.failed) return validationFailed(v.errors)
      const guarded = guardQueryTask(ctx.params[0]!, ctx.body)
      if (isReply(guarded)) return guarded
      guarded.status = "completed"
      const outcome = queryOutcome(guarded, ctx.body)
      completedQueryTasks.push(outcome)
      emit({ _tag: "QueryTaskCompleted", outcome })
      changed()
      return {
        status: 200,
        body: { query_task_id: guarded.queryTaskId, query_task_attempt: guarded.attempt, outcome: "completed", status: 200 }
      }
    },

    queryTaskFail: (ctx) => {
      const v = new Validator(ctx.body)
      v.string("lease_owner", { required: true })
      v.integer("query_task_attempt", { required: true, min: 1 })
      v.object("failure", { required: true })
      v.string("failure.message", { required: true })
      v.string("failure.reason")
      v.string("failure.type")
      v.string("failure.stack_trace")
      if (v.failed) return validationFailed(v.errors)
      const guarded = guardQueryTask(ctx.params[0]!, ctx.body)
      if (isReply(guarded)) return guarded
      guarded.status = "failed"
      const outcome = queryOutcome(guarded, ctx.body)
      failedQueryTasks.push(outcome)
      emit({ _tag: "QueryTaskFailed", outcome })
      changed()
      return {
        status: 200,
        body: { query_task_id: guarded.queryTaskId, query_task_attempt: guarded.attempt, outcome: "failed", status: 200 }
      }
    },

    updateValidationApprove: (ctx) => answerValidation(ctx, "approved"),
    updateValidationReject: (ctx) => answerValidation(ctx, "rejected"),

    deregisterRegistration: (ctx) => {
      const workerId = ctx.params[0]!
      const key = regKey(ctx.namespace, workerId)
      if (!registrations.has(key)) {
        return {
          status: 404,
          body: { reason: "worker_not_found", message: `Worker [${workerId}] is not registered.`, worker_id: workerId }
        }
      }
      registrations.delete(key)
      let recovered = 0
      for (const task of workflowTasks.values()) {
        if (task.status === "leased" && task.leaseOwner === workerId && task.namespace === ctx.namespace) {
          task.status = "ready"
          task.attempt += 1
          task.leaseOwner = null
          task.leaseExpiresAt = null
          recovered += 1
        }
      }
      deregistrations.push({ workerId, namespace: ctx.namespace, recoveredWorkflowTaskCount: recovered })
      emit({ _tag: "WorkerDeregistered", workerId, namespace: ctx.namespace, recoveredWorkflowTaskCount: recovered })
      changed()
      return { status: 200, body: { worker_id: workerId, outcome: "deregistered", recovered_workflow_task_count: recovered } }
    },

    controlListWorkers: (ctx) => {
      const query = new URL(ctx.request.path, "http://x").searchParams
      const workers = [...registrations.values()]
        .filter((r) => r.namespace === ctx.namespace)
        .filter((r) => !query.has("task_queue") || r.taskQueue === query.get("task_queue"))
        .filter((r) => !query.has("status") || r.status === query.get("status"))
        .map((r) => ({
          worker_id: r.workerId,
          namespace: r.namespace,
          task_queue: r.taskQueue,
          runtime: r.runtime,
          sdk_version: r.sdkVersion,
          build_id: r.buildId,
          status: r.status,
          last_heartbeat_at: iso(r.lastHeartbeatAt)
        }))
      return { status: 200, body: { namespace: ctx.namespace, workers } }
    },

    controlDescribeWorker: (ctx) => {
      const workerId = ctx.params[0]!
      const r = registrations.get(regKey(ctx.namespace, workerId))
      if (r === undefined) {
        return { status: 404, body: { message: `Worker [${workerId}] not found.`, reason: "worker_not_found" } }
      }
      return {
        status: 200,
        body: {
          worker_id: r.workerId,
          namespace: r.namespace,
          task_queue: r.taskQueue,
          runtime: r.runtime,
          sdk_version: r.sdkVersion,
          build_id: r.buildId,
          status: r.status,
          max_concurrent_workflow_tasks: r.maxConcurrentWorkflowTasks,
          max_concurrent_activity_tasks: r.maxConcurrentActivityTasks,
          supported_workflow_types: r.supportedWorkflowTypes,
          supported_activity_types: r.supportedActivityTypes,
          last_heartbeat_at: iso(r.lastHeartbeatAt),
          registered_at: iso(r.registeredAt),
          updated_at: iso(r.lastHeartbeatAt)
        }
      }
    },

    controlDeregisterWorker: (ctx) => {
      const workerId = ctx.params[0]!
      const key = regKey(ctx.namespace, workerId)
      if (!registrations.has(key)) {
        return { status: 404, body: { message: `Worker [${workerId}] not found.`, reason: "worker_not_found" } }
      }
      registrations.delete(key)
      changed()
      return { status: 200, body: { worker_id: workerId, outcome: "deregistered" } }
    },

    describeWorkflow: (ctx) => {
      const workflowId = ctx.params[0]!
      const run = runs.get(workflowId)
      if (run === undefined || run.namespace !== ctx.namespace) {
        return { status: 404, body: { message: `Workflow [${workflowId}] not found.`, reason: "workflow_not_found" } }
      }
      return {
        status: 200,
        body: {
          workflow_id: run.workflowId,
          run_id: run.runId,
          namespace: run.namespace,
          workflow_type: run.workflowType,
          task_queue: run.taskQueue,
          status: run.status,
          run_status: run.status,
          closed_reason: run.closedReason,
          closed_at: iso(run.closedAt),
          result: run.result,
          ...run.extra
        }
      }
    }
  }

  const validateCommands = (v: Validator, commands: ReadonlyArray<unknown>): void => {
    const supported: ReadonlyArray<string> = [...terminalCommands, ...nonTerminalCommands]
    commands.forEach((command, i) => {
      const at = `commands.${i}`
      if (!isRecord(command)) return v.custom(at, `The ${at} field must be an array.`)
      const type = command["type"]
      if (typeof type !== "string" || type === "") return v.custom(`${at}.type`, `The ${at}.type field is required.`)
      if (!supported.includes(type)) return v.custom(`${at}.type`, `The selected ${at}.type is invalid.`)
      const has = (field: string) => command[field] !== undefined && command[field] !== null
      if (has("retry_policy") && type !== "schedule_activity" && type !== "start_child_workflow") {
        v.custom(`${at}.retry_policy`, "retry_policy is only supported on schedule_activity and start_child_workflow commands.")
      }
      const activityTimeouts = ["start_to_close_timeout", "schedule_to_start_timeout", "schedule_to_close_timeout", "heartbeat_timeout"]
      for (const field of activityTimeouts) {
        if (!has(field)) continue
        if (type !== "schedule_activity") v.custom(`${at}.${field}`, `${field} is only supported on schedule_activity commands.`)
        else if (typeof command[field] !== "number" || !Number.isInteger(command[field]) || (command[field] as number) < 1) {
          v.custom(`${at}.${field}`, `The ${at}.${field} field must be an integer of at least 1.`)
        }
      }
      if (type === "schedule_activity") {
        const n = (field: string) => (typeof command[field] === "number" ? (command[field] as number) : undefined)
        const [heartbeat, startToClose, scheduleToClose, scheduleToStart] = [
          n("heartbeat_timeout"),
          n("start_to_close_timeout"),
          n("schedule_to_close_timeout"),
          n("schedule_to_start_timeout")
        ]
        if (heartbeat !== undefined && startToClose !== undefined && heartbeat > startToClose) {
          v.custom(`${at}.heartbeat_timeout`, "heartbeat_timeout must not exceed start_to_close_timeout.")
        }
        if (startToClose !== undefined && scheduleToClose !== undefined && startToClose > scheduleToClose) {
          v.custom(`${at}.start_to_close_timeout`, "start_to_close_timeout must not exceed schedule_to_close_timeout.")
        }
        if (scheduleToStart !== undefined && scheduleToClose !== undefined && scheduleToStart > scheduleToClose) {
          v.custom(`${at}.schedule_to_start_timeout`, "schedule_to_start_timeout must not exceed schedule_to_close_timeout.")
        }
      }
      for (const field of ["execution_timeout_seconds", "run_timeout_seconds"]) {
        if (!has(field)) continue
        if (type !== "start_child_workflow") v.custom(`${at}.${field}`, `${field} is only supported on start_child_workflow commands.`)
      }
      if (
        type === "start_child_workflow" && typeof command["run_timeout_seconds"] === "number" &&
        typeof command["execution_timeout_seconds"] === "number" &&
        command["run_timeout_seconds"] > command["execution_timeout_seconds"]
      ) {
        v.custom(`${at}.run_timeout_seconds`, "run_timeout_seconds must not exceed execution_timeout_seconds.")
      }
      if ((type === "complete_update" || type === "fail_update") && (typeof command["update_id"] !== "string" || command["update_id"] === "")) {
        v.custom(`${at}.update_id`, `The ${at}.update_id field is required.`)
      }
      if (type === "fail_update" && (typeof command["message"] !== "string" || command["message"] === "")) {
        v.custom(`${at}.message`, `The ${at}.message field is required.`)
      }
      if (has("non_retryable") && type !== "fail_workflow" && type !== "fail_update") {
        v.custom(`${at}.non_retryable`, "non_retryable is only supported on fail_workflow and fail_update commands.")
      }
      if (type === "start_timer" && (typeof command["delay_seconds"] !== "number" || !Number.isInteger(command["delay_seconds"]) || command["delay_seconds"] < 0)) {
        v.custom(`${at}.delay_seconds`, `The ${at}.delay_seconds field must be an integer of at least 0.`)
      }
    })
  }

  // ---- pipeline --------------------------------------------------------------------------

  const readBody = (req: http.IncomingMessage): Promise<{ text: string; tooLarge: boolean }> =>
    new Promise((resolve, reject) => {
      const chunks: Array<Buffer> = []
      let size = 0
      let tooLarge = false
      req.on("data", (chunk: Buffer) => {
        size += chunk.length
        if (size > maxPayloadBytes) tooLarge = true
        else chunks.push(chunk)
      })
      req.on("end", () => resolve({ text: Buffer.concat(chunks).toString("utf8"), tooLarge }))
      req.on("error", reject)
    })

  const handle = async (req: http.IncomingMessage, res: http.ServerResponse): Promise<void> => {
    const method = req.method ?? "GET"
    const rawPath = req.url ?? "/"
    const pathname = rawPath.split("?")[0]!
    const headers: Record<string, string> = {}
    for (const [name, value] of Object.entries(req.headers)) {
      if (value !== undefined) headers[name.toLowerCase()] = Array.isArray(value) ? value.join(", ") : value
    }
    const { text, tooLarge } = await readBody(req)
    let parsed: unknown = undefined
    let jsonError: string | undefined
    if (text.length > 0) {
      try {
        parsed = JSON.parse(text)
      } catch (error) {
        jsonError = error instanceof Error ? error.message : String(error)
      }
    }
    const matched = routeTable.find((r) => r.pattern.test(pathname))
    const exact = routeTable.find((r) => r.method === method && r.pattern.test(pathname))
    const route = exact?.route
    const request: MutableRequest = {
      seq: requests.length + 1,
      method,
      path: rawPath,
      route,
      headers,
      body: parsed,
      rawBody: text,
      receivedAt: now(),
      status: undefined,
      responseBody: undefined,
      aborted: false
    }
    requests.push(request)
    res.on("close", () => {
      if (!res.writableFinished) {
        request.aborted = true
        changed()
      }
    })
    changed()

    const requestedVersion = headers[HeaderNames.protocolVersion]
    const worker = isWorkerPath(pathname)
    const sink = { request, res, worker, control: route !== undefined && controlRoutes.has(route) }
    // Framework-level errors carry the worker envelope only when the request version equals ours.
    const frameworkSink = { ...sink, worker: worker && requestedVersion === protocolVersion }

    // 1. payload limits
    if (tooLarge) {
      return send(sink, {
        status: 413,
        body: { reason: "payload_too_large", message: `The request body exceeds ${maxPayloadBytes} bytes.`, limit: maxPayloadBytes }
      })
    }
    const contentType = (headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase()
    if (text.length > 0 && ["POST", "PUT", "PATCH", "DELETE"].includes(method) && !(contentType === "application/json" || contentType.endsWith("+json"))) {
      return send(sink, {
        status: 415,
        body: {
          reason: "unsupported_media_type",
          message: "Request bodies must be JSON.",
          accepted_content_types: ["application/json", "application/*+json"]
        }
      })
    }
    if (jsonError !== undefined) {
      return send(sink, {
        status: 400,
        body: { reason: "malformed_json", message: "The request body is not valid JSON.", json_error: jsonError }
      })
    }

    if (route === undefined) {
      if (matched !== undefined) {
        return send(frameworkSink, { status: 405, body: { message: `The ${method} method is not supported for route ${pathname.slice(1)}.` } })
      }
      return send(frameworkSink, { status: 404, body: { message: `The route ${pathname.slice(1)} could not be found.` } })
    }

    // fault injection
    const pending = faults.get(route)
    const fault = pending?.[0]
    if (fault !== undefined) {
      fault.remaining -= 1
      if (fault.remaining <= 0) pending!.shift()
      if (fault.delayMs !== undefined && fault.delayMs > 0) await new Promise((resolve) => setTimeout(resolve, fault.delayMs))
      if (fault.destroy) {
        request.aborted = true
        res.destroy()
        changed()
        return
      }
      if (fault.status !== undefined) {
        return send(
          { ...sink, worker: worker && fault.envelope !== false },
          {
            status: fault.status,
            body: fault.body === undefined ? standardBody(fault.status, route) : fault.body,
            ...(fault.headers === undefined ? {} : { headers: { ...fault.headers } })
          }
        )
      }
    }

    // 2. authentication, 3. role
    let role: Role | undefined
    if (options.auth !== "none") {
      const authorization = headers["authorization"] ?? ""
      const match = /^Bearer\s+(.+)$/i.exec(authorization)
      const token = match?.[1]?.trim()
      role = token === undefined
        ? undefined
        : token === tokens.worker
        ? "worker"
        : token === tokens.operator
        ? "operator"
        : token === tokens.admin
        ? "admin"
        : undefined
      if (role === undefined) {
        return send(sink, { status: 401, body: { reason: "unauthorized", message: "Invalid or missing authentication token." } })
      }
      const allowed = rolesFor(route)
      if (!allowed.includes(role)) {
        return send(sink, {
          status: 403,
          body: {
            reason: "forbidden",
            message: `The ${role} role is not allowed to call this route.`,
            role,
            allowed_roles: allowed
          }
        })
      }
    }

    // 4. version
    if (workerRoutes.has(route)) {
      const problem = versionProblem(requestedVersion)
      if (problem !== undefined) return send(sink, problem)
    } else if (controlRoutes.has(route)) {
      const requested = headers[HeaderNames.controlPlaneVersion]
      if (requested !== "2") {
        return send(sink, {
          status: 400,
          body: {
            reason: requested === undefined || requested === "" ? "missing_control_plane_version" : "unsupported_control_plane_version",
            message: "Send X-Durable-Workflow-Control-Plane-Version: 2.",
            supported_version: "2",
            requested_version: requested ?? null
          }
        })
      }
    }

    // 5. namespace
    const namespace = headers[HeaderNames.namespace] || defaultNamespace
    if (!namespaces.has(namespace)) {
      return send(sink, {
        status: 404,
        body: {
          reason: "namespace_not_found",
          message: `Namespace [${namespace}] does not exist.`,
          namespace,
          remediation: "Create the namespace or send an existing one in X-Namespace."
        }
      })
    }

    const params = (exact!.pattern.exec(pathname) ?? []).slice(1).map((segment) => decodeURIComponent(segment))
    const ctx: Context = {
      request,
      route,
      params,
      body: isRecord(parsed) ? parsed : {},
      namespace,
      role,
      req,
      res
    }
    const reply = await handlers[route](ctx)
    if (reply.status === 499) return // client went away during a long poll
    // Validation errors are framework errors: the worker envelope only with the exact version.
    send(reply.status === 422 ? frameworkSink : sink, reply)
  }

  const server = http.createServer((req, res) => {
    handle(req, res).catch((error) => {
      if (!res.headersSent) {
        res.writeHead(500, { "content-type": "application/json" })
        res.end(JSON.stringify({ reason: "server_error", message: `test server bug: ${String(error)}` }))
      }
    })
  })
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => resolve())
  })
  const port = (server.address() as AddressInfo).port
  let stopped: Promise<void> | undefined

  const waitUntil = (check: () => boolean, timeoutMs = 5000): Promise<void> =>
    new Promise((resolve, reject) => {
      if (check()) return resolve()
      const timer = setTimeout(() => {
        listeners.delete(listener)
        reject(new Error(`durable workflow test server: condition not met within ${timeoutMs} ms`))
      }, timeoutMs)
      const listener = () => {
        if (check()) {
          clearTimeout(timer)
          listeners.delete(listener)
          resolve()
        }
      }
      listeners.add(listener)
    })

  const api: DurableWorkflowServer = {
    url: `http://127.0.0.1:${port}`,
    port,
    options: { protocolVersion, defaultNamespace },
    tokens,
    get requests() {
      return requests
    },
    requestsTo: (route) => requests.filter((r) => r.route === route),
    clearRequests: () => {
      requests.length = 0
    },
    waitForRequest: async (predicate, timeoutMs) => {
      let found: RecordedRequest | undefined
      await waitUntil(() => (found = requests.find(predicate)) !== undefined, timeoutMs)
      return found!
    },
    waitUntil,
    heldPolls: (route) => held[route],

    injectFault: (route, fault) => {
      const list = faults.get(route) ?? []
      list.push({ ...fault, remaining: fault.times ?? 1 })
      faults.set(route, list)
    },
    failNext: (route, status, body, times = 1) => {
      const list = faults.get(route) ?? []
      list.push({ status, ...(body === undefined ? {} : { body }), times, remaining: times })
      faults.set(route, list)
    },
    clearFaults: () => faults.clear(),
    announceHeartbeatInterval: (seconds) => {
      heartbeatReplyInterval = seconds
    },
    onEvent: (listener) => {
      eventListeners.add(listener)
      return () => {
        eventListeners.delete(listener)
      }
    },

    setClusterInfo: (override) => {
      clusterInfoOverride = override
    },
    clusterInfo,
    advanceTime: (ms) => {
      clockOffset += ms
      changed()
    },
    now,

    enqueueWorkflowTask: (input) => {
      const namespace = input.namespace ?? defaultNamespace
      const run = ensureRun(input.workflowId, input.runId, input.workflowType, namespace, input.taskQueue)
      const taskId = input.taskId ?? nextId("workflow-task")
      workflowTasks.set(taskId, {
        taskId,
        namespace,
        taskQueue: input.taskQueue,
        run,
        workflowType: input.workflowType,
        payloadCodec: input.payloadCodec === undefined ? "avro" : input.payloadCodec,
        arguments: encodeInput(input.input, input.wireArguments, "wireArguments" in input),
        history: sequenceHistory(input.historyEvents),
        compatibility: input.buildId ?? null,
        extra: {
          ...(input.updateId === undefined
            ? {}
            : { workflow_update_id: input.updateId, resume_source_kind: "workflow_update", resume_source_id: input.updateId }),
          ...input.extra
        },
        status: "ready",
        attempt: 1,
        leaseOwner: null,
        leaseExpiresAt: null,
        createdAt: now()
      })
      changed()
      return { taskId, workflowId: run.workflowId, runId: run.runId }
    },
    enqueueActivityTask: (input) => {
      const namespace = input.namespace ?? defaultNamespace
      const run = ensureRun(input.workflowId, input.runId, "unknown", namespace, input.taskQueue)
      const taskId = input.taskId ?? nextId("activity-task")
      activityTasks.set(taskId, {
        taskId,
        namespace,
        taskQueue: input.taskQueue,
        run,
        activityType: input.activityType,
        payloadCodec: input.payloadCodec === undefined ? "avro" : input.payloadCodec,
        arguments: encodeInput(input.input, input.wireArguments, "wireArguments" in input),
        retryPolicy: input.retryPolicy ?? null,
        compatibility: input.buildId ?? null,
        extra: input.extra ?? {},
        status: "ready",
        attemptNumber: 1,
        attemptId: null,
        firstAttemptId: input.attemptId ?? null,
        leaseOwner: null,
        leaseExpiresAt: null,
        cancelRequested: false,
        lastHeartbeatAt: null
      })
      changed()
      return { taskId, workflowId: run.workflowId, runId: run.runId }
    },
    enqueueQueryTask: (input) => {
      const task: QueryTask = {
        ...replayTask(input),
        queryTaskId: input.queryTaskId ?? nextId("query-task"),
        queryName: input.queryName,
        queryArguments: encodeInput(input.queryInput, input.wireQueryArguments, "wireQueryArguments" in input),
        status: "pending"
      }
      queryTasks.set(task.queryTaskId, task)
      changed()
      return { queryTaskId: task.queryTaskId, workflowId: task.run.workflowId, runId: task.run.runId }
    },
    enqueueUpdateValidationTask: (input) => {
      const task: ValidationTask = {
        ...replayTask(input),
        id: input.updateValidationTaskId ?? nextId("update-validation"),
        updateName: input.updateName,
        updateArguments: encodeInput(input.updateInput, input.wireUpdateArguments, "wireUpdateArguments" in input),
        status: "ready"
      }
      validationTasks.set(task.id, task)
      changed()
      return { updateValidationTaskId: task.id, workflowId: task.run.workflowId, runId: task.run.runId }
    },
    updateValidationTask: (id) => {
      const task = validationTasks.get(id)
      return task === undefined ? undefined : { status: task.status, attempt: task.attempt, leaseOwner: task.leaseOwner }
    },
    requestActivityCancellation: (taskId) => {
      const task = activityTasks.get(taskId)
      if (task === undefined) throw new Error(`no activity task ${taskId}`)
      task.cancelRequested = true
      changed()
    },
    closeRun: (workflowId, status) => {
      const run = runs.get(workflowId)
      if (run === undefined) throw new Error(`no workflow ${workflowId}`)
      run.status = status
      run.closedReason = status
      run.closedAt = now()
      changed()
    },
    putWorkflow: (workflow) => {
      const run = ensureRun(
        workflow.workflowId,
        workflow.runId,
        workflow.workflowType ?? "unknown",
        workflow.namespace ?? defaultNamespace,
        workflow.taskQueue ?? "default"
      )
      if (workflow.status !== undefined) run.status = workflow.status
      if (workflow.extra !== undefined) run.extra = workflow.extra
      changed()
    },
    putRegistration: (input) => {
      const namespace = input.namespace ?? defaultNamespace
      registrations.set(regKey(namespace, input.workerId), {
        workerId: input.workerId,
        namespace,
        taskQueue: input.taskQueue,
        runtime: input.runtime ?? "typescript",
        sdkVersion: null,
        buildId: input.buildId ?? null,
        supportedWorkflowTypes: [],
        supportedActivityTypes: [],
        fingerprints: {},
        maxConcurrentWorkflowTasks: 100,
        maxConcurrentActivityTasks: 100,
        status: input.status ?? "active",
        registeredAt: now(),
        lastHeartbeatAt: now(),
        registerBody: {},
        heartbeats: []
      })
      changed()
    },

    removeRegistration: (workerId, namespace = defaultNamespace) => {
      registrations.delete(regKey(namespace, workerId))
      changed()
    },

    get registrations() {
      return new Map([...registrations.values()].map((r) => [r.workerId, r as WorkerRegistration]))
    },
    registration: (workerId, namespace = defaultNamespace) => registrations.get(regKey(namespace, workerId)),
    get deregistrations() {
      return deregistrations
    },
    workflowTask: (taskId) => {
      const task = workflowTasks.get(taskId)
      return task === undefined ? undefined : workflowTaskState(task)
    },
    get workflowTasks() {
      return [...workflowTasks.values()].map(workflowTaskState)
    },
    get completedWorkflowTasks() {
      return completedWorkflowTasks
    },
    get failedWorkflowTasks() {
      return failedWorkflowTasks
    },
    get completedActivityTasks() {
      return completedActivityTasks
    },
    get failedActivityTasks() {
      return failedActivityTasks
    },
    get activityHeartbeats() {
      return activityHeartbeats
    },
    get completedQueryTasks() {
      return completedQueryTasks
    },
    get failedQueryTasks() {
      return failedQueryTasks
    },
    get updateValidations() {
      return updateValidations
    },

    stop: () => {
      stopped ??= new Promise<void>((resolve) => {
        server.close(() => resolve())
        server.closeAllConnections()
      })
      return stopped
    }
  }
  return api
}

const workflowTaskState = (task: WorkflowTask): WorkflowTaskState => ({
  taskId: task.taskId,
  namespace: task.namespace,
  taskQueue: task.taskQueue,
  workflowId: task.run.workflowId,
  runId: task.run.runId,
  workflowType: task.workflowType,
  status: task.status,
  attempt: task.attempt,
  leaseOwner: task.leaseOwner,
  leaseExpiresAt: task.leaseExpiresAt
})

/** The server as a scoped resource: started on acquire, stopped when the scope closes. */
export const scoped = (options: DurableWorkflowServerOptions = {}): Effect.Effect<DurableWorkflowServer, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.promise(() => start(options)),
    (server) => Effect.promise(() => server.stop())
  )

/**
 * Headers a worker-plane client sends (bearer token, namespace, protocol version) — a convenience
 * for tests that call the server with `fetch`.
 */
export const workerHeaders = (
  server: DurableWorkflowServer,
  overrides: { readonly token?: string | null; readonly namespace?: string; readonly version?: string | null } = {}
): Record<string, string> => {
  const out: Record<string, string> = { "content-type": "application/json", accept: "application/json" }
  const token = overrides.token === undefined ? server.tokens.worker : overrides.token
  if (token !== null && token !== undefined) out["authorization"] = `Bearer ${token}`
  out[HeaderNames.namespace] = overrides.namespace ?? server.options.defaultNamespace
  const version = overrides.version === undefined ? server.options.protocolVersion : overrides.version
  if (version !== null) out[HeaderNames.protocolVersion] = version
  return out
}

/** Headers a control-plane client sends (operator/admin token, namespace, control-plane version 2). */
export const controlHeaders = (
  server: DurableWorkflowServer,
  overrides: { readonly token?: string | null; readonly namespace?: string; readonly version?: string | null } = {}
): Record<string, string> => {
  const out: Record<string, string> = { "content-type": "application/json", accept: "application/json" }
  const token = overrides.token === undefined ? server.tokens.admin : overrides.token
  if (token !== null && token !== undefined) out["authorization"] = `Bearer ${token}`
  out[HeaderNames.namespace] = overrides.namespace ?? server.options.defaultNamespace
  const version = overrides.version === undefined ? "2" : overrides.version
  if (version !== null) out[HeaderNames.controlPlaneVersion] = version
  return out
}
