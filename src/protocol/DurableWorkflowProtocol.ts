/**
 * The Durable Workflow worker protocol (server protocol 1.1): activity tasks, workflow tasks
 * (accepted-update tasks included), query tasks and update-validation tasks, decoded, run against
 * the worker's activities and workflow definitions, and answered with a {@link DurableWorkflowReply}.
 *
 * It does no I/O of its own: the history pages after the first, external-storage payloads, activity
 * heartbeats and the storing of large outbound payloads are asked of the task's delivery, and the
 * reply is sent by the delivery's `complete`. A transport for another way of reaching the server
 * takes it as it is.
 *
 * @since 0.2.0
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Predicate from "effect/Predicate"
import * as Codec from "../wire/DurableWorkflowCodec.js"
import type { StepEvent } from "../wire/StepProtocol.js"
import type { StepContext } from "../core/Step.js"
import { isNonRetryable, messageOf, withReason } from "../core/internal/errors.js"
import { abortReason, abortSignal, type StepAborted } from "../core/internal/interruption.js"
import { makeStepLogger } from "../core/internal/stepLogger.js"
import * as Protocol from "../seam/Protocol.js"
import type { Handlers, Outcome, Task } from "../seam/Protocol.js"
import type { TransportError } from "../seam/TransportError.js"
import { ActivityCancelled, type QueryFailed, UpdateRejected } from "../core/internal/durableWorkflow/errors.js"
import type { Command } from "../core/internal/durableWorkflow/replay.js"
import { decodeArgs } from "../core/internal/durableWorkflow/replay.js"
import { capturing } from "./internal/durableWorkflowCapture.js"
import {
  applyUpdate,
  errorClass,
  query,
  replay,
  ReplayFailure,
  type ReplayInput,
  typeOf,
  unserializable,
  validateUpdate
} from "../core/internal/durableWorkflow/run.js"

/**
 * The kinds of task of the Durable Workflow worker plane (`update_validation` tasks come from
 * multiplexed workflow polls); the `task_kind` tag of the task metrics.
 *
 * @since 0.2.0
 * @category models
 */
export type TaskKind = "workflow" | "activity" | "query" | "update_validation"

/**
 * A delivery's payload: the task record of a poll answer, its kind (the poll it came from), and the
 * worker and queue it was leased to (the activity context and the interceptors see them).
 *
 * @since 0.2.0
 * @category models
 */
export interface DurableWorkflowTask {
  readonly kind: TaskKind
  readonly task: Record<string, unknown>
  readonly workerId: string
  readonly taskQueue: string
}

/**
 * A failure report (`failure` of a `/fail` or `/reject` call).
 *
 * @since 0.2.0
 * @category models
 */
export type FailureBody = Record<string, unknown> & { readonly message: string }

/**
 * What the protocol answers a task with; the delivery sends it to the server. Each reply carries
 * the `outcome` label of the task metrics as the protocol sees it; the delivery keeps it, or
 * replaces it by what the answer itself came to (e.g. `expired` for a fenced answer).
 *
 * - `ActivityCompleted`: the result envelope (inline, or stored externally), for `/complete`;
 * - `ActivityFailed`: the failure for `/fail` (`decode_error`, `no_handler`, `cancelled`, `failed`,
 *   `failed_non_retryable`);
 * - `WorkflowCompleted`: the task's commands; `WorkflowFailed`: a workflow-task failure;
 * - `QueryCompleted`: the query's result and its envelope; `QueryFailed`: a query failure;
 * - `UpdateApproved`; `UpdateRejected`: the rejection of the update (`rejected` by its validator, or
 *   `failed` when the worker could not validate it).
 *
 * @since 0.2.0
 * @category models
 */
