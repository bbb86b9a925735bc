/**
 * A commit of unknown outcome on the SQL transport, against the real databases and the real engine:
 * the connection is cut right after the statement (PostgreSQL) or the `COMMIT` (MySQL) completing a
 * task and claiming the next one reached the server and ran, before its answer came back. The rows
 * that commit claimed are held by a claim no delivery serves: they must be released as soon as the
 * database answers again, not left leased for the lease (30 s); the retried completion must find
 * its task completed and say so, and no handler runs twice.
 */
import { afterAll, assert, describe, it, vi } from "vitest"
import { Worker } from "../../src/promise.js"
import { SqlTransport as PostgresSql } from "../../src/postgres.js"
import { SqlTransport as MysqlSql } from "../../src/mysql.js"
import { cuttingProxy, type CuttingProxy } from "../support/cuttingProxy.js"
import { type SqlEngine, startSqlEngine } from "../support/sqlEngine.js"

const opened: Array<{ close: () => Promise<void> }> = []
afterAll(async () => {
  for (const resource of opened.reverse()) await resource.close()
})

/** Everything the worker logged, as text. */
const captureLogs = () => {
  const lines: Array<string> = []
  const spies = (["log", "info", "warn", "error"] as const).map((level) =>
    vi.spyOn(console, level).mockImplementation((...args: Array<unknown>) => {
      lines.push(args.map((arg) => typeof arg === "string" ? arg : JSON.stringify(arg)).join(" "))
    })
  )
  return { lines, restore: () => spies.forEach((spy) => spy.mockRestore()) }
}

/** The engine's database URL with its port replaced by the proxy's. */
const throughProxy = (engine: SqlEngine, proxy: CuttingProxy) => {
  const url = new URL(engine.url)
  url.port = String(proxy.port)
  return url.toString()
}

describe.each([
  // the completion's statement is the only one inserting results; on MySQL its second round trip ends with COMMIT
  { dialect: "postgres" as const, port: 5432, marker: "INSERT INTO" },
  { dialect: "mysql" as const, port: 3306, marker: "COMMIT" }
])("SQL on $dialect: a completion whose commit's answer was lost", ({ dialect, marker, port }) => {
  it("releases the rows it claimed at once, and the retry finds its task completed", async () => {
    const engine = await startSqlEngine(dialect)
    opened.push(engine)
    const proxy = await cuttingProxy(port)
    opened.push(proxy)
    const logs = captureLogs()
    try {
      // one at a time, so the completion of the first task claims the next
      const worker = new Worker({ handleSignals: false, logLevel: "Info", concurrency: 1 })
      const calls = new Map<number, number>()
      worker.step("echo", async (input: { i: number }) => {
        calls.set(input.i, (calls.get(input.i) ?? 0) + 1)
        // the next statement of the kind is this task's completion
        if (input.i === 1 && calls.get(1) === 1) proxy.arm(marker)
        return input.i
      })
      engine.register("wf", async (ctx, input) => ctx.step("echo", input))
      const runs: Array<string> = []
      for (const i of [1, 2, 3]) runs.push(await engine.start("wf", { i }))
      const options = { url: throughProxy(engine, proxy), prefix: engine.prefix, pollInterval: 50 }
      const running = worker.run({ layer: dialect === "postgres" ? PostgresSql.layerPostgres(options) : MysqlSql.layerMysql(options) })
      const started = Date.now()
      // well under the lease: rows left leased would wait 30 s
      const results = await Promise.all(runs.map((runId) => engine.waitForRun(runId, 12_000)))
      const elapsed = Date.now() - started
      await worker.stop()
      await running

      assert.strictEqual(proxy.cuts(), 1)
      assert.deepStrictEqual(results.map((r) => [r.status, r.output]), [["completed", 1], ["completed", 2], ["completed", 3]])
      assert.deepStrictEqual([...calls.entries()].sort(), [[1, 1], [2, 1], [3, 1]])
      assert.isBelow(elapsed, 12_000)
      const text = logs.lines.join("\n")
      assert.match(text, /a claim whose outcome was lost with the connection had been committed; its 1 task\(s\)/)
      assert.match(text, /was already completed \(by an earlier attempt of this answer whose outcome was lost/)
    } finally {
      logs.restore()
    }
  }, 40_000)
})
