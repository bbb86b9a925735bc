/**
 * The BullMQ transport's answers, on the real Redis: a reply goes out with the acknowledgement of its
 * job in one script call, the reply first; a reply Redis refuses leaves its job unacknowledged; and a
 * job whose data cannot be read, handed over with an answer or taken from the queue, is failed at once;
 * a job whose lock is another worker's gets no reply, on its own broker or on another; a take that
 * fails in a batch leaves the jobs taken with it served.
 */
import { assert, describe, it, vi } from "@effect/vitest"
import { Job, Queue, Worker as BullWorker } from "bullmq"
import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import { Redis } from "ioredis"
import * as Workflow from "../../src/core/Workflow.js"
import * as BullMQTransport from "../../src/transport/BullMQTransport.js"
import { TaskWorker } from "../../src/transport/bullmq/internal/jobs.js"
import type { Delivery } from "../../src/seam/Transport.js"
import { cuttingProxy } from "../support/cuttingProxy.js"
import { deletePrefixKeys, redisConnection, uniquePrefix } from "../support/engine.js"
import { completedReply, describedWorker, servingSteps, untilTrue } from "../support/handlers.js"

/** Waits on the wall clock for Redis I/O (not for a timing rule): re-checks every 10 ms, up to 10 s. */
const until = untilTrue

const description = describedWorker("worker-a", servingSteps(["work"]), Duration.seconds(1))

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

/** The poller of the `work` task queue of a transport registered on `prefix` (closed with the scope). */
const workQueuePoller = (prefix: string) =>
  BullMQTransport.make({ url: `redis://${redisConnection().host}:${redisConnection().port}`, prefix }).pipe(
    Effect.flatMap((transport) => transport.register(description)),
    Effect.map((registration) => registration.pollers[0]!)
  )

const reply = (delivery: Delivery) => completedReply(delivery)

