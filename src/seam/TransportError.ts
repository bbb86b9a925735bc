/**
 * The errors of the seam: a broker operation that failed, a registration that failed, a
 * deregistration that failed. Re-exported by `Transport`.
 *
 * @since 0.2.0
 */
import * as Schema from "effect/Schema"

/**
 * A broker operation failed. Transient ones (the default) are logged and retried by the runtime;
 * `fatal` ones end the worker loop.
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
