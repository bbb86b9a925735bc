/**
 * The promise facade's PostgreSQL transport: `postgres(...)`.
 *
 * @since 0.3.0
 */
import * as SqlTransport from "../transport/SqlTransportPostgres.js"
import { withDatabaseUrl } from "./internal/databaseUrl.js"
import type { TransportHandle } from "./internal/options.js"
import type { PostgresOptions } from "./internal/transportOptions.js"

export type { PostgresOptions } from "./internal/transportOptions.js"

/**
 * The database transport of the nestjs-durable engine on PostgreSQL: the engine's own task and
 * result tables, claims with `FOR UPDATE SKIP LOCKED`, leases renewed while a step runs, and
 * `LISTEN/NOTIFY` wake-ups (polling as the fallback). `url` defaults to `process.env.DATABASE_URL` when
 * none of `host`, `port`, `database`, `username` and `password` is given either (the pool would take
 * the URL over them).
 * An unknown or invalid option makes `run` reject with an `SqlConfigError` naming it, before anything
 * connects.
 *
 * @since 0.1.0
 * @category transports
 */
export const postgres = (options: PostgresOptions = {}): TransportHandle => ({
  layer: withDatabaseUrl("postgres", options, SqlTransport.layerPostgres)
})
