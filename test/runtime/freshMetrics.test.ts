/**
 * A fresh process's `/metrics`, before its first task: the counters an alert is written on are there
 * at 0, on every transport that counts them. A series that first appears at 1 is no increase to
 * Prometheus' `increase()` or `rate()`, so an alert on the first failure, lost reply or lost
 * connection would never fire. Each case runs in a process of its own, since Effect's metrics are
 * global to a process and another test's series would hide a missing one.
 */
import { randomUUID } from "node:crypto"
import { fileURLToPath } from "node:url"
import { afterAll, assert, describe, it } from "vitest"
import { startFauxqs } from "../support/fauxqs.js"
import { freePort, spawnSource } from "../support/local.js"
import { databaseUrl, dropTables, openDb } from "../support/sqlEngine.js"

const SCRIPT = fileURLToPath(new URL("../support/freshMetrics.ts", import.meta.url))

const scrape = async (transport: string, env: Record<string, string> = {}) => {
  const { child, exited, output } = spawnSource(SCRIPT, [transport, String(await freePort())], {
    AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: "true",
    ...env
  })
  const timer = setTimeout(() => child.kill("SIGKILL"), 30_000)
  const { code } = await exited
  clearTimeout(timer)
  assert.strictEqual(code, 0, output())
  return output().split("\n")
}

const atZero = (lines: ReadonlyArray<string>, series: string) => assert.include(lines, `${series} 0`, lines.join("\n"))

const prefix = `fm_${randomUUID().replaceAll("-", "").slice(0, 10)}`

describe("a fresh worker's /metrics, before its first task", () => {
  afterAll(async () => {
    const db = openDb("postgres")
    await dropTables(db, prefix)
    await db.end()
  })

  it("every handler's started, completed and failed (by outcome), and the replies retried and lost, are 0", async () => {
    const lines = await scrape("in-memory")
    for (const [kind, name] of [["step", "charge"], ["step", "refund"], ["workflow", "order"]]) {
      atZero(lines, `durable_worker_tasks_started_total{kind="${kind}",name="${name}"}`)
      atZero(lines, `durable_worker_tasks_completed_total{kind="${kind}",name="${name}"}`)
      for (const outcome of ["failed", "rejected", "cancelled", "abandoned"]) {
        atZero(lines, `durable_worker_tasks_failed_total{kind="${kind}",name="${name}",outcome="${outcome}"}`)
      }
      // the completed and failed durations' histograms exist, empty, so the first batch is an
      // increase of their buckets; the rarer outcomes' appear with their first task
      for (const outcome of ["completed", "failed"]) {
        atZero(lines, `durable_worker_task_duration_seconds_count{kind="${kind}",name="${name}",outcome="${outcome}"}`)
        atZero(lines, `durable_worker_task_duration_seconds_bucket{kind="${kind}",name="${name}",outcome="${outcome}",le="+Inf"}`)
      }
      for (const outcome of ["rejected", "cancelled", "abandoned"]) {
        const series = `durable_worker_task_duration_seconds_count{kind="${kind}",name="${name}",outcome="${outcome}"}`
        assert.isFalse(lines.some((line) => line.startsWith(series)), `${series} before any such task`)
      }
    }
    atZero(lines, "durable_worker_replies_retried_total")
    atZero(lines, "durable_worker_replies_lost_total")
    // the in-memory broker has no connection to lose
    assert.isFalse(lines.some((line) => line.startsWith("durable_worker_connections_lost_total{")), lines.join("\n"))
  }, 40_000)

  it("Redis, PostgreSQL and SQS publish their lost connections at 0", async () => {
    const fauxqs = await startFauxqs()
    try {
      const [redis, postgres, sqs] = await Promise.all([
        scrape("redis", { FRESH_PREFIX: prefix }),
        scrape("postgres", { FRESH_PREFIX: prefix, FRESH_URL: databaseUrl("postgres") }),
        scrape("sqs", { FRESH_PREFIX: prefix.replaceAll("_", "-"), FRESH_SQS: JSON.stringify(fauxqs.clientConfig) })
      ])
      atZero(redis, `durable_worker_connections_lost_total{transport="bullmq"}`)
      atZero(postgres, `durable_worker_connections_lost_total{transport="sql"}`)
      atZero(sqs, `durable_worker_connections_lost_total{transport="sqs"}`)
      for (const lines of [redis, postgres, sqs]) atZero(lines, "durable_worker_replies_lost_total")
    } finally {
      await fauxqs.stop()
    }
  }, 60_000)
})