export type DurableWorkflowReply = Data.TaggedEnum<{
  ActivityCompleted: { readonly result: unknown; readonly outcome: "completed" }
  ActivityFailed: {
    readonly failure: FailureBody
    readonly outcome: "decode_error" | "no_handler" | "cancelled" | "failed" | "failed_non_retryable"
  }
  WorkflowCompleted: { readonly commands: ReadonlyArray<Command>; readonly outcome: "completed" }
  WorkflowFailed: { readonly failure: FailureBody; readonly outcome: "failed" }
  QueryCompleted: { readonly result: unknown; readonly envelope: Codec.AvroPayloadEnvelope; readonly outcome: "completed" }
  QueryFailed: { readonly failure: FailureBody; readonly outcome: "failed" }
  UpdateApproved: { readonly outcome: "approved" }
  UpdateRejected: {
    readonly failure: FailureBody & { readonly reason: string }
    readonly outcome: "rejected" | "failed"
  }
}>

/**
 * Constructors and matching of {@link DurableWorkflowReply}.
 *
 * @since 0.2.0
 * @category constructors
 */
export const DurableWorkflowReply = Data.taggedEnum<DurableWorkflowReply>()

/**
 * Hooks around task execution, outermost first. The activity hook wraps the handler; the workflow
 * and query hooks wrap the protocol's processing of the task (decoding, replay, encoding), whose
 * `next` yields the task's outcome label; the answer to the server is sent after them, by the
 * delivery. An interceptor that does not run `next` leaves the task unanswered (to its lease).
 *
 * @since 0.1.0
 * @category models
 */
export interface WorkerInterceptor {
  readonly executeWorkflowTask?: (
    ctx: { readonly workerId: string; readonly taskQueue: string; readonly task: Record<string, unknown> },
    next: Effect.Effect<string>
  ) => Effect.Effect<string>
  readonly executeActivity?: (
    ctx: {
      readonly workerId: string
      readonly taskQueue: string
      readonly task: Record<string, unknown>
      readonly activityType: string
      readonly args: ReadonlyArray<unknown>
    },
    next: Effect.Effect<unknown, unknown>
  ) => Effect.Effect<unknown, unknown>
  readonly executeQueryTask?: (
    ctx: { readonly workerId: string; readonly taskQueue: string; readonly task: Record<string, unknown> },
    next: Effect.Effect<string>
  ) => Effect.Effect<string>
}

const chain = <A, E>(
  interceptors: ReadonlyArray<WorkerInterceptor>,
  pick: (i: WorkerInterceptor) => ((next: Effect.Effect<A, E>) => Effect.Effect<A, E>) | undefined,
  inner: Effect.Effect<A, E>
): Effect.Effect<A, E> =>
  interceptors.reduceRight((next, interceptor) => pick(interceptor)?.(next) ?? next, inner)

const str = (value: unknown): string | undefined => (typeof value === "string" ? value : undefined)

const stackOf = (error: unknown): string | undefined => (error instanceof Error && typeof error.stack === "string" ? error.stack : undefined)

/** The error behind a delivery call's failure (a server or external-storage error), which failure reports describe. */
const underlying = (error: TransportError): unknown => error.cause ?? error

/** Fetches a part kept in external storage; fails with the storage error itself. */
const resolvePart = (task: Task, part: unknown) => Effect.mapError(task.resolve(part), underlying)

/** Encodes an outbound payload inline (no external storage): what queries and validators return. */
const encodeInline = (value: unknown): Codec.AvroPayloadEnvelope => Either.getOrThrowWith(Codec.encodeEnvelope(value), (e) => e)

/**
 * What a task's run is replayed with: its ids, queue and codec from the task, the decoded workflow
 * arguments, the resolved history and the clock's time now.
 */
const taskReplayInput = (
  t: DurableWorkflowTask,
  workflowType: string,
  args: ReadonlyArray<unknown>,
  history: ReadonlyArray<unknown>,
  encode: (value: unknown) => unknown = encodeInline
): Effect.Effect<ReplayInput> =>
  Effect.map(Clock.currentTimeMillis, (now) => ({
    workflowId: str(t.task["workflow_id"]) ?? "",
    runId: str(t.task["run_id"]) ?? "",
    workflowType,
    taskQueue: str(t.task["task_queue"]) ?? t.taskQueue,
    codec: t.task["payload_codec"],
    args,
    history,
    now,
    encode
  }))

