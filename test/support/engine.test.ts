import { assert, describe, it } from "@effect/vitest"
import type { StepCheckpoint } from "@dudousxd/nestjs-durable-core"
import { type Job, Queue, Worker } from "bullmq"
import * as Effect from "effect/Effect"
import { Redis } from "ioredis"
import * as Descriptor from "../../src/transport/bullmq/internal/descriptor.js"
import * as Naming from "../../src/transport/bullmq/internal/naming.js"
import { Engine, engineHarness, type EngineHarness, prefixKeys, redisConnection, startEngine } from "./engine.js"

interface Captured {
  readonly name: string
  readonly data: string
  readonly opts: Record<string, unknown>
}

/**
 * A minimal foreign worker: a plain BullMQ Worker on `<P>-tasks-<token>` that answers every task with
 * one `result` job on `<P>-results`, built only from the wire facts.
 */
const handWrittenWorker = (
  harness: EngineHarness,
  token: string,
  answer: (task: Record<string, unknown>) => Record<string, unknown>
) => {
  const connection = { ...harness.connection, maxRetriesPerRequest: null }
  const captured: Array<Captured> = []
  const results = new Queue(Naming.resultsQueue(harness.effectivePrefix), { connection })
  const worker = new Worker(
    Naming.tasksQueue(harness.effectivePrefix, token),
    async (job: Job) => {
      const task = job.data as Record<string, unknown>
      captured.push({ name: job.name, data: JSON.stringify(job.data), opts: { ...job.opts } })
      await results.add(
        Naming.JobName.result,
        { runId: task.runId, seq: task.seq, stepId: task.stepId, ...answer(task) },
        Naming.resultJobOptions
      )
    },
    { connection }
  )
  return {
    captured,
    close: async () => {
      await worker.close()
      await results.close()
    }
  }
}

const plain = (checkpoint: StepCheckpoint) => JSON.parse(JSON.stringify(checkpoint)) as Record<string, unknown>

