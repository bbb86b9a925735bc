/**
 * The BullMQ transport's answer to a task whose reply goes to another broker (its `transport` names
 * one), on real Redis servers: the reply is written there before the job is acknowledged on its own
 * broker, two writes on two servers. An acknowledgement that fails after the reply was written (the
 * job still locked by this worker) is answered again without writing the reply a second time; one
 * applied whose outcome was lost is found applied when sent again; a reply that cannot be encoded is
 * a defect, as on the job's own broker, not a transport failure.
 */
import { assert, beforeAll, describe, it } from "@effect/vitest"
import { Queue, Worker as BullWorker } from "bullmq"
import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Option from "effect/Option"
import { Redis } from "ioredis"
import * as BullMQTransport from "../../src/transport/BullMQTransport.js"
import type { Delivery } from "../../src/seam/Transport.js"
import { cuttingProxy } from "../support/cuttingProxy.js"
import { deletePrefixKeys, redisConnection, uniquePrefix } from "../support/engine.js"
import { completedReply, describedWorker, servingSteps, untilTrue } from "../support/handlers.js"
import { captureLogs, freePort } from "../support/local.js"
import { ownRedisServer } from "../support/ownRedis.js"

const description = describedWorker("worker-a", servingSteps(["work"]), Duration.seconds(1))

const reply = (delivery: Delivery, output: unknown = "done") => completedReply(delivery, output)

