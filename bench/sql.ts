/**
 * The SQL transport's benchmark, on the local PostgreSQL and MariaDB:
 *
 * 1. throughput — no-op steps/s at concurrency 1, 16 and 64: this worker (`SqlTransport`) against a
 *    minimal hand-written claim-and-complete loop on the same tables with the plain driver (`pg` /
 *    `mysql2`): `concurrency` lanes, each claiming one row in a transaction (`SELECT … FOR UPDATE SKIP
 *    LOCKED` + `UPDATE`), then inserting the result and deleting the task — the engine's own worker
 *    shape. Each run: start the peer idle on a fresh prefix, insert N task rows as the engine does, time
 *    until N result rows exist. Alternating rounds, median.
 * 2. pickup latency on PostgreSQL — one task inserted into an idle worker, time until its handler
 *    starts: LISTEN/NOTIFY (default) against pure polling (`notify: false`, the engine's 500 ms).
 *
 * BENCH_SQL_N (default 2000) tasks per run, BENCH_SQL_ROUNDS (default 3), BENCH_SQL_CONCURRENCY
 * (default "1,16,64"), BENCH_SQL_DIALECTS (default "postgres,mysql"), PG_URL / MYSQL_URL.
 *
 * Run: `npm run bench:sql` (builds first: the worker is measured from the built package, as a user
 * runs it), or call `main()`.
 */
import { SqlTransport as MysqlSql } from "effect-durable-worker/mysql"
import { SqlTransport as PostgresSql } from "effect-durable-worker/postgres"
import { Worker } from "effect-durable-worker/promise"
// the plain peer's tables, made as the engine makes them (not timed)
import * as Statements from "../src/transport/sql/internal/statements.js"
import { databaseUrl, type Db, type DialectName, dropTables, openDb, uniqueTablePrefix } from "../test/support/sqlEngine.js"
import { median, percentile, roundRatio } from "./support/stats.js"

const n = Number(process.env.BENCH_SQL_N ?? 2_000)
const rounds = Number(process.env.BENCH_SQL_ROUNDS ?? 3)
const levels = (process.env.BENCH_SQL_CONCURRENCY ?? "1,16,64").split(",").map(Number)
const dialects = (process.env.BENCH_SQL_DIALECTS ?? "postgres,mysql").split(",") as Array<DialectName>
const stepName = "bench.noop"
const POLL_MS = 20

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

interface Running {
  readonly stop: () => Promise<void>
}

/** This worker on the SQL transport, idle once it resolves. */
const startOurs = async (
  dialect: DialectName,
  prefix: string,
  concurrency: number,
  options: PostgresSql.SqlTransportOptions = {},
  onStart?: () => void
): Promise<Running> => {
  const worker = new Worker({ handleSignals: false, logLevel: "None", concurrency })
  worker.step(stepName, (input: unknown) => {
    onStart?.()
    return input
  })
  const all = { url: databaseUrl(dialect), prefix, pollInterval: POLL_MS, maxConnections: 16, ...options }
  const running = worker.run({
    layer: dialect === "postgres" ? PostgresSql.layerPostgres(all) : MysqlSql.layerMysql(all)
  })
  running.catch(() => undefined)
  // registered once the tables exist (autoCreate) and the first poll has run
  const db = openDb(dialect, 1)
  for (let i = 0; i < 500; i++) {
    const found = await db.query(
      dialect === "postgres"
        ? "SELECT 1 FROM pg_tables WHERE tablename = $1"
        : "SELECT 1 FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?",
      [`${prefix}_transport_results`]
    )
    if (found.length > 0) break
    await sleep(10)
  }
  await db.end()
  await sleep(200)
  return {
    stop: async () => {
      await worker.stop()
      await running
    }
  }
}

