/**
 * `npm run demo -- --transport redis`: the real nestjs-durable engine (BullMQ transport, in-memory
 * store) and this worker on the local Redis (REDIS_URL, default redis://127.0.0.1:6379). The engine
 * runs a `checkout` workflow whose three steps are served by our worker, plus one whose card is
 * declined; the worker prints each step as it runs.
 */
import { InMemoryStateStore, WorkflowEngine } from "@dudousxd/nestjs-durable-core"
import { BullMQTransport } from "@dudousxd/nestjs-durable-transport-bullmq"
import { randomUUID } from "node:crypto"
import { FatalError, redis, Worker } from "effect-durable-worker/promise"

const url = new URL(process.env.REDIS_URL ?? "redis://127.0.0.1:6379")
const prefix = `demo-${randomUUID().slice(0, 8)}`

const transport = new BullMQTransport({ connection: { host: url.hostname, port: Number(url.port || 6379) }, prefix })
const engine = new WorkflowEngine({ store: new InMemoryStateStore(), transport, controlPlane: transport })
engine.register("checkout", "1", async (ctx, input) => {
  const order = input as { orderId: string; amount: number }
  const charge = (await ctx.step("payments.charge-card", { amount: order.amount })) as { chargeId: string }
  await ctx.step("inventory.reserve", { orderId: order.orderId })
  await ctx.step("email.send-receipt", { orderId: order.orderId, chargeId: charge.chargeId }, { retries: 3 })
  return { orderId: order.orderId, chargeId: charge.chargeId }
})
const timers = setInterval(() => void engine.resumeDueTimers().catch(() => {}), 200)

const worker = new Worker({ concurrency: 8, shutdownTimeoutMs: 5_000, logLevel: "Error" })
worker.step("payments.charge-card", async (input: { amount: number }, ctx) => {
  console.log(`  worker: charging ${input.amount} (run ${ctx.runId}, step ${ctx.stepId})`)
  if (input.amount > 10_000) throw new FatalError("card declined", "card_declined")
  return { chargeId: `ch_${ctx.runId.slice(0, 8)}` }
})
worker.step("inventory.reserve", async (input: { orderId: string }) => {
  console.log(`  worker: reserving stock for ${input.orderId}`)
  return { reserved: true }
})
worker.step("email.send-receipt", async (input: { orderId: string }, ctx) => {
  console.log(`  worker: sending the receipt for ${input.orderId} (attempt ${ctx.attempt})`)
  if (ctx.attempt === 1) throw new Error("smtp timeout") // retried by the engine
  return { sent: true }
})

console.log(`engine and worker on redis://${url.host}, prefix ${prefix}\n`)
const running = worker.run(redis({ url: url.toString(), prefix }))
try {
  for (const order of [{ orderId: "order-1", amount: 42 }, { orderId: "order-2", amount: 99_000 }]) {
    const runId = `${order.orderId}-${randomUUID().slice(0, 6)}`
    console.log(`engine: start checkout ${runId}`)
    await engine.start("checkout", order, runId)
    const result = await engine.waitForRun(runId, { until: "terminal", timeoutMs: 30_000 })
    console.log(`engine: ${runId} ${result.status}`, result.status === "completed" ? result.output : result.error?.message, "\n")
  }
} finally {
  await worker.stop()
  await running
  clearInterval(timers)
  await transport.close()
  console.log("worker drained and deregistered; engine closed")
}
