import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Predicate from "effect/Predicate"
import * as Codec from "../../../protocol/DurableWorkflowCodec.js"
import type { StepEvent } from "../../../protocol/StepProtocol.js"
import type { StepContext } from "../../Step.js"
import { messageOf } from "../errors.js"
import { makeStepLogger } from "../stepLogger.js"
import type { Handlers, Outcome, Protocol } from "../protocol.js"
import { ActivityCancelled, type QueryFailed, UpdateRejected } from "./errors.js"
import type { Command } from "./replay.js"
import { decodeArgs } from "./replay.js"
import { applyUpdate, errorClass, query, replay, ReplayFailure, type ReplayInput, typeOf, validateUpdate } from "./run.js"

/** The kinds of task of the Durable Workflow worker plane (`update_validation` comes from multiplexed workflow polls). @internal */
export type TaskKind = "workflow" | "activity" | "query" | "update_validation"

/** A failure report of an activity task (`failure` of `/fail`). @internal */
export type FailureBody = Record<string, unknown> & { readonly message: string }

/**
 * What the transport gives the protocol with each task: the worker-plane calls about that task.
 * Errors are the transport's typed errors; the protocol reports and logs, never crashes.
 *
 * @internal
 */
export interface TaskOps {
  readonly workerId: string
  readonly taskQueue: string
  /** Encodes an outbound payload as an envelope (inline, or in external storage above the threshold). */
  readonly encode: (value: unknown) => Effect.Effect<unknown, unknown>
  /** Replaces external-storage references in a task or history payload by their (verified) blob. */
  readonly resolve: (payload: unknown) => Effect.Effect<unknown, unknown>
  /** Workflow tasks: the rest of the history after the first page (partial on failure). */
  readonly remainingHistory: Effect.Effect<ReadonlyArray<unknown>>
  /** Workflow tasks: completes with commands (bounded retry, classification); the outcome. */
  readonly completeWorkflow: (commands: ReadonlyArray<Command>) => Effect.Effect<"completed" | "failed">
  readonly failWorkflow: (failure: FailureBody) => Effect.Effect<void, unknown>
  readonly completeActivity: (result: unknown) => Effect.Effect<void, unknown>
  readonly failActivity: (failure: FailureBody) => Effect.Effect<void, unknown>
  /** Activity heartbeat; `cancelRequested` from the answer. */
  readonly heartbeatActivity: (details: Record<string, unknown> | undefined) => Effect.Effect<{ readonly cancelRequested: boolean }, unknown>
  /** Query tasks: the result; fails with the server's error. */
  readonly completeQuery: (result: unknown, envelope: unknown) => Effect.Effect<void, unknown>
  readonly failQuery: (failure: FailureBody) => Effect.Effect<void, unknown>
  /** Whether a completion error is a final query-task rejection (outcome `expired`). */
  readonly isFinalQueryRejection: (error: unknown) => boolean
  /** Update-validation tasks: approves the update (`/approve`). */
  readonly approveUpdate: Effect.Effect<void, unknown>
  /** Update-validation tasks: rejects the update (`/reject`) with `failure`. */
  readonly rejectUpdate: (failure: FailureBody & { readonly reason: string }) => Effect.Effect<void, unknown>
  /** Whether an approve/reject error is a final (fenced) rejection of the validation task (outcome `expired`). */
  readonly isFinalValidationRejection: (error: unknown) => boolean
  readonly interceptors: ReadonlyArray<WorkerInterceptor>
  /** Records the task metric (kind, outcome, seconds). */
  readonly recordTask: (kind: TaskKind, outcome: string, seconds: number) => Effect.Effect<void>
}

/** A delivery payload of the Durable Workflow transport. @internal */
export interface DurableWorkflowTask {
  readonly kind: TaskKind
  readonly task: Record<string, unknown>
  readonly ops: TaskOps
}

/** What the protocol answers: the task's outcome (already reported to the server). @internal */
export interface DurableWorkflowReply {
  readonly kind: TaskKind
  readonly outcome: string
}

