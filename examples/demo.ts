/**
 * `npm run demo`: a worker serving three steps on the in-memory transport, fed by a tiny stand-in
 * for the engine that dispatches step tasks, retries retryable failures with attempt+1, and prints
 * every result. No server needed.
 */
import { FatalError, inMemory, Worker } from "effect-durable-worker/promise"

const transportArg = process.argv.indexOf("--transport")
if (transportArg !== -1 && process.argv[transportArg + 1] === "redis") {
  await import("./demo-redis.js")
  process.exit(0)
}

const orders = [
  { id: "order-1", amount: 42 },
  { id: "order-2", amount: 1_000_000 }, // declined: a FatalError, not retried
  { id: "order-3", amount: 7 }
]
const flaky = new Set(["order-3"]) // the receipt email fails once, then succeeds on retry

const worker = new Worker({ concurrency: 4, shutdownTimeoutMs: 5_000, logLevel: "Error" })

worker.step("payments.charge-card", async (input: { amount: number }, ctx) => {
  ctx.log.info(`charging ${input.amount}`)
  await new Promise((resolve) => setTimeout(resolve, 150))
  if (input.amount > 10_000) throw new FatalError("card declined: amount over limit", "card_declined")
  return { chargeId: `ch_${ctx.runId}` }
})

worker.step("inventory.reserve", async (input: { orderId: string }) => {
  await new Promise((resolve) => setTimeout(resolve, 100))
  return { reservation: `rsv_${input.orderId}` }
})

worker.step("email.send-receipt", async (input: { orderId: string }, ctx) => {
  await new Promise((resolve) => setTimeout(resolve, 50))
  if (flaky.has(input.orderId) && ctx.attempt === 1) {
    throw Object.assign(new Error("smtp timeout"), { code: "smtp_timeout" })
  }
  return { sent: true }
})

const broker = inMemory()
const running = worker.run(broker)

const dispatch = (runId: string, seq: number, name: string, input: unknown, attempt = 1) =>
  broker.enqueue({ runId, seq, name, stepId: `${runId}:${seq}`, group: name, input, attempt, transport: "default" })

const plan = (order: { id: string; amount: number }) => [
  { name: "payments.charge-card", input: { amount: order.amount } },
  { name: "inventory.reserve", input: { orderId: order.id } },
  { name: "email.send-receipt", input: { orderId: order.id } }
]

console.log(`worker ${worker.id} running on the in-memory transport\n`)
for (const order of orders) await dispatch(order.id, 0, plan(order)[0]!.name, plan(order)[0]!.input)

const started = Date.now()
let open = orders.length
while (open > 0) {
  const reply = await broker.takeReply()
  if (reply._tag !== "StepResult") continue
  const { result } = reply
  const order = orders.find((o) => o.id === result.runId)!
  const step = plan(order)[result.seq]!
  const took = result.startedAt === undefined ? "" : ` (picked up at +${result.startedAt - started} ms)`
  if (result.status === "completed") {
    console.log(`✔ ${result.runId} ${step.name} → ${JSON.stringify(result.output)}${took}`)
    const next = plan(order)[result.seq + 1]
    if (next === undefined) {
      console.log(`  ${result.runId} completed`)
      open--
    } else {
      await dispatch(result.runId, result.seq + 1, next.name, next.input)
    }
  } else if (result.error?.retryable === false) {
    console.log(`✘ ${result.runId} ${step.name} failed for good: ${result.error.message} [${result.error.code}]`)
    open--
  } else {
    console.log(`↻ ${result.runId} ${step.name} failed (${result.error?.message}); the engine retries it`)
    await dispatch(result.runId, result.seq, step.name, step.input, 2)
  }
  for (const event of result.events ?? []) console.log(`    event ${event.level}: ${event.message}`)
}

await worker.stop()
await running
console.log(`\nall orders settled; worker drained and deregistered in ${Date.now() - started} ms`)