const decodeOrFail = (raw: unknown, codec: unknown, task: Task): Effect.Effect<ReadonlyArray<unknown>, unknown> =>
  Effect.gen(function*() {
    yield* Codec.requireAvroCodec(codec, "task payload")
    const resolved = yield* resolvePart(task, raw)
    return yield* Effect.try({ try: () => decodeArgs(resolved, codec), catch: (e) => e })
  })

const activityFailed = (outcome: Extract<DurableWorkflowReply, { _tag: "ActivityFailed" }>["outcome"], failure: FailureBody) =>
  DurableWorkflowReply.ActivityFailed({ failure, outcome })

const runActivity = <R>(
  handlers: Handlers<R>,
  interceptors: ReadonlyArray<WorkerInterceptor>,
  t: DurableWorkflowTask,
  delivered: Task
): Effect.Effect<DurableWorkflowReply, never, R> =>
  Effect.gen(function*() {
    const { task, taskQueue, workerId } = t
    const activityType = str(task["activity_type"]) ?? ""
    const attemptId = str(task["activity_attempt_id"]) ?? str(task["attempt_id"]) ?? ""
    const codec = task["payload_codec"]
    const decoded = yield* Effect.either(decodeOrFail(task["arguments"], codec, delivered))
    if (Either.isLeft(decoded)) {
      const error = decoded.left
      return activityFailed("decode_error", {
        message: `cannot decode activity arguments with codec ${codec === undefined ? "missing" : JSON.stringify(codec)}: ${messageOf(error)}`,
        type: typeOf(error),
        class: errorClass(error),
        ...(stackOf(error) === undefined ? {} : { stack_trace: stackOf(error) }),
        // arguments that could not be fetched from external storage may be there on the next attempt
        ...((error as { _tag?: unknown } | null)?._tag === "ExternalStorageError" ? {} : { non_retryable: true })
      })
    }
    const args = decoded.right
    const step = handlers.steps.get(activityType)
    if (step === undefined) {
      yield* Effect.logWarning(`no activity registered for '${activityType}'`)
      return activityFailed("no_handler", { message: `no activity registered for '${activityType}'` })
    }
    const controller = new AbortController()
    let cancelled = false
    const attemptNumber = typeof task["attempt_number"] === "number" ? task["attempt_number"] : 1
    const activityCtx = {
      info: {
        taskId: str(task["task_id"]) ?? "",
        activityType,
        activityAttemptId: attemptId,
        attemptNumber,
        taskQueue,
        workerId,
        workflowId: str(task["workflow_id"]),
        runId: str(task["run_id"])
      },
      heartbeat: (details?: Record<string, unknown>) =>
        Effect.flatMap(
          // the server's error propagates, as the activity context documents
          Effect.mapError(delivered.heartbeat(details), (e) => {
            const error = underlying(e)
            return error instanceof Error ? error : new Error(messageOf(error))
          }),
          (ack) => {
            if (!ack.cancelRequested) return Effect.void
            cancelled = true
            controller.abort(new ActivityCancelled({}))
            return Effect.fail(new ActivityCancelled({}))
          }
        ),
      isCancelled: () => cancelled,
      signal: controller.signal
    }
    const clock = yield* Effect.clock
    const events: Array<StepEvent> = []
    const stepCtx: StepContext & Record<string, unknown> = {
      runId: str(task["run_id"]) ?? "",
      seq: attemptNumber,
      stepId: attemptId,
      attempt: attemptNumber,
      name: activityType,
      group: taskQueue,
      traceparent: undefined,
      context: undefined,
      log: makeStepLogger(events, clock, yield* Effect.runtime<never>()),
      signal: controller.signal,
      durableWorkflowActivity: activityCtx,
      [abortSignal]: (reason: StepAborted) => controller.abort(reason)
    }
    const exit = yield* (chain<unknown, unknown>(
      interceptors,
      (i) => i.executeActivity === undefined ? undefined : (next) => i.executeActivity!({ workerId, taskQueue, task, activityType, args }, next),
      step.run(args, stepCtx) as Effect.Effect<unknown, unknown>
    ) as Effect.Effect<unknown, unknown, R>).pipe(
      Effect.onInterrupt((interruptors) => Effect.sync(() => controller.abort(abortReason(interruptors)))),
      Effect.exit
    )
    if (Exit.isSuccess(exit)) {
      const encoded = yield* Effect.either(
        Effect.flatMap(Codec.encodeEnvelope(exit.value === undefined ? null : exit.value), (envelope) =>
          Effect.mapError(delivered.store(envelope), underlying))
      )
      if (Either.isLeft(encoded)) {
        if (encoded.left instanceof Codec.PayloadEncodeError) {
          // the same result would come back on every retry: final, at once
          const refused = unserializable(`the result of activity ${JSON.stringify(activityType)}`, encoded.left)
          return activityFailed("failed_non_retryable", {
            message: refused.message,
            type: refused.type,
            class: `effect-durable-worker.${refused.type}`,
            kind: "malformed_output",
            non_retryable: true
          })
        }
        return activityFailed("failed_non_retryable", {
          message: `activity result could not be encoded: ${messageOf(encoded.left)}`,
          type: typeOf(encoded.left),
          class: errorClass(encoded.left),
          non_retryable: true
        })
      }
      return DurableWorkflowReply.ActivityCompleted({ result: encoded.right, outcome: "completed" })
    }
    if (Cause.isInterruptedOnly(exit.cause)) return yield* Effect.interrupt
    const error = Option.getOrElse(
      Cause.failureOption(exit.cause),
      () => Option.getOrElse(Cause.dieOption(exit.cause), () => new Error("activity was interrupted"))
    )
    if (cancelled || error instanceof ActivityCancelled) {
      return activityFailed("cancelled", {
        message: "activity cancelled",
        type: "ActivityCancelled",
        class: errorClass(new ActivityCancelled({})),
        non_retryable: true
      })
    }
    const code = (error as { code?: unknown } | null)?.code
    const final = isNonRetryable(error)
    return activityFailed(final ? "failed_non_retryable" : "failed", {
      message: messageOf(error),
      type: typeOf(error),
      class: errorClass(error),
      ...(typeof code === "number" && Number.isInteger(code) ? { code } : {}),
      ...(stackOf(error) === undefined ? {} : { stack_trace: stackOf(error) }),
      ...(final ? { non_retryable: true } : {})
    })
  })

