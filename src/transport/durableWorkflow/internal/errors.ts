import * as Schema from "effect/Schema"

/**
 * The server refused the credentials (HTTP 401). Not a {@link DurableWorkflowServerError}.
 *
 * @since 0.1.0
 * @category errors
 */
export class DurableWorkflowUnauthorized extends Schema.TaggedError<DurableWorkflowUnauthorized>()(
  "DurableWorkflowUnauthorized",
  { message: Schema.String, body: Schema.optional(Schema.Unknown) }
) {}

/**
 * Any other HTTP error (400, 403, 409, 412, 413, 415, 429, 5xx, …), with the server's `reason`.
 *
 * @since 0.1.0
 * @category errors
 */
export class DurableWorkflowServerError extends Schema.TaggedError<DurableWorkflowServerError>()(
  "DurableWorkflowServerError",
  {
    status: Schema.Number,
    reason: Schema.optional(Schema.String),
    body: Schema.Unknown,
    message: Schema.String,
    /** How long the server asked to wait before the next attempt (its `Retry-After`, on a 429 or 503). */
    retryAfterMillis: Schema.optional(Schema.Number)
  }
) {}

/**
 * The server rejected the request's data (HTTP 422 `validation_failed`, and other 422s).
 *
 * @since 0.1.0
 * @category errors
 */
export class DurableWorkflowInvalidArgument extends Schema.TaggedError<DurableWorkflowInvalidArgument>()(
  "DurableWorkflowInvalidArgument",
  { message: Schema.String, errors: Schema.optional(Schema.Unknown), body: Schema.optional(Schema.Unknown) }
) {}

/**
 * HTTP 404 `namespace_not_found`.
 *
 * @since 0.1.0
 * @category errors
 */
export class DurableWorkflowNamespaceNotFound extends Schema.TaggedError<DurableWorkflowNamespaceNotFound>()(
  "DurableWorkflowNamespaceNotFound",
  { message: Schema.String }
) {}

/**
 * HTTP 404 for a workflow (`workflow_not_found`, `instance_not_found`, or a call about a workflow).
 *
 * @since 0.1.0
 * @category errors
 */
export class DurableWorkflowNotFound extends Schema.TaggedError<DurableWorkflowNotFound>()(
  "DurableWorkflowNotFound",
  { message: Schema.String, context: Schema.String }
) {}

/**
 * The request did not get an HTTP answer: connection refused or reset, or the timeout passed.
 *
 * @since 0.1.0
 * @category errors
 */
export class DurableWorkflowRequestError extends Schema.TaggedError<DurableWorkflowRequestError>()(
  "DurableWorkflowRequestError",
  {
    method: Schema.String,
    path: Schema.String,
    timeout: Schema.Boolean,
    message: Schema.String,
    cause: Schema.optional(Schema.Defect)
  }
) {}

/**
 * An option the transport refuses (named, with what it accepts and what it got), or a request that
 * cannot be sent as configured (e.g. a worker-plane call with only a control token). Raised before
 * any I/O.
 *
 * @since 0.1.0
 * @category errors
 */
export class DurableWorkflowConfigError extends Schema.TaggedError<DurableWorkflowConfigError>()(
  "DurableWorkflowConfigError",
  {
    message: Schema.String,
    /**
     * The option refused (`baseUrl`, `waitForBroker`, …), as the other transports' config errors
     * name it; absent for an error that is not about one option.
     */
    option: Schema.optional(Schema.String)
  }
) {}

/**
 * The server is not one this worker can talk to; the message starts `Server compatibility error: `.
 *
 * @since 0.1.0
 * @category errors
 */
export class ServerCompatibilityError extends Schema.TaggedError<ServerCompatibilityError>()(
  "ServerCompatibilityError",
  { message: Schema.String, cause: Schema.optional(Schema.Defect) }
) {}

/**
 * Any failure of a call to the server.
 *
 * @since 0.1.0
 * @category errors
 */
export type DurableWorkflowError =
  | DurableWorkflowUnauthorized
  | DurableWorkflowServerError
  | DurableWorkflowInvalidArgument
  | DurableWorkflowNamespaceNotFound
  | DurableWorkflowNotFound
  | DurableWorkflowRequestError
  | DurableWorkflowConfigError

/** The server's answers that are the SDK's own "definite" errors (not transport trouble). @internal */
export const isHttpAnswerError = (error: DurableWorkflowError): boolean =>
  error._tag !== "DurableWorkflowRequestError" && error._tag !== "DurableWorkflowConfigError"

/** `reason` of a server error, when it has one. @internal */
export const reasonOf = (error: DurableWorkflowError): string | undefined =>
  error._tag === "DurableWorkflowServerError" ? error.reason : undefined

/** Maps an HTTP error answer to its typed error (reference §1.3). @internal */
export const fromHttpAnswer = (
  status: number,
  body: unknown,
  text: string,
  context: string,
  retryAfterMillis?: number
): DurableWorkflowError => {
  const record = typeof body === "object" && body !== null && !Array.isArray(body) ? (body as Record<string, unknown>) : {}
  const message = typeof record["message"] === "string"
    ? record["message"]
    : typeof record["error"] === "string"
    ? record["error"]
    : text
  const reason = typeof record["reason"] === "string" ? record["reason"] : undefined
  if (status === 401) return new DurableWorkflowUnauthorized({ message: message || "unauthorized", body })
  if (status === 404) {
    if (reason === "instance_not_found" || reason === "workflow_not_found" || (reason !== "namespace_not_found" && context.includes("workflow"))) {
      return new DurableWorkflowNotFound({ message: message || `not found: ${context}`, context })
    }
    if (reason === "namespace_not_found") return new DurableWorkflowNamespaceNotFound({ message })
  }
  if (status === 422) {
    return new DurableWorkflowInvalidArgument({
      message: message || "invalid argument",
      errors: record["errors"] ?? record["validation_errors"],
      body
    })
  }
  return new DurableWorkflowServerError({
    status,
    ...(reason === undefined ? {} : { reason }),
    body,
    message: `HTTP ${status}${reason === undefined ? "" : ` ${reason}`}${message ? `: ${message}` : ""}`,
    ...(retryAfterMillis === undefined || (status !== 429 && status !== 503) ? {} : { retryAfterMillis })
  })
}