/**
 * Hooks around task execution, outermost first. The workflow hook wraps the whole task including
 * its completion call; the activity hook wraps only the handler; the query hook wraps replay and
 * completion.
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

const logged = <E>(label: string, effect: Effect.Effect<void, E>) =>
  effect.pipe(Effect.catchAll((error) => Effect.logWarning(`${label} failed`, error)))

/** Encodes an outbound payload inline (no external storage): what queries and validators return. */
const encodeInline = (value: unknown): unknown => Either.getOrThrowWith(Codec.encodeEnvelope(value), (e) => e)

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
    taskQueue: str(t.task["task_queue"]) ?? t.ops.taskQueue,
    codec: t.task["payload_codec"],
    args,
    history,
    now,
    encode
  }))

const decodeOrFail = (raw: unknown, codec: unknown, ops: TaskOps) =>
  Effect.gen(function*() {
    const checked = Codec.requireAvroCodec(codec, "task payload")
    if (Either.isLeft(checked)) return yield* Effect.fail(checked.left as unknown)
    const resolved = yield* ops.resolve(raw)
    return yield* Effect.try({ try: () => decodeArgs(resolved, codec), catch: (e) => e })
  })

const nonRetryable = (error: unknown): boolean =>
  typeof error === "object" && error !== null &&
  ((error as { retryable?: unknown }).retryable === false || (error as { nonRetryable?: unknown }).nonRetryable === true ||
    (error as { non_retryable?: unknown }).non_retryable === true)

const runActivity = <R>(handlers: Handlers<R>, t: DurableWorkflowTask): Effect.Effect<string, never, R> =>
  Effect.gen(function*() {
    const { ops, task } = t
    const activityType = str(task["activity_type"]) ?? ""
    const attemptId = str(task["activity_attempt_id"]) ?? str(task["attempt_id"]) ?? ""
    const codec = task["payload_codec"]
    const decoded = yield* Effect.either(decodeOrFail(task["arguments"], codec, ops))
    if (Either.isLeft(decoded)) {
      const error = decoded.left
      yield* logged("reporting an undecodable activity", ops.failActivity({
        message: `cannot decode activity arguments with codec ${codec === undefined ? "missing" : JSON.stringify(codec)}: ${messageOf(error)}`,
        type: typeOf(error),
        class: errorClass(error),
        ...(stackOf(error) === undefined ? {} : { stack_trace: stackOf(error) }),
        // arguments that could not be fetched from external storage may be there on the next attempt
        ...((error as { _tag?: unknown } | null)?._tag === "ExternalStorageError" ? {} : { non_retryable: true })
      }))
      return "decode_error"
    }
    const args = decoded.right
    const step = handlers.steps.get(activityType)
    if (step === undefined) {
      yield* Effect.logWarning(`no activity registered for '${activityType}'`)
      yield* logged("reporting a missing activity", ops.failActivity({ message: `no activity registered for '${activityType}'` }))
      return "no_handler"
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
        taskQueue: ops.taskQueue,
        workerId: ops.workerId,
        workflowId: str(task["workflow_id"]),
        runId: str(task["run_id"])
      },
      heartbeat: (details?: Record<string, unknown>) =>
        Effect.flatMap(
          Effect.mapError(ops.heartbeatActivity(details), (e) => (e instanceof Error ? e : new Error(messageOf(e)))),
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
      group: ops.taskQueue,
      traceparent: undefined,
      context: undefined,
      log: makeStepLogger(events, clock, yield* Effect.runtime<never>()),
      signal: controller.signal,
      durableWorkflowActivity: activityCtx
    }
    const exit = yield* (chain<unknown, unknown>(
      ops.interceptors,
      (i) => i.executeActivity === undefined ? undefined : (next) => i.executeActivity!({ workerId: ops.workerId, taskQueue: ops.taskQueue, task, activityType, args }, next),
      step.run(args, stepCtx) as Effect.Effect<unknown, unknown>
    ) as Effect.Effect<unknown, unknown, R>).pipe(
      Effect.onInterrupt(() => Effect.sync(() => controller.abort())),
      Effect.exit
    )
    if (Exit.isSuccess(exit)) {
      const encoded = yield* Effect.either(ops.encode(exit.value === undefined ? null : exit.value))
      if (Either.isLeft(encoded)) {
        yield* logged("reporting an unencodable activity result", ops.failActivity({
          message: `activity result could not be encoded: ${messageOf(encoded.left)}`,
          type: typeOf(encoded.left),
          class: errorClass(encoded.left),
          non_retryable: true
        }))
        return "failed_non_retryable"
      }
      const sent = yield* Effect.either(ops.completeActivity(encoded.right))
      if (Either.isLeft(sent)) {
        yield* Effect.logError("activity completion failed", sent.left)
        return "complete_error"
      }
      return "completed"
    }
    if (Cause.isInterruptedOnly(exit.cause)) return yield* Effect.interrupt
    const error = Option.getOrElse(
      Cause.failureOption(exit.cause),
      () => Option.getOrElse(Cause.dieOption(exit.cause), () => new Error("activity was interrupted"))
    )
    if (cancelled || error instanceof ActivityCancelled) {
      yield* logged("reporting a cancelled activity", ops.failActivity({
        message: "activity cancelled",
        type: "ActivityCancelled",
        class: errorClass(new ActivityCancelled({})),
        non_retryable: true
      }))
      return "cancelled"
    }
    const code = (error as { code?: unknown } | null)?.code
    const final = nonRetryable(error)
    yield* logged("reporting a failed activity", ops.failActivity({
      message: messageOf(error),
      type: typeOf(error),
      class: errorClass(error),
      ...(typeof code === "number" && Number.isInteger(code) ? { code } : {}),
      ...(stackOf(error) === undefined ? {} : { stack_trace: stackOf(error) }),
      ...(final ? { non_retryable: true } : {})
    }))
    return final ? "failed_non_retryable" : "failed"
  })

