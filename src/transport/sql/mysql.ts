/**
 * The SQL transport on MySQL/MariaDB: `@effect/sql-mysql2`. The entry point
 * `effect-durable-worker/mysql`: the driver `SqlTransport` loads for MySQL/MariaDB.
 *
 * @since 0.3.0
 */
import * as Reactivity from "@effect/experimental/Reactivity"
import * as MysqlClient from "@effect/sql-mysql2/MysqlClient"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import type * as Scope from "effect/Scope"
import type { RegistrationError } from "../../seam/Transport.js"
import type { Connection, ConnectionOptions, Driver } from "../SqlTransport.js"
import { connectFailed, connectTimeoutOf, redact, retryLostConnection } from "./internal/connection.js"

/**
 * The URL with mysql2's `connectTimeout` parameter, unless it names one of its own (mysql2 reads
 * the parameters of a URL as connection settings).
 */
const withConnectTimeout = (url: string, millis: string): Redacted.Redacted => {
  const parsed = new URL(url)
  if (!parsed.searchParams.has("connectTimeout")) parsed.searchParams.set("connectTimeout", millis)
  return Redacted.make(parsed.toString())
}

/**
 * Connects to MySQL/MariaDB with `@effect/sql-mysql2`, closed with the scope; fails with a
 * {@link RegistrationError} that says what to check. The options are taken as checked
 * (`layerMysql` checks them when it is built).
 *
 * @since 0.1.0
 * @category constructors
 */
export const connectMysql = (options: ConnectionOptions): Effect.Effect<Connection, RegistrationError, Scope.Scope> => {
  // mysql2's own timer is the one that holds: @effect/sql-mysql2's check of the first connection
  // cannot be cut short, and it takes its pool settings from the URL alone when there is one
  const connectTimeout = String(Duration.toMillis(connectTimeoutOf(options)))
  const url = options.url === undefined ? undefined : withConnectTimeout(
    (Redacted.isRedacted(options.url) ? Redacted.value(options.url) : options.url).replace(/^mariadb:/, "mysql:"),
    connectTimeout
  )
  const maxConnections = options.maxConnections ?? 10
  return MysqlClient.make({
    url,
    host: url === undefined ? options.host ?? "127.0.0.1" : undefined,
    port: options.port,
    database: options.database,
    username: options.username,
    password: redact(options.password),
    maxConnections,
    // maxIdle below the pool size starts mysql2's idle sweep, a timer that @effect/sql-mysql2 stops
    // only by ending the pool, which it does not when its first connection fails: the process of a
    // failed start would never exit. At the pool size, idle connections stay, as with a URL.
    ...(url === undefined ? { poolConfig: { connectTimeout: Number(connectTimeout), maxIdle: maxConnections } } : {})
  }).pipe(
    Effect.provide(Reactivity.layer),
    Effect.map((client): Connection => ({ sql: client, dialect: "mysql", listen: Option.none() })),
    Effect.retry(retryLostConnection),
    Effect.mapError(connectFailed("mysql", options))
  )
}

/**
 * MySQL/MariaDB as a {@link Driver} of `SqlTransport.layerDriver`.
 *
 * @since 0.3.0
 * @category drivers
 */
export const driver: Driver = { dialect: "mysql", connect: connectMysql }
