/**
 * A stop while the worker's announcement (the MULTI that writes its descriptor and heartbeat keys)
 * is in flight, against a real Redis of the test's own: the connection is cut right after Redis ran
 * it, before its reply came back, and the stop comes meanwhile. The keys it wrote must not be left
 * to expire: the client sends it again once it reconnects, its answer is waited for, and the
 * registration it made is deleted.
 */
import { assert, describe, it } from "vitest"
import { Redis } from "ioredis"
import { redis, Worker } from "../../src/promise.js"
import { ownRedisBehindProxy } from "../support/ownRedis.js"

const redisServer = ownRedisBehindProxy()

describe("BullMQ: a stop while the worker's announcement is in flight", () => {
  it("deletes the keys the announcement wrote: no registration is left to expire", async () => {
    const workerId = "late-announcement-worker"
    const direct = new Redis({ port: redisServer.port, host: "127.0.0.1", lazyConnect: true })
    await direct.connect()
    try {
      const worker = new Worker({ handleSignals: false, logLevel: "Error", workerId, interruptTimeoutMs: 5_000 })
      worker.step("echo", async (input: number) => input)
      // the first command that names the worker is its announcement: Redis runs it, its reply is lost
      redisServer.proxy.arm(workerId)
      const running = worker.run(redis({ url: `redis://127.0.0.1:${redisServer.proxy.port}`, prefix: "late" }))
      for (let i = 0; i < 1_000 && redisServer.proxy.cuts() === 0; i++) await new Promise((resolve) => setTimeout(resolve, 5))
      assert.strictEqual(redisServer.proxy.cuts(), 1, "the announcement reached Redis")
      assert.isNotEmpty(await direct.keys(`*${workerId}*`), "Redis ran it")
      await worker.stop()
      await running.catch(() => undefined)
      assert.deepStrictEqual(await direct.keys(`*${workerId}*`), [], "no key of the worker left behind")
    } finally {
      direct.disconnect()
    }
  })
})
