import { CreateQueueCommand, SendMessageCommand } from "@aws-sdk/client-sqs"
import { spawn } from "node:child_process"
import { createInterface } from "node:readline"
import { fileURLToPath } from "node:url"
import { afterAll, assert, describe, it } from "vitest"
import { Worker } from "../../src/promise.js"
import * as SqsTransport from "../../src/transport/SqsTransport.js"
import { recordingClient, sqsPrefix, useFauxqs } from "../support/fauxqs.js"
import { failsOnceWith, fatalErrorFailsOnce, retryableErrorRecovers, whileServing } from "../support/interop.js"
import { type SqsEngine, type SqsEngineOptions, startSqsEngine } from "../support/sqsEngine.js"

const quiet = { handleSignals: false, logLevel: (process.env.TEST_LOG_LEVEL ?? "None") as "None" } as const
const server = useFauxqs()

const engines: Array<SqsEngine> = []
afterAll(async () => {
  await Promise.all(engines.map((engine) => engine.close()))
})

/** An engine on its own prefix, and a worker transport on the same server and prefix. */
const setup = (options: { engine?: SqsEngineOptions; sqs?: SqsTransport.SqsOptions; concurrency?: number } = {}) => {
  const engine = startSqsEngine(server(), options.engine)
  engines.push(engine)
  const worker = new Worker({ ...quiet, concurrency: options.concurrency ?? 8, shutdownTimeoutMs: 10_000 })
  const transport = {
    layer: SqsTransport.layer({
      clientConfig: server().clientConfig,
      prefix: engine.prefix,
      autoCreate: true,
      ...options.sqs
    })
  }
  return { engine, worker, transport }
}

