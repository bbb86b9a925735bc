/**
 * A worker process for the SQL "killed worker" test: serves step `slow` on the SQL transport, prints
 * `started <stepId> <attempt>` when the handler starts and never finishes it, so the parent can
 * SIGKILL the process mid-step. Arguments: dialect, url, table prefix, lease in ms.
 */
import { Worker } from "../../src/promise.js"
import { SqlTransport as PostgresSql } from "../../src/postgres.js"
import { SqlTransport as MysqlSql } from "../../src/mysql.js"

const [dialect, url, prefix, leaseMs] = process.argv.slice(2)
const options = { url: url!, prefix: prefix!, lease: Number(leaseMs), pollInterval: 50 }
const worker = new Worker({ handleSignals: false, logLevel: "None", concurrency: 1 })
worker.step("slow", (_input: unknown, ctx) => {
  process.stdout.write(`started ${ctx.stepId} ${ctx.attempt}\n`)
  return new Promise<never>(() => {})
})
void worker.run({
  layer: dialect === "postgres" ? PostgresSql.layerPostgres(options) : MysqlSql.layerMysql(options)
}).catch((error: unknown) => {
  process.stderr.write(`worker failed: ${String(error)}\n`)
  process.exit(1)
})