const workflowFailed = (failure: FailureBody) => DurableWorkflowReply.WorkflowFailed({ failure, outcome: "failed" })

const runWorkflowTask = <R>(handlers: Handlers<R>, t: DurableWorkflowTask, delivered: Task): Effect.Effect<DurableWorkflowReply, never, R> =>
  Effect.gen(function*() {
    const { task } = t
    const workflowType = str(task["workflow_type"]) ?? ""
    const codec = task["payload_codec"]
    const firstPage = Array.isArray(task["history_events"]) ? task["history_events"] : []
    const paged = yield* Effect.either(delivered.rest)
    if (Either.isLeft(paged)) {
      // a task failure, not a completion: the server hands the task out again, with its whole history
      yield* Effect.logError(withReason(`${delivered.id} not replayed, its history is incomplete`, paged.left, "reporting it as failed, for the server to hand it out again"))
      return workflowFailed({ message: `workflow task history incomplete: ${paged.left.message}`, type: "WorkflowTaskHistoryUnavailable" })
    }
    const rest = paged.right
    const decoded = yield* Effect.either(decodeOrFail(task["arguments"], codec, delivered))
    if (Either.isLeft(decoded)) {
      const error = decoded.left
      return workflowFailed({
        message: `cannot decode workflow start input with codec ${codec === undefined ? "missing" : JSON.stringify(codec)}: ${messageOf(error)}`,
        type: typeOf(error),
        ...(stackOf(error) === undefined ? {} : { stack_trace: stackOf(error) })
      })
    }
    const definition = handlers.durableWorkflows.get(workflowType)
    if (definition === undefined) return workflowFailed({ message: `no workflow registered for type '${workflowType}'` })
    const updateId = str(task["workflow_update_id"])
    const history = yield* Effect.either(Effect.forEach([...firstPage, ...rest], (event) => resolvePart(delivered, event)))
    if (Either.isLeft(history)) {
      return workflowFailed({ message: `replay failed: ${messageOf(history.left)}`, type: typeOf(history.left) })
    }
    const encoded: Array<Codec.AvroPayloadEnvelope> = []
    const input = yield* taskReplayInput(t, workflowType, decoded.right, history.right, (value) => {
      // outbound payloads are encoded inline here; the delivery stores the large ones below
      const envelope = encodeInline(value)
      encoded.push(envelope)
      return envelope
    })
    // an accepted-update task: exactly one complete_update / fail_update command
    const replayed = yield* Effect.either<{ readonly commands: ReadonlyArray<Command> }, ReplayFailure, R>(
      updateId !== undefined && updateId !== ""
        ? Effect.map(applyUpdate(definition, input, updateId), (command) => ({ commands: [command] }))
        : replay(definition, input)
    )
    if (Either.isLeft(replayed)) {
      const error = replayed.left instanceof ReplayFailure ? replayed.left.error : replayed.left
      return workflowFailed({
        message: `replay failed: ${messageOf(error)}`,
        type: typeOf(error),
        ...(stackOf(error) === undefined ? {} : { stack_trace: stackOf(error) })
      })
    }
    const commands = yield* Effect.either(Effect.forEach(replayed.right.commands, (command) => externalize(command, encoded, delivered)))
    if (Either.isLeft(commands)) {
      return workflowFailed({
        message: `unhandled workflow task execution error: ${messageOf(commands.left)}`,
        type: typeOf(commands.left),
        ...(stackOf(commands.left) === undefined ? {} : { stack_trace: stackOf(commands.left) })
      })
    }
    return DurableWorkflowReply.WorkflowCompleted({ commands: commands.right, outcome: "completed" })
  })

