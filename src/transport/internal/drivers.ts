/**
 * The drivers each transport needs. They are optional peer dependencies: an application installs
 * those of the transports it uses, and a transport whose driver is missing says which to install.
 */
import * as Schema from "effect/Schema"
import { messageOf } from "../../core/internal/errors.js"
import { installCommand, isNotFound } from "../../core/internal/packages.js"

/** @internal */
export const BULLMQ_PACKAGES = ["bullmq", "ioredis"] as const
/** @internal */
export const POSTGRES_PACKAGES = ["@effect/sql", "@effect/sql-pg", "@effect/experimental", "pg"] as const
/** @internal */
export const MYSQL_PACKAGES = ["@effect/sql", "@effect/sql-mysql2", "@effect/experimental", "mysql2"] as const
/** @internal */
export const SQS_PACKAGES = ["@aws-sdk/client-sqs"] as const

/**
 * A transport's driver is not installed (it is an optional peer dependency of this package).
 *
 * @since 0.3.0
 * @category errors
 */
export class MissingDriverError extends Schema.TaggedError<MissingDriverError>()("MissingDriverError", {
  transport: Schema.String,
  packages: Schema.Array(Schema.String),
  message: Schema.String
}) {}

/** The message of a driver that failed to load: what to install, or why it failed when it is installed. */
const missingDriver = (packages: ReadonlyArray<string>, user: string, cause: unknown): string =>
  isNotFound(cause)
    ? `${user} needs ${packages.join(", ")} (optional peer dependencies of effect-durable-worker); install them: ${
      installCommand(packages)
    } (${messageOf(cause)})`
    : `${user}'s packages failed to load: ${messageOf(cause)}`

/**
 * A {@link MissingDriverError} for a failed import of a transport's driver (`user`, what needs
 * the packages, defaults to "the <transport> transport").
 */
export const missingDriverError =
  (packages: ReadonlyArray<string>, transport: string, user = `the ${transport} transport`) => (cause: unknown) =>
    new MissingDriverError({ transport, packages: [...packages], message: missingDriver(packages, user, cause) })
