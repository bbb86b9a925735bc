/**
 * Calls of unknown outcome on the SQS transport, against fauxqs and the real engine: the connection
 * is cut right after a `SendMessageBatch` (the result) or a `DeleteMessageBatch` (the task) reached
 * the server and ran, before its answer came back, or was lost before it reached the server: the
 * worker cannot tell the two apart.
 *
 * SQS has no transaction to reconcile against, so the rule is per call: a result is sent at least
 * once (sent again, by the SDK's retry or the runtime's, it may arrive twice; the engine keeps the
 * result of a pending step only, so the run completes once with the first); a delete is idempotent
 * (a receipt handle already deleted counts as done), so a delete sent again neither fails the answer
 * nor leaves the task to be redelivered. Either way the handler runs once.
 */
import { SQSClient, GetQueueAttributesCommand, GetQueueUrlCommand } from "@aws-sdk/client-sqs"
import { afterAll, assert, describe, it } from "vitest"
import { Worker } from "../../src/promise.js"
import * as SqsTransport from "../../src/transport/SqsTransport.js"
import { cuttingProxy, type CuttingProxy } from "../support/cuttingProxy.js"
import { useFauxqs } from "../support/fauxqs.js"
import { type SqsEngine, startSqsEngine } from "../support/sqsEngine.js"

const server = useFauxqs()
const opened: Array<{ close: () => Promise<void> }> = []
afterAll(async () => {
  for (const resource of opened.reverse()) await resource.close()
})

/** How many messages a queue holds (visible, in flight or delayed). */
const queueDepth = async (engine: SqsEngine, name: string) => {
  const client = new SQSClient(server().clientConfig)
  try {
    const { QueueUrl } = await client.send(new GetQueueUrlCommand({ QueueName: `${engine.prefix}-${name}` }))
    const { Attributes } = await client.send(
      new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"] })
    )
    return Number(Attributes?.ApproximateNumberOfMessages ?? 0) + Number(Attributes?.ApproximateNumberOfMessagesNotVisible ?? 0)
  } finally {
    client.destroy()
  }
}

describe.each([
  { call: "SendMessageBatch", applied: true },
  { call: "SendMessageBatch", applied: false },
  { call: "DeleteMessageBatch", applied: true },
  { call: "DeleteMessageBatch", applied: false }
])("SQS: a $call of unknown outcome (applied: $applied)", ({ applied, call }) => {
  it("the run completes once with the handler's output, the handler runs once, and the task is gone", async () => {
    const engine = startSqsEngine(server())
    opened.push(engine)
    const proxy: CuttingProxy = await cuttingProxy(server().port)
    opened.push(proxy)
    const calls: Array<number> = []
    const worker = new Worker({ handleSignals: false, logLevel: "None", concurrency: 1 })
    worker.step("echo", async (input: { i: number }) => {
      calls.push(input.i)
      // the next call of the kind carries this task's answer
      if (calls.length === 1) proxy.arm(`AmazonSQS.${call}`, { applied })
      return input.i
    })
    engine.register("wf", async (ctx, input) => ctx.step("echo", input))
    const running = worker.run({
      layer: SqsTransport.layer({
        // no retry in the SDK: the transport and the runtime see the lost answer themselves
        clientConfig: { ...server().clientConfig, endpoint: `http://127.0.0.1:${proxy.port}`, maxAttempts: 1 },
        prefix: engine.prefix,
        autoCreate: true,
        // short, so a task left in flight would be seen again within the test
        visibilityTimeout: "2 seconds",
        visibilityExtendInterval: "1 second"
      })
    })
    try {
      const result = await engine.run("wf", { i: 7 }, 15_000)
      // the delete follows the result: the run may be complete before it is sent
      for (let i = 0; i < 100 && proxy.cuts() === 0; i++) await new Promise((resolve) => setTimeout(resolve, 20))
      assert.strictEqual(proxy.cuts(), 1)
      assert.strictEqual(result.status, "completed")
      assert.strictEqual(result.output, 7)
      // past the visibility timeout: a task whose delete was lost would have come back by now
      await new Promise((resolve) => setTimeout(resolve, 3_000))
      assert.deepStrictEqual(calls, [7])
      const tasksQueue = "tasks-echo"
      assert.strictEqual(await queueDepth(engine, tasksQueue), 0)
      assert.strictEqual((await engine.checkpoint(result.runId, 0))?.status, "completed")
    } finally {
      await worker.stop()
      await running
    }
  }, 30_000)
})
