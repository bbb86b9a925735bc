/**
 * `effect-durable-worker/postgres`: the database transport of the nestjs-durable engine on
 * PostgreSQL.
 *
 * Needs the optional peer dependencies `@effect/sql`, `@effect/sql-pg`, `@effect/experimental` and
 * `pg`. The Effect transport is `SqlTransport` (with `layerPostgres`, `connectPostgres` and the
 * dialect-neutral `layer`, `layerConfig`, `make`); the promise facade's handle constructor is
 * `postgres`.
 *
 * @since 0.3.0
 */

/** @since 0.1.0 */
export * as SqlTransport from "./transport/SqlTransportPostgres.js"

export { postgres, type PostgresOptions } from "./facade/postgres.js"
