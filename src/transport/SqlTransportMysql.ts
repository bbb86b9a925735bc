/**
 * The SQL transport on MySQL/MariaDB: the dialect-neutral `SqlTransport` with the MySQL/MariaDB driver's
 * constructors. This is `SqlTransport` of the entry point `effect-durable-worker/mysql`.
 *
 * @since 0.3.0
 */
import type * as Layer from "effect/Layer"
import type { Transport } from "../seam/Transport.js"
import { driver } from "./sql/mysql.js"
import type { SqlConfigError } from "./sql/internal/config.js"
import type { MysqlOptions } from "./sql/internal/options.js"
import { layerDriver } from "./SqlTransport.js"

export * from "./SqlTransport.js"
export type { MysqlOptions } from "./sql/internal/options.js"
export { connectMysql, driver } from "./sql/mysql.js"

/**
 * The transport on MySQL/MariaDB, with its own `@effect/sql-mysql2` pool (opened at registration,
 * closed at shutdown). Building it fails with an `SqlConfigError` when an option is unknown or
 * invalid (a `url` that is not `mysql://` or `mariadb://` included), before anything connects; `run`
 * fails fast when the database is unreachable.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerMysql = (options: MysqlOptions = {}): Layer.Layer<Transport, SqlConfigError> =>
  layerDriver(driver, options)
