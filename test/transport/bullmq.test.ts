/**
 * The BullMQ transport's own rules, on the real Redis but a `TestClock`-driven runtime: a reply goes
 * out with the acknowledgement of its job, and a reply that Redis refused while it ran the
 * acknowledgement is written again (at once, then from 100 ms, doubling) until it is, with nothing run twice and the
 * next job given back.
 */
import { assert, describe, it } from "@effect/vitest"
import { Queue } from "bullmq"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as TestClock from "effect/TestClock"
import { Redis } from "ioredis"
import * as BullMQTransport from "../../src/transport/BullMQTransport.js"
import type { Delivery, WorkerDescription } from "../../src/transport/Transport.js"
import { deletePrefixKeys, redisConnection, uniquePrefix } from "../support/engine.js"

/** Lets forked fibers run until they block. */
const settle = Effect.repeatN(Effect.yieldNow(), 50)

/** Waits on the wall clock for Redis I/O (not for a timing rule): re-checks every 10 ms, up to 10 s. */
const until = (what: string, check: () => Promise<boolean>) =>
  Effect.promise(async () => {
    for (let i = 0; i < 1_000; i++) {
      if (await check()) return
      await new Promise((resolve) => setTimeout(resolve, 10))
    }
    assert.fail(`timed out waiting for ${what}`)
  })

/** A wall-clock pause, for asserting that nothing happens meanwhile. */
const pause = (ms: number) => Effect.promise(() => new Promise((resolve) => setTimeout(resolve, ms)))

const description: WorkerDescription = {
  workerId: "worker-a",
  buildId: undefined,
  steps: ["work"],
  workflows: [],
  durableWorkflows: [],
  startedAt: 0,
  pollTimeout: Duration.seconds(1),
  status: Effect.succeed({ runtime: "node", concurrency: { mode: "fixed", limit: 1 }, inFlight: 0 })
}

/** A fresh prefix with `tasks` step tasks waiting, a Redis client, and a command monitor; keys deleted at the end. */
const fixture = (tasks: number) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const prefix = uniquePrefix("edwb")
      const redis = new Redis(redisConnection())
      const queue = new Queue(`${prefix}-tasks-work`, { connection: redisConnection() })
      for (let seq = 0; seq < tasks; seq++) {
        const runId = `run-${prefix}`
        const task = { runId, seq, name: "work", stepId: `${runId}:${seq}`, group: "work", attempt: 1, transport: "default" }
        await queue.add("task", task, { removeOnComplete: true })
      }
      await queue.close()
      // what the scripts do, in the order Redis runs it: adding a result job takes the next id of the
      // results queue (once per attempt that ran, whether or not it failed), acknowledging a job
      // takes it off the task queue's active list
      const monitor = await redis.monitor()
      const resultAdds: Array<number> = []
      const order: Array<"reply" | "ack"> = []
      monitor.on("monitor", (_time: string, args: Array<string>) => {
        const command = args[0]?.toLowerCase()
        if (command === "incr" && args[1] === `bull:${prefix}-results:id`) {
          resultAdds.push(Date.now())
          order.push("reply")
        } else if (command === "lrem" && args[1] === `bull:${prefix}-tasks-work:active`) order.push("ack")
      })
      return { prefix, redis, monitor, resultAdds, order }
    }),
    ({ monitor, prefix, redis }) =>
      Effect.promise(async () => {
        monitor.disconnect()
        await deletePrefixKeys(redis, prefix)
        await redis.quit()
      })
  )

const reply = (delivery: Delivery) => {
  const payload = delivery.payload as { runId: string; seq: number; stepId: string }
  return {
    _tag: "StepResult" as const,
    result: { runId: payload.runId, seq: payload.seq, stepId: payload.stepId, status: "completed" as const, output: payload.seq }
  }
}