describe("BullMQ transport answers for another broker", () => {
  // the job's own broker: a Redis server of this file's (made a replica here for a while), and the
  // broker the replies go to: the local Redis
  const home = ownRedisServer()
  // where no Redis listens: a replica of it never syncs, so it keeps its data
  let unreachablePort = 0
  beforeAll(async () => {
    unreachablePort = await freePort()
  })

  /**
   * Tasks on the home broker whose replies go to broker `b` (one unless told), a transport registered
   * on it (through `via`, a port in front of it, when given) with the first task taken, and clients
   * of both Redis.
   */
  const fixture = (options: { readonly tasks?: number; readonly via?: number; readonly otherVia?: number } = {}) => Effect.gen(function*() {
    const prefix = uniquePrefix("edwo")
    const other = redisConnection()
    const homeRedis = yield* Effect.acquireRelease(
      Effect.sync(() => new Redis({ host: "127.0.0.1", port: home.port })),
      (client) => Effect.promise(() => client.replicaof("NO", "ONE").then(() => client.flushall()).then(() => client.quit()))
    )
    const otherRedis = yield* Effect.acquireRelease(
      Effect.sync(() => new Redis(other)),
      (client) => Effect.promise(() => deletePrefixKeys(client, prefix).then(() => client.quit()))
    )
    yield* Effect.promise(async () => {
      const tasks = new Queue(`${prefix}-tasks-work`, { connection: { host: "127.0.0.1", port: home.port } })
      const runId = `run-${prefix}`
      for (let seq = 0; seq < (options.tasks ?? 1); seq++) {
        const task = { runId, seq, name: "work", stepId: `${runId}:${seq}`, group: "work", attempt: 1, transport: "b" }
        await tasks.add("task", task, { removeOnComplete: true })
      }
      await tasks.close()
    })
    const transport = yield* BullMQTransport.make({
      connection: { host: "127.0.0.1", port: options.via ?? home.port },
      prefix,
      brokerId: "a",
      brokers: { b: { connection: options.otherVia === undefined ? other : { ...other, port: options.otherVia } } }
    })
    const [task] = yield* (yield* transport.register(description)).pollers[0]!.poll(1)
    assert.isDefined(task)
    const replies = () => otherRedis.lrange(`bull:${prefix}-results:wait`, 0, -1)
    return { prefix, homeRedis, otherRedis, task: task!, replies }
  })

  it.live("an acknowledgement refused after the reply was written there is answered again without a second reply", () =>
    Effect.scoped(Effect.gen(function*() {
      const { homeRedis, otherRedis, prefix, replies, task } = yield* fixture()
      const lock = `bull:${prefix}-tasks-work:1:lock`
      const token = yield* Effect.promise(() => homeRedis.get(lock))
      // the home Redis refuses writes (a replica now, as in a failover the worker's connection has not
      // followed yet): the reply goes to the other broker, the acknowledgement is refused, the job
      // stays active under this worker's lock
      yield* Effect.promise(() => homeRedis.replicaof("127.0.0.1", unreachablePort))
      const refused = yield* Effect.flip(task.complete(reply(task)))
      assert.strictEqual(refused._tag, "TransportError")
      assert.match(refused.message, /READONLY/)
      assert.strictEqual((yield* Effect.promise(replies)).length, 1)
      assert.strictEqual(yield* Effect.promise(() => homeRedis.get(lock)), token)

      // the runtime's retry, once the home Redis takes writes again: the job is acknowledged, and the
      // reply already written is not written again
      yield* Effect.promise(() => homeRedis.replicaof("NO", "ONE"))
      yield* task.complete(reply(task))
      const written = yield* Effect.promise(replies)
      assert.strictEqual(written.length, 1)
      assert.strictEqual(yield* Effect.promise(() => homeRedis.exists(`bull:${prefix}-tasks-work:1`)), 0)
      // the record of it, beside the reply queue's keys, names it
      const records = yield* Effect.promise(() => otherRedis.keys(`bull:${prefix}-results:answered:*`))
      assert.strictEqual(records.length, 1)
      assert.strictEqual(yield* Effect.promise(() => otherRedis.get(records[0]!)), `${token}:sent:${written[0]}`)
    })))

  it.live("an acknowledgement applied, its outcome lost with the connection, is found applied when sent again: no lost reply, the next job served", () =>
    Effect.scoped(Effect.gen(function*() {
      const proxy = yield* Effect.acquireRelease(Effect.promise(() => cuttingProxy(home.port)), (p) => Effect.promise(() => p.close()))
      const { homeRedis, prefix, replies, task } = yield* fixture({ tasks: 2, via: proxy.port })
      // the connection is cut once the acknowledgement (the only command naming the completed set) ran
      proxy.arm(`${prefix}-tasks-work:completed`)
      const next = yield* task.completeAndTakeNext!(reply(task))
      assert.strictEqual(proxy.cuts(), 1)
      assert.strictEqual((Option.getOrThrow(next).payload as { seq: number }).seq, 1)
      assert.strictEqual((yield* Effect.promise(replies)).length, 1)
      assert.strictEqual(yield* Effect.promise(() => homeRedis.exists(`bull:${prefix}-tasks-work:1`)), 0)
      yield* Option.getOrThrow(next).complete(reply(Option.getOrThrow(next)))
      assert.strictEqual((yield* Effect.promise(replies)).length, 2)
      assert.strictEqual(yield* Effect.promise(() => homeRedis.llen(`bull:${prefix}-tasks-work:active`)), 0)
    })))

  it.live("a reply applied there, its outcome lost and broker b away past the record's usual keep, is written once when the client sends it again", () =>
    Effect.scoped(Effect.gen(function*() {
      const proxy = yield* Effect.acquireRelease(Effect.promise(() => cuttingProxy(redisConnection().port)), (p) => Effect.promise(() => p.close()))
      const { homeRedis, otherRedis, prefix, replies, task } = yield* fixture({ otherVia: proxy.port })
      // the connection to b is cut once the reply (the only command naming its record) ran there
      proxy.arm(`${prefix}-results:answered:`)
      const answering = yield* Effect.fork(task.complete(reply(task)))
      yield* untilTrue("the reply written", () => replies().then((written) => written.length === 1))
      // b stays away; the client holds the command whose outcome it lost, to send it again
      proxy.setDown(true)
      // a minute and a second go by on b (its keys' time to live, moved on as Redis's clock would;
      // the job's lock on its own broker renewed meanwhile by the task's lease)
      const [record] = yield* Effect.promise(() => otherRedis.keys(`bull:${prefix}-results:answered:*`))
      const left = yield* Effect.promise(() => otherRedis.pttl(record!))
      yield* Effect.promise(() => left <= 61_000 ? otherRedis.del(record!) : otherRedis.pexpire(record!, left - 61_000))
      proxy.setDown(false)
      yield* Fiber.join(answering)
      assert.strictEqual(proxy.cuts(), 1)
      assert.strictEqual((yield* Effect.promise(replies)).length, 1, "one reply: the same answer sent again is not written twice")
      assert.strictEqual(yield* Effect.promise(() => homeRedis.exists(`bull:${prefix}-tasks-work:1`)), 0)
      // the job acknowledged, the record is kept as an answer's is (a minute), no longer
      yield* untilTrue("the record kept a minute from the acknowledgement", () =>
        otherRedis.pttl(record!).then((ttl) => ttl > 0 && ttl <= 60_000))
    })))

  it.live("a reply that cannot be encoded is a defect, as on the job's own broker: nothing written, the job still held", () =>
    Effect.scoped(Effect.gen(function*() {
      const { homeRedis, otherRedis, prefix, replies, task } = yield* fixture()
      const died = yield* Effect.exit(task.complete(reply(task, 10n) as never))
      assert.isTrue(Exit.isFailure(died) && Cause.isDie(died.cause), "a defect, not a transport failure")
      assert.strictEqual((yield* Effect.promise(replies)).length, 0)
      assert.deepStrictEqual(yield* Effect.promise(() => homeRedis.lrange(`bull:${prefix}-tasks-work:active`, 0, -1)), ["1"])
      // the failed answer the runtime sends for it then (worker_defect) goes out, once
      const failed = { ...reply(task), result: { ...reply(task).result, status: "failed" as const, output: undefined } }
      yield* task.complete(failed as never)
      const written = yield* Effect.promise(replies)
      assert.strictEqual(written.length, 1)
      const data = JSON.parse((yield* Effect.promise(() => otherRedis.hget(`bull:${prefix}-results:${written[0]}`, "data")))!)
      assert.strictEqual(data.status, "failed")
      assert.strictEqual(yield* Effect.promise(() => homeRedis.exists(`bull:${prefix}-tasks-work:1`)), 0)
    })))
})

