/**
 * The SQL transport on PostgreSQL: `@effect/sql-pg` (a pool, plus one connection of its own for
 * `LISTEN`): the driver `SqlTransport` loads for PostgreSQL.
 *
 * @since 0.3.0
 */
import * as Reactivity from "@effect/experimental/Reactivity"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type { RegistrationError } from "../../seam/Transport.js"
import type { Connection, Driver } from "../SqlTransport.js"
import type { PostgresConnectionOptions } from "./internal/options.js"
import { connectFailed, connectTimeoutOf, redact, retryLostConnection } from "./internal/connection.js"
import * as Listen from "./internal/listen.js"

/** `LISTEN` on a connection of its own, with the client's connection settings (see `internal/listen`). */
const listenOn = (client: PgClient.PgClient) => Listen.listen(Listen.clientConfig(client.config))

/**
 * Connects to PostgreSQL with `@effect/sql-pg` (a pool, plus one connection for `LISTEN` when used),
 * closed with the scope; fails with a {@link RegistrationError} that says what to check. The options
 * are taken as checked (`layerPostgres` checks them when it is built).
 *
 * @since 0.1.0
 * @category constructors
 */
export const connectPostgres = (options: PostgresConnectionOptions): Effect.Effect<Connection, RegistrationError, Scope.Scope> =>
  PgClient.make({
    url: redact(options.url),
    host: options.url === undefined ? options.host ?? "127.0.0.1" : undefined,
    port: options.port,
    database: options.database,
    username: options.username,
    password: redact(options.password),
    maxConnections: options.maxConnections ?? 10,
    connectTimeout: connectTimeoutOf(options),
    applicationName: options.applicationName ?? "effect-durable-worker"
  }).pipe(
    Effect.provide(Reactivity.layer),
    Effect.map((client): Connection => ({ sql: client, dialect: "postgres", listen: Option.some(listenOn(client)) })),
    Effect.retry(retryLostConnection),
    Effect.mapError(connectFailed("postgres", options))
  )

/**
 * PostgreSQL as a {@link Driver} of `SqlTransport.layerDriver`.
 *
 * @since 0.3.0
 * @category drivers
 */
export const driver: Driver<PostgresConnectionOptions> = { dialect: "postgres", connect: connectPostgres }
