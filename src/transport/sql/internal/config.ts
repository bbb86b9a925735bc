/**
 * The SQL transport's options, checked once when the transport is built: every option with a
 * constraint is checked here, and an unknown key or a bad value fails with an
 * {@link SqlConfigError} that names the option, says what it accepts and shows what it got.
 *
 * @since 0.2.0
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Either from "effect/Either"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import { checks, millisHint, show } from "../../internal/options.js"
import type { ConnectionOptions, PostgresConnectionOptions, SqlTransportOptions } from "./options.js"
import * as Statements from "./statements.js"

/**
 * An invalid or unknown option of the SQL transport, named, with the accepted forms and the value
 * given. Raised when the transport is built, before anything connects.
 *
 * @since 0.2.0
 * @category errors
 */
export class SqlConfigError extends Schema.TaggedError<SqlConfigError>()("SqlConfigError", {
  option: Schema.String,
  message: Schema.String
}) {}

/**
 * The checked transport options, defaults applied.
 *
 * @since 0.2.0
 */
export interface Resolved {
  readonly prefix: string
  readonly partition: string | undefined
  readonly lease: Duration.Duration
  readonly renewInterval: Duration.Duration
  /** `undefined`: the default, which depends on whether the registration is notified. */
  readonly pollInterval: Duration.Duration | undefined
  readonly batchSize: number
  readonly autoCreate: boolean
  readonly notify: boolean
  /** Whether a database that does not answer at start is waited for. */
  readonly waitForBroker: boolean
}

const TRANSPORT_KEYS: ReadonlyArray<keyof SqlTransportOptions> = [
  "prefix",
  "partition",
  "lease",
  "renewInterval",
  "pollInterval",
  "batchSize",
  "autoCreate",
  "notify",
  "waitForBroker"
]

const CONNECTION_KEYS: ReadonlyArray<keyof ConnectionOptions> = [
  "url",
  "host",
  "port",
  "database",
  "username",
  "password",
  "maxConnections",
  "connectTimeout"
]

const DEFAULT_LEASE = Duration.seconds(30)
const DEFAULT_BATCH = 100

const { boolean, duration, fail, integer, namePart, refuseUnknown, string } = checks(
  "SQL transport",
  (option, message) => new SqlConfigError({ option, message })
)

/** Checks the values of the transport options (their keys are checked by the callers). */
const transport = (options: SqlTransportOptions): Either.Either<Resolved, SqlConfigError> =>
  Either.gen(function*() {
    const prefix = options.prefix ?? Statements.DEFAULT_PREFIX
    const invalid = typeof prefix === "string" ? Statements.invalidPrefix(prefix) : `prefix must be a string, got ${show(prefix)}`
    if (invalid !== undefined) return yield* fail("prefix", invalid)
    const lease = (yield* duration("lease", options.lease)) ?? DEFAULT_LEASE
    // renewed every third of it, a lease of milliseconds (`lease: 30` meant as seconds) has every
    // running task's claim renewed without pause, and lost at the first slow statement
    if (Duration.lessThan(lease, Duration.seconds(1))) {
      return yield* fail("lease", `lease must be at least 1 second (got ${Duration.format(lease)}${millisHint(options.lease)})`)
    }
    const renewInterval = (yield* duration("renewInterval", options.renewInterval)) ??
      Duration.millis(Math.max(1, Math.floor(Duration.toMillis(lease) / 3)))
    if (!Duration.lessThan(renewInterval, lease)) {
      return yield* fail(
        "renewInterval",
        `renewInterval (${Duration.format(renewInterval)}) must be shorter than lease (${
          Duration.format(lease)
        }), or running tasks lose their claim`
      )
    }
    return {
      prefix,
      partition: yield* namePart("partition", yield* string("partition", options.partition, true)),
      lease,
      renewInterval,
      pollInterval: yield* duration("pollInterval", options.pollInterval),
      batchSize: (yield* integer("batchSize", options.batchSize, 1)) ?? DEFAULT_BATCH,
      autoCreate: (yield* boolean("autoCreate", options.autoCreate)) ?? true,
      notify: (yield* boolean("notify", options.notify)) ?? true,
      waitForBroker: (yield* boolean("waitForBroker", options.waitForBroker)) ?? false
    }
  })

