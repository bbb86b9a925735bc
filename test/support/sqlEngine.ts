/**
 * A real nestjs-durable engine on the DB transport, for the SQL integration tests and the benchmark:
 * `WorkflowEngine` + `InMemoryStateStore` + `DbTransport` (`@dudousxd/nestjs-durable-transport-db`)
 * over a hand-written `SqlExecutor` on plain `pg` or `mysql2`, under a unique table prefix, with
 * `resumeDueTimers()` driven on a short interval. `close()` stops everything and drops the prefix's
 * tables (and, on PostgreSQL, the notify function).
 */
import { InMemoryStateStore, type RunResult, type StepCheckpoint, type WorkflowCtx, WorkflowEngine } from "@dudousxd/nestjs-durable-core"
import { DbTransport, type SqlExecutor } from "@dudousxd/nestjs-durable-transport-db"
import * as mysql from "mysql2/promise"
import pg from "pg"
import { randomUUID } from "node:crypto"

/** The two databases the SQL transport runs on. */
export type DialectName = "postgres" | "mysql"

/** Connection URLs of the local databases (`PG_URL` / `MYSQL_URL` override them). */
export const databaseUrl = (dialect: DialectName): string =>
  dialect === "postgres"
    ? process.env.PG_URL ?? "postgres://postgres@127.0.0.1:5432/test"
    : process.env.MYSQL_URL ?? "mysql://root@127.0.0.1:3306/test"

/** A fresh table prefix, `edw_<12 hex>` (valid on both dialects). */
export const uniqueTablePrefix = (label = "edw"): string => `${label}_${randomUUID().replaceAll("-", "").slice(0, 12)}`

/** A plain driver connection pool with the few operations the tests and the benchmark need. */
export interface Db {
  readonly dialect: DialectName
  /** Runs one statement; rows for a SELECT, `[]` otherwise. Placeholders: `$n` on PostgreSQL, `?` on MySQL. */
  readonly query: <T = Record<string, unknown>>(text: string, params?: ReadonlyArray<unknown>) => Promise<Array<T>>
  /** Runs `fn` in a transaction on one connection. */
  readonly transaction: <T>(fn: (query: Db["query"]) => Promise<T>) => Promise<T>
  /** Quotes an identifier. */
  readonly id: (name: string) => string
  /** The `i`-th placeholder. */
  readonly ph: (i: number) => string
  readonly end: () => Promise<void>
}

/** Opens a plain `pg` / `mysql2` pool on the local database. */
export const openDb = (dialect: DialectName, max = 10): Db => {
  if (dialect === "postgres") {
    const pool = new pg.Pool({ connectionString: databaseUrl("postgres"), max })
    pool.on("error", () => {})
    const query = async <T>(text: string, params: ReadonlyArray<unknown> = []) =>
      (await pool.query(text, params as Array<unknown>)).rows as Array<T>
    return {
      dialect,
      query,
      transaction: async (fn) => {
        const client = await pool.connect()
        try {
          await client.query("BEGIN")
          const result = await fn(async (text, params = []) => (await client.query(text, params as Array<unknown>)).rows)
          await client.query("COMMIT")
          return result
        } catch (error) {
          await client.query("ROLLBACK").catch(() => undefined)
          throw error
        } finally {
          client.release()
        }
      },
      id: (name) => `"${name}"`,
      ph: (i) => `$${i}`,
      end: () => pool.end()
    }
  }
  const pool = mysql.createPool({ uri: databaseUrl("mysql"), connectionLimit: max, supportBigNumbers: true })
  const rowsOf = <T>(result: unknown): Array<T> => (Array.isArray(result) ? (result as Array<T>) : [])
  return {
    dialect,
    query: async <T>(text: string, params: ReadonlyArray<unknown> = []) => {
      const [rows] = await pool.query(text, params as Array<unknown>)
      return rowsOf<T>(rows)
    },
    transaction: async (fn) => {
      const connection = await pool.getConnection()
      try {
        await connection.beginTransaction()
        const result = await fn(async (text, params = []) => {
          const [rows] = await connection.query(text, params as Array<unknown>)
          return rowsOf(rows)
        })
        await connection.commit()
        return result
      } catch (error) {
        await connection.rollback().catch(() => undefined)
        throw error
      } finally {
        connection.release()
      }
    },
    id: (name) => `\`${name}\``,
    ph: () => "?",
    end: () => pool.end()
  }
}

/** The engine's `SqlExecutor` over a {@link Db}. */
export const executor = (db: Db): SqlExecutor => ({
  dialect: db.dialect,
  escapeId: db.id,
  query: <T>(text: string, params?: Array<unknown>) => db.query<T>(text, params),
  transaction: (fn) => db.transaction((query) => fn({ query: <T>(text: string, params?: Array<unknown>) => query<T>(text, params) }))
})

