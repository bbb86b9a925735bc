/**
 * The SQL transport's options, declared apart from the transport so that declarations carrying only
 * options (the promise facade's) need no `@effect/sql` installed.
 */
import type { DurationOption } from "../../../runtime/WorkerConfig.js"
import type * as Redacted from "effect/Redacted"

/**
 * How the transport uses the engine's tables. The options are checked when the transport is built:
 * an unknown key or a bad value fails with an `SqlConfigError` naming it.
 *
 * @since 0.1.0
 * @category models
 */
export interface SqlTransportOptions {
  /**
   * Table prefix shared with the engine: `<prefix>_transport_tasks` / `_results`; 1-40 characters of
   * `A-Z`, `a-z`, `0-9`, `_` or `-`. Default `durable`.
   */
  readonly prefix?: string | undefined
  /** Isolation suffix of this worker pool: serves `<name>@<partition>` tokens (engine namespaces); no blank or quote around it. Default none. */
  readonly partition?: string | undefined
  /** How long a claimed row is owned before another worker may claim it: at least 1 second. Default 30 seconds (the engine's). */
  readonly lease?: DurationOption | undefined
  /** How often a running task's lease is renewed; shorter than `lease`. Default a third of `lease`. */
  readonly renewInterval?: DurationOption | undefined
  /**
   * How long an idle subscription waits before it looks again (positive). Default 500 ms (the engine's);
   * 5 seconds on PostgreSQL with `notify`, where polling only catches expired leases and missed notifications.
   */
  readonly pollInterval?: DurationOption | undefined
  /** At most this many rows per claim (a claim never exceeds the free permits); at least 1. Default 100. */
  readonly batchSize?: number | undefined
  /**
   * Create the tables and the task index if missing, like the engine. Default true; when false, a
   * worker started before the tables exist waits for them (logged once, retried with a capped backoff).
   */
  readonly autoCreate?: boolean | undefined
  /**
   * PostgreSQL: create the insert trigger (with `autoCreate`) and `LISTEN` for new tasks. Default true;
   * ignored on MySQL.
   */
  readonly notify?: boolean | undefined
  /**
   * Wait for a database that does not answer at start (logged once, retried with a backoff of up
   * to 5 s) instead of failing the start. A refused login still fails at once. Default `false`.
   */
  readonly waitForBroker?: boolean | undefined
}

/**
 * Where the database is. `url` wins over the separate fields.
 *
 * @since 0.1.0
 * @category models
 */
export interface ConnectionOptions {
  /**
   * `postgres://user:password@host:5432/db` (or `postgresql://`) on PostgreSQL,
   * `mysql://user:password@host:3306/db` (or `mariadb://`) on MySQL/MariaDB. Default none; the
   * promise facade's `postgres()` / `mysql()` and `SqlTransport.layerConfig()` take `DATABASE_URL`.
   */
  readonly url?: string | Redacted.Redacted | undefined
  /** Default `127.0.0.1`. */
  readonly host?: string | undefined
  /** 1-65535. Default 5432 on PostgreSQL, 3306 on MySQL/MariaDB. */
  readonly port?: number | undefined
  /** Default the driver's. */
  readonly database?: string | undefined
  /** Default the driver's. */
  readonly username?: string | undefined
  /** Default none. */
  readonly password?: string | Redacted.Redacted | undefined
  /** Pool size; at least 1. Default 10. */
  readonly maxConnections?: number | undefined
  /** How long the first connection may take before `run` fails (positive). Default 5 seconds. */
  readonly connectTimeout?: DurationOption | undefined
}

/**
 * Where the PostgreSQL database is: {@link ConnectionOptions}, and the name the connections show.
 *
 * @since 0.3.0
 * @category models
 */
export interface PostgresConnectionOptions extends ConnectionOptions {
  /** `application_name` of the connections (visible in `pg_stat_activity`). Default `effect-durable-worker`. */
  readonly applicationName?: string | undefined
}

/**
 * Options of `layerPostgres` (`effect-durable-worker/postgres`).
 *
 * @since 0.1.0
 * @category models
 */
export interface PostgresOptions extends SqlTransportOptions, PostgresConnectionOptions {}

/**
 * Options of `layerMysql` (`effect-durable-worker/mysql`).
 *
 * @since 0.1.0
 * @category models
 */
export interface MysqlOptions extends SqlTransportOptions, ConnectionOptions {}
