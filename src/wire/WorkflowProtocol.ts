/**
 * The nestjs-durable coordinator-driven workflow wire: the turn the engine sends (`WorkflowTask`, with
 * the run's resolved `history`) and the `WorkflowDecision` a worker answers with (the new durable
 * `commands` of the turn plus a status). Field by field as the engine's `interfaces.ts` defines them;
 * unknown extra fields of a task are ignored on decode, unknown extra fields of a step error are kept.
 *
 * @since 0.1.0
 */
import * as Either from "effect/Either"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import { StepEvent } from "./StepProtocol.js"
import { describeIssues } from "./internal/issues.js"

/**
 * A failure as it travels in workflow history entries, `recordStep` commands and failed decisions:
 * the engine's `StepError` (`message` plus optional `code`, `retryable`, `stack`). Extra keys are
 * kept (a failed gather carries its per-item `errors`), and a `code: null` (sent by a Python
 * `FatalError` without a code) is accepted and kept as is.
 *
 * @since 0.1.0
 * @category schemas
 */
export const WorkflowStepError = Schema.Struct(
  {
    message: Schema.String,
    code: Schema.optional(Schema.NullOr(Schema.String)),
    retryable: Schema.optional(Schema.Boolean),
    stack: Schema.optional(Schema.String)
  },
  Schema.Record({ key: Schema.String, value: Schema.Unknown })
)

/**
 * @since 0.1.0
 * @category models
 */
export type WorkflowStepError = typeof WorkflowStepError.Type

/**
 * The kinds of resolved durable op the engine puts in history: `step` (a local op the worker recorded:
 * `now`, `sideEffect`, a gather item), `call` (a dispatched step), `timer` (an elapsed sleep),
 * `signal` (a delivered signal) and `child` (a finished child run).
 *
 * @since 0.1.0
 * @category schemas
 */
export const HistoryEventKind = Schema.Literal("step", "call", "timer", "signal", "child")

/**
 * @since 0.1.0
 * @category models
 */
export type HistoryEventKind = typeof HistoryEventKind.Type

/**
 * One resolved durable op of a run, keyed by `seq`. `output` is present when it resolved to a value,
 * `error` when it resolved to a failure (a `null` error is treated as absent). `name` is absent on
 * `signal` and `child` entries: the engine drops it so replay matches on seq and kind only.
 *
 * @since 0.1.0
 * @category schemas
 */
export const HistoryEvent = Schema.Struct({
  seq: Schema.Int,
  kind: HistoryEventKind,
  name: Schema.optionalWith(Schema.String, { nullable: true }),
  output: Schema.optional(Schema.Unknown),
  error: Schema.optionalWith(WorkflowStepError, { nullable: true })
})

/**
 * @since 0.1.0
 * @category models
 */
export type HistoryEvent = typeof HistoryEvent.Type

/**
 * A signal delivered to the run but not yet consumed, resolving the `waitForSignal` at `seq`. The
 * current engine never sends these (signals arrive as `signal` history entries); they are accepted
 * for peers that do.
 *
 * @since 0.1.0
 * @category schemas
 */
export const PendingSignal = Schema.Struct({
  seq: Schema.Int,
  signal: Schema.String,
  payload: Schema.optional(Schema.Unknown)
})

/**
 * @since 0.1.0
 * @category models
 */
export type PendingSignal = typeof PendingSignal.Type

/**
 * One workflow turn, engine → worker. `taskId` is fresh on every turn and is echoed in the decision
 * (the engine drops a decision whose `taskId` is not the one it awaits). `input` is the run input,
 * the same on every turn. `workflowVersion`, `group` and `attempt` are always sent by the engine but
 * not needed to replay, so a task without them still decodes.
 *
 * @since 0.1.0
 * @category schemas
 */
export const WorkflowTask = Schema.Struct({
  taskId: Schema.String,
  runId: Schema.String,
  workflow: Schema.String,
  workflowVersion: Schema.optional(Schema.String),
  input: Schema.optional(Schema.Unknown),
  history: Schema.Array(HistoryEvent),
  pendingSignals: Schema.optional(Schema.Array(PendingSignal)),
  group: Schema.optional(Schema.String),
  transport: Schema.optional(Schema.String),
  traceparent: Schema.optional(Schema.String),
  priority: Schema.optional(Schema.Number),
  attempt: Schema.optional(Schema.Int)
})

/**
 * @since 0.1.0
 * @category models
 */
export type WorkflowTask = typeof WorkflowTask.Type

/**
 * `call`: dispatch the step `name` with `input`. `group` is a partition suffix, not a queue: the
 * engine routes to `tenantGroup(sanitizeQueueToken(name), group)`. A gathered call carries the fan's
 * `parallelGroup` (`gather:<firstSeq>`).
 *
 * @since 0.1.0
 * @category schemas
 */
