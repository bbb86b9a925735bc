import { Queue } from "bullmq"
import type { ChildProcess } from "node:child_process"
import { randomUUID } from "node:crypto"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { redis, Worker } from "../../src/promise.js"
import { freePort, startRedisServer } from "../support/local.js"


describe("BullMQ transport with several brokers", () => {
  let second: ChildProcess | undefined
  let port = 0
  beforeAll(async () => {
    port = await freePort()
    second = await startRedisServer(port)
  })
  afterAll(() => {
    second?.kill("SIGKILL")
  })

  it("consumes from every broker and answers on the broker the task's `transport` names", async () => {
    const prefix = `edw-${randomUUID().slice(0, 8)}`
    const main = { host: "127.0.0.1", port: 6379 }
    const other = { host: "127.0.0.1", port }
    const worker = new Worker({ handleSignals: false, logLevel: "None" })
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
})