describe("BullMQ transport answers", () => {
  it.scoped("a reply Redis refuses leaves its job unacknowledged and nothing handed over; answered again, both go through", () =>
    Effect.gen(function*() {
      const { prefix, redis, resultAdds } = yield* fixture(2)
      const poller = yield* workQueuePoller(prefix)
      const [first] = yield* poller.poll(1)
      assert.isDefined(first)
      const lock = `bull:${prefix}-tasks-work:1:lock`
      const token = yield* Effect.promise(() => redis.get(lock))
      // the results queue's id counter is not a number: adding a result fails inside the script
      yield* Effect.promise(() => redis.set(`bull:${prefix}-results:id`, "not-a-number"))
      const refused = yield* Effect.flip(first!.completeAndTakeNext!(reply(first!)))
      assert.strictEqual(refused._tag, "TransportError")
      assert.match(refused.message, /answering job 1/)

      // the reply was tried once; the job is still active and locked by this worker, the next one
      // still waits, and no reply was written
      yield* until("the refused reply to reach the monitor", async () => resultAdds.length === 1)
      assert.deepStrictEqual(yield* Effect.promise(() => redis.lrange(`bull:${prefix}-tasks-work:active`, 0, -1)), ["1"])
      assert.strictEqual(yield* Effect.promise(() => redis.get(lock)), token)
      assert.strictEqual(yield* Effect.promise(() => redis.llen(`bull:${prefix}-tasks-work:wait`)), 1)
      assert.strictEqual(yield* Effect.promise(() => redis.llen(`bull:${prefix}-results:wait`)), 0)

      // once the results queue is sound again, the same answer writes the reply, acknowledges the
      // job and hands over the next one
      yield* Effect.promise(() => redis.del(`bull:${prefix}-results:id`))
      const next = yield* first!.completeAndTakeNext!(reply(first!))
      assert.strictEqual((Option.getOrThrow(next).payload as { seq: number }).seq, 1)
      assert.deepStrictEqual(yield* Effect.promise(() => redis.lrange(`bull:${prefix}-tasks-work:active`, 0, -1)), ["2"])
      assert.strictEqual(yield* Effect.promise(() => redis.exists(`bull:${prefix}-tasks-work:1`)), 0)
      const written = yield* Effect.promise(() => redis.lrange(`bull:${prefix}-results:wait`, 0, -1))
      assert.strictEqual(written.length, 1)
      const data = JSON.parse((yield* Effect.promise(() => redis.hget(`bull:${prefix}-results:${written[0]}`, "data")))!)
      assert.deepStrictEqual(data, reply(first!).result)
      assert.isTrue(Option.isNone(yield* Option.getOrThrow(next).completeAndTakeNext!(reply(Option.getOrThrow(next)))))
      assert.strictEqual(yield* Effect.promise(() => redis.llen(`bull:${prefix}-results:wait`)), 2)
    }))

  it.scoped("a reply goes out with its job's acknowledgement, the reply first, and the next job comes with it", () =>
    Effect.gen(function*() {
      const { order, prefix, redis, resultAdds } = yield* fixture(2)
      const poller = yield* workQueuePoller(prefix)
      const [first] = yield* poller.poll(1)
      const next = yield* first!.completeAndTakeNext!(reply(first!))
      assert.isTrue(Option.isSome(next))
      assert.strictEqual((next.pipe(Option.getOrThrow).payload as { seq: number }).seq, 1)
      assert.isTrue(Option.isNone(yield* Option.getOrThrow(next).completeAndTakeNext!(reply(Option.getOrThrow(next)))))
      yield* until("both answers to reach the monitor", async () => order.length === 4 && resultAdds.length === 2)
      assert.deepStrictEqual(order, ["reply", "ack", "reply", "ack"])
      assert.strictEqual(yield* Effect.promise(() => redis.llen(`bull:${prefix}-results:wait`)), 2)
    }))

  // a field BullMQ parses as JSON that is not (written by hand or by another tool): the job is read
  // without it and failed, where it threw out of the answer (an unhandled rejection) or out of the take
  for (const field of ["data", "opts"] as const) {
    it.scoped(`a job handed over with an answer whose ${field} is not JSON is failed at once; the answer stands`, () =>
      Effect.gen(function*() {
        const { prefix, redis } = yield* fixture(2)
        const poller = yield* workQueuePoller(prefix)
        const [first] = yield* poller.poll(1)
        yield* Effect.promise(() => redis.hset(`bull:${prefix}-tasks-work:2`, field, "{not json"))

        assert.isTrue(Option.isNone(yield* first!.completeAndTakeNext!(reply(first!))))
        assert.strictEqual(yield* Effect.promise(() => redis.llen(`bull:${prefix}-results:wait`)), 1)
        assert.strictEqual(yield* Effect.promise(() => redis.llen(`bull:${prefix}-tasks-work:active`)), 0)
        assert.deepStrictEqual(yield* Effect.promise(() => redis.zrange(`bull:${prefix}-tasks-work:failed`, 0, -1)), ["2"])
        const reason = yield* Effect.promise(() => redis.hget(`bull:${prefix}-tasks-work:2`, "failedReason"))
        assert.match(reason!, new RegExp(`job 2 on .* cannot be read, its ${field} is not JSON`))
      }))
  }

  for (const field of ["data", "opts", "progress"] as const) {
    it.scoped(`a job taken from the queue whose ${field} is not JSON is failed at once; the next one is taken`, () =>
      Effect.gen(function*() {
        const { prefix, redis } = yield* fixture(2)
        yield* Effect.promise(() => redis.hset(`bull:${prefix}-tasks-work:1`, field, "{not json"))
        const poller = yield* workQueuePoller(prefix)

        const taken = yield* poller.poll(2)
        assert.deepStrictEqual(taken.map((delivery) => delivery.id), [`${prefix}-tasks-work#2`])
        assert.deepStrictEqual(yield* Effect.promise(() => redis.zrange(`bull:${prefix}-tasks-work:failed`, 0, -1)), ["1"])
        const reason = yield* Effect.promise(() => redis.hget(`bull:${prefix}-tasks-work:1`, "failedReason"))
        assert.match(reason!, new RegExp(`job 1 on .* cannot be read, its ${field} is not JSON`))
        assert.deepStrictEqual(yield* Effect.promise(() => redis.lrange(`bull:${prefix}-tasks-work:active`, 0, -1)), ["2"])
      }))
  }

  // a parent reference (BullMQ flows) that BullMQ's finishing script cannot follow stops that script
  // part way, after it deleted the job's lock (and, failing it, took it off the active list): the job
  // was left active without a lock to be taken and failed again forever, or in no list at all, or its
  // reply written without its acknowledgement. It is removed first, and said.
  const taskJob = (prefix: string, id: string) => `bull:${prefix}-tasks-work:${id}`
  const failedJobs = (redis: Redis, prefix: string) => redis.zrange(`bull:${prefix}-tasks-work:failed`, 0, -1)
  /** A take of two from the work queue: job 1 failed (its parent reference removed, its reason `reason`), job 2 taken. */
  const failsFirstTakesSecond = (prefix: string, redis: Redis, reason: RegExp) =>
    Effect.gen(function*() {
      const poller = yield* workQueuePoller(prefix)
      const taken = yield* poller.poll(2)
      assert.deepStrictEqual(taken.map((delivery) => delivery.id), [`${prefix}-tasks-work#2`])
      assert.deepStrictEqual(yield* Effect.promise(() => failedJobs(redis, prefix)), ["1"])
      const stored = yield* Effect.promise(() => redis.hgetall(taskJob(prefix, "1")))
      assert.isUndefined(stored.parent)
      assert.isUndefined(stored.parentKey)
      assert.match(stored.failedReason!, reason)
    })

  it.scoped("a job taken from the queue whose parent is not JSON is failed at once, its parent reference removed; the next one is taken", () =>
    Effect.gen(function*() {
      const { prefix, redis } = yield* fixture(2)
      yield* Effect.promise(() => redis.hset(taskJob(prefix, "1"), "parent", "{not json"))
      yield* failsFirstTakesSecond(prefix, redis, /its parent is not JSON .*; job 1 on .* had a parent reference BullMQ cannot follow \(parent \{not json\)/)
    }))

  it.scoped("a job handed over with an answer whose parent is not JSON is answered once, its reply and its acknowledgement both written", () =>
    Effect.gen(function*() {
      const { prefix, redis } = yield* fixture(2)
      const poller = yield* workQueuePoller(prefix)
      const [first] = yield* poller.poll(1)
      yield* Effect.promise(() => redis.hset(taskJob(prefix, "2"), "parent", "{not json"))
      const second = Option.getOrThrow(yield* first!.completeAndTakeNext!(reply(first!)))
      yield* second.complete(reply(second))
      assert.strictEqual(yield* Effect.promise(() => redis.llen(`bull:${prefix}-results:wait`)), 2)
      assert.strictEqual(yield* Effect.promise(() => redis.exists(taskJob(prefix, "2"))), 0)
      assert.strictEqual(yield* Effect.promise(() => redis.llen(`bull:${prefix}-tasks-work:active`)), 0)
    }))

  for (
    const [what, fields] of [
      ["a parent with no queueKey", { parent: JSON.stringify({ id: "p" }) }],
      ["a parentKey that is no job key", { parentKey: "no-separator" }]
    ] as const
  ) {
    it.scoped(`a job stalled past the limit with ${what} is failed with it removed, not left in no list`, () =>
      Effect.gen(function*() {
        const { prefix, redis } = yield* fixture(2)
        // as BullMQ's stalled check leaves a job stalled more than allowed: back in wait, to be failed when taken
        yield* Effect.promise(() => redis.hset(taskJob(prefix, "1"), { ...fields, defa: "job stalled more than allowable limit" }))
        yield* failsFirstTakesSecond(prefix, redis, /^job stalled more than allowable limit; job 1 on .* had a parent reference BullMQ cannot follow/)
      }))

    it.scoped(`a job with ${what} is answered once, its reply and its acknowledgement both written; rejected, it is failed`, () =>
      Effect.gen(function*() {
        const { prefix, redis } = yield* fixture(3)
        const poller = yield* workQueuePoller(prefix)
        const [first] = yield* poller.poll(1)
        // the second comes with the first one's answer (its fields read as they are), the third is taken
        yield* Effect.promise(() => redis.hset(taskJob(prefix, "2"), fields))
        yield* Effect.promise(() => redis.hset(taskJob(prefix, "3"), fields))
        const second = Option.getOrThrow(yield* first!.completeAndTakeNext!(reply(first!)))
        yield* second.complete(reply(second))
        assert.strictEqual(yield* Effect.promise(() => redis.llen(`bull:${prefix}-results:wait`)), 2)
        assert.strictEqual(yield* Effect.promise(() => redis.exists(taskJob(prefix, "2"))), 0)

        const [third] = yield* poller.poll(1)
        yield* third!.reject("not a task")
        assert.deepStrictEqual(yield* Effect.promise(() => failedJobs(redis, prefix)), ["3"])
        assert.match((yield* Effect.promise(() => redis.hget(taskJob(prefix, "3"), "failedReason")))!, /^not a task; job 3 on /)
        assert.strictEqual(yield* Effect.promise(() => redis.llen(`bull:${prefix}-tasks-work:active`)), 0)
        assert.strictEqual(yield* Effect.promise(() => redis.llen(`bull:${prefix}-results:wait`)), 2)
      }))
  }

  it.scoped("a job whose parent job is gone keeps its reference (BullMQ follows it) and is failed as BullMQ fails it", () =>
    Effect.gen(function*() {
      const { prefix, redis } = yield* fixture(2)
      const parent = JSON.stringify({ id: "p", queueKey: `bull:${prefix}-gone`, fpof: true })
      yield* Effect.promise(() =>
        redis.hset(taskJob(prefix, "1"), { parent, parentKey: `bull:${prefix}-gone:p`, defa: "job stalled more than allowable limit" })
      )
      const poller = yield* workQueuePoller(prefix)

      assert.strictEqual((yield* poller.poll(2)).length, 1)
      assert.deepStrictEqual(yield* Effect.promise(() => failedJobs(redis, prefix)), ["1"])
      const stored = yield* Effect.promise(() => redis.hgetall(taskJob(prefix, "1")))
      assert.strictEqual(stored.parent, parent)
      assert.strictEqual(stored.failedReason, "job stalled more than allowable limit")
    }))

  it.scoped("a take that fails in a batched poll leaves the jobs taken with it served, none stranded in active", () =>
    Effect.gen(function*() {
      const { prefix, redis } = yield* fixture(7)
      const poller = yield* workQueuePoller(prefix)
      // the batch grows while every take finds a job: 1, then 2, then 4
      assert.strictEqual((yield* poller.poll(8)).length, 1)
      assert.strictEqual((yield* poller.poll(8)).length, 2)

      // the second take of the next batch (of 4) is refused before it reaches Redis (the project's
      // own seam: the task worker's take), as a command that fails on a sick connection
      let takes = 0
      const original = TaskWorker.prototype.getNextJob
      yield* Effect.acquireRelease(
        Effect.sync(() =>
          vi.spyOn(TaskWorker.prototype, "getNextJob").mockImplementation(function(this: TaskWorker, ...args) {
            return ++takes === 2 ? Promise.reject(new Error("injected: take refused")) : original.apply(this, args)
          })
        ),
        (spy) => Effect.sync(() => spy.mockRestore())
      )
      const taken = yield* poller.poll(8)
      assert.strictEqual(takes, 4)
      const seqs = taken.map((delivery) => (delivery.payload as { seq: number }).seq).sort()
      assert.deepStrictEqual(seqs, [3, 4, 5])

      // six jobs active, each under a lock of its delivery; the seventh still waits
      const active = yield* Effect.promise(() => redis.lrange(`bull:${prefix}-tasks-work:active`, 0, -1))
      assert.strictEqual(active.length, 6)
      assert.strictEqual(yield* Effect.promise(() => redis.llen(`bull:${prefix}-tasks-work:wait`)), 1)

      // the three taken with the failed take are answered and acknowledged: nothing of theirs stays active
      for (const delivery of taken) yield* delivery.complete(reply(delivery))
      assert.strictEqual(yield* Effect.promise(() => redis.llen(`bull:${prefix}-tasks-work:active`)), 3)
      assert.strictEqual(yield* Effect.promise(() => redis.llen(`bull:${prefix}-results:wait`)), 3)
      // and the one left waiting is taken by the next poll
      const [last] = yield* poller.poll(8)
      assert.strictEqual((last!.payload as { seq: number }).seq, 6)
    }))

  it.live("replicas sharing a workerId take jobs under tokens of their own: one's sweep after a reconnect leaves the other's jobs", () =>
    Effect.scoped(Effect.gen(function*() {
      const { prefix, redis } = yield* fixture(1)
      // replica B takes the job and runs it
      const [job] = yield* (yield* workQueuePoller(prefix)).poll(1)
      assert.isDefined(job)
      const lock = `bull:${prefix}-tasks-work:1:lock`
      const token = yield* Effect.promise(() => redis.get(lock))
      // replica A, the same workerId, loses its connection and sweeps for orphans a second after it is back
      const name = `replica-a-${prefix}`
      const a = yield* BullMQTransport.make({ connection: { ...redisConnection(), connectionName: name }, prefix })
      yield* a.register(description)
      const clients = yield* Effect.promise(() => redis.client("LIST") as Promise<string>)
      const ids = clients.split("\n").filter((line) => line.includes(` name=${name} `)).map((line) => /id=(\d+)/.exec(line)![1]!)
      assert.isNotEmpty(ids)
      for (const id of ids) yield* Effect.promise(() => redis.client("KILL", "ID", id) as Promise<unknown>)
      yield* until("replica A to reconnect", async () =>
        ((await redis.client("LIST")) as string).includes(` name=${name} `))
      yield* Effect.sleep("2 seconds")
      assert.strictEqual(yield* Effect.promise(() => redis.get(lock)), token, "the job is still replica B's")
      assert.deepStrictEqual(yield* Effect.promise(() => redis.lrange(`bull:${prefix}-tasks-work:active`, 0, -1)), ["1"])
      yield* Option.getOrThrow(job!.keepAlive).renew
    })))

  it.live("a reply that throws as it is encoded leaves no command in flight under its token: the job, its failed answer lost, is swept back after a reconnect", () =>
    Effect.scoped(Effect.gen(function*() {
      const { prefix, redis } = yield* fixture(2)
      const name = `encoder-${prefix}`
      const transport = yield* BullMQTransport.make({ connection: { ...redisConnection(), connectionName: name }, prefix })
      const [first] = yield* (yield* transport.register(description)).pollers[0]!.poll(1)
      const lock = `bull:${prefix}-tasks-work:1:lock`
      const token = yield* Effect.promise(() => redis.get(lock))
      // a value JSON.stringify throws on (what the step's check let through: a getter that throws by now)
      const unencodable = { ...reply(first!), result: { ...reply(first!).result, output: 10n } }
      const died = yield* Effect.exit(first!.completeAndTakeNext(unencodable as never))
      assert.isTrue(Exit.isFailure(died) && Cause.isDie(died.cause), "a defect, nothing sent")
      assert.deepStrictEqual(yield* Effect.promise(() => redis.lrange(`bull:${prefix}-tasks-work:active`, 0, -1)), ["1"])
      // the failed answer the runtime sends then is lost too (Redis refuses the reply): the job stays
      // active under this worker's lock, served by no task
      yield* Effect.promise(() => redis.set(`bull:${prefix}-results:id`, "not-a-number"))
      const failed = { ...reply(first!), result: { ...reply(first!).result, status: "failed" as const, output: undefined } }
      assert.strictEqual((yield* Effect.flip(first!.complete(failed as never)))._tag, "TransportError")
      yield* Effect.promise(() => redis.del(`bull:${prefix}-results:id`))
      assert.strictEqual(yield* Effect.promise(() => redis.get(lock)), token)

      // the connection drops and comes back: the sweep a second later gives the job back to wait at
      // once, as any job of this worker that no task serves (no take or answer is in flight under its token)
      const clients = yield* Effect.promise(() => redis.client("LIST") as Promise<string>)
      const ids = clients.split("\n").filter((line) => line.includes(` name=${name} `)).map((line) => /id=(\d+)/.exec(line)![1]!)
      for (const id of ids) yield* Effect.promise(() => redis.client("KILL", "ID", id) as Promise<unknown>)
      yield* until("the job to be given back to wait", async () => (await redis.lrange(`bull:${prefix}-tasks-work:wait`, 0, -1)).includes("1"))
      assert.strictEqual(yield* Effect.promise(() => redis.exists(lock)), 0)
    })))

  it.scoped("a workflow turn's lease renewal Redis refuses, the lock still held, still beats for its run; a lock lost stops the beats", () =>
    Effect.gen(function*() {
      const { prefix, redis } = yield* fixture(0)
      const runId = `run-${prefix}`
      yield* Effect.promise(async () => {
        const turns = new Queue(`${prefix}-tasks-flow`, { connection: redisConnection() })
        const turn = { taskId: `${runId}:wf:1`, runId, workflow: "flow", workflowVersion: "1", input: null, history: [], group: "flow", attempt: 1 }
        await turns.add("workflow", turn, { removeOnComplete: true })
        await turns.close()
      })
      // the run's beats on the heartbeat channel, as the engine hears them
      const beats: Array<{ readonly runId: string }> = []
      yield* Effect.acquireRelease(
        Effect.promise(async () => {
          const client = new Redis(redisConnection())
          client.on("message", (_channel: string, text: string) => void beats.push(JSON.parse(text)))
          await client.subscribe(`${prefix}-heartbeat`)
          return client
        }),
        (client) => Effect.promise(() => client.quit())
      )
      const flow = Workflow.make("flow", () => Effect.succeed(1))
      const turns = describedWorker("worker-a", { steps: new Map(), workflows: new Map([["flow", flow]]), durableWorkflows: new Map() }, Duration.seconds(1))
      const transport = yield* BullMQTransport.make({ url: `redis://${redisConnection().host}:${redisConnection().port}`, prefix })
      const [turn] = yield* (yield* transport.register(turns)).pollers[0]!.poll(1)
      assert.isDefined(turn)
      yield* until("the turn's first beat", async () => beats.length === 1)
      const lease = Option.getOrThrow(turn!.keepAlive)

      // Redis refuses the lock's extension (as a write at maxmemory under noeviction, BullMQ's advised
      // policy, is refused), the lock still held: the renewal fails, not for good, and the run still beats
      const lock = `bull:${prefix}-tasks-flow:1:lock`
      const token = yield* Effect.promise(() => redis.get(lock))
      yield* Effect.acquireRelease(
        Effect.sync(() =>
          vi.spyOn(Job.prototype, "extendLock").mockImplementationOnce(() =>
            Promise.reject(new Error("OOM command not allowed when used memory > 'maxmemory'."))
          )
        ),
        (spy) => Effect.sync(() => spy.mockRestore())
      )
      const refused = yield* Effect.flip(lease.renew)
      assert.isFalse(refused.fatal, "the lock is still this worker's")
      assert.strictEqual(yield* Effect.promise(() => redis.get(lock)), token)
      yield* until("the beat of the refused renewal", async () => beats.length === 2)
      assert.deepStrictEqual(beats.map((beat) => beat.runId), [runId, runId])

      // renewed: beats; the lock another's: lost for good, and no beat for a turn this worker no longer holds
      yield* lease.renew
      yield* until("the beat of the renewal", async () => beats.length === 3)
      yield* Effect.promise(() => redis.set(lock, "another-worker"))
      assert.isTrue((yield* Effect.flip(lease.renew)).fatal)
      yield* Effect.promise(() => redis.publish(`${prefix}-heartbeat`, JSON.stringify({ runId: "marker" })))
      yield* until("the marker", async () => beats.length === 4)
      assert.strictEqual(beats[3]!.runId, "marker", "no beat went before it")
    }))

  it.scoped("a reply for another broker is written there only while the job's lock is this worker's", () =>
    Effect.gen(function*() {
      const { prefix, redis } = yield* fixture(2)
      // the other broker: the same server, another database
      const other = { ...redisConnection(), db: 1 }
      const otherRedis = yield* Effect.acquireRelease(
        Effect.sync(() => new Redis(other)),
        (client) => Effect.promise(() => deletePrefixKeys(client, prefix).then(() => client.quit()))
      )
      const task = JSON.parse((yield* Effect.promise(() => redis.hget(`bull:${prefix}-tasks-work:1`, "data")))!)
      yield* Effect.promise(() => redis.hset(`bull:${prefix}-tasks-work:1`, "data", JSON.stringify({ ...task, transport: "b" })))
      const transport = yield* BullMQTransport.make({
        url: `redis://${redisConnection().host}:${redisConnection().port}`,
        prefix,
        brokerId: "a",
        brokers: { b: { connection: other } }
      })
      const registration = yield* transport.register(description)
      const [first] = yield* registration.pollers[0]!.poll(1)
      const lock = `bull:${prefix}-tasks-work:1:lock`
      const token = yield* Effect.promise(() => redis.get(lock))

      // another worker holds the job now: the answer fails as BullMQ's acknowledgement does, no reply
      yield* Effect.promise(() => redis.set(lock, "another-worker"))
      const lost = yield* Effect.flip(first!.complete(reply(first!)))
      assert.match(lost.message, /Lock mismatch for job 1/)
      assert.strictEqual(yield* Effect.promise(() => otherRedis.llen(`bull:${prefix}-results:wait`)), 0)

      // the lock this worker's again: the reply goes to the other broker, the job is acknowledged here
      yield* Effect.promise(() => redis.set(lock, token!))
      yield* first!.complete(reply(first!))
      assert.strictEqual(yield* Effect.promise(() => otherRedis.llen(`bull:${prefix}-results:wait`)), 1)
      assert.strictEqual(yield* Effect.promise(() => redis.llen(`bull:${prefix}-results:wait`)), 0)
      assert.strictEqual(yield* Effect.promise(() => redis.exists(`bull:${prefix}-tasks-work:1`)), 0)
    }))

  it.live("with several brokers, the scan at a stop reports a failure on a broker whose connection opened after the others", () =>
    Effect.scoped(Effect.gen(function*() {
      const { prefix, redis } = yield* fixture(0)
      // broker b: the same server, another database, behind a proxy that is down when the worker starts
      const other = { ...redisConnection(), db: 1 }
      const otherRedis = yield* Effect.acquireRelease(
        Effect.sync(() => new Redis(other)),
        (client) => Effect.promise(() => deletePrefixKeys(client, prefix).then(() => client.quit()))
      )
      const proxy = yield* Effect.acquireRelease(Effect.promise(() => cuttingProxy(redisConnection().port)), (p) => Effect.promise(() => p.close()))
      // a task of broker a, its answer for broker b, failed at BullMQ's level by a peer that took it
      const tasks = new Queue(`${prefix}-tasks-work`, { connection: redisConnection() })
      const peer = new BullWorker(`${prefix}-tasks-work`, undefined, { connection: { ...redisConnection(), maxRetriesPerRequest: null }, autorun: false })
      yield* Effect.promise(async () => {
        await tasks.add("task", { runId: "r-b", seq: 0, name: "work", stepId: "r-b:0", group: "work", attempt: 1, transport: "b" })
        const job = await peer.getNextJob("peer-token", { block: false })
        await job!.moveToFailed(new Error("worker process crashed"), "peer-token")
        await peer.close()
        await tasks.close()
      })
      assert.deepStrictEqual(yield* Effect.promise(() => redis.zrange(`bull:${prefix}-tasks-work:failed`, 0, -1)), ["1"])

      // broker a opens at once, b once it is up: the worker waits for it (waitForBroker)
      proxy.setDown(true)
      const up = setTimeout(() => proxy.setDown(false), 300)
      yield* Effect.addFinalizer(() => Effect.sync(() => clearTimeout(up)))
      yield* Effect.scoped(Effect.gen(function*() {
        const transport = yield* BullMQTransport.make({
          url: `redis://${redisConnection().host}:${redisConnection().port}`,
          prefix,
          brokerId: "a",
          brokers: { b: { connection: { host: "127.0.0.1", port: proxy.port, db: 1 } } },
          waitForBroker: true
        })
        yield* transport.register(description)
        // stopped before its first scan (an interval in): only the scan at the stop can report it
      }))

      const reported = yield* Effect.promise(() => otherRedis.lrange(`bull:${prefix}-results:wait`, 0, -1))
      assert.strictEqual(reported.length, 1)
      const data = JSON.parse((yield* Effect.promise(() => otherRedis.hget(`bull:${prefix}-results:${reported[0]}`, "data")))!)
      assert.deepStrictEqual([data.runId, data.status, data.error.message], ["r-b", "failed", "remote step worker failed: worker process crashed"])
    })))
})
