/**
 * The errors of the seam: a broker operation that failed, a registration that failed, a
 * deregistration that failed. Re-exported by `Transport`.
 *
 * @since 0.2.0
 */
import * as Schema from "effect/Schema"

/**
 * A broker operation failed. Transient ones (the default) are logged and retried by the runtime;
 * `fatal` ones cannot work if tried again: a fatal poll ends the worker loop, a fatal lease renewal
 * ends that task's renewals.
 *
 * @since 0.1.0
 * @category errors
 */
export class TransportError extends Schema.TaggedError<TransportError>()("TransportError", {
  transport: Schema.String,
  operation: Schema.String,
  message: Schema.String,
  fatal: Schema.optionalWith(Schema.Boolean, { default: () => false }),
  cause: Schema.optional(Schema.Defect)
}) {}

/**
 * The worker could not register; no task was taken and no deregistration will be sent.
 *
 * @since 0.1.0
 * @category errors
 */
export class RegistrationError extends Schema.TaggedError<RegistrationError>()("RegistrationError", {
  transport: Schema.String,
  message: Schema.String,
  cause: Schema.optional(Schema.Defect)
}) {}

/**
 * The worker-plane deregistration failed (auth, protocol, connection). It is not retried.
 *
 * @since 0.1.0
 * @category errors
 */
export class DeregistrationError extends Schema.TaggedError<DeregistrationError>()("DeregistrationError", {
  transport: Schema.String,
  message: Schema.String,
  cause: Schema.optional(Schema.Defect)
}) {}

/**
 * The broker or server refused who the worker says it is: a wrong password or token, an unknown
 * user, missing or invalid credentials (Redis `WRONGPASS` / `NOAUTH`, PostgreSQL `28P01` / `28000`,
 * MySQL `ER_ACCESS_DENIED_ERROR`, SQS `InvalidClientTokenId` / `SignatureDoesNotMatch`, HTTP 401).
 * Its message names the server's answer and what to check. It is never retried: credentials do not
 * fix themselves. A failed start carries it as the `cause` of its {@link RegistrationError}.
 *
 * @since 0.3.0
 * @category errors
 */
export class AuthenticationError extends Schema.TaggedError<AuthenticationError>()("AuthenticationError", {
  transport: Schema.String,
  message: Schema.String,
  cause: Schema.optional(Schema.Defect)
}) {}

/**
 * The broker or server knows who the worker is but does not let it do what it asked (Redis
 * `NOPERM`, PostgreSQL `42501`, MySQL `ER_DBACCESS_DENIED_ERROR` / `ER_TABLEACCESS_DENIED_ERROR`, SQS
 * `AccessDenied`, HTTP 403). Its message names the server's answer and the permission to grant.
 * Never retried; a failed start carries it as the `cause` of its {@link RegistrationError}.
 *
 * @since 0.3.0
 * @category errors
 */
export class PermissionError extends Schema.TaggedError<PermissionError>()("PermissionError", {
  transport: Schema.String,
  message: Schema.String,
  cause: Schema.optional(Schema.Defect)
}) {}
