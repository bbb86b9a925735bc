/**
 * What both SQL dialects share when they connect: how a target is named without its password, which
 * errors mean a connection was lost (worth another try), and the registration error of a failed connect.
 */
import * as Duration from "effect/Duration"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import { messageOf } from "../../../core/internal/errors.js"
import { decodeDuration } from "../../../core/internal/options.js"
import { RegistrationError } from "../../../seam/Transport.js"
import type { ConnectionOptions } from "./options.js"
import * as Refusals from "../../internal/connectErrors.js"
import { passwordOf, redact as redactText, safeCause } from "../../internal/redact.js"
import type { Dialect } from "./statements.js"

/** The transport's name in errors and logs. */
export const NAME = "sql"

/** The message of an SQL error with its driver's cause (the SQL client's own message says little). */
export const sqlMessageOf = (error: unknown): string => {
  if (typeof error === "object" && error !== null && "cause" in error && (error as { cause?: unknown }).cause !== undefined) {
    const inner = messageOf((error as { cause: unknown }).cause)
    const outer = error instanceof Error ? error.message : ""
    // the client's message often repeats its cause's ("PgClient: Connection timed out" over
    // "Connection timed out", "MysqlClient: Connection timeout" over "connection timeout"): say it once
    const [outerCase, innerCase] = [outer.toLowerCase(), inner.toLowerCase()]
    return outer === "" || innerCase.includes(outerCase) ? inner : outerCase.includes(innerCase) ? outer : `${outer}: ${inner}`
  }
  return messageOf(error)
}

export const dialectLabel = (dialect: Dialect) => (dialect === "postgres" ? "PostgreSQL" : "MySQL/MariaDB")

/** `scheme://user@host:port/db`, password removed. */
export const describeTarget = (dialect: Dialect, options: ConnectionOptions): string => {
  if (options.url !== undefined) {
    const text = Redacted.isRedacted(options.url) ? Redacted.value(options.url) : options.url
    try {
      const url = new URL(text)
      url.password = ""
      return url.toString().replace(/\/$/, "")
    } catch {
      return "<unparsable url>"
    }
  }
  const scheme = dialect === "postgres" ? "postgres" : "mysql"
  const port = options.port ?? (dialect === "postgres" ? 5432 : 3306)
  const user = options.username === undefined ? "" : `${options.username}@`
  return `${scheme}://${user}${options.host ?? "127.0.0.1"}:${port}${options.database === undefined ? "" : `/${options.database}`}`
}

/**
 * Who failed, for an error: the target, and when neither `url` nor `host` was given (nor
 * `DATABASE_URL`, which the facade and `layerConfig` read) that it is only the driver's default,
 * since a forgotten `DATABASE_URL` otherwise reads as a refusal of some user the application never named.
 */
const whereOf = (dialect: Dialect, options: ConnectionOptions): string => {
  if (options.url !== undefined || options.host !== undefined) return `${dialectLabel(dialect)} at ${describeTarget(dialect, options)}`
  const user = options.username !== undefined
    ? ""
    : dialect === "postgres"
    ? ", the user from PGUSER or the login"
    : ", no user"
  // DATABASE_URL may be set and still not read: postgres() and mysql() read it only beside no field
  const given = locationFields(options)
  const missing = given.length > 0 && process.env.DATABASE_URL !== undefined
    ? `no url or host given (DATABASE_URL is not read beside ${given.join(", ")})`
    : "no url, host or DATABASE_URL given"
  return `${dialectLabel(dialect)} at ${describeTarget(dialect, options)} (${missing}: the driver's defaults${user})`
}

/**
 * How long the first connection may take: the `connectTimeout` option in any form the options take
 * (the short forms, `"5s"`, among them: the option was checked, not decoded), 5 seconds by default.
 * `connectPostgres` / `connectMysql` called directly are not checked: a value nothing decodes fails
 * there as Effect's own decode does, not as a silent default.
 */
export const connectTimeoutOf = ({ connectTimeout }: ConnectionOptions): Duration.Duration =>
  connectTimeout === undefined
    ? Duration.seconds(5)
    : Option.getOrElse(decodeDuration(connectTimeout), () => Duration.decode(connectTimeout as Duration.DurationInput))

/**
 * The fields that say where a database is, beside `url` (which the pool takes over all of them).
 *
 * @internal
 */
export const locationFields = (options: ConnectionOptions): ReadonlyArray<string> =>
  (["host", "port", "database", "username", "password"] as const).filter((field) => options[field] !== undefined)

export const redact = (value: string | Redacted.Redacted | undefined) =>
  value === undefined ? undefined : Redacted.isRedacted(value) ? value : Redacted.make(value)

/**
 * The server ended an established connection (a killed backend, a restart, a failover, a reset
 * socket): the statement may be tried again on a new connection. A refused or timed-out connect is
 * not one of these, so an unreachable database still fails fast.
 */