/** The minimal hand-written claim-and-complete loop with the plain driver. */
const startPlain = async (dialect: DialectName, prefix: string, concurrency: number): Promise<Running> => {
  const db = openDb(dialect, Math.max(2, Math.min(concurrency + 1, 16)))
  const names = Statements.names(prefix)
  for (const statement of Statements.createSchema(dialect, names)) await db.query(statement).catch(() => undefined)
  const q = db.id
  const tasks = q(names.tasks)
  const results = q(names.results)
  const insertHead = dialect === "postgres" ? `INSERT INTO ${results}` : `INSERT IGNORE INTO ${results}`
  const insertTail = dialect === "postgres" ? ` ON CONFLICT (${q("step_id")}) DO NOTHING` : ""
  const instanceId = `plain-${process.pid}`
  let running = true
  const lane = async () => {
    while (running) {
      const now = Date.now()
      // InnoDB can report a deadlock between concurrent SKIP LOCKED claims: the claim rolled back, try again
      const rows = await db.transaction(async (query) => {
        const picked = await query<{ step_id: string; run_id: string; seq: number; input: string | null; created_at: number }>(
          `SELECT * FROM ${tasks} WHERE ${q("grp")} = ${db.ph(1)} AND (${q("claimed_at")} IS NULL OR ${q("claimed_at")} < ${
            db.ph(2)
          }) ORDER BY ${q("created_at")} ASC LIMIT 1 FOR UPDATE SKIP LOCKED`,
          [stepName, now - 30_000]
        )
        if (picked.length > 0) {
          await query(
            `UPDATE ${tasks} SET ${q("claimed_by")} = ${db.ph(1)}, ${q("claimed_at")} = ${db.ph(2)} WHERE ${q("step_id")} = ${db.ph(3)}`,
            [instanceId, now, picked[0]!.step_id]
          )
        }
        return picked
      }).catch((error: { code?: string }) => {
        if (error.code === "ER_LOCK_DEADLOCK" || error.code === "ER_LOCK_WAIT_TIMEOUT") return null
        throw error
      })
      if (rows === null) continue
      if (rows.length === 0) {
        await sleep(POLL_MS)
        continue
      }
      const row = rows[0]!
      const output = row.input === null ? null : JSON.parse(row.input)
      await db.query(
        `${insertHead} (${q("step_id")}, ${q("run_id")}, ${q("seq")}, ${q("status")}, ${q("output")}, ${q("error")}, ${q("started_at")}, ${
          q("created_at")
        }) VALUES (${[1, 2, 3, 4, 5, 6, 7, 8].map(db.ph).join(", ")})${insertTail}`,
        [row.step_id, row.run_id, Number(row.seq), "completed", JSON.stringify(output), null, now, Date.now()]
      )
      await db.query(`DELETE FROM ${tasks} WHERE ${q("step_id")} = ${db.ph(1)}`, [row.step_id])
    }
  }
  const lanes = Array.from({ length: concurrency }, lane)
  await sleep(200)
  return {
    stop: async () => {
      running = false
      await Promise.all(lanes)
      await db.end()
    }
  }
}

/** Inserts `count` task rows as the engine's `dispatch` writes them, in multi-row statements. */
const insertTasks = async (db: Db, prefix: string, count: number, runId: string) => {
  const q = db.id
  const columns = ["step_id", "run_id", "seq", "name", "grp", "input", "attempt", "status", "created_at"]
  const base = Date.now()
  for (let from = 0; from < count; from += 500) {
    const size = Math.min(500, count - from)
    const params: Array<unknown> = []
    const tuples: Array<string> = []
    for (let i = 0; i < size; i++) {
      const seq = from + i
      const offset = params.length
      params.push(`${runId}:${seq}`, runId, seq, stepName, stepName, JSON.stringify({ i: seq }), 1, "pending", base + seq)
      tuples.push(`(${columns.map((_, c) => db.ph(offset + c + 1)).join(", ")})`)
    }
    await db.query(
      `INSERT INTO ${q(`${prefix}_transport_tasks`)} (${columns.map(q).join(", ")}) VALUES ${tuples.join(", ")}`,
      params
    )
  }
}

const countRows = (db: Db, table: string) =>
  db.query<{ n: string | number }>(`SELECT count(*) AS n FROM ${db.id(table)}`).then(([row]) => Number(row?.n ?? 0))

