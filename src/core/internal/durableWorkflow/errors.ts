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
