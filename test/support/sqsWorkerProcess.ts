/**
 * A worker process for the "worker killed mid-step" interop test: serves `slow-step` on the SQS
 * transport, prints `{"started":stepId,"attempt":n}` on stdout when a step starts and then never
 * finishes it, so the test can SIGKILL the process in the middle of the step.
 *
 * Usage: `node --import tsx test/support/sqsWorkerProcess.ts <endpoint> <prefix> <visibilitySeconds>`
 */
import * as Duration from "effect/Duration"
import * as SqsTransport from "../../src/transport/SqsTransport.js"
import { Worker } from "../../src/promise.js"

const [endpoint, prefix, visibilitySeconds] = process.argv.slice(2)
if (endpoint === undefined || prefix === undefined || visibilitySeconds === undefined) {
  throw new Error("usage: sqsWorkerProcess.ts <endpoint> <prefix> <visibilitySeconds>")
}

const worker = new Worker({ handleSignals: false, logLevel: "None", concurrency: 2 })
worker.step("slow-step", async (_input: unknown, ctx) => {
  process.stdout.write(`${JSON.stringify({ started: ctx.stepId, attempt: ctx.attempt })}\n`)
  return new Promise<never>(() => {})
})
await worker.run({
  layer: SqsTransport.layer({
    clientConfig: { endpoint, region: "us-east-1", credentials: { accessKeyId: "test", secretAccessKey: "test" } },
    prefix,
    autoCreate: true,
    visibilityTimeout: Duration.seconds(Number(visibilitySeconds))
  })
})