const throughputOnce = async (dialect: DialectName, peer: "ours" | "plain", concurrency: number) => {
  const prefix = uniqueTablePrefix("bench")
  const db = openDb(dialect, 2)
  const running = peer === "ours" ? await startOurs(dialect, prefix, concurrency) : await startPlain(dialect, prefix, concurrency)
  try {
    const started = performance.now()
    await insertTasks(db, prefix, n, `run-${prefix}`)
    const deadline = Date.now() + 300_000
    // done when every result is written and every task row is gone
    while ((await countRows(db, `${prefix}_transport_results`)) < n || (await countRows(db, `${prefix}_transport_tasks`)) > 0) {
      if (Date.now() > deadline) throw new Error(`${peer} on ${dialect}: timed out`)
      await sleep(5)
    }
    const seconds = (performance.now() - started) / 1000
    const results = await countRows(db, `${prefix}_transport_results`)
    if (results !== n) throw new Error(`${peer} on ${dialect}: ${results} results for ${n} tasks`)
    return n / seconds
  } finally {
    await running.stop()
    await dropTables(db, prefix)
    await db.end()
  }
}

/** Median ms from a task's insert to its handler start, on an idle worker. */
const pickupLatency = async (notify: boolean, samples: number) => {
  const prefix = uniqueTablePrefix("benchlat")
  const db = openDb("postgres", 2)
  let onStart: (() => void) | undefined
  const running = await startOurs("postgres", prefix, 4, { notify, pollInterval: notify ? "5 seconds" : "500 millis" }, () =>
    onStart?.())
  const latencies: Array<number> = []
  try {
    for (let i = 0; i < samples; i++) {
      // idle for a random part of the poll interval, so a polling worker is caught anywhere in its cycle
      await sleep(100 + Math.floor(Math.random() * 500))
      const picked = new Promise<number>((resolve) => (onStart = () => resolve(performance.now())))
      const inserted = performance.now()
      await insertTasks(db, prefix, 1, `run-${i}`)
      latencies.push((await picked) - inserted)
    }
  } finally {
    await running.stop()
    await dropTables(db, prefix)
    await db.end()
  }
  return { median: median(latencies), p95: percentile(latencies, 0.95) }
}

/** Runs the benchmark and prints the markdown tables. */
export const main = async (): Promise<void> => {
  console.log(`SQL transport: ${n} no-op tasks per run, ${rounds} alternating rounds; median steps/s, and ratios as the median of each round's ratio\n`)
  const rows: Array<string> = []
  for (const dialect of dialects) {
    for (const concurrency of levels) {
      const samples = { ours: [] as Array<number>, plain: [] as Array<number> }
      for (let round = 0; round < rounds; round++) {
        const order = round % 2 === 0 ? (["ours", "plain"] as const) : (["plain", "ours"] as const)
        for (const peer of order) {
          const stepsPerSec = await throughputOnce(dialect, peer, concurrency)
          samples[peer].push(stepsPerSec)
          console.log(`  ${dialect} c=${concurrency} round ${round + 1} ${peer}: ${Math.round(stepsPerSec)} steps/s`)
        }
      }
      rows.push(
        `| ${dialect} | ${concurrency} | ${Math.round(median(samples.ours))} | ${Math.round(median(samples.plain))} | ${
          roundRatio(samples.ours, samples.plain).toFixed(2)
        }x |`
      )
    }
  }
  console.log("\n| database | concurrency | effect-durable-worker (steps/s) | plain claim loop (steps/s) | ratio |")
  console.log("| --- | ---: | ---: | ---: | ---: |")
  for (const row of rows) console.log(row)

  if (dialects.includes("postgres")) {
    const samples = Number(process.env.BENCH_SQL_LATENCY_SAMPLES ?? 15)
    const notified = await pickupLatency(true, samples)
    const polled = await pickupLatency(false, samples)
    console.log(`\nPostgreSQL pickup latency, idle worker, ${samples} single inserts (ms from insert to handler start):\n`)
    console.log("| wake-up | median | p95 |")
    console.log("| --- | ---: | ---: |")
    console.log(`| LISTEN/NOTIFY (insert trigger) | ${notified.median.toFixed(1)} | ${notified.p95.toFixed(1)} |`)
    console.log(`| polling every 500 ms (notify: false) | ${polled.median.toFixed(1)} | ${polled.p95.toFixed(1)} |`)
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().then(() => process.exit(0), (error) => {
    console.error(error)
    process.exit(1)
  })
}