/**
 * The dialect a database URL names: `postgres://`/`postgresql://` or `mysql://`/`mariadb://`.
 *
 * @since 0.1.0
 * @category utils
 */
export const dialectOfUrl = (url: string): Either.Either<Statements.Dialect, string> =>
  /^postgres(ql)?:\/\//i.test(url)
    ? Either.right("postgres")
    : /^(mysql|mariadb):\/\//i.test(url)
    ? Either.right("mysql")
    : Either.left("must start with postgres://, postgresql://, mysql:// or mariadb://")

/**
 * The scheme of a URL (`postgres:`), all of it a message may show: the rest may hold a password.
 *
 * @internal
 */
export const schemeOf = (url: string): string | undefined => /^[a-z][a-z0-9+.-]*:/i.exec(url)?.[0]

/**
 * What a database URL that names no dialect looks like, for a message that must not show it (it may
 * hold a password): blanks around it, quotes (both kept by some env files), no scheme, or another one.
 *
 * @internal
 */
export const urlShape = (url: string): string => {
  if (url.trim() === "") return "is empty"
  if (url.trim() !== url) return "has blanks around it"
  if (/^['"`]/.test(url)) return "is in quotes"
  const scheme = schemeOf(url)
  return scheme === undefined
    ? "has no scheme"
    : url.startsWith(`${scheme}//`)
    ? `is a ${scheme}// URL`
    : `has the scheme ${scheme} without //`
}

const schemes = { postgres: "postgres:// or postgresql://", mysql: "mysql:// or mariadb://" } as const

/** Checks the connection options of a pool the transport opens on `dialect`. */
const connection = (dialect: Statements.Dialect, options: PostgresConnectionOptions) =>
  Either.gen(function*() {
    if (options.url !== undefined) {
      const url = Redacted.isRedacted(options.url) ? Redacted.value(options.url) : options.url
      // the URL may hold a password: only its scheme is shown
      const scheme = typeof url === "string" ? schemeOf(url) : undefined
      if (typeof url !== "string" || Either.getOrUndefined(dialectOfUrl(url)) !== dialect) {
        return yield* fail(
          "url",
          `url must be a ${schemes[dialect]} URL on ${dialect === "postgres" ? "PostgreSQL" : "MySQL/MariaDB"}, got ${
            typeof url !== "string" ? show(url) : scheme === undefined ? "no scheme" : `a ${scheme}// URL`
          }`
        )
      }
    }
    for (const option of ["host", "database", "username", "applicationName"] as const) {
      yield* string(option, options[option])
    }
    if (options.password !== undefined && typeof options.password !== "string" && !Redacted.isRedacted(options.password)) {
      return yield* fail("password", "password must be a string or a Redacted string")
    }
    yield* integer("port", options.port, 1, 65_535)
    yield* integer("maxConnections", options.maxConnections, 1)
    yield* duration("connectTimeout", options.connectTimeout)
  })

/**
 * Checks the options of a transport over the application's own client: only transport options.
 *
 * @since 0.2.0
 */
export const resolve = (options: SqlTransportOptions): Either.Either<Resolved, SqlConfigError> =>
  Either.flatMap(refuseUnknown(options, TRANSPORT_KEYS), () => transport(options))

/**
 * Checks the options of a transport with its own pool on `dialect`: transport and connection
 * options, the URL's scheme matching the dialect.
 *
 * @since 0.2.0
 */
export const resolvePool = (
  dialect: Statements.Dialect,
  options: SqlTransportOptions & PostgresConnectionOptions
): Either.Either<Resolved, SqlConfigError> =>
  Either.gen(function*() {
    if (dialect === "mysql" && options.applicationName !== undefined) {
      return yield* fail(
        "applicationName",
        "applicationName sets PostgreSQL's application_name; MySQL/MariaDB connections have none, so leave it out there"
      )
    }
    yield* refuseUnknown(options, [...TRANSPORT_KEYS, ...CONNECTION_KEYS, "applicationName"])
    yield* connection(dialect, options)
    return yield* transport(options)
  })
