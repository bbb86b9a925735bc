import { Queue } from "bullmq"
import { randomUUID } from "node:crypto"
import { Redis } from "ioredis"
import { assert, describe, it } from "vitest"
import { redis, Worker } from "../../src/promise.js"
import { ownRedisServer } from "../support/ownRedis.js"


describe("BullMQ transport with several brokers", () => {
  const second = ownRedisServer()

  /** A fresh prefix on broker A (the local Redis) and B (the one started here), and a quiet worker. */
  const twoBrokers = () => ({
    prefix: `edw-${randomUUID().slice(0, 8)}`,
    main: { host: "127.0.0.1", port: 6379 },
    other: { host: "127.0.0.1", port: second.port },
    worker: new Worker({ handleSignals: false, logLevel: "None" })
  })

  it("consumes from every broker and answers on the broker the task's `transport` names", async () => {
    const { prefix, main, other, worker } = twoBrokers()
    worker.step("echo", (input: unknown) => input)
    const running = worker.run(redis({ prefix, brokerId: "a", brokers: { b: { connection: other } } }))
    const task = (runId: string, transport: string) => ({
      runId,
      seq: 0,
      name: "echo",
      stepId: `${runId}:0`,
      group: "echo",
      input: runId,
      attempt: 1,
      transport
    })
    const tasksOnA = new Queue(`${prefix}-tasks-echo`, { connection: main })
    const tasksOnB = new Queue(`${prefix}-tasks-echo`, { connection: other })
    const resultsOnA = new Queue(`${prefix}-results`, { connection: main })
    const resultsOnB = new Queue(`${prefix}-results`, { connection: other })
    try {
      await tasksOnA.add("task", task("from-a-for-a", "a"))
      await tasksOnA.add("task", task("from-a-for-b", "b"))
      await tasksOnB.add("task", task("from-b-for-b", "b"))
      await tasksOnB.add("task", task("from-b-unknown", "zzz"))
      const runIds = async (queue: Queue) => (await queue.getWaiting()).map((job) => job.data.runId as string).sort()
      for (let i = 0; i < 200 && (await resultsOnA.count()) + (await resultsOnB.count()) < 4; i++) {
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
      assert.deepStrictEqual(await runIds(resultsOnA), ["from-a-for-a"])
      assert.deepStrictEqual(await runIds(resultsOnB), ["from-a-for-b", "from-b-for-b", "from-b-unknown"])
    } finally {
      await worker.stop()
      await running
      for (const queue of [tasksOnA, tasksOnB, resultsOnA, resultsOnB]) {
        await queue.obliterate({ force: true })
        await queue.close()
      }
    }
  })

  it("reports a task job failed at BullMQ's level on the broker the task's `transport` names, as its answer would go", async () => {
    const { prefix, main, other, worker } = twoBrokers()
    worker.step("doomed", (input: unknown) => input)
    const tasksOnA = new Queue(`${prefix}-tasks-doomed`, { connection: main })
    const resultsOnA = new Queue(`${prefix}-results`, { connection: main })
    const resultsOnB = new Queue(`${prefix}-results`, { connection: other })
    // a peer takes the task on A (its engine on B), then dies: BullMQ fails the job on A
    const { Worker: BullWorker } = await import("bullmq")
    const peer = new BullWorker(`${prefix}-tasks-doomed`, undefined, { connection: { ...main, maxRetriesPerRequest: null }, autorun: false })
    await tasksOnA.add("task", { runId: "r-b", seq: 0, name: "doomed", stepId: "r-b:0", group: "doomed", input: 1, attempt: 1, transport: "b" })
    const job = await peer.getNextJob("peer-token", { block: true })
    assert.isDefined(job)
    const running = worker.run(redis({ prefix, brokerId: "a", brokers: { b: { connection: other } }, stalledIntervalMs: 200 }))
    try {
      await new Promise((resolve) => setTimeout(resolve, 300))
      await job!.moveToFailed(new Error("worker process crashed"), "peer-token")
      for (let i = 0; i < 200 && (await resultsOnB.count()) === 0; i++) await new Promise((resolve) => setTimeout(resolve, 20))
      const onB = (await resultsOnB.getWaiting()).map((reply) => [reply.data.runId, reply.data.status, reply.data.error?.message])
      assert.deepStrictEqual(onB, [["r-b", "failed", "remote step worker failed: worker process crashed"]])
      assert.strictEqual(await resultsOnA.count(), 0)
    } finally {
      await worker.stop()
      await running
      await peer.close()
      for (const queue of [tasksOnA, resultsOnA, resultsOnB]) {
        await queue.obliterate({ force: true })
        await queue.close()
      }
    }
  })

  it("a broker that does not answer holds its own heartbeats only: the others' keys are still written every interval", async () => {
    const { prefix, main, other } = twoBrokers()
    const worker = new Worker({ handleSignals: false, logLevel: "None", heartbeatIntervalMs: 300 })
    worker.step("echo", (input: unknown) => input)
    const running = worker.run(redis({ prefix, brokerId: "a", brokers: { b: { connection: other } } }))
    const a = new Redis(main)
    const b = new Redis(other)
    try {
      const key = `${prefix}-worker-heartbeat:echo:${worker.id}`
      const beatOnA = async () => JSON.parse((await a.get(key)) ?? "{}").ts as number | undefined
      for (let i = 0; i < 200 && (await beatOnA()) === undefined; i++) await new Promise((r) => setTimeout(r, 10))
      // broker B keeps the connection and answers nothing for 3 s (its own server: no other test waits on it)
      await b.call("CLIENT", "PAUSE", "3000", "ALL")
      const seen = new Set<number>()
      const end = Date.now() + 2_500
      while (Date.now() < end) {
        const ts = await beatOnA()
        if (ts !== undefined) seen.add(ts)
        await new Promise((r) => setTimeout(r, 50))
      }
      // a beat every 300 ms: B's silence held none of them to A
      assert.isAtLeast(seen.size, 5, `beats written to broker A while B was paused: ${seen.size}`)
    } finally {
      await worker.stop()
      await running
      await a.quit()
      b.disconnect()
    }
  })
})