export const isConnectionLost = (error: unknown): boolean => {
  for (let current = error, depth = 0; typeof current === "object" && current !== null && depth < 5; depth++) {
    const { code, message } = current as { code?: unknown; message?: unknown }
    // pg-pool's own connect timeout reads "Connection terminated due to connection timeout": a connect
    // that timed out, raced against the client's own timeout at the same instant; retried, a database
    // that never answers would fail `run` after four connect timeouts instead of one
    if (typeof message === "string" && /connection timeout/i.test(message)) return false
    if (typeof code === "string" && LOST_CONNECTION_CODES.has(code)) return true
    if (typeof message === "string" && /connection terminated|not queryable|connection lost/i.test(message)) return true
    current = (current as { cause?: unknown }).cause
  }
  return false
}
const LOST_CONNECTION_CODES: ReadonlySet<string> = new Set([
  "57P01", // admin_shutdown: pg_terminate_backend, a fast shutdown
  "57P02", // crash_shutdown
  "57P03", // cannot_connect_now: the server is starting or shutting down
  "ECONNRESET",
  "EPIPE",
  "PROTOCOL_CONNECTION_LOST", // mysql2
  "ER_SERVER_SHUTDOWN",
  "ER_CONNECTION_KILLED"
])

/** Whether `error` or one of its causes carries one of `codes`: a SQLSTATE or driver code, or a MySQL errno. */
export const hasErrorCode = (error: unknown, codes: ReadonlyArray<string | number>): boolean => {
  for (let current = error, depth = 0; typeof current === "object" && current !== null && depth < 5; depth++) {
    const { code, errno } = current as { code?: unknown; errno?: unknown }
    if (codes.includes(code as string) || codes.includes(errno as number)) return true
    current = (current as { cause?: unknown }).cause
  }
  return false
}

/** Registration's statements ride out a connection lost under them, on a new connection each time. */
export const retryLostConnection = { times: 3, while: isConnectionLost } as const

/** The password of the target, masked wherever a driver's message might echo it. */
const secretsOf = (options: ConnectionOptions): ReadonlyArray<string | undefined> => {
  const url = options.url === undefined ? undefined : Redacted.isRedacted(options.url) ? Redacted.value(options.url) : options.url
  const password = (options as { password?: string | Redacted.Redacted }).password
  return [passwordOf(url), password === undefined ? undefined : Redacted.isRedacted(password) ? Redacted.value(password) : password]
}

/**
 * The database's refusal of a login or a statement, if that is what failed, on either dialect (their
 * codes do not overlap): at registration and on the task path alike.
 */
export const refusalOf = (cause: unknown): Refusals.Refusal | undefined =>
  Refusals.inChain(cause, (error) => Refusals.postgres(error) ?? Refusals.mysql(error))

/**
 * A refused login (PostgreSQL 28P01 / 28000, MySQL 1045 …) or a refused operation (42501, 1044 …)
 * as an `AuthenticationError` / `PermissionError` cause with what to check; `undefined` otherwise.
 */
export const refused = (dialect: Dialect, options: ConnectionOptions, cause: unknown, doing: string) => {
  const refusal = refusalOf(cause)
  if (refusal === undefined) return undefined
  const secrets = secretsOf(options)
  const error = Refusals.toError(
    NAME,
    { ...refusal, answer: redactText(refusal.answer, secrets) },
    `${whereOf(dialect, options)}${doing === "" ? "" : `, ${doing},`}`,
    {
      authentication: "check the user and password in DATABASE_URL (or the url / username / password options) and that " +
        `the user exists and may log in from this host${dialect === "postgres" ? " (pg_hba.conf)" : ""}`,
      permission: "grant the worker's user access to the database and SELECT, INSERT, UPDATE, DELETE on the durable tables " +
        "(CREATE too with autoCreate)"
    },
    safeCause(cause, secrets)
  )
  return new RegistrationError({ transport: NAME, message: error.message, cause: error })
}

export const connectFailed = (dialect: Dialect, options: ConnectionOptions) => (cause: unknown) => {
  const refusal = refused(dialect, options, cause, "")
  if (refusal !== undefined) return refusal
  const secrets = secretsOf(options)
  const missing = Refusals.inChain(cause, Refusals.missingDatabase)
  return new RegistrationError({
    transport: NAME,
    message: missing === undefined
      ? `could not connect to ${whereOf(dialect, options)} (${
        redactText(sqlMessageOf(cause), secrets)
      }); check that the database is running and that DATABASE_URL (or the url option) points at it`
      : `${whereOf(dialect, options)} has no such database (${redactText(missing, secrets)}); create it, or fix the ` +
        `database's name in ${options.url === undefined ? "the database option" : "DATABASE_URL (or the url option)"}`,
    cause: safeCause(cause, secrets)
  })
}
