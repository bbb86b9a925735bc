/**
 * Replies of unknown outcome on BullMQ, against a real Redis of the test's own and the real
 * nestjs-durable engine: the worker's connection is cut right after an answer script reached Redis
 * and ran, before its reply came back. The client sends the script again once it reconnects; the
 * answer must be recognised as applied (no second reply, no "will be redelivered"), and the job that
 * first run took under the worker's lock must be served at once, not left to its lock and the
 * stalled check (30 s here).
 */
import { assert, describe, it, vi } from "vitest"
import { Worker as BullWorker } from "bullmq"
import { Redis } from "ioredis"
import { redis, Worker } from "../../src/promise.js"
import { ownRedisBehindProxy } from "../support/ownRedis.js"
import { startEngine } from "../support/engine.js"

const redisServer = ownRedisBehindProxy()

/** Everything the worker logged, as text. */
const captureLogs = () => {
  const lines: Array<string> = []
  const spies = (["log", "info", "warn", "error"] as const).map((level) =>
    vi.spyOn(console, level).mockImplementation((...args: Array<unknown>) => {
      lines.push(args.map((arg) => typeof arg === "string" ? arg : JSON.stringify(arg)).join(" "))
    })
  )
  return { lines, restore: () => spies.forEach((spy) => spy.mockRestore()) }
}

describe("BullMQ: an answer whose reply was lost with the connection", () => {
  it("is recognised as applied when sent again, and the job it took is served at once", async () => {
    const engine = await startEngine({ connection: { host: "127.0.0.1", port: redisServer.port } })
    const logs = captureLogs()
    try {
      // one at a time, so each answer takes the next waiting job with it
      const worker = new Worker({ handleSignals: false, logLevel: "Info", concurrency: 1 })
      const calls = new Map<number, number>()
      worker.step("echo", async (input: { i: number }) => {
        calls.set(input.i, (calls.get(input.i) ?? 0) + 1)
        return input.i
      })
      engine.register("wf", async (ctx, input) => ctx.step("echo", input))
      const runs = await Promise.all([1, 2, 3].map((i) => engine.start("wf", { i })))
      // the first answer (the only scripts that name an answer's record, sent in full the first time) loses its reply
      redisServer.proxy.arm(":answered")
      const running = worker.run(
        redis({ url: `redis://127.0.0.1:${redisServer.proxy.port}`, prefix: engine.prefix, lockDurationMs: 30_000, stalledIntervalMs: 30_000 })
      )
      const started = Date.now()
      // well under the lock duration: a job left to its lock would take 30 s or more
      const results = await Promise.all(runs.map((runId) => engine.waitForRun(runId, { timeoutMs: 10_000 })))
      const elapsed = Date.now() - started
      await worker.stop()
      await running

      assert.strictEqual(redisServer.proxy.cuts(), 1)
      assert.deepStrictEqual(results.map((r) => [r.status, r.output]), [["completed", 1], ["completed", 2], ["completed", 3]])
      assert.deepStrictEqual([...calls.entries()].sort(), [[1, 1], [2, 1], [3, 1]])
      assert.isBelow(elapsed, 10_000)
      const text = logs.lines.join("\n")
      assert.match(text, /had been applied by an earlier send of it whose outcome the worker had not learnt \(the connection to Redis lost meanwhile, say\); it was not written again, and job \S+ it took is served now/)
      assert.notMatch(text, /will be redelivered/)
      // one reply per run reached the engine: the results queue got exactly three
      const replies = await engine.redis.get(`bull:${engine.effectivePrefix}-results:id`)
      assert.strictEqual(replies, "3")
    } finally {
      logs.restore()
      await engine.close()
    }
  }, 30_000)

  it("a job left active under this worker's lock that no task of it serves is given back once the connection is back", async () => {
    const engine = await startEngine({ connection: { host: "127.0.0.1", port: redisServer.port } })
    const logs = captureLogs()
    const taker = new BullWorker(`${engine.effectivePrefix}-tasks-echo`, undefined, {
      connection: { host: "127.0.0.1", port: redisServer.port },
      autorun: false
    })
    const client = new Redis({ host: "127.0.0.1", port: redisServer.port })
    try {
      // one slot, held by a first task until the orphan is made: the worker takes nothing meanwhile
      const worker = new Worker({ handleSignals: false, logLevel: "Info", workerId: "reconcile-w1", concurrency: 1 })
      let calls = 0
      let release!: () => void
      const held = new Promise<void>((resolve) => (release = resolve))
      worker.step("echo", async (input: { i: number }) => {
        calls++
        if (input.i === 1) await held
        return input.i
      })
      engine.register("wf", async (ctx, input) => ctx.step("echo", input))
      const running = worker.run(
        redis({ url: `redis://127.0.0.1:${redisServer.proxy.port}`, prefix: engine.prefix, lockDurationMs: 30_000, stalledIntervalMs: 30_000 })
      )
      const first = await engine.start("wf", { i: 1 })
      // the lock of the job it serves names this registration's tokens (its worker id, a nonce, a counter)
      const queue = `bull:${engine.effectivePrefix}-tasks-echo`
      let token: string | null = null
      for (let i = 0; i < 500 && token === null; i++) {
        const [active] = await client.lrange(`${queue}:active`, 0, -1)
        token = active === undefined ? null : await client.get(`${queue}:${active}:lock`)
        if (token === null) await new Promise((resolve) => setTimeout(resolve, 10))
      }
      assert.match(token!, /^reconcile-w1:[0-9a-f]+\.\d+$/)
      const ours = token!.slice(0, token!.lastIndexOf(".") + 1)
      // what a take applied but whose reply was lost leaves: a job active under a token of this
      // registration that no task of it serves; its lock runs 30 s
      const runId = await engine.start("wf", { i: 5 })
      let orphan = await taker.getNextJob(`${ours}900001`, { block: false })
      for (let i = 0; i < 100 && orphan === undefined; i++) {
        await new Promise((resolve) => setTimeout(resolve, 20))
        orphan = await taker.getNextJob(`${ours}900001`, { block: false })
      }
      assert.isDefined(orphan)
      release()
      assert.strictEqual((await engine.waitForRun(first, { timeoutMs: 10_000 })).status, "completed")
      const cut = Date.now()
      redisServer.proxy.cutAll()
      const result = await engine.waitForRun(runId, { timeoutMs: 10_000 })
      const elapsed = Date.now() - cut
      await worker.stop()
      await running

      assert.strictEqual(result.status, "completed")
      assert.strictEqual(result.output, 5)
      assert.strictEqual(calls, 2)
      assert.isBelow(elapsed, 5_000)
      assert.match(logs.lines.join("\n"), new RegExp(`job ${orphan!.id} on \\S+ was active under this worker's lock with no task of it serving it`))
    } finally {
      logs.restore()
      await taker.close()
      await client.quit()
      await engine.close()
    }
  }, 30_000)
})
