/**
 * The nestjs-durable remote step wire: the task the engine dispatches and the result a worker sends
 * back. Field by field as the engine's `RemoteTask` / `StepResult` define them; optional fields are
 * optional, unknown extra fields are ignored on decode.
 *
 * @since 0.1.0
 */
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import { describeIssues } from "./internal/issues.js"

/**
 * A step task, engine → worker (`RemoteTask`).
 *
 * `stepId` is always `${runId}:${seq}` and stays the same across retries and redeliveries: it is the
 * idempotency key. The tenant travels only as the `@<tenant>` suffix of `group`.
 *
 * @since 0.1.0
 * @category schemas
 */
export const StepTask = Schema.Struct({
  runId: Schema.String,
  seq: Schema.Int,
  name: Schema.String,
  stepId: Schema.String,
  group: Schema.String,
  input: Schema.optional(Schema.Unknown),
  attempt: Schema.Int.pipe(Schema.greaterThanOrEqualTo(1)),
  traceparent: Schema.optional(Schema.String),
  context: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown })),
  priority: Schema.optional(Schema.Number),
  transport: Schema.optional(Schema.String)
})

/**
 * @since 0.1.0
 * @category models
 */
export type StepTask = typeof StepTask.Type

/**
 * The error carried by a failed step result. `retryable: false` stops the engine's retries; a missing
 * `retryable` counts as retryable.
 *
 * @since 0.1.0
 * @category schemas
 */
export const StepError = Schema.Struct({
  message: Schema.String,
  code: Schema.optional(Schema.String),
  retryable: Schema.optional(Schema.Boolean),
  stack: Schema.optional(Schema.String)
})

/**
 * @since 0.1.0
 * @category models
 */
export type StepError = typeof StepError.Type

/**
 * The error of a step whose result its broker refused for its size (an SQS message, a MySQL
 * packet): `code: "result_too_large"`, not retryable, since the same output would be refused again.
 * `message` says how large, the limit, and what to do. A transport answers the step with it rather
 * than leave the task to come back and run again for ever.
 *
 * @since 0.3.0
 * @category constructors
 */
export const resultTooLarge = (message: string): StepError => ({ message, code: "result_too_large", retryable: false })

/**
 * A log line or sub-process outcome recorded while a step ran; persisted on the engine's checkpoint.
 *
 * @since 0.1.0
 * @category schemas
 */
export const StepEvent = Schema.Struct({
  at: Schema.Number,
  level: Schema.Literal("debug", "info", "warn", "error"),
  message: Schema.String,
  subId: Schema.optional(Schema.String),
  name: Schema.optional(Schema.String),
  group: Schema.optional(Schema.String),
  status: Schema.optional(Schema.Literal("ok", "failed", "skipped")),
  phase: Schema.optional(Schema.String),
  data: Schema.optional(Schema.Unknown)
})

/**
 * @since 0.1.0
 * @category models
 */
export type StepEvent = typeof StepEvent.Type

/**
 * A step result, worker → engine. The engine correlates by `(runId, seq)`; there is no `name`,
 * `attempt` or `transport` in a result.
 *
 * @since 0.1.0
 * @category schemas
 */
export const StepResult = Schema.Struct({
  runId: Schema.String,
  seq: Schema.Int,
  stepId: Schema.String,
  status: Schema.Literal("completed", "failed"),
  output: Schema.optional(Schema.Unknown),
  error: Schema.optional(StepError),
  startedAt: Schema.optional(Schema.Number),
  events: Schema.optional(Schema.Array(StepEvent))
})

/**
 * @since 0.1.0
 * @category models
 */
export type StepResult = typeof StepResult.Type

/**
 * A task payload that could not be decoded as the protocol requires. `identity` holds the run/step
 * coordinates when the payload carried them, so the runtime can still answer with a failed result.
 *
 * @since 0.1.0
 * @category errors
 */
