import * as Schema from "effect/Schema"
import { WorkflowStepError } from "../../../wire/WorkflowProtocol.js"

/**
 * A durable op resolved to a failure: a dispatched step whose result failed, a failed child run, or a
 * local op (`now`, `sideEffect`) whose body failed. `error` is the recorded failure, verbatim. Catch it
 * in workflow code to compensate; uncaught, it fails the run with `error` as the run's error.
 *
 * @since 0.1.0
 * @category errors
 */
export class StepFailed extends Schema.TaggedError<StepFailed>()("StepFailed", {
  error: WorkflowStepError
}) {
  override get message(): string {
    return this.error.message
  }
}

/**
 * One failed item of a gather: its label (the step name, or the child workflow name) and its error.
 *
 * @since 0.1.0
 * @category models
 */
export interface GatherItemFailure {
  readonly name: string
  readonly error: WorkflowStepError
}

/**
 * One or more items of a gather failed. It is a {@link StepFailed} (same `_tag`, so
 * `Effect.catchTag("StepFailed", ...)` and `instanceof StepFailed` catch it too); `errors` lists every
 * failed item and `error` is the aggregate `{ message: "gather: N item(s) failed: a, b", errors }`
 * that becomes the run's error when it is not caught.
 *
 * @since 0.1.0
 * @category errors
 */
export class GatherFailed extends StepFailed {
  /** Every failed item, in input order. */
  readonly errors: ReadonlyArray<GatherItemFailure>

  constructor(errors: ReadonlyArray<GatherItemFailure>) {
    super({
      error: {
        message: `gather: ${errors.length} item(s) failed: ${errors.map((failure) => failure.name).join(", ")}`,
        errors
      }
    })
    this.errors = errors
    Object.defineProperty(this, "name", { value: "GatherFailed", enumerable: false, configurable: true, writable: true })
  }
}

const renderOp = (kind: string, name: string | undefined) =>
  `${kind}/${name === undefined ? "(no name)" : JSON.stringify(name)}`

/**
 * Replay left the run's recorded history: at seq `seq` history holds `recordedKind`/`recordedName`
 * (the kind of entry and its name, when history keeps one), but the code reached `reachedKind`/
 * `reachedName` there (another kind, or another name), or, offline only (`Workflow.replay`), ended
 * the turn before reaching a recorded seq at all (`reachedKind` `"end"`, `reachedName` the decision's
 * status). The workflow code changed under an in-flight run. It fails the turn even if workflow code
 * catches it.
 *
 * @since 0.1.0
 * @category errors
 */
export class NondeterminismError extends Schema.TaggedError<NondeterminismError>()("NondeterminismError", {
  runId: Schema.String,
  seq: Schema.Number,
  recordedKind: Schema.String,
  recordedName: Schema.optional(Schema.String),
  reachedKind: Schema.String,
  reachedName: Schema.optional(Schema.String)
}) {
  override get message(): string {
    const reached = this.reachedKind === "end"
      ? `the code ended the turn (${this.reachedName ?? "decided"}) before reaching it`
      : `replay reached ${renderOp(this.reachedKind, this.reachedName)}`
    return `history at seq ${this.seq} is ${renderOp(this.recordedKind, this.recordedName)}, but ${reached} ` +
      `(run ${this.runId}): the workflow code no longer matches this run's history; keep the old code path for ` +
      `runs started on it, or ship the change under a new workflow name`
  }
}

/**
 * The workflow called an op the nestjs-durable workflow wire has no command for (continue-as-new,
 * patch markers, absolute-deadline timers, bounded signal waits, entities, ...). It fails the turn even
 * if workflow code catches it.
 *
 * @since 0.1.0
 * @category errors
 */
export class UnsupportedInRemoteWorkflow extends Schema.TaggedError<UnsupportedInRemoteWorkflow>()(
  "UnsupportedInRemoteWorkflow",
  { op: Schema.String }
) {
  override get message(): string {
    return `ctx.${this.op} is unsupported in a remote workflow: the nestjs-durable workflow wire has no command for ` +
      `it. Run this workflow in-process on the engine, or express it with step, sleep, waitForSignal, child, ` +
      `sideEffect or a gather`
  }
}

/**
 * The workflow called an op with an argument it cannot use (a negative or unparseable sleep duration,
 * an empty step name, ...). It fails the turn even if workflow code catches it.
 *
 * @since 0.1.0
 * @category errors
 */
export class InvalidWorkflowCall extends Schema.TaggedError<InvalidWorkflowCall>()("InvalidWorkflowCall", {
  op: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `ctx.${this.op}: ${this.reason}`
  }
}

/** Errors that poison a turn: the decision is `failed` whatever the workflow code does with them. */
export type FatalReplayError = NondeterminismError | UnsupportedInRemoteWorkflow | InvalidWorkflowCall