/** Has the delivery store the command payloads (the envelopes the replay encoded) that go over its threshold. */
const externalize = (command: Command, encoded: ReadonlyArray<Codec.AvroPayloadEnvelope>, delivered: Task): Effect.Effect<Command, unknown> =>
  Effect.gen(function*() {
    const out: Record<string, unknown> = { ...command }
    for (const field of ["arguments", "result"]) {
      const value = out[field]
      if (encoded.some((envelope) => envelope === value)) out[field] = yield* Effect.mapError(delivered.store(value), underlying)
    }
    if (command.type === "record_side_effect" && typeof command["result"] === "string") {
      // a bare blob on the wire; the envelope form only when the value went to external storage
      const envelope = encoded.find((e) => e.blob === command["result"])
      if (envelope !== undefined) {
        const sent = yield* Effect.mapError(delivered.store(envelope), underlying)
        if (Predicate.isRecord(sent) && "external_storage" in sent) out["result"] = sent
      }
    }
    return out as Command
  })

const queryFailed = (failure: FailureBody) => DurableWorkflowReply.QueryFailed({ failure, outcome: "failed" })

const runQueryTask = <R>(handlers: Handlers<R>, t: DurableWorkflowTask, delivered: Task): Effect.Effect<DurableWorkflowReply, never, R> =>
  Effect.gen(function*() {
    const { task } = t
    const codec = task["payload_codec"]
    const workflowType = str(task["workflow_type"]) ?? ""
    const queryName = str(task["query_name"]) ?? ""
    const decoded = yield* Effect.either(Effect.all([
      decodeOrFail(task["workflow_arguments"], codec, delivered),
      decodeOrFail(task["query_arguments"], codec, delivered)
    ]))
    if (Either.isLeft(decoded)) {
      return queryFailed({ message: messageOf(decoded.left), reason: "query_payload_decode_failed", type: typeOf(decoded.left) })
    }
    const definition = handlers.durableWorkflows.get(workflowType)
    if (definition === undefined) {
      return queryFailed({
        message: `no workflow registered for type '${workflowType}'`,
        reason: "query_workflow_type_not_registered",
        type: "WorkflowTypeNotRegistered"
      })
    }
    const history = yield* Effect.either(
      Effect.forEach(Array.isArray(task["history_events"]) ? task["history_events"] : [], (event) => resolvePart(delivered, event))
    )
    if (Either.isLeft(history)) {
      return queryFailed({ message: `workflow replay failed before query: ${messageOf(history.left)}`, reason: "query_workflow_state_unavailable" })
    }
    const input = yield* taskReplayInput(t, workflowType, decoded.right[0], history.right)
    const answered = yield* Effect.either(query(definition, input, queryName, decoded.right[1]))
    if (Either.isLeft(answered)) {
      const error: QueryFailed = answered.left
      return queryFailed({ message: error.message, reason: error.reason, type: "QueryFailed" })
    }
    const result = answered.right === undefined ? null : answered.right
    const envelope = Codec.encodeEnvelope(result)
    if (Either.isLeft(envelope)) {
      const refused = unserializable(`the result of query ${JSON.stringify(queryName)}`, envelope.left)
      return queryFailed({ message: refused.message, reason: "query_result_encode_failed", type: refused.type })
    }
    return DurableWorkflowReply.QueryCompleted({ result, envelope: envelope.right, outcome: "completed" })
  })

