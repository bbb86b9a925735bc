import * as Schema from "effect/Schema"

/**
 * An activity the workflow scheduled failed (or timed out); raised inside workflow code, which may
 * catch it to compensate.
 *
 * @since 0.1.0
 * @category errors
 */
export class ActivityFailed extends Schema.TaggedError<ActivityFailed>()("ActivityFailed", {
  message: Schema.String,
  activityType: Schema.optional(Schema.String),
  activityAttemptId: Schema.optional(Schema.String),
  exceptionType: Schema.optional(Schema.String),
  exceptionClass: Schema.optional(Schema.String),
  timedOut: Schema.optionalWith(Schema.Boolean, { default: () => false })
}) {}

/**
 * A child workflow failed, was cancelled or terminated.
 *
 * @since 0.1.0
 * @category errors
 */
export class ChildWorkflowFailed extends Schema.TaggedError<ChildWorkflowFailed>()("ChildWorkflowFailed", {
  message: Schema.String,
  status: Schema.Literal("failed", "cancelled", "terminated"),
  workflowType: Schema.optional(Schema.String)
}) {}

/**
 * The workflow code did not do what its history recorded. It fails the workflow *task* (the server
 * retries it, e.g. on a worker with the right code), never the workflow.
 *
 * @since 0.1.0
 * @category errors
 */
export class NonDeterministicReplayError extends Schema.TaggedError<NonDeterministicReplayError>()(
  "NonDeterministicReplayError",
  { workflowSequence: Schema.Number, expected: Schema.String, recorded: Schema.String, message: Schema.String }
) {}

/**
 * The server asked a running activity to stop (its heartbeat answered `cancel_requested`).
 *
 * @since 0.1.0
 * @category errors
 */
export class ActivityCancelled extends Schema.TaggedError<ActivityCancelled>()("ActivityCancelled", {
  message: Schema.optionalWith(Schema.String, { default: () => "activity cancelled" })
}) {}

/**
 * A query could not be answered: unknown query name, replay failure, or the handler failed.
 *
 * @since 0.1.0
 * @category errors
 */
export class QueryFailed extends Schema.TaggedError<QueryFailed>()("QueryFailed", {
  message: Schema.String,
  reason: Schema.String
}) {}

/**
 * An update validator refused an update. Fail (or throw) it from a validator to reject with
 * per-field `validationErrors`; a validator returning `false` or failing with anything else rejects
 * too. The server answers the caller with `update_validator_rejected`.
 *
 * @since 0.1.0
 * @category errors
 */
export class UpdateRejected extends Schema.TaggedError<UpdateRejected>()("UpdateRejected", {
  message: Schema.String,
  validationErrors: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Array(Schema.String) }))
}) {}

/**
 * An update could not be validated for a reason of the worker, not of the update: no workflow
 * type or update name on the task, an unregistered workflow type, a failed replay, or an update
 * without a declared validator. Reported as `update_validation_worker_failed`.
 *
 * @since 0.1.0
 * @category errors
 */
export class UpdateValidationFailed extends Schema.TaggedError<UpdateValidationFailed>()("UpdateValidationFailed", {
  message: Schema.String
}) {}

/**
 * The same worker id registered a different definition of a workflow type earlier in this
 * process. The server pins a definition to a live registration, so restart the worker process (or
 * use a new worker id) to serve the changed definition.
 *
 * @since 0.1.0
 * @category errors
 */
export class WorkflowDefinitionChanged extends Schema.TaggedError<WorkflowDefinitionChanged>()("WorkflowDefinitionChanged", {
  workerId: Schema.String,
  workflowType: Schema.String,
  previous: Schema.String,
  current: Schema.String
}) {
  override get message(): string {
    return `Workflow definition changed for worker '${this.workerId}' and workflow type '${this.workflowType}' ` +
      `(fingerprint ${this.previous} is now ${this.current}); restart the worker process before re-registering this ` +
      `workflow type (or register it under a new worker id).`
  }
}

/**
 * A workflow's receiver declarations are inconsistent (a validator for an undeclared update, a
 * variadic parameter that is not the last one, a duplicate parameter name).
 *
 * @since 0.1.0
 * @category errors
 */
export class InvalidWorkflowDeclaration extends Schema.TaggedError<InvalidWorkflowDeclaration>()("InvalidWorkflowDeclaration", {
  workflowType: Schema.String,
  message: Schema.String
}) {}

/**
 * An offline replay (`DurableWorkflow.replay`, `replayQuery`, `replayUpdate`) could not run the history
 * against the code for a reason other than non-determinism or an undecodable payload: `reason`
 * says which (`no_workflows`, `duplicate_workflow_type`, `unknown_workflow_type` — the message lists
 * the registered types —, `invalid_history` — not an event list or export document —,
 * `invalid_update`, or `replay_failed` for anything the workflow code threw while replaying, e.g.
 * an `UpdateApplied` with no handler).
 *
 * @since 0.3.0
 * @category errors
 */
export class ReplayError extends Schema.TaggedError<ReplayError>()("ReplayError", {
  reason: Schema.Literal("no_workflows", "duplicate_workflow_type", "unknown_workflow_type", "invalid_history", "invalid_update", "replay_failed"),
  message: Schema.String
}) {}
