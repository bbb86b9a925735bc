/**
 * The SQL transport against the real nestjs-durable engine with its DB transport
 * (`@dudousxd/nestjs-durable-transport-db@0.2.0`), on the local PostgreSQL and MariaDB. Every test has
 * its own table prefix and drops its tables at the end.
 */
import { afterAll, assert, describe, it } from "vitest"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Str from "effect/String"
import { spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { type TransportHandle, Worker } from "../../src/promise.js"
import * as SqlTransport from "../../src/transport/SqlTransport.js"
import { type DialectName, type SqlEngine, startSqlEngine } from "../support/sqlEngine.js"
import { freePort, silentServer, waitFor } from "../support/local.js"
import { failsOnceWith, fatalErrorFailsOnce, retryableErrorRecovers, whileServing } from "../support/interop.js"
import { SqlTransport as PostgresSql } from "../../src/postgres.js"
import { SqlTransport as MysqlSql } from "../../src/mysql.js"

const quiet = { handleSignals: false, logLevel: (process.env.TEST_LOG_LEVEL ?? "None") as "None" } as const

const handle = (engine: SqlEngine, options: SqlTransport.SqlTransportOptions = {}): TransportHandle => {
  const all = { url: engine.url, prefix: engine.prefix, pollInterval: 50, ...options }
  return { layer: engine.dialect === "postgres" ? PostgresSql.layerPostgres(all) : MysqlSql.layerMysql(all) }
}

const engines: Array<SqlEngine> = []
const startEngine = async (dialect: DialectName, options: { readonly namespace?: string } = {}) => {
  const engine = await startSqlEngine(dialect, options)
  engines.push(engine)
  return engine
}
afterAll(async () => {
  await Promise.all(engines.map((engine) => engine.close()))
})

const taskRows = (engine: SqlEngine) =>
  engine.db.query<{ step_id: string; claimed_by: string | null; claimed_at: string | number | null }>(
    `SELECT step_id, claimed_by, claimed_at FROM ${engine.db.id(`${engine.prefix}_transport_tasks`)}`
  )


describe.each(["postgres", "mysql"] as const)("SQL transport on %s against the real engine", (dialect) => {
  it("a step completes with the handler's output; the task and result rows are consumed", async () => {
    const engine = await startEngine(dialect)
    const worker = new Worker({ ...quiet, concurrency: 4 })
    worker.step("payments.charge-card", async (input: { amount: number }, ctx) => ({
      chargeId: `ch_${input.amount}`,
      attempt: ctx.attempt,
      group: ctx.group
    }))
    engine.register("checkout", async (ctx, input) => ctx.step("payments.charge-card", input))
    const result = await whileServing(worker, handle(engine), () => engine.run("checkout", { amount: 99 }))
    assert.strictEqual(result.status, "completed")
    assert.deepStrictEqual(result.output, { chargeId: "ch_99", attempt: 1, group: "payments.charge-card" })
    assert.deepStrictEqual(await taskRows(engine), [])
  })

  it("a FatalError fails the run after exactly one attempt and keeps its code on the checkpoint", async () => {
    const engine = await startEngine(dialect)
    await fatalErrorFailsOnce(engine, new Worker(quiet), handle(engine), "payments.charge-card")
  })

  it("a retryable error recovers within retries: 3 (each retry's new task row is claimed)", async () => {
    const engine = await startEngine(dialect)
    await retryableErrorRecovers(engine, new Worker(quiet), handle(engine))
  })

  it("a fan-out of 200 steps completes with exactly 200 results and no duplicate execution", async () => {
    const engine = await startEngine(dialect)
    const worker = new Worker({ ...quiet, concurrency: 32 })
    const seen = new Map<string, number>()
    worker.step("item", async (input: { i: number }, ctx) => {
      seen.set(ctx.stepId, (seen.get(ctx.stepId) ?? 0) + 1)
      return input.i * 2
    })
    engine.register("fanout", async (ctx) => {
      const outputs = await Promise.all(Array.from({ length: 200 }, (_, i) => ctx.step("item", { i })))
      return (outputs as Array<number>).reduce((a, b) => a + b, 0)
    })
    const running = worker.run(handle(engine))
    const runId = await engine.start("fanout", {})
    const result = await engine.waitForRun(runId, 60_000)
    await worker.stop()
    await running
    assert.strictEqual(result.status, "completed")
    assert.strictEqual(result.output, 2 * (199 * 200) / 2)
    assert.strictEqual(seen.size, 200)
    assert.isTrue([...seen.values()].every((n) => n === 1))
    const completed = (await engine.checkpoints(runId)).filter((c) => c.status === "completed")
    assert.strictEqual(completed.length, 200)
    assert.deepStrictEqual(await taskRows(engine), [])
  })

  it("a worker killed mid-step loses nothing: after the lease a second worker completes the same stepId", async () => {
    const engine = await startEngine(dialect)
    engine.register("wf", async (ctx) => ctx.step("slow", { n: 1 }))
    const runId = await engine.start("wf", {})
    const child = spawn(
      process.execPath,
      [
        "--import",
        "tsx",
        "--conditions=source",
        fileURLToPath(new URL("../support/sqlWorkerChild.ts", import.meta.url)),
        dialect,
        engine.url,
        engine.prefix,
        "1500"
      ],
      { stdio: ["ignore", "pipe", "pipe"] }
    )
    let output = ""
    child.stdout.on("data", (chunk) => (output += String(chunk)))
    child.stderr.on("data", (chunk) => (output += String(chunk)))
    try {
      await waitFor("the child worker to start the step", () => output.includes("started "), 30_000)
    } finally {
      child.kill("SIGKILL")
    }
    await new Promise((resolve) => child.once("exit", resolve))
    const [, childStepId, childAttempt] = /started (\S+) (\d+)/.exec(output)!
    const [row] = await taskRows(engine)
    assert.strictEqual(row?.step_id, childStepId)
    assert.isNotNull(row?.claimed_by, "the killed worker's claim is still on the row")

    const runs: Array<{ stepId: string; attempt: number }> = []
    const worker = new Worker(quiet)
    worker.step("slow", async (_input: unknown, ctx) => {
      runs.push({ stepId: ctx.stepId, attempt: ctx.attempt })
      return "done"
    })
    const result = await whileServing(worker, handle(engine, { lease: 1_500 }), () => engine.waitForRun(runId))
    assert.strictEqual(result.status, "completed")
    assert.strictEqual(result.output, "done")
    // the duplicate run is the same task: same stepId, same attempt
    assert.deepStrictEqual(runs, [{ stepId: childStepId!, attempt: Number(childAttempt) }])
    assert.deepStrictEqual(await taskRows(engine), [])
  })

  it("a step longer than the lease is not run twice: the running worker renews its lease", async () => {
    const engine = await startEngine(dialect)
    const runs: Array<string> = []
    const makeWorker = () =>
      new Worker(quiet).step("long", async (_input: unknown, ctx) => {
        runs.push(ctx.stepId)
        await new Promise((resolve) => setTimeout(resolve, 5_000))
        return "slow but once"
      })
    const first = makeWorker()
    const second = makeWorker()
    // the step runs 2.5 leases; a renewal every 250 ms keeps it (with room for a loaded machine)
    const options = { lease: 2_000, renewInterval: 250 }
    const runningFirst = first.run(handle(engine, options))
    const runningSecond = second.run(handle(engine, options))
    engine.register("wf", async (ctx) => ctx.step("long", {}))
    const result = await engine.run("wf", {})
    await Promise.all([first.stop(), second.stop()])
    await Promise.all([runningFirst, runningSecond])
    assert.strictEqual(result.status, "completed")
    assert.strictEqual(result.output, "slow but once")
    assert.strictEqual(runs.length, 1)
  })

  it("an engine namespace (@tenant) reaches a worker with that partition", async () => {
    const engine = await startEngine(dialect, { namespace: "acme" })
    const worker = new Worker(quiet)
    worker.step("billing:charge", async (_input: unknown, ctx) => ctx.group)
    engine.register("wf", async (ctx) => ctx.step("billing:charge", {}))
    const result = await whileServing(worker, handle(engine, { partition: "acme" }), () => engine.run("wf", {}))
    assert.strictEqual(result.status, "completed")
    assert.strictEqual(result.output, "billing-charge@acme")
  })

  it("at a forced stop an interrupted step's row is given back at once, unclaimed, and no result is written", async () => {
    const engine = await startEngine(dialect)
    let started = false
    const worker = new Worker({ ...quiet, shutdownTimeoutMs: 0 })
    worker.step("stuck", async (_input: unknown, ctx) => {
      started = true
      await new Promise((resolve) => ctx.signal.addEventListener("abort", resolve))
      throw new Error("interrupted")
    })
    engine.register("wf", async (ctx) => ctx.step("stuck", {}))
    const running = worker.run(handle(engine))
    const runId = await engine.start("wf", {})
    await waitFor("the step to start", () => started)
    await worker.forceStop()
    await running
    const rows = await taskRows(engine)
    assert.strictEqual(rows.length, 1)
    assert.isNull(rows[0]!.claimed_by)
    assert.isNull(rows[0]!.claimed_at)
    assert.strictEqual((await engine.checkpoint(runId, 0))?.status, "pending")
    // and another worker takes it over at once
    const next = new Worker(quiet)
    next.step("stuck", () => "taken over")
    const runningNext = next.run(handle(engine))
    const result = await engine.waitForRun(runId)
    await next.stop()
    await runningNext
    assert.strictEqual(result.output, "taken over")
  })

  it("an unreachable database fails run fast with an error that says what to check", async () => {
    const port = await freePort()
    const worker = new Worker(quiet)
    worker.step("x", () => 1)
    const url = dialect === "postgres" ? `postgres://postgres@127.0.0.1:${port}/test` : `mysql://root@127.0.0.1:${port}/test`
    const layer = dialect === "postgres"
      ? PostgresSql.layerPostgres({ url, connectTimeout: 1_000 })
      : MysqlSql.layerMysql({ url, connectTimeout: 1_000 })
    const started = Date.now()
    const error = await worker.run({ layer }).then(
      () => assert.fail("run should fail"),
      (e: Error) => e
    )
    assert.isBelow(Date.now() - started, 6_000)
    assert.strictEqual((error as { _tag?: string })._tag, "RegistrationError")
    assert.match(error.message, new RegExp(`could not connect to (PostgreSQL|MySQL/MariaDB) at \\w+://root@127.0.0.1:${port}|could not connect to (PostgreSQL|MySQL/MariaDB) at \\w+://postgres@127.0.0.1:${port}`))
    assert.match(error.message, /DATABASE_URL/)
  })

  it("a database that accepts connections and never answers fails run after connectTimeout (\"1s\" or 1000), by URL or by host", async () => {
    const silent = await silentServer()
    try {
      const user = dialect === "postgres" ? "postgres" : "root"
      const layers = dialect === "postgres"
        ? [
          // the short form operators write, which every duration option takes at run time (a JavaScript
          // caller's, or one read from configuration; Effect's type has only its own forms)
          PostgresSql.layerPostgres({ url: `postgres://${user}@127.0.0.1:${silent.port}/test`, connectTimeout: "1s" }),
          PostgresSql.layerPostgres({ host: "127.0.0.1", port: silent.port, username: user, connectTimeout: 1_000 })
        ]
        : [
          MysqlSql.layerMysql({ url: `mysql://${user}@127.0.0.1:${silent.port}/test`, connectTimeout: "1s" }),
          MysqlSql.layerMysql({ host: "127.0.0.1", port: silent.port, username: user, connectTimeout: 1_000 })
        ]
      for (const layer of layers) {
        const worker = new Worker(quiet)
        worker.step("x", () => 1)
        const started = Date.now()
        const error = await worker.run({ layer }).then(() => assert.fail("run should fail"), (e: Error) => e)
        // the driver's own default is 10 s: the option, not the default, ends the wait
        assert.isBelow(Date.now() - started, 4_000)
        assert.strictEqual((error as { _tag?: string })._tag, "RegistrationError")
        assert.match(error.message, new RegExp(`could not connect to (PostgreSQL|MySQL/MariaDB) at .*127.0.0.1:${silent.port}`))
      }
    } finally {
      silent.close()
    }
  })
})

describe("SQL transport on postgres: SqlTransport.layer over an application PgClient that renames columns", () => {
  // MySQL's claims and completions read their rows on a reserved connection, untransformed: there
  // a renaming client only touched a log line (test/transport/sql.test.ts covers it)
  it("a step runs once and its result reaches the engine with snakeToCamel / camelToSnake transforms", async () => {
    const engine = await startEngine("postgres")
    const worker = new Worker({ ...quiet, concurrency: 2 })
    let runs = 0
    worker.step("payments.charge-card", async (input: { amount: number }) => {
      runs++
      return { chargeId: `ch_${input.amount}` }
    })
    engine.register("checkout", async (ctx, input) => ctx.step("payments.charge-card", input))
    const client = PgClient.layer({
      url: Redacted.make(engine.url),
      transformResultNames: Str.snakeToCamel,
      transformQueryNames: Str.camelToSnake
    })
    const layer = SqlTransport.layer({ prefix: engine.prefix, pollInterval: 50, lease: "2 seconds" }).pipe(Layer.provide(client))
    const result = await whileServing(worker, { layer }, () => engine.run("checkout", { amount: 99 }, 10_000))
    assert.strictEqual(result.status, "completed")
    assert.deepStrictEqual(result.output, { chargeId: "ch_99" })
    assert.strictEqual(runs, 1)
    assert.deepStrictEqual(await taskRows(engine), [])
  })
})

describe("SQL transport on mysql: a result over max_allowed_packet", () => {
  it("fails its step once, not retryable, with a message naming the limit; the handler is not run again", async () => {
    const engine = await startEngine("mysql")
    const [{ limit }] = await engine.db.query<{ limit: number }>("SELECT @@max_allowed_packet AS `limit`")
    const worker = new Worker({ ...quiet, concurrency: 2 })
    const checkpoint = await failsOnceWith(
      engine,
      worker,
      handle(engine, { lease: "2 seconds" }),
      "report.render",
      async () => ({ pdf: "x".repeat(Number(limit)) }),
      "result_too_large"
    )
    assert.include(checkpoint.error.message, `over the database's max_allowed_packet (${limit} bytes`)
    assert.deepStrictEqual(await taskRows(engine), [])
  })
})

describe("SQL transport on postgres: LISTEN/NOTIFY", () => {
  it("an idle worker is woken by the insert trigger long before its poll interval", async () => {
    const engine = await startEngine("postgres")
    const worker = new Worker(quiet)
    worker.step("prompt", () => "woken")
    engine.register("wf", async (ctx) => ctx.step("prompt", {}))
    const running = worker.run(handle(engine, { pollInterval: 60_000 }))
    // the first poll (at start) finds nothing; from then on only a notification can wake the poller
    await new Promise((resolve) => setTimeout(resolve, 300))
    const started = Date.now()
    const result = await engine.run("wf", {})
    const elapsed = Date.now() - started
    await worker.stop()
    await running
    assert.strictEqual(result.output, "woken")
    assert.isBelow(elapsed, 10_000)
    const [trigger] = await engine.db.query<{ tgname: string }>(
      "SELECT tgname FROM pg_trigger WHERE tgrelid = $1::regclass",
      [`"${engine.prefix}_transport_tasks"`]
    )
    assert.strictEqual(trigger?.tgname, `${engine.prefix}_transport_tasks_notify`)
  })
})

describe("SQL transport on postgres: lost connections", () => {
  it("a connection killed while registration creates the schema is ridden out: the worker registers and serves", async () => {
    const engine = await startEngine("postgres")
    const applicationName = `edw-reg-${engine.prefix}`
    const worker = new Worker(quiet)
    worker.step("after-kill", () => "served")
    engine.register("wf", async (ctx) => ctx.step("after-kill", {}))
    let running: Promise<void> | undefined
    // hold the schema lock, so the worker's schema transaction waits on it; kill that backend, then let go
    // (pg_stat_activity is read outside the transaction, which would see one snapshot of it)
    const killed = await engine.db.transaction(async (query) => {
      await query("SELECT pg_advisory_xact_lock(hashtext($1))", [`${engine.prefix}_transport_tasks`])
      running = worker.run({
        layer: PostgresSql.layerPostgres({ url: engine.url, prefix: engine.prefix, pollInterval: 50, applicationName })
      })
      await waitFor("the worker's schema transaction to wait on the lock", async () =>
        (await engine.db.query(
          "SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
          [applicationName]
        )).length > 0)
      return engine.db.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'", [
        applicationName
      ])
    })
    const result = await engine.run("wf", {})
    await worker.stop()
    await running
    assert.lengthOf(killed, 1)
    assert.strictEqual(result.status, "completed")
    assert.strictEqual(result.output, "served")
  })

  it("connections killed mid-claim and mid-result lose nothing: every step is answered, no task row is left", async () => {
    const engine = await startEngine("postgres")
    const applicationName = `edw-kill-${engine.prefix}`
    const worker = new Worker({ ...quiet, concurrency: 8 })
    const seen = new Map<string, number>()
    worker.step("item", async (input: { i: number }, ctx) => {
      seen.set(ctx.stepId, (seen.get(ctx.stepId) ?? 0) + 1)
      await new Promise((resolve) => setTimeout(resolve, 20))
      return input.i
    })
    engine.register("fanout", async (ctx) => {
      const outputs = await Promise.all(Array.from({ length: 60 }, (_, i) => ctx.step("item", { i })))
      return (outputs as Array<number>).reduce((a, b) => a + b, 0)
    })
    const running = worker.run({
      layer: PostgresSql.layerPostgres({ url: engine.url, prefix: engine.prefix, pollInterval: 50, applicationName })
    })
    const runId = await engine.start("fanout", {})
    let killed = 0
    for (let round = 0; round < 8; round++) {
      await new Promise((resolve) => setTimeout(resolve, 150))
      const rows = await engine.db.query<{ n: boolean }>(
        "SELECT pg_terminate_backend(pid) AS n FROM pg_stat_activity WHERE application_name = $1",
        [applicationName]
      )
      killed += rows.length
    }
    const result = await engine.waitForRun(runId, 60_000)
    await worker.stop()
    await running
    assert.isAbove(killed, 0)
    assert.strictEqual(result.status, "completed")
    assert.strictEqual(result.output, (59 * 60) / 2)
    assert.strictEqual(seen.size, 60)
    assert.deepStrictEqual(await taskRows(engine), [])
  })
})