describe("BullMQ failed-job bridge reporting on another broker", () => {
  // the task queue's own broker: a Redis server of this file's; the broker its answers go to (the
  // task's `transport`): the local Redis, behind a proxy the test cuts
  const home = ownRedisServer()

  /** A task of the home broker, its answer for broker `b`, failed at BullMQ's level by a peer that took it. */
  const failedTask = Effect.gen(function*() {
    const prefix = uniquePrefix("edwf")
    const homeRedis = yield* Effect.acquireRelease(
      Effect.sync(() => new Redis({ host: "127.0.0.1", port: home.port })),
      (client) => Effect.promise(() => deletePrefixKeys(client, prefix).then(() => client.quit()))
    )
    const otherRedis = yield* Effect.acquireRelease(
      Effect.sync(() => new Redis(redisConnection())),
      (client) => Effect.promise(() => deletePrefixKeys(client, prefix).then(() => client.quit()))
    )
    const reason = `crashed-${prefix}`
    const failedAt = yield* Effect.promise(async () => {
      const connection = { host: "127.0.0.1", port: home.port }
      const tasks = new Queue(`${prefix}-tasks-work`, { connection })
      const peer = new BullWorker(`${prefix}-tasks-work`, undefined, { connection: { ...connection, maxRetriesPerRequest: null }, autorun: false })
      await tasks.add("task", { runId: `run-${prefix}`, seq: 0, name: "work", stepId: `run-${prefix}:0`, group: "work", attempt: 1, transport: "b" })
      const job = await peer.getNextJob("peer-token", { block: false })
      await job!.moveToFailed(new Error(reason), "peer-token")
      await peer.close()
      await tasks.close()
      return Number(await homeRedis.zscore(`bull:${prefix}-tasks-work:failed`, "1"))
    })
    const reports = () => otherRedis.lrange(`bull:${prefix}-results:wait`, 0, -1)
    const claim = `bull:${prefix}-tasks-work:failed:bridged:1:*`
    // the claim on the failure, kept past its 30 s once its report went out
    const claimKept = () =>
      homeRedis.keys(claim).then(async (keys) => keys.length === 1 && (await homeRedis.pttl(keys[0]!)) > 30_000)
    /** A worker's transport registered on both brokers, broker `b` through `otherPort`. */
    const worker = (otherPort: number) =>
      Effect.flatMap(
        BullMQTransport.make({
          connection: { host: "127.0.0.1", port: home.port },
          prefix,
          brokerId: "a",
          brokers: { b: { connection: { host: "127.0.0.1", port: otherPort } } },
          stalledInterval: Duration.millis(200)
        }),
        (transport) => transport.register(description)
      )
    return { prefix, reason, failedAt, homeRedis, otherRedis, reports, claimKept, worker }
  })

  it.live("a report whose outcome was lost with the connection, sent again by the client, is written there once", () =>
    Effect.scoped(Effect.gen(function*() {
      const proxy = yield* Effect.acquireRelease(Effect.promise(() => cuttingProxy(redisConnection().port)), (p) => Effect.promise(() => p.close()))
      const { claimKept, failedAt, otherRedis, prefix, reason, reports, worker } = yield* failedTask
      // the connection to broker b is cut once the report (the only command naming the reason) ran there
      proxy.arm(reason)
      yield* Effect.scoped(Effect.gen(function*() {
        yield* worker(proxy.port)
        // the report went out (sent again once the connection was back, as the client does) and the claim is kept
        yield* untilTrue("the report's claim kept", claimKept)
      }))
      assert.strictEqual(proxy.cuts(), 1)
      const written = yield* Effect.promise(reports)
      assert.strictEqual(written.length, 1)
      // the record of it there, beside the reply queue's keys, names it
      const records = yield* Effect.promise(() => otherRedis.keys(`bull:${prefix}-results:bridged:*`))
      assert.deepStrictEqual(records, [`bull:${prefix}-results:bridged:a:${prefix}-tasks-work:1:${failedAt}`])
      assert.match((yield* Effect.promise(() => otherRedis.get(records[0]!)))!, new RegExp(`:sent:${written[0]}$`))
    })))

  it.live("a report held up past its claim, sent once another worker reported the failure there, is not written a second time", () =>
    Effect.scoped(Effect.gen(function*() {
      const proxy = yield* Effect.acquireRelease(
        Effect.promise(() => cuttingProxy(redisConnection().port, { afterMs: 5_000 })),
        (p) => Effect.promise(() => p.close())
      )
      const { claimKept, homeRedis, prefix, reason, reports, worker } = yield* failedTask
      const logs = captureLogs()
      // worker 1's report never reaches broker b (dropped, the connection cut), and b stays away: the
      // client holds the report until it is back
      proxy.arm(reason, { applied: false })
      yield* worker(proxy.port).pipe(Effect.provide(logs.layer), Logger.withMinimumLogLevel(LogLevel.Debug))
      yield* untilTrue("worker 1's report dropped", () => Promise.resolve(proxy.cuts() === 1))
      proxy.setDown(true)
      // its claim lapses (deleted here, as its expiry would delete it 30 s in), worker 2 claims the
      // failure and reports it on b
      const [claim] = yield* Effect.promise(() => homeRedis.keys(`bull:${prefix}-tasks-work:failed:bridged:1:*`))
      yield* Effect.promise(() => homeRedis.del(claim!))
      yield* worker(redisConnection().port)
      yield* untilTrue("worker 2's report and its claim kept", claimKept)
      assert.strictEqual((yield* Effect.promise(reports)).length, 1)
      // b is back: worker 1's client sends the report it held
      proxy.setDown(false)
      yield* untilTrue("worker 1's bridge done with the failure", () => Promise.resolve(logs.lines.some((line) => line.includes("job 1 on"))))
      assert.strictEqual((yield* Effect.promise(reports)).length, 1)
      assert.isTrue(logs.lines.some((line) => line.includes("another worker reported it on broker b already")), logs.lines.join("\n"))
    })))
})