const runWorkflowTask = <R>(handlers: Handlers<R>, t: DurableWorkflowTask): Effect.Effect<string, never, R> =>
  Effect.gen(function*() {
    const { ops, task } = t
    const fail = (failure: FailureBody) =>
      Effect.as(logged("reporting a workflow task failure", ops.failWorkflow(failure)), "failed")
    const workflowType = str(task["workflow_type"]) ?? ""
    const codec = task["payload_codec"]
    const firstPage = Array.isArray(task["history_events"]) ? task["history_events"] : []
    const rest = task["next_history_page_token"] ? yield* ops.remainingHistory : []
    const decoded = yield* Effect.either(decodeOrFail(task["arguments"], codec, ops))
    if (Either.isLeft(decoded)) {
      const error = decoded.left
      return yield* fail({
        message: `cannot decode workflow start input with codec ${codec === undefined ? "missing" : JSON.stringify(codec)}: ${messageOf(error)}`,
        type: typeOf(error),
        ...(stackOf(error) === undefined ? {} : { stack_trace: stackOf(error) })
      })
    }
    const definition = handlers.durableWorkflows?.get(workflowType)
    if (definition === undefined) return yield* fail({ message: `no workflow registered for type '${workflowType}'` })
    const updateId = str(task["workflow_update_id"])
    const history = yield* Effect.either(Effect.forEach([...firstPage, ...rest], (event) => ops.resolve(event)))
    if (Either.isLeft(history)) {
      return yield* fail({ message: `replay failed: ${messageOf(history.left)}`, type: typeOf(history.left) })
    }
    const encoded = new Map<unknown, unknown>()
    const input = yield* taskReplayInput(t, workflowType, decoded.right, history.right, (value) => {
      // outbound payloads are encoded inline here; external storage is applied below
      const envelope = encodeInline(value)
      encoded.set(envelope, value)
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
      return yield* fail({
        message: `replay failed: ${messageOf(error)}`,
        type: typeOf(error),
        ...(stackOf(error) === undefined ? {} : { stack_trace: stackOf(error) })
      })
    }
    const commands = yield* Effect.either(Effect.forEach(replayed.right.commands, (command) => externalize(command, encoded, ops)))
    if (Either.isLeft(commands)) {
      return yield* fail({
        message: `unhandled workflow task execution error: ${messageOf(commands.left)}`,
        type: typeOf(commands.left),
        ...(stackOf(commands.left) === undefined ? {} : { stack_trace: stackOf(commands.left) })
      })
    }
    return yield* ops.completeWorkflow(commands.right)
  })

/** Re-encodes the command payloads that went over the external-storage threshold. */
const externalize = (command: Command, encoded: Map<unknown, unknown>, ops: TaskOps): Effect.Effect<Command, unknown> =>
  Effect.gen(function*() {
    const out: Record<string, unknown> = { ...command }
    for (const field of ["arguments", "result"]) {
      const value = out[field]
      if (value !== null && typeof value === "object" && encoded.has(value)) {
        out[field] = yield* ops.encode(encoded.get(value))
      }
    }
    if (command.type === "record_side_effect" && typeof command["result"] === "string") {
      // a bare blob on the wire; the envelope form only when the value went to external storage
      const entry = [...encoded.entries()].find(([envelope]) => (envelope as { blob?: unknown }).blob === command["result"])
      if (entry !== undefined) {
        const sent = (yield* ops.encode(entry[1])) as Record<string, unknown>
        if ("external_storage" in sent) out["result"] = sent
      }
    }
    return out as Command
  })

const runQueryTask = <R>(handlers: Handlers<R>, t: DurableWorkflowTask): Effect.Effect<string, never, R> =>
  Effect.gen(function*() {
    const { ops, task } = t
    const fail = (failure: FailureBody, outcome = "failed") =>
      Effect.as(logged("reporting a query failure", ops.failQuery(failure)), outcome)
    const codec = task["payload_codec"]
    const workflowType = str(task["workflow_type"]) ?? ""
    const queryName = str(task["query_name"]) ?? ""
    const decoded = yield* Effect.either(Effect.all([
      decodeOrFail(task["workflow_arguments"], codec, ops),
      decodeOrFail(task["query_arguments"], codec, ops)
    ]))
    if (Either.isLeft(decoded)) {
      return yield* fail({ message: messageOf(decoded.left), reason: "query_payload_decode_failed", type: typeOf(decoded.left) })
    }
    const definition = handlers.durableWorkflows?.get(workflowType)
    if (definition === undefined) {
      return yield* fail({
        message: `no workflow registered for type '${workflowType}'`,
        reason: "query_workflow_type_not_registered",
        type: "WorkflowTypeNotRegistered"
      })
    }
    const history = yield* Effect.either(
      Effect.forEach(Array.isArray(task["history_events"]) ? task["history_events"] : [], (event) => ops.resolve(event))
    )
    if (Either.isLeft(history)) {
      return yield* fail({ message: `workflow replay failed before query: ${messageOf(history.left)}`, reason: "query_workflow_state_unavailable" })
    }
    const input = yield* taskReplayInput(t, workflowType, decoded.right[0], history.right)
    const answered = yield* Effect.either(query(definition, input, queryName, decoded.right[1]))
    if (Either.isLeft(answered)) {
      const error: QueryFailed = answered.left
      return yield* fail({ message: error.message, reason: error.reason, type: "QueryFailed" })
    }
    const value = answered.right === undefined ? null : answered.right
    const envelope = Codec.encodeEnvelope(value)
    if (Either.isLeft(envelope)) {
      return yield* fail({ message: envelope.left.message, reason: "query_result_encode_failed", type: "PayloadEncodeError" })
    }
    const completed = yield* Effect.either(ops.completeQuery(value, envelope.right))
    if (Either.isLeft(completed)) {
      if (ops.isFinalQueryRejection(completed.left)) return "expired"
      const reason = (completed.left as { reason?: unknown }).reason
      return yield* fail({
        message: `query result completion failed: ${messageOf(completed.left)}`,
        reason: typeof reason === "string" ? reason : "query_result_completion_failed"
      })
    }
    return "completed"
  })

/** Approve/reject call: the outcome, `expired` when the server fenced the validation task off. */
const answerValidation = (ops: TaskOps, send: Effect.Effect<void, unknown>, outcome: string) =>
  Effect.flatMap(Effect.either(send), (sent) => {
    if (Either.isRight(sent)) return Effect.succeed(outcome)
    if (ops.isFinalValidationRejection(sent.left)) {
      return Effect.as(Effect.logInfo("the update-validation task is no longer ours; its answer was not recorded", sent.left), "expired")
    }
    return Effect.as(Effect.logError("could not answer the update-validation task", sent.left), "error")
  })

const runUpdateValidation = <R>(handlers: Handlers<R>, t: DurableWorkflowTask): Effect.Effect<string, never, R> =>
  Effect.gen(function*() {
    const { ops, task } = t
    const workerFailed = (message: string) =>
      answerValidation(ops, ops.rejectUpdate({ message, reason: "update_validation_worker_failed", type: "UpdateValidationFailed" }), "failed")
    const rejected = (error: UpdateRejected) =>
      answerValidation(
        ops,
        ops.rejectUpdate({
          message: error.message,
          reason: "update_validator_rejected",
          type: "UpdateRejected",
          ...(error.validationErrors === undefined ? {} : { validation_errors: error.validationErrors })
        }),
        "rejected"
      )
    const workflowType = str(task["workflow_type"]) ?? ""
    const updateName = str(task["update_name"]) ?? ""
    if (workflowType === "" || updateName === "") {
      return yield* workerFailed("the update-validation task names no workflow_type or update_name")
    }
    const definition = handlers.durableWorkflows?.get(workflowType)
    if (definition === undefined) return yield* workerFailed(`no workflow registered for type '${workflowType}'`)
    const codec = task["payload_codec"]
    // like the SDK, undecodable arguments reject the update (the caller sent them)
    const decoded = yield* Effect.either(Effect.all([
      decodeOrFail(task["workflow_arguments"], codec, ops),
      decodeOrFail(task["update_arguments"], codec, ops)
    ]))
    if (Either.isLeft(decoded)) {
      return yield* rejected(new UpdateRejected({ message: `cannot decode the update arguments: ${messageOf(decoded.left)}` }))
    }
    const exported = Predicate.isRecord(task["history_export"]) ? task["history_export"]["history_events"] : undefined
    const rawHistory = Array.isArray(task["history_events"]) ? task["history_events"] : Array.isArray(exported) ? exported : []
    const history = yield* Effect.either(Effect.forEach(rawHistory, (event) => ops.resolve(event)))
    if (Either.isLeft(history)) {
      return yield* workerFailed(`workflow replay failed before update validation: ${messageOf(history.left)}`)
    }
    const input = yield* taskReplayInput(t, workflowType, decoded.right[0], history.right)
    const verdict = yield* Effect.either(validateUpdate(definition, input, updateName, decoded.right[1]))
    if (Either.isRight(verdict)) return yield* answerValidation(ops, ops.approveUpdate, "approved")
    const error = verdict.left
    return yield* (error._tag === "UpdateRejected" ? rejected(error) : workerFailed(error.message))
  })

/**
 * The protocol of Durable Workflow deliveries: activity, workflow (accepted-update tasks included),
 * query and update-validation tasks, each reported to the server by the protocol itself (through the
 * task's {@link TaskOps}).
 *
 * @internal
 */
export const durableWorkflowProtocol: Protocol<DurableWorkflowReply> = {
  name: "durable-workflow",
  // a task interrupted mid-run is not reported: its lease expires (or the deregistration recovers it)
  cancelled: () => Option.none(),
  label: (payload) => {
    const t = payload as DurableWorkflowTask
    return t.kind === "activity"
      ? { kind: "step", name: str(t.task["activity_type"]) }
      : { kind: "workflow", name: str(t.task["workflow_type"]) }
  },
  process: <R>(handlers: Handlers<R>, payload: unknown): Effect.Effect<Outcome<DurableWorkflowReply>, never, R> => {
    const t = payload as DurableWorkflowTask
    const { ops, task } = t
    const ctx = { workerId: ops.workerId, taskQueue: ops.taskQueue, task }
    const run: Effect.Effect<string, never, R> = t.kind === "activity"
      ? runActivity(handlers, t)
      : t.kind === "update_validation"
      // update-validation tasks are not intercepted
      ? runUpdateValidation(handlers, t)
      : t.kind === "workflow"
      ? chain(ops.interceptors, (i) => i.executeWorkflowTask === undefined ? undefined : (next) => i.executeWorkflowTask!(ctx, next), runWorkflowTask(handlers, t) as Effect.Effect<string>) as Effect.Effect<string, never, R>
      : chain(ops.interceptors, (i) => i.executeQueryTask === undefined ? undefined : (next) => i.executeQueryTask!(ctx, next), runQueryTask(handlers, t) as Effect.Effect<string>) as Effect.Effect<string, never, R>
    return Effect.gen(function*() {
      const started = yield* Clock.currentTimeMillis
      const outcome = yield* run.pipe(
        Effect.onInterrupt(() =>
          Effect.flatMap(Clock.currentTimeMillis, (now) => ops.recordTask(t.kind, "error", (now - started) / 1000))
        )
      )
      yield* ops.recordTask(t.kind, outcome, ((yield* Clock.currentTimeMillis) - started) / 1000)
      return { _tag: "Reply" as const, reply: { kind: t.kind, outcome } }
    }).pipe(Effect.annotateLogs({
      taskKind: t.kind,
      taskId: str(task["task_id"]) ?? str(task["query_task_id"]) ?? str(task["update_validation_task_id"]) ?? ""
    }))
  }
}