export const CallCommand = Schema.Struct({
  kind: Schema.Literal("call"),
  seq: Schema.Int,
  name: Schema.String,
  group: Schema.String,
  input: Schema.optional(Schema.Unknown),
  parallelGroup: Schema.optional(Schema.String)
})

/**
 * `recordStep`: a local op the worker ran this turn (`now`, `sideEffect`, a gather item), with its
 * `output` or `error`, its time window and the events it logged.
 *
 * @since 0.1.0
 * @category schemas
 */
export const RecordStepCommand = Schema.Struct({
  kind: Schema.Literal("recordStep"),
  seq: Schema.Int,
  name: Schema.String,
  output: Schema.optional(Schema.Unknown),
  error: Schema.optional(WorkflowStepError),
  startedAt: Schema.optional(Schema.Number),
  finishedAt: Schema.optional(Schema.Number),
  events: Schema.optional(Schema.Array(StepEvent)),
  parallelGroup: Schema.optional(Schema.String)
})

/**
 * `sleep`: a durable timer of `ms` milliseconds. A duration, not a deadline: the engine computes the
 * deadline itself when it applies the command.
 *
 * @since 0.1.0
 * @category schemas
 */
export const SleepCommand = Schema.Struct({
  kind: Schema.Literal("sleep"),
  seq: Schema.Int,
  ms: Schema.Number
})

/**
 * `waitSignal`: block until the signal `signal` is delivered. The signal name is the engine's global
 * signal token.
 *
 * @since 0.1.0
 * @category schemas
 */
export const WaitSignalCommand = Schema.Struct({
  kind: Schema.Literal("waitSignal"),
  seq: Schema.Int,
  signal: Schema.String
})

/**
 * `startChild`: start the child run `<runId>.child.<seq>` of `workflow` (idempotent on the engine).
 * A gathered child carries the fan's `parallelGroup`.
 *
 * @since 0.1.0
 * @category schemas
 */
export const StartChildCommand = Schema.Struct({
  kind: Schema.Literal("startChild"),
  seq: Schema.Int,
  workflow: Schema.String,
  input: Schema.optional(Schema.Unknown),
  parallelGroup: Schema.optional(Schema.String)
})

/**
 * Every command kind the engine applies. There is no command for anything else (continue-as-new,
 * patch markers, entities, absolute-deadline timers, ...): those ops are unsupported in a remote
 * workflow.
 *
 * @since 0.1.0
 * @category schemas
 */
export const WorkflowCommand = Schema.Union(
  CallCommand,
  RecordStepCommand,
  SleepCommand,
  WaitSignalCommand,
  StartChildCommand
)

/**
 * @since 0.1.0
 * @category models
 */
export type WorkflowCommand = typeof WorkflowCommand.Type

/**
 * The outcome of a turn: `continue` (blocked on an op, `commands` say what to do), `completed`
 * (with `output`), `failed` (with `error`) or `cancelled` (the run was cancelled at an op boundary).
 *
 * @since 0.1.0
 * @category schemas
 */
export const WorkflowDecisionStatus = Schema.Literal("continue", "completed", "failed", "cancelled")

/**
 * @since 0.1.0
 * @category models
 */
export type WorkflowDecisionStatus = typeof WorkflowDecisionStatus.Type

/**
 * A turn's result, worker → engine. `taskId` and `runId` are echoed from the task; `commands` are the
 * turn's new durable ops ordered by seq (the engine applies them for every status).
 *
 * @since 0.1.0
 * @category schemas
 */
export const WorkflowDecision = Schema.Struct({
  taskId: Schema.String,
  runId: Schema.String,
  status: WorkflowDecisionStatus,
  commands: Schema.Array(WorkflowCommand),
  output: Schema.optional(Schema.Unknown),
  error: Schema.optional(WorkflowStepError)
})

/**
 * @since 0.1.0
 * @category models
 */
export type WorkflowDecision = typeof WorkflowDecision.Type

/**
 * A local step's lifecycle streamed while the turn runs (`running`, then `completed` or `failed`), so
 * the engine shows it before the turn's decision arrives. Purely additive: the decision's
 * `recordStep` persists the same checkpoint again.
 *
 * @since 0.1.0
 * @category schemas
 */
export const WorkflowStepEvent = Schema.Struct({
  runId: Schema.String,
  seq: Schema.Int,
  name: Schema.String,
  phase: Schema.Literal("running", "completed", "failed"),
  startedAt: Schema.Number,
  finishedAt: Schema.optional(Schema.Number),
  output: Schema.optional(Schema.Unknown),
  error: Schema.optional(WorkflowStepError),
  events: Schema.optional(Schema.Array(StepEvent)),
  parallelGroup: Schema.optional(Schema.String)
})

/**
 * @since 0.1.0
 * @category models
 */