/** Drops the tables (and notify function) of a prefix. */
export const dropTables = async (db: Db, prefix: string): Promise<void> => {
  await db.query(`DROP TABLE IF EXISTS ${db.id(`${prefix}_transport_tasks`)}`)
  await db.query(`DROP TABLE IF EXISTS ${db.id(`${prefix}_transport_results`)}`)
  if (db.dialect === "postgres") await db.query(`DROP FUNCTION IF EXISTS ${db.id(`${prefix}_transport_tasks_notify`)}()`)
}

/** A workflow body as the engine runs it. */
export type WorkflowBody = (ctx: WorkflowCtx, input: unknown) => Promise<unknown>

/** A running engine on the DB transport. */
export interface SqlEngine {
  readonly dialect: DialectName
  readonly prefix: string
  readonly url: string
  readonly engine: WorkflowEngine
  readonly store: InMemoryStateStore
  /** A plain pool for inspecting the tables. */
  readonly db: Db
  readonly register: (name: string, fn: WorkflowBody) => void
  readonly start: (workflow: string, input: unknown) => Promise<string>
  readonly waitForRun: (runId: string, timeoutMs?: number) => Promise<RunResult>
  readonly run: (workflow: string, input: unknown, timeoutMs?: number) => Promise<RunResult>
  readonly checkpoints: (runId: string) => Promise<Array<StepCheckpoint>>
  readonly checkpoint: (runId: string, seq: number) => Promise<StepCheckpoint | null>
  /** Stops the engine and drops the prefix's tables. Idempotent. */
  readonly close: () => Promise<void>
}

/** Starts an engine with the DB transport on `dialect` under a fresh prefix. */
export const startSqlEngine = async (
  dialect: DialectName,
  options: {
    readonly prefix?: string
    readonly pollMs?: number
    readonly timerIntervalMs?: number
    /** Engine namespace: suffixes the routing token of its runs with `@<namespace>`. */
    readonly namespace?: string
  } = {}
): Promise<SqlEngine> => {
  const prefix = options.prefix ?? uniqueTablePrefix()
  const db = openDb(dialect)
  const store = new InMemoryStateStore()
  const transport = new DbTransport({ executor: executor(db), prefix, pollMs: options.pollMs ?? 20 })
  const engine = new WorkflowEngine({ store, transport, instanceId: `engine-${randomUUID().slice(0, 8)}`,
    ...(options.namespace === undefined ? {} : { namespace: options.namespace })
  })
  // The engine creates its tables in the background (its result loop starts at construction) and
  // memoizes that promise even when it fails: wait until its last DDL (the index) is done, so a worker
  // creating the same tables at the same moment cannot make the engine's creation fail.
  const indexQuery = dialect === "postgres"
    ? "SELECT 1 FROM pg_indexes WHERE indexname = $1"
    : "SELECT 1 FROM information_schema.statistics WHERE table_schema = DATABASE() AND index_name = ?"
  for (let i = 0; (await db.query(indexQuery, [`${prefix}_transport_tasks_grp_idx`])).length === 0; i++) {
    if (i > 500) throw new Error(`the engine did not create ${prefix}_transport_tasks within 10s`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  let busy = false
  let ticking: Promise<unknown> = Promise.resolve()
  const timer = setInterval(() => {
    if (busy) return
    busy = true
    ticking = engine.resumeDueTimers().catch(() => undefined).finally(() => {
      busy = false
    })
  }, options.timerIntervalMs ?? 100)
  let closing: Promise<void> | undefined
  const waitForRun = (runId: string, timeoutMs = 30_000) => engine.waitForRun(runId, { until: "terminal", timeoutMs })
  const start = async (workflow: string, input: unknown) => {
    const runId = `run-${randomUUID()}`
    await engine.start(workflow, input, runId)
    return runId
  }
  return {
    dialect,
    prefix,
    url: databaseUrl(dialect),
    engine,
    store,
    db,
    register: (name, fn) => engine.register(name, "1", fn),
    start,
    waitForRun,
    run: async (workflow, input, timeoutMs) => waitForRun(await start(workflow, input), timeoutMs),
    checkpoints: (runId) => store.listCheckpoints(runId),
    checkpoint: (runId, seq) => store.getCheckpoint(runId, seq),
    close: () =>
      (closing ??= (async () => {
        clearInterval(timer)
        await ticking
        try {
          await engine.drain(2_000)
          await transport.close()
        } finally {
          await dropTables(db, prefix).catch(() => undefined)
          await db.end()
        }
      })())
  }
}
