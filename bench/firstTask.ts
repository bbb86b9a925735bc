/**
 * `npx tsx bench/firstTask.ts`: where the time from `run()` to the first result goes, for this
 * worker on the built package (a pre-filled queue, one fresh worker; debug logs timestamped). It
 * prints the window's bounds (`T0US`, `T1US`, µs of `process.hrtime`) so that a CPU profile
 * (`node --cpu-prof --import tsx bench/firstTask.ts`) can be cut to that window.
 */
import { Redis } from "ioredis"
import { randomUUID } from "node:crypto"
import { Worker } from "effect-durable-worker/promise"
import { redis } from "effect-durable-worker/bullmq"
import { deletePrefixKeys, enqueueTasks } from "./support/load.js"

const prefix = `first-${randomUUID().slice(0, 8)}`
const stepName = "bench.noop"
await enqueueTasks({ prefix, stepName, n: 100 })
const watcher = new Redis({ host: "127.0.0.1", port: 6379 })
await watcher.ping()
const t0 = performance.now()
console.log("T0US", Number(process.hrtime.bigint() / 1000n))
const stamp = (what: string) => console.log(`${(performance.now() - t0).toFixed(1).padStart(7)} ms  ${what}`)
const first = (async () => {
  let last = "0"
  for (;;) {
    const reply = await watcher.xread("BLOCK", 0, "STREAMS", `bull:${prefix}-results:events`, last)
    for (const [, entries] of reply ?? []) {
      for (const [id, fields] of entries) {
        last = id
        for (let i = 0; i < fields.length; i += 2) if (fields[i] === "event" && fields[i + 1] === "added") return
      }
    }
  }
})()
const worker = new Worker({
  concurrency: 10,
  handleSignals: false,
  logLevel: "Debug",
  logger: { info: (m: string) => stamp(m), warn: (m: string) => stamp(m), error: (m: string) => stamp(m), debug: (m: string) => stamp(m) }
})
worker.step(stepName, () => undefined)
const running = worker.run(redis({ url: "redis://127.0.0.1:6379", prefix }))
await first
stamp("first result")
console.log("T1US", Number(process.hrtime.bigint() / 1000n))
await worker.stop()
await running
watcher.disconnect()
await deletePrefixKeys(prefix)
process.exit(0)