export type WorkflowStepEvent = typeof WorkflowStepEvent.Type

/**
 * A workflow-turn payload that does not decode. `identity` keeps `taskId`/`runId` when they are
 * readable, so the runtime can still answer the turn with a failed decision.
 *
 * @since 0.1.0
 * @category errors
 */
export class WorkflowTaskDecodeError extends Schema.TaggedError<WorkflowTaskDecodeError>()(
  "WorkflowTaskDecodeError",
  {
    detail: Schema.String,
    identity: Schema.optional(Schema.Struct({ taskId: Schema.String, runId: Schema.String }))
  }
) {
  override get message(): string {
    return `malformed workflow task (check the engine and worker protocol versions): ${this.detail}`
  }
}

const decodeTaskEither = Schema.decodeUnknownEither(WorkflowTask, { errors: "all" })
const decodeIdentity = Schema.decodeUnknownOption(Schema.Struct({ taskId: Schema.String, runId: Schema.String }))
const decodeStepErrorEither = Schema.decodeUnknownEither(WorkflowStepError)
const HISTORY_KINDS: ReadonlySet<unknown> = new Set(HistoryEventKind.literals)

/**
 * The history entries decoded by hand, with {@link HistoryEvent}'s exact semantics (excess keys
 * dropped, a `null` name or error treated as absent, an error decoded by its schema), or `undefined`
 * as soon as one entry does not fit, so the schema decode can say why. A turn's history is the one
 * part of a task that grows (10,000 entries and more); decoding it entry by entry through the schema
 * held the event loop for 100+ ms per 10,000 entries, longer than the replay itself.
 */
const decodeHistoryFast = (raw: unknown): Array<HistoryEvent> | undefined => {
  if (!Array.isArray(raw)) return undefined
  const events = new Array<HistoryEvent>(raw.length)
  for (let i = 0; i < raw.length; i++) {
    const entry: unknown = raw[i]
    if (typeof entry !== "object" || entry === null || Array.isArray(entry)) return undefined
    const { error, kind, name, seq } = entry as Record<string, unknown>
    if (typeof seq !== "number" || !Number.isSafeInteger(seq) || !HISTORY_KINDS.has(kind)) return undefined
    const event: { -readonly [K in keyof HistoryEvent]: HistoryEvent[K] } = { seq, kind: kind as HistoryEventKind }
    if ("name" in entry) {
      if (typeof name === "string" || name === undefined) event.name = name as string
      else if (name !== null) return undefined
    }
    if ("output" in entry) event.output = (entry as { readonly output?: unknown }).output
    if ("error" in entry && error !== null) {
      if (error === undefined) {
        event.error = error as never
      } else {
        const decoded = decodeStepErrorEither(error)
        if (Either.isLeft(decoded)) return undefined
        event.error = decoded.right
      }
    }
    events[i] = event
  }
  return events
}

/**
 * Decodes a raw payload into a {@link WorkflowTask}, or a {@link WorkflowTaskDecodeError} that says
 * which fields are wrong. Never throws. Cost is linear in history length, with the history decoded by
 * a hand-written pass (same result as the schema; on any mismatch the schema decodes the whole task
 * and explains it).
 *
 * @since 0.1.0
 * @category decoding
 */
export const decodeWorkflowTask = (payload: unknown): Either.Either<WorkflowTask, WorkflowTaskDecodeError> => {
  if (typeof payload === "object" && payload !== null && !Array.isArray(payload)) {
    const history = decodeHistoryFast((payload as { readonly history?: unknown }).history)
    if (history !== undefined) {
      const rest = decodeTaskEither({ ...payload, history: [] })
      if (Either.isRight(rest)) return Either.right({ ...rest.right, history })
    }
  }
  return Either.mapLeft(decodeTaskEither(payload), (error) => {
    const identity = decodeIdentity(payload)
    return new WorkflowTaskDecodeError({
      detail: describeIssues(error),
      ...(identity._tag === "Some" ? { identity: identity.value } : {})
    })
  })
}

const encodeDecisionEither = Schema.encodeEither(WorkflowDecision)

/**
 * Checks a decision against the wire schema and returns its JSON-ready form (the decision itself:
 * every field is plain JSON already). Fails with the schema's explanation instead of throwing.
 *
 * @since 0.1.0
 * @category encoding
 */
export const encodeWorkflowDecision = (
  decision: WorkflowDecision
): Either.Either<typeof WorkflowDecision.Encoded, ParseResult.ParseError> => encodeDecisionEither(decision)

/**
 * The engine's shape test for a workflow turn (`workflow` a string, `history` an array); defined
 * with the step protocol, whose queues carry both kinds.
 *
 * @since 0.1.0
 * @category decoding
 */
export { isWorkflowTaskShape } from "./StepProtocol.js"
