/**
 * The SQL transport on PostgreSQL: the dialect-neutral `SqlTransport` with the PostgreSQL driver's
 * constructors. This is `SqlTransport` of the entry point `effect-durable-worker/postgres`.
 *
 * @since 0.3.0
 */
import type * as Layer from "effect/Layer"
import type { Transport } from "../seam/Transport.js"
import { driver } from "./sql/postgres.js"
import type { SqlConfigError } from "./sql/internal/config.js"
import type { PostgresOptions } from "./sql/internal/options.js"
import { layerDriver } from "./SqlTransport.js"

export * from "./SqlTransport.js"
export type { PostgresConnectionOptions, PostgresOptions } from "./sql/internal/options.js"
export { connectPostgres, driver } from "./sql/postgres.js"

/**
 * The transport on PostgreSQL, with its own `@effect/sql-pg` pool (opened at registration, closed at
 * shutdown). Building it fails with an `SqlConfigError` when an option is unknown or invalid
 * (a `url` that is not `postgres://` included), before anything connects; `run` fails fast when the
 * database is unreachable.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerPostgres = (options: PostgresOptions = {}): Layer.Layer<Transport, SqlConfigError> =>
  layerDriver(driver, options)