export class TaskDecodeError extends Schema.TaggedError<TaskDecodeError>()("TaskDecodeError", {
  kind: Schema.String,
  detail: Schema.String,
  identity: Schema.optional(Schema.Struct({ runId: Schema.String, seq: Schema.Number, stepId: Schema.String }))
}) {
  override get message(): string {
    return `malformed ${this.kind} task: ${this.detail}`
  }
}

const optional = (task: Record<string, unknown>, key: string, is: (value: unknown) => boolean) =>
  !Object.hasOwn(task, key) || task[key] === undefined || is(task[key])
const isString = (value: unknown) => typeof value === "string"
const isPlainRecord = (value: unknown) => typeof value === "object" && value !== null && !Array.isArray(value)

/**
 * The task path's decoder: a payload that {@link StepTask} accepts in its usual shape (a plain
 * object, every field of its schema's type), checked field by field and copied as the schema would
 * copy it. It accepts nothing the schema rejects; whatever it does not accept goes through the schema.
 * The schema costs about ten times more per task.
 */
const wellFormedStepTask = (payload: unknown): StepTask | undefined => {
  if (!isPlainRecord(payload)) return undefined
  const task = payload as Record<string, unknown>
  const { attempt, group, name, runId, seq, stepId } = task
  if (
    typeof runId !== "string" || !Number.isSafeInteger(seq) || typeof name !== "string" ||
    typeof stepId !== "string" || typeof group !== "string" || !Number.isSafeInteger(attempt) ||
    (attempt as number) < 1 || !optional(task, "traceparent", isString) || !optional(task, "context", isPlainRecord) ||
    !optional(task, "priority", (value) => typeof value === "number") || !optional(task, "transport", isString)
  ) return undefined
  const decoded: { -readonly [K in keyof StepTask]: StepTask[K] } = {
    runId,
    seq: seq as number,
    name,
    stepId,
    group,
    attempt: attempt as number
  }
  if (Object.hasOwn(task, "input")) decoded.input = task.input
  if (Object.hasOwn(task, "traceparent")) decoded.traceparent = task.traceparent as string | undefined
  if (Object.hasOwn(task, "context")) {
    decoded.context = task.context === undefined ? undefined : { ...(task.context as Record<string, unknown>) }
  }
  if (Object.hasOwn(task, "priority")) decoded.priority = task.priority as number | undefined
  if (Object.hasOwn(task, "transport")) decoded.transport = task.transport as string | undefined
  return decoded
}

const decodeStepTaskFirstError = Schema.decodeUnknownEither(StepTask)
const decodeStepTaskAll = Schema.decodeUnknownEither(StepTask, { errors: "all" })

const Identity = Schema.Struct({ runId: Schema.String, seq: Schema.Int, stepId: Schema.String })
const decodeIdentity = Schema.decodeUnknownOption(Identity)

/**
 * Decodes a raw payload into a {@link StepTask}, or a {@link TaskDecodeError} that says which fields
 * are wrong (and keeps the run/step coordinates if they are readable).
 *
 * @since 0.1.0
 * @category decoding
 */
export const decodeStepTask = (payload: unknown): Either.Either<StepTask, TaskDecodeError> => {
  const task = wellFormedStepTask(payload)
  if (task !== undefined) return Either.right(task)
  const decoded = decodeStepTaskFirstError(payload)
  if (Either.isRight(decoded)) return Either.right(decoded.right)
  // a bad task is rare: decode it again to report every problem, not only the first
  return Either.mapLeft(decodeStepTaskAll(payload), (error) => {
    const identity = decodeIdentity(payload)
    return new TaskDecodeError({
      kind: "step",
      detail: describeIssues(error),
      ...(identity._tag === "Some" ? { identity: identity.value } : {})
    })
  })
}

/**
 * Whether a payload on a step queue is a coordinator-driven workflow turn rather than a step task:
 * the engine's own shape test (`workflow` is a string and `history` an array).
 *
 * @since 0.1.0
 * @category decoding
 */
export const isWorkflowTaskShape = (payload: unknown): boolean =>
  typeof payload === "object" && payload !== null &&
  typeof (payload as { workflow?: unknown }).workflow === "string" &&
  Array.isArray((payload as { history?: unknown }).history)