describe("BullMQ transport on a TestClock", () => {
  it.scoped("a reply refused while its job was acknowledged is written again at once, after 100 ms, then 200 ms; the next job is given back", () =>
    Effect.gen(function*() {
      const { prefix, redis, resultAdds } = yield* fixture(2)
      const transport = BullMQTransport.make({ url: `redis://${redisConnection().host}:${redisConnection().port}`, prefix })
      const poller = (yield* transport.register(description)).pollers[0]!
      const [first] = yield* poller.poll(1)
      assert.isDefined(first)
      // the results queue's id counter is not a number: adding a result fails inside its script,
      // while the acknowledgement (other keys) goes through
      yield* Effect.promise(() => redis.set(`bull:${prefix}-results:id`, "not-a-number"))
      const answering = yield* Effect.fork(first!.completeAndTakeNext!(reply(first!)))

      // the job is acknowledged, the next one taken with it is back in the queue, and the reply is
      // written again at once (refused again)
      yield* until("the first job to be acknowledged", async () =>
        (await redis.llen(`bull:${prefix}-tasks-work:active`)) === 0 && resultAdds.length === 2)
      assert.strictEqual(yield* Effect.promise(() => redis.llen(`bull:${prefix}-tasks-work:wait`)), 1)
      assert.strictEqual(yield* Effect.promise(() => redis.exists(`bull:${prefix}-tasks-work:1`)), 0)

      // and again 100 ms later, still refused
      yield* settle
      yield* TestClock.adjust("99 millis")
      yield* settle
      yield* pause(50)
      assert.strictEqual(resultAdds.length, 2)
      yield* TestClock.adjust("1 millis")
      yield* until("the third attempt", async () => resultAdds.length === 3)
      yield* pause(50)

      // once the results queue is sound again, the next attempt (200 ms later) writes it
      yield* Effect.promise(() => redis.del(`bull:${prefix}-results:id`))
      yield* settle
      yield* TestClock.adjust("199 millis")
      yield* settle
      yield* pause(50)
      assert.strictEqual(resultAdds.length, 3)
      assert.strictEqual(yield* Effect.promise(() => redis.llen(`bull:${prefix}-results:wait`)), 0)
      yield* TestClock.adjust("1 millis")
      // no next job is handed over: it went back to the queue, where the next poll finds it
      assert.isTrue(Option.isNone(yield* Fiber.join(answering)))
      assert.strictEqual(resultAdds.length, 4)
      const written = yield* Effect.promise(() => redis.lrange(`bull:${prefix}-results:wait`, 0, -1))
      assert.strictEqual(written.length, 1)
      const data = JSON.parse((yield* Effect.promise(() => redis.hget(`bull:${prefix}-results:${written[0]}`, "data")))!)
      assert.deepStrictEqual(data, reply(first!).result)

      const [second] = yield* poller.poll(1)
      assert.strictEqual((second!.payload as { seq: number }).seq, 1)
      assert.isTrue(Option.isNone(yield* second!.completeAndTakeNext!(reply(second!))))
      assert.strictEqual(yield* Effect.promise(() => redis.llen(`bull:${prefix}-results:wait`)), 2)
    }))

  it.scoped("a reply goes out with its job's acknowledgement, the reply first, and the next job comes with it", () =>
    Effect.gen(function*() {
      const { order, prefix, redis, resultAdds } = yield* fixture(2)
      const transport = BullMQTransport.make({ url: `redis://${redisConnection().host}:${redisConnection().port}`, prefix })
      const poller = (yield* transport.register(description)).pollers[0]!
      const [first] = yield* poller.poll(1)
      const next = yield* first!.completeAndTakeNext!(reply(first!))
      assert.isTrue(Option.isSome(next))
      assert.strictEqual((next.pipe(Option.getOrThrow).payload as { seq: number }).seq, 1)
      assert.isTrue(Option.isNone(yield* Option.getOrThrow(next).completeAndTakeNext!(reply(Option.getOrThrow(next)))))
      yield* until("both answers to reach the monitor", async () => order.length === 4 && resultAdds.length === 2)
      assert.deepStrictEqual(order, ["reply", "ack", "reply", "ack"])
      assert.strictEqual(yield* Effect.promise(() => redis.llen(`bull:${prefix}-results:wait`)), 2)
    }))
})
