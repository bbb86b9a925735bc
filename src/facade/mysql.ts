/**
 * The promise facade's MySQL/MariaDB transport: `mysql(...)`.
 *
 * @since 0.3.0
 */
import * as SqlTransport from "../transport/SqlTransportMysql.js"
import { withDatabaseUrl } from "./internal/databaseUrl.js"
import type { TransportHandle } from "./internal/options.js"
import type { MysqlOptions } from "./internal/transportOptions.js"

export type { MysqlOptions } from "./internal/transportOptions.js"

/**
 * The database transport of the nestjs-durable engine on MySQL 8 / MariaDB: the engine's own
 * tables, claims with `FOR UPDATE SKIP LOCKED`, leases renewed while a step runs. `url` defaults to
 * `process.env.DATABASE_URL` when none of `host`, `port`, `database`, `username` and `password` is
 * given either (the pool would take the URL over them). An unknown or invalid option makes `run` reject with an
 * `SqlConfigError` naming it, before anything connects.
 *
 * @since 0.1.0
 * @category transports
 */
export const mysql = (options: MysqlOptions = {}): TransportHandle => ({
  layer: withDatabaseUrl("mysql", options, SqlTransport.layerMysql)
})
