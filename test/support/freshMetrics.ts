/**
 * What a scraper reads from a fresh process: the promise facade runs a worker with the probe server's
 * `/metrics` on the transport the first argument names (`in-memory`, `redis`, `postgres`, `sqs`; where
 * from in `FRESH_*` variables), waits until `/readyz` says it runs, prints the `/metrics` text before
 * any task was taken, and stops.
 */
import { inMemory, postgres, redis, sqs, type TransportHandle, Worker } from "../../src/promise.js"

const [kind, port] = [process.argv[2]!, Number(process.argv[3])]
const prefix = process.env.FRESH_PREFIX!
const transports: Record<string, () => TransportHandle> = {
  "in-memory": () => inMemory(),
  redis: () => redis({ prefix }),
  postgres: () => postgres({ url: process.env.FRESH_URL, prefix }),
  sqs: () => sqs({ prefix, autoCreate: true, clientConfig: JSON.parse(process.env.FRESH_SQS!) })
}

// SQS: a stop waits out the long polls its pollers left running (so none hides a message), which at
// the default 20 s wait would take most of the test's time limit; a short one keeps the stop short
const worker = new Worker({ logLevel: "None", health: { port, metrics: true }, ...(kind === "sqs" ? { pollTimeoutMs: 1_000 } : {}) })
worker.step("charge", () => 1)
worker.step("refund", () => 2)
if (kind === "in-memory") worker.workflow("order", async () => 3)
const running = worker.run(transports[kind]!())
const get = (path: string) => fetch(`http://127.0.0.1:${port}${path}`).then(async (r) => ({ status: r.status, body: await r.text() }))
for (let i = 0; ; i++) {
  const ready = await get("/readyz").catch(() => undefined)
  if (ready?.status === 200) break
  if (i === 500) throw new Error(`not ready after 10 s: ${ready?.body}`)
  await new Promise((resolve) => setTimeout(resolve, 20))
}
process.stdout.write((await get("/metrics")).body)
await worker.stop()
await running