describe("engine harness (real engine on Redis)", () => {
  it("runs a workflow whose step is served by a hand-written BullMQ worker", async () => {
    const harness = await startEngine()
    const stepName = "billing:charge-card"
    const token = Naming.routingToken(stepName, "acme")
    assert.strictEqual(token, "billing-charge-card@acme")
    const pickedUpAt = 1_700_000_000_123
    const foreign = handWrittenWorker(harness, token, (task) => ({
      status: "completed",
      output: { chargeId: `ch_${(task.input as { amount: number }).amount}` },
      startedAt: pickedUpAt
    }))
    try {
      harness.register("checkout", async (ctx, input) => {
        const { amount } = input as { amount: number }
        const charge = await ctx.step<{ chargeId: string }>(stepName, { amount }, { priority: 9 })
        return charge.chargeId
      })
      const runId = `r-${harness.prefix}`
      const result = await harness.run("checkout", { amount: 99 }, { runId, namespace: "acme" })
      assert.strictEqual(result.runId, runId)
      assert.strictEqual(result.status, "completed")
      assert.strictEqual(result.output, "ch_99")

      assert.strictEqual(foreign.captured.length, 1)
      const [task] = foreign.captured
      assert.strictEqual(task!.name, "task")
      assert.strictEqual(
        task!.data,
        `{"runId":"${runId}","seq":0,"name":"billing:charge-card","stepId":"${runId}:0","group":"billing-charge-card@acme",` +
          `"input":{"amount":99},"priority":9,"attempt":1,"transport":"default"}`
      )
      for (const [key, value] of Object.entries(Naming.taskJobOptions(9))) {
        assert.deepStrictEqual(task!.opts[key], value, `job option ${key}`)
      }
      assert.strictEqual(task!.opts.attempts, 0)

      const checkpoints = await harness.checkpoints(runId)
      assert.strictEqual(checkpoints.length, 1)
      const checkpoint = checkpoints[0]!
      assert.strictEqual(checkpoint.runId, runId)
      assert.strictEqual(checkpoint.seq, 0)
      assert.strictEqual(checkpoint.name, stepName)
      assert.strictEqual(checkpoint.stepId, `${runId}:0`)
      assert.strictEqual(checkpoint.status, "completed")
      assert.deepStrictEqual(checkpoint.input, { amount: 99 })
      assert.deepStrictEqual(checkpoint.output, { chargeId: "ch_99" })
      assert.strictEqual(checkpoint.attempts, 1)
      assert.strictEqual(checkpoint.workerGroup, token)
      assert.instanceOf(checkpoint.startedAt, Date)
      assert.strictEqual(checkpoint.startedAt.getTime(), pickedUpAt)
      assert.deepStrictEqual(await harness.checkpoint(runId, 0), checkpoint)
      assert.strictEqual(checkpoint.kind, "remote")
      assert.deepStrictEqual(Object.keys(plain(checkpoint)).sort(), [
        "attempts",
        "enqueuedAt",
        "finishedAt",
        "input",
        "kind",
        "name",
        "output",
        "runId",
        "seq",
        "startedAt",
        "status",
        "stepId",
        "workerGroup"
      ])

      // Result jobs were added with removeOnComplete/removeOnFail: the engine consumed them and nothing stays.
      const results = new Queue(Naming.resultsQueue(harness.effectivePrefix), { connection: harness.connection })
      try {
        const counts = () => results.getJobCounts("wait", "active", "completed", "failed")
        const settledBy = Date.now() + 2_000
        while (Object.values(await counts()).some((n) => n > 0) && Date.now() < settledBy) {
          await new Promise((r) => setTimeout(r, 20))
        }
        assert.deepStrictEqual(await counts(), { wait: 0, active: 0, completed: 0, failed: 0 })
      } finally {
        await results.close()
      }
    } finally {
      await foreign.close()
      await harness.close()
    }
  })

  it("fails the run on a non-retryable failed result and keeps the error on the checkpoint", async () => {
    const harness = await startEngine()
    const token = Naming.routingToken("inventory.reserve")
    const foreign = handWrittenWorker(harness, token, () => ({
      status: "failed",
      error: { message: "out of stock", code: "OOS", retryable: false },
      startedAt: Date.now()
    }))
    try {
      harness.register("reserve", async (ctx) => ctx.step("inventory.reserve", { sku: "x" }, { retries: 3 }))
      const runId = `r-fail-${harness.prefix}`
      const result = await harness.run("reserve", {}, { runId })
      assert.strictEqual(result.status, "failed")
      assert.include(result.error?.message ?? "", "out of stock")
      assert.strictEqual(foreign.captured.length, 1)
      const checkpoint = await harness.checkpoint(runId, 0)
      assert.strictEqual(checkpoint?.status, "failed")
      assert.deepStrictEqual(checkpoint?.error, { message: "out of stock", code: "OOS", retryable: false })
    } finally {
      await foreign.close()
      await harness.close()
    }
  })

  it("folds a transport namespace into the prefix of every queue", async () => {
    const harness = await startEngine({ transportNamespace: "dev-alice" })
    assert.strictEqual(harness.effectivePrefix, Naming.names({ prefix: harness.prefix, namespace: "dev-alice" }).prefix)
    assert.strictEqual(harness.effectivePrefix, `${harness.prefix}-dev-alice`)
    const foreign = handWrittenWorker(harness, Naming.routingToken("ns:step"), () => ({
      status: "completed",
      output: 7,
      startedAt: Date.now()
    }))
    try {
      harness.register("namespaced", async (ctx) => ctx.step("ns:step", null))
      const result = await harness.run("namespaced", {}, { timeoutMs: 10_000 })
      assert.strictEqual(result.status, "completed")
      assert.strictEqual(result.output, 7)
      assert.strictEqual(JSON.parse(foreign.captured[0]!.data).group, "ns-step")
      assert.include(await harness.keys(), `bull:${harness.prefix}-dev-alice-tasks-ns-step:meta`)
    } finally {
      await foreign.close()
      await harness.close()
    }
  })

  it("publishes {kind:cancel} on <P>-control when a run is cancelled", async () => {
    const harness = await startEngine()
    const subscriber = new Redis({ ...harness.connection, lazyConnect: true })
    try {
      await subscriber.connect()
      const messages: Array<string> = []
      subscriber.on("message", (channel: string, message: string) => {
        if (channel === Naming.controlChannel(harness.effectivePrefix)) messages.push(message)
      })
      await subscriber.subscribe(Naming.controlChannel(harness.effectivePrefix))

      harness.register("waits", async (ctx) => ctx.step("nobody.serves.this", {}))
      const runId = `r-cancel-${harness.prefix}`
      await harness.start("waits", {}, { runId })
      const pending = await harness.waitForCheckpoint(runId, 0, { status: "pending" })
      assert.strictEqual(pending.workerGroup, "nobody.serves.this")

      const cancelled = await harness.cancel(runId)
      assert.strictEqual(cancelled?.status, "cancelled")
      assert.strictEqual((await harness.waitForRun(runId)).status, "cancelled")

      const deadline = Date.now() + 5_000
      const isCancel = (m: string) => (JSON.parse(m) as { kind?: string }).kind === "cancel"
      while (!messages.some(isCancel) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20))
      const cancels = messages.filter(isCancel)
      assert.deepStrictEqual(cancels, [`{"kind":"cancel","runId":"${runId}","from":"${harness.instanceId}"}`])
    } finally {
      subscriber.disconnect()
      await harness.close()
    }
  })

  it("routes by a descriptor built here and reads the heartbeat value written here", async () => {
    const harness = await startEngine()
    const stepName = "fx:convert"
    const token = Naming.routingToken(stepName)
    const instanceId = "ts-edw-test-1"
    const descriptor = Descriptor.buildDescriptor({ instanceId, steps: [stepName], startedAt: Date.now() })
    const status: Descriptor.WorkerStatus = { runtime: "node", concurrency: { mode: "fixed", limit: 4 }, inFlight: 0 }
    const ts = Date.now()
    const P = harness.effectivePrefix
    await harness.redis.set(Naming.workerDescriptorKey(P, token, instanceId), JSON.stringify(descriptor), "EX", 35)
    await harness.redis.set(
      Naming.workerHeartbeatKey(P, token, instanceId),
      Descriptor.heartbeatValue({ ts, status, descriptorHash: Descriptor.descriptorHash(descriptor) }),
      "EX",
      35
    )
    const foreign = handWrittenWorker(harness, token, () => ({ status: "completed", output: "converted", startedAt: Date.now() }))
    try {
      assert.deepStrictEqual(await harness.transport.readWorkerDescriptors(token), [descriptor] as unknown)
      const health = await harness.transport.groupHealth(token)
      assert.strictEqual(health.liveWorkers.length, 1)
      assert.strictEqual(health.liveWorkers[0]!.instanceId, instanceId)
      assert.strictEqual(health.liveWorkers[0]!.lastBeatAt, ts)
      assert.deepStrictEqual(health.liveWorkers[0]!.status as unknown, status)

      // A v1 worker advertises cancellation and saga, so the engine dispatches to it...
      harness.register("capable", async (ctx) => ctx.step(stepName, {}, { requires: ["cancellation", "saga"] }))
      const done = await harness.run("capable", {}, { timeoutMs: 10_000 })
      assert.strictEqual(done.status, "completed")
      assert.strictEqual(done.output, "converted")
      assert.strictEqual(foreign.captured.length, 1)

      // ...but parks a step that needs a capability the descriptor does not advertise.
      harness.register("incapable", async (ctx) => ctx.step(stepName, {}, { requires: ["search-attr-v2"] }))
      const runId = await harness.start("incapable", {})
      const blockedBy = Date.now() + 10_000
      while ((await harness.getRun(runId))?.status !== "blocked" && Date.now() < blockedBy) {
        await new Promise((r) => setTimeout(r, 20))
      }
      assert.strictEqual((await harness.getRun(runId))?.status, "blocked")
      assert.strictEqual(foreign.captured.length, 1)
      await harness.cancel(runId)
    } finally {
      await foreign.close()
      await harness.close()
    }
  })

  it("deletes every key of its prefix on close", async () => {
    const harness = await startEngine()
    const prefix = harness.prefix
    const inspector = new Redis({ ...harness.connection })
    try {
      harness.register("waits", async (ctx) => ctx.step("left.pending", {}))
      const runId = `r-keys-${prefix}`
      await harness.start("waits", {}, { runId })
      await harness.waitForCheckpoint(runId, 0, { status: "pending" })
      // the engine records the pending checkpoint before it dispatches the task: give the dispatch
      // up to 5 s to reach Redis
      let before = await harness.keys()
      for (let i = 0; i < 500 && !before.includes(`bull:${prefix}-tasks-left.pending:meta`); i++) {
        await new Promise((resolve) => setTimeout(resolve, 10))
        before = await harness.keys()
      }
      assert.include(before, `bull:${prefix}-tasks-left.pending:meta`)
      assert.isTrue(before.some((key) => key.startsWith(`bull:${prefix}-results:`)))
      await harness.close()
      await harness.close()
      assert.deepStrictEqual(await prefixKeys(inspector, prefix), [])
    } finally {
      inspector.disconnect()
    }
  })

  it.effect("is a scoped resource that cleans up when the scope closes", () =>
    Effect.gen(function*() {
      const prefix = yield* Effect.scoped(
        Effect.gen(function*() {
          const harness = yield* engineHarness({ namespace: "acme" })
          harness.register("noop", async () => "done")
          const result = yield* Effect.promise(() => harness.run("noop", {}))
          assert.strictEqual(result.status, "completed")
          assert.strictEqual(result.output, "done")
          return harness.prefix
        })
      )
      const inspector = new Redis({ ...redisConnection(), lazyConnect: true })
      const keys = yield* Effect.promise(async () => {
        await inspector.connect()
        try {
          return await prefixKeys(inspector, prefix)
        } finally {
          inspector.disconnect()
        }
      })
      assert.deepStrictEqual(keys, [])
    }))

  it.effect("is provided as a service layer", () =>
    Effect.gen(function*() {
      const harness = yield* Engine
      harness.register("echo", async (_ctx, input) => input)
      const result = yield* Effect.promise(() => harness.run("echo", { x: 1 }))
      assert.deepStrictEqual(result.output, { x: 1 })
    }).pipe(Effect.provide(Engine.layer())))
})
