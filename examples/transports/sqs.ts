/**
 * A worker on the nestjs-durable engine's SQS transport, through the promise facade.
 *
 *   npm install effect-durable-worker effect@3 @effect/platform@0.97 @aws-sdk/client-sqs@3
 *   SQS_ENDPOINT=http://127.0.0.1:4566 npx tsx examples/transports/sqs.ts
 *
 * (In a clone of this repository, which has no build until `npm run build`, run it from the
 * sources: `npx tsx --conditions=source examples/transports/sqs.ts`.)
 *
 * Queue names and the results queue are the engine's (`prefix` as the engine's SQS transport has
 * it). A worker started before the engine created its queues waits for them. Step names become queue
 * names (`durable-tasks-payments-charge-card`), and SQS refuses a `.` in one: name steps with `-` or
 * `_`, or map each group to its queue with `taskQueueUrl` as the engine does.
 */
import { FatalError, Worker } from "effect-durable-worker/promise"
import { sqs } from "effect-durable-worker/sqs"

const worker = new Worker({ concurrency: 16, shutdownTimeoutMs: 30_000 })
worker.step("payments-charge-card", async (input: { amount: number }, ctx) => {
  if (input.amount > 10_000) throw new FatalError("card declined", "card_declined")
  return { chargeId: `ch_${ctx.stepId}` }
})
worker.step("inventory-reserve", async (input: { orderId: string }) => ({ orderId: input.orderId, reserved: true }))

// SIGTERM/SIGINT stop the worker: it drains within shutdownTimeoutMs, then run() settles
await worker.run(
  sqs({
    prefix: process.env.DURABLE_PREFIX ?? "durable",
    clientConfig: {
      region: process.env.AWS_REGION ?? "us-east-1",
      ...(process.env.SQS_ENDPOINT === undefined ? {} : { endpoint: process.env.SQS_ENDPOINT })
    }
  })
)