describe("SQS transport against the real nestjs-durable engine (fauxqs)", () => {
  it("a step completes with the handler's output", async () => {
    const { engine, worker, transport } = setup()
    worker.step("payments-charge-card", async (input: { amount: number }, ctx) => ({
      chargeId: `ch_${input.amount}`,
      attempt: ctx.attempt,
      group: ctx.group
    }))
    engine.register("checkout", async (ctx, input) => ctx.step("payments-charge-card", input))
    const result = await whileServing(worker, transport, () => engine.run("checkout", { amount: 99 }))
    assert.strictEqual(result.status, "completed")
    assert.deepStrictEqual(result.output, { chargeId: "ch_99", attempt: 1, group: "payments-charge-card" })
    // the task was deleted once its result was sent: nothing is left on either queue
    assert.deepStrictEqual(await server().counts(`${engine.prefix}-tasks-payments-charge-card`), { visible: 0, inFlight: 0 })
    assert.deepStrictEqual(await server().counts(`${engine.prefix}-results`), { visible: 0, inFlight: 0 })
  })

  it("a FatalError fails the run after exactly one attempt and keeps its code on the checkpoint", async () => {
    const { engine, worker, transport } = setup()
    await fatalErrorFailsOnce(engine, worker, transport, "charge-card")
  })

  it("a retryable error recovers within retries: 3", async () => {
    const { engine, worker, transport } = setup()
    await retryableErrorRecovers(engine, worker, transport)
  })

  it("a fan-out of 200 steps completes with exactly 200 results and no duplicate execution", async () => {
    const resultsSent: Array<string> = []
    const recorder = recordingClient(server(), (call) => {
      if (call.command === "SendMessageBatchCommand") {
        for (const entry of call.input.Entries as Array<{ MessageBody: string }>) resultsSent.push(entry.MessageBody)
      }
    })
    const { engine, worker, transport } = setup({ concurrency: 32, sqs: { client: recorder.client } })
    const seen = new Map<string, number>()
    worker.step("item", async (input: { i: number }, ctx) => {
      seen.set(ctx.stepId, (seen.get(ctx.stepId) ?? 0) + 1)
      return input.i * 2
    })
    engine.register("fanout", async (ctx) => {
      const outputs = await Promise.all(Array.from({ length: 200 }, (_, i) => ctx.step("item", { i })))
      return (outputs as Array<number>).reduce((a, b) => a + b, 0)
    })
    const result = await whileServing(worker, transport, () => engine.run("fanout", {}, 60_000))
    recorder.client.destroy()
    assert.strictEqual(result.status, "completed")
    assert.strictEqual(result.output, 2 * (199 * 200) / 2)
    assert.strictEqual(seen.size, 200)
    assert.isTrue([...seen.values()].every((n) => n === 1))
    assert.strictEqual(resultsSent.length, 200)
    assert.strictEqual(new Set(resultsSent.map((body) => JSON.parse(body).stepId)).size, 200)
    // every receive asked for at most 10 messages
    const receives = recorder.calls.filter((c) => c.command === "ReceiveMessageCommand")
    assert.isTrue(receives.every((c) => (c.input.MaxNumberOfMessages as number) <= 10))
    assert.deepStrictEqual(await server().counts(`${engine.prefix}-tasks-item`), { visible: 0, inFlight: 0 })
  })

  it("a worker killed in the middle of a step: a second worker completes the same task (same stepId), nothing is lost", async () => {
    const { engine, worker, transport } = setup()
    engine.register("wf", async (ctx, input) => ctx.step("slow-step", input))
    const script = fileURLToPath(new URL("../support/sqsWorkerProcess.ts", import.meta.url))
    const child = spawn(process.execPath, ["--import", "tsx", script, server().endpoint, engine.prefix, "2"], {
      stdio: ["ignore", "pipe", "inherit"]
    })
    const exited = new Promise((resolve) => child.once("exit", resolve))
    try {
      const firstStart = new Promise<{ started: string; attempt: number }>((resolve, reject) => {
        createInterface({ input: child.stdout! }).once("line", (line) => resolve(JSON.parse(line)))
        child.once("exit", (code) => reject(new Error(`the first worker exited (${code}) before starting the step`)))
      })
      const runId = await engine.start("wf", { n: 7 })
      const first = await firstStart
      assert.deepStrictEqual(await server().counts(`${engine.prefix}-tasks-slow-step`), { visible: 0, inFlight: 1 })
      // killed mid-step: no result, no delete, no give-back; SQS shows the task again once its visibility (2 s) lapses
      child.kill("SIGKILL")
      await exited

      const runs: Array<{ stepId: string; attempt: number }> = []
      worker.step("slow-step", async (input: { n: number }, ctx) => {
        runs.push({ stepId: ctx.stepId, attempt: ctx.attempt })
        return input.n * 6
      })
      const result = await whileServing(worker, transport, () => engine.waitForRun(runId, 30_000))
      assert.strictEqual(result.status, "completed")
      assert.strictEqual(result.output, 42)
      // the same task, redelivered by SQS: same stepId, same attempt — the duplicate run shows only there
      assert.deepStrictEqual(runs, [{ stepId: first.started, attempt: first.attempt }])
      assert.strictEqual(first.started, `${runId}:0`)
      assert.deepStrictEqual(await server().counts(`${engine.prefix}-tasks-slow-step`), { visible: 0, inFlight: 0 })
    } finally {
      child.kill("SIGKILL")
    }
  })

  it("a result over the results queue's MaximumMessageSize fails the step once, not retryable, saying why; the task is deleted", async () => {
    const prefix = sqsPrefix()
    // a results queue that takes at most 1 KiB (SQS's lowest MaximumMessageSize), made before engine and worker
    await server().client.send(
      new CreateQueueCommand({ QueueName: `${prefix}-results`, Attributes: { MaximumMessageSize: "1024" } })
    )
    // a short visibility, so that a task left undeleted would come back (and run again) within the test
    const { engine, worker, transport } = setup({ engine: { prefix }, sqs: { visibilityTimeout: "2 seconds" } })
    const checkpoint = await failsOnceWith(
      engine,
      worker,
      transport,
      "big-output",
      async () => "x".repeat(2_000),
      "result_too_large",
      // longer than the visibility timeout: an undeleted task would have come back by now
      () => new Promise((resolve) => setTimeout(resolve, 3_000))
    )
    assert.match(checkpoint.error.message, /is 2\d{3} bytes of JSON, more than the SQS results queue takes \(1024 bytes, its MaximumMessageSize\)/)
    assert.match(checkpoint.error.message, /external storage/)
    assert.deepStrictEqual(await server().counts(`${prefix}-tasks-big-output`), { visible: 0, inFlight: 0 })
  }, 30_000)

  it("a step name with '.' is refused at start, naming the step and the SQS rule", async () => {
    const { worker, transport } = setup()
    worker.step("payments.charge-card", async () => 1)
    worker.step("fine-name", async () => 1)
    const error = await worker.run(transport).then(
      () => assert.fail("run should fail"),
      (e: Error) => e
    )
    assert.strictEqual((error as { _tag?: string })._tag, "RegistrationError")
    assert.match(error.message, /step "payments\.charge-card"/)
    assert.match(error.message, /-tasks-payments\.charge-card", which SQS refuses \(it contains '\.'\)/)
    assert.match(error.message, /letters, digits, '-' and '_'/)
    assert.match(error.message, /taskQueueUrl/)
    assert.notMatch(error.message, /fine-name/)
  })

  it("a dotted step name works when engine and worker share a taskQueueUrl mapping", async () => {
    const prefix = sqsPrefix()
    const created = await server().client.send(new CreateQueueCommand({ QueueName: `${prefix}-charges` }))
    const urls: Record<string, string> = { "payments.charge-card": created.QueueUrl! }
    const { engine, worker, transport } = setup({
      engine: { prefix, transport: { taskQueueUrl: (group) => urls[group]! } },
      sqs: { taskQueueUrl: urls }
    })
    worker.step("payments.charge-card", async (input: { amount: number }, ctx) => `${ctx.group}:${input.amount}`)
    engine.register("checkout", async (ctx, input) => ctx.step("payments.charge-card", input))
    const result = await whileServing(worker, transport, () => engine.run("checkout", { amount: 5 }))
    assert.strictEqual(result.status, "completed")
    assert.strictEqual(result.output, "payments.charge-card:5")
  })

  it("with a marker, unmarked messages on the shared queue are left alone and results carry the marker", async () => {
    const { engine, worker, transport } = setup({
      engine: { transport: { marker: "durable" } },
      sqs: { marker: "durable" }
    })
    const calls: Array<unknown> = []
    worker.step("shared-queue", async (input: unknown) => {
      calls.push(input)
      return "done"
    })
    engine.register("wf", async (ctx) => ctx.step("shared-queue", { durable: true }))
    const queue = `${engine.prefix}-tasks-shared-queue`
    await server().client.send(new CreateQueueCommand({ QueueName: queue }))
    // a legacy producer's message, without the marker, on the same queue
    await server().client.send(
      new SendMessageCommand({ QueueUrl: await server().queueUrl(queue), MessageBody: JSON.stringify({ legacy: true }) })
    )
    const running = worker.run(transport)
    // the engine only accepts results that carry the marker, so completion proves it is on them
    const result = await engine.run("wf", {})
    await worker.stop()
    await running
    assert.strictEqual(result.status, "completed")
    assert.deepStrictEqual(calls, [{ durable: true }])
    const snapshot = await server().inspect(queue)
    const left = [...snapshot!.ready, ...snapshot!.inflight.map((i) => i.message)]
    assert.deepStrictEqual(left.map((m) => JSON.parse(m.body)), [{ legacy: true }])
  })
})
