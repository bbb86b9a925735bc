/**
 * `effect-durable-worker/mysql`: the database transport of the nestjs-durable engine on MySQL 8 /
 * MariaDB.
 *
 * Needs the optional peer dependencies `@effect/sql`, `@effect/sql-mysql2` (which brings the
 * `mysql2` driver) and `@effect/experimental`. The Effect transport is `SqlTransport` (with
 * `layerMysql`, `connectMysql` and the dialect-neutral `layer`, `layerConfig`, `make`); the promise
 * facade's handle constructor is `mysql`.
 *
 * @since 0.3.0
 */

/** @since 0.1.0 */
export * as SqlTransport from "./transport/SqlTransportMysql.js"

export { mysql, type MysqlOptions } from "./facade/mysql.js"