const runUpdateValidation = <R>(handlers: Handlers<R>, t: DurableWorkflowTask, delivered: Task): Effect.Effect<DurableWorkflowReply, never, R> =>
  Effect.gen(function*() {
    const { task } = t
    const workerFailed = (message: string) =>
      DurableWorkflowReply.UpdateRejected({
        failure: { message, reason: "update_validation_worker_failed", type: "UpdateValidationFailed" },
        outcome: "failed"
      })
    const rejected = (error: UpdateRejected) =>
      DurableWorkflowReply.UpdateRejected({
        failure: {
          message: error.message,
          reason: "update_validator_rejected",
          type: "UpdateRejected",
          ...(error.validationErrors === undefined ? {} : { validation_errors: error.validationErrors })
        },
        outcome: "rejected"
      })
    const workflowType = str(task["workflow_type"]) ?? ""
    const updateName = str(task["update_name"]) ?? ""
    if (workflowType === "" || updateName === "") {
      return workerFailed("the update-validation task names no workflow_type or update_name")
    }
    const definition = handlers.durableWorkflows.get(workflowType)
    if (definition === undefined) return workerFailed(`no workflow registered for type '${workflowType}'`)
    const codec = task["payload_codec"]
    // like the SDK, undecodable arguments reject the update (the caller sent them)
    const decoded = yield* Effect.either(Effect.all([
      decodeOrFail(task["workflow_arguments"], codec, delivered),
      decodeOrFail(task["update_arguments"], codec, delivered)
    ]))
    if (Either.isLeft(decoded)) {
      return rejected(new UpdateRejected({ message: `cannot decode the update arguments: ${messageOf(decoded.left)}` }))
    }
    const exported = Predicate.isRecord(task["history_export"]) ? task["history_export"]["history_events"] : undefined
    const rawHistory = Array.isArray(task["history_events"]) ? task["history_events"] : Array.isArray(exported) ? exported : []
    const history = yield* Effect.either(Effect.forEach(rawHistory, (event) => resolvePart(delivered, event)))
    if (Either.isLeft(history)) {
      return workerFailed(`workflow replay failed before update validation: ${messageOf(history.left)}`)
    }
    const input = yield* taskReplayInput(t, workflowType, decoded.right[0], history.right)
    const verdict = yield* Effect.either(validateUpdate(definition, input, updateName, decoded.right[1]))
    if (Either.isRight(verdict)) return DurableWorkflowReply.UpdateApproved({ outcome: "approved" })
    const error = verdict.left
    return error._tag === "UpdateRejected" ? rejected(error) : workerFailed(error.message)
  })

/** A reply counts as a success for the controller unless its activity failed. */
const replyOutcome = (reply: DurableWorkflowReply): Outcome<DurableWorkflowReply> => Protocol.reply(reply, reply._tag !== "ActivityFailed")

/**
 * Runs a task's processing inside its interceptor hooks, whose `next` yields the reply's outcome
 * label. When a hook does not run `next` there is no reply: the task is left unanswered.
 */
