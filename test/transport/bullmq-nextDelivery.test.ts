/**
 * The BullMQ transport's delivery of the job an answer hands over, on the real Redis: only a job that
 * cannot be read (see bullmq.test.ts) is failed as such; a bug while the delivery is made (here, the
 * protocol's reading of the task throwing for one marked task, as a bug would) is a defect of the
 * answer's fiber, the answer standing and the job handed over given back to wait, not failed; the
 * failed answer the runtime then sends finds the answer applied, and says so without blaming a lost
 * connection.
 */
import { assert, describe, it } from "@effect/vitest"
import { Queue } from "bullmq"
import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import { Redis } from "ioredis"
import { vi } from "vitest"
import * as BullMQTransport from "../../src/transport/BullMQTransport.js"
import type { Delivery } from "../../src/seam/Transport.js"
import { deletePrefixKeys, redisConnection, uniquePrefix } from "../support/engine.js"
import { completedReply, describedWorker, servingSteps } from "../support/handlers.js"
import { captureLogs } from "../support/local.js"

/** The input of the task the protocol's reading throws on. */
const { BUG } = vi.hoisted(() => ({ BUG: "the reading of this task throws" }))

vi.mock("../../src/protocol/NestDurableProtocol.js", async (importOriginal) => {
  const actual = await importOriginal<typeof import("../../src/protocol/NestDurableProtocol.js")>()
  return {
    ...actual,
    stepIdentity: (payload: unknown) => {
      if ((payload as { readonly input?: unknown } | null)?.input === BUG) throw new TypeError("a bug reading the task")
      return actual.stepIdentity(payload)
    }
  }
})

const description = describedWorker("worker-a", servingSteps(["work"]), Duration.seconds(1))

const reply = (delivery: Delivery) => completedReply(delivery)

describe("BullMQ transport: the job an answer hands over", () => {
  it.scoped("a bug while its delivery is made is a defect; the answer stands and the job goes back to wait, not failed", () =>
    Effect.gen(function*() {
      const prefix = uniquePrefix("edwn")
      const redis = yield* Effect.acquireRelease(
        Effect.sync(() => new Redis(redisConnection())),
        (client) => Effect.promise(() => deletePrefixKeys(client, prefix).then(() => client.quit()))
      )
      yield* Effect.promise(async () => {
        const tasks = new Queue(`${prefix}-tasks-work`, { connection: redisConnection() })
        const runId = `run-${prefix}`
        for (const [seq, input] of [[0, "plain"], [1, BUG]] as const) {
          const task = { runId, seq, name: "work", stepId: `${runId}:${seq}`, group: "work", input, attempt: 1, transport: "default" }
          await tasks.add("task", task, { removeOnComplete: true })
        }
        await tasks.close()
      })
      const transport = yield* BullMQTransport.make({ url: `redis://${redisConnection().host}:${redisConnection().port}`, prefix })
      const [first] = yield* (yield* transport.register(description)).pollers[0]!.poll(1)
      assert.isDefined(first)

      const died = yield* Effect.exit(first!.completeAndTakeNext!(reply(first!)))
      assert.isTrue(Exit.isFailure(died) && Cause.isDie(died.cause), "a defect")
      assert.match(Cause.pretty((died as Exit.Failure<unknown, unknown>).cause), /a bug reading the task/)
      // the answer went through: its reply written, its job acknowledged
      assert.strictEqual(yield* Effect.promise(() => redis.llen(`bull:${prefix}-results:wait`)), 1)
      assert.strictEqual(yield* Effect.promise(() => redis.exists(`bull:${prefix}-tasks-work:1`)), 0)
      // the job it took is waiting again, unlocked: neither failed as unreadable nor left active
      assert.deepStrictEqual(yield* Effect.promise(() => redis.zrange(`bull:${prefix}-tasks-work:failed`, 0, -1)), [])
      assert.deepStrictEqual(yield* Effect.promise(() => redis.lrange(`bull:${prefix}-tasks-work:active`, 0, -1)), [])
      assert.deepStrictEqual(yield* Effect.promise(() => redis.lrange(`bull:${prefix}-tasks-work:wait`, 0, -1)), ["2"])
      assert.strictEqual(yield* Effect.promise(() => redis.exists(`bull:${prefix}-tasks-work:2:lock`)), 0)
      // the failed answer the runtime sends for a defect while answering finds the answer applied: no second reply
      const failed = { ...reply(first!), result: { ...reply(first!).result, status: "failed" as const, output: undefined } }
      const logs = captureLogs()
      yield* first!.complete(failed as never).pipe(Effect.provide(logs.layer))
      assert.strictEqual(yield* Effect.promise(() => redis.llen(`bull:${prefix}-results:wait`)), 1)
      // said as it is: no connection was lost, the worker knew the earlier answer went through
      assert.deepStrictEqual(logs.lines, [`INFO an earlier answer to job 1 on ${prefix}-tasks-work had been applied; it stands, this one was not written`])
    }))
})