const intercepted = <R>(
  interceptors: ReadonlyArray<WorkerInterceptor>,
  hook: (i: WorkerInterceptor) => ((next: Effect.Effect<string>) => Effect.Effect<string>) | undefined,
  run: Effect.Effect<DurableWorkflowReply, never, R>
): Effect.Effect<Outcome<DurableWorkflowReply>, never, R> =>
  Effect.suspend(() => {
    let reply: DurableWorkflowReply | undefined
    const next = Effect.map(run, (r) => {
      reply = r
      return r.outcome
    })
    return Effect.map(
      chain(interceptors, hook, next as Effect.Effect<string>) as Effect.Effect<string, never, R>,
      (): Outcome<DurableWorkflowReply> => (reply === undefined ? Protocol.reject("an interceptor did not run the task") : replyOutcome(reply))
    )
  })

/**
 * The pools of the task kinds: workflow tasks (update validations included) take the worker's
 * `workflowConcurrency`, activities its `concurrency`, queries run one at a time.
 *
 * @since 0.2.0
 * @category pools
 */
export const pools = {
  workflow: Protocol.pool("workflow", "workflowConcurrency"),
  step: Protocol.pool("step", "concurrency"),
  query: Protocol.pool("query", 1)
} as const

/**
 * The protocol, with the interceptors of its tasks. Its payloads are {@link DurableWorkflowTask}s.
 * A task interrupted mid-run has no answer: it is left to its lease.
 *
 * @since 0.2.0
 * @category constructors
 */
export const make = (
  options: { readonly interceptors?: ReadonlyArray<WorkerInterceptor> | undefined } = {}
): Protocol.Protocol<DurableWorkflowReply> & { readonly pools: typeof pools } => {
  const interceptors = options.interceptors ?? []
  return {
    name: "durable-workflow",
    serves: ["steps", "durableWorkflows"],
    pools,
    cancelled: () => Option.none(),
    crashed: (payload, message) => {
      const kind = (payload as Partial<DurableWorkflowTask> | null)?.kind
      const failure = { message: `the worker crashed on this task (a defect, not the handler's): ${message}`, type: "WorkerDefect" }
      // an activity's attempt fails as retryable (the server's retry policy decides), a workflow
      // task fails (the server hands it out again), a query and an update validation are refused
      return kind === "activity"
        ? Option.some(activityFailed("failed", failure))
        : kind === "workflow"
        ? Option.some(workflowFailed(failure))
        : kind === "query"
        ? Option.some(queryFailed({ ...failure, reason: "query_rejected" }))
        : kind === "update_validation"
        ? Option.some(DurableWorkflowReply.UpdateRejected({ failure: { ...failure, reason: "update_validation_worker_failed" }, outcome: "failed" }))
        : Option.none()
    },
    label: (payload) => {
      const { kind, task } = payload as DurableWorkflowTask
      return kind === "activity"
        ? { kind: "step", name: str(task["activity_type"]) }
        : { kind: "workflow", name: str(task["workflow_type"]) }
    },
    process: <R>(handlers: Handlers<R>, delivered: Task): Effect.Effect<Outcome<DurableWorkflowReply>, never, R> => {
      const t = delivered.payload as DurableWorkflowTask
      const ctx = { workerId: t.workerId, taskQueue: t.taskQueue, task: t.task }
      const run: Effect.Effect<Outcome<DurableWorkflowReply>, never, R> = t.kind === "activity"
        ? Effect.map(runActivity(handlers, interceptors, t, delivered), replyOutcome)
        : t.kind === "update_validation"
        // update-validation tasks are not intercepted
        ? Effect.map(runUpdateValidation(handlers, t, delivered), replyOutcome)
        : t.kind === "workflow"
        ? intercepted(interceptors, (i) => i.executeWorkflowTask && ((next) => i.executeWorkflowTask!(ctx, next)), capturing(t, delivered, runWorkflowTask(handlers, t, delivered)))
        : intercepted(interceptors, (i) => i.executeQueryTask && ((next) => i.executeQueryTask!(ctx, next)), runQueryTask(handlers, t, delivered))
      return Effect.annotateLogs(run, {
        taskKind: t.kind,
        taskId: str(t.task["task_id"]) ?? str(t.task["query_task_id"]) ?? str(t.task["update_validation_task_id"]) ?? ""
      })
    }
  }
}
