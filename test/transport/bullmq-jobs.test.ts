/**
 * The BullMQ transport's task-path calls (`bullmq/internal/jobs`), against the real Redis: a reply
 * job and an acknowledgement must leave Redis as BullMQ's own `Queue.add` and `Job.moveToCompleted`
 * leave it, and the job handed over with an acknowledgement must read as `getNextJob` reads it.
 */
import { afterEach, assert, describe, it } from "@effect/vitest"
import { FlowProducer, Job, Queue, Worker } from "bullmq"
import { Redis } from "ioredis"
import { createRequire } from "node:module"
import { createHash, randomUUID } from "node:crypto"
import {
  decodeData,
  decodeOptions,
  FAST_ANSWER_LUA,
  FAST_PATH_SCRIPTS,
  jobAnswerer,
  jobWriter
} from "../../src/transport/bullmq/internal/jobs.js"
import { JobName, resultJobOptions, taskJobOptions } from "../../src/transport/bullmq/internal/naming.js"
import { redisConnection } from "../support/engine.js"

const opened: Array<{ close: () => Promise<unknown> }> = []
const prefixes: Array<string> = []

const open = <A extends { close: () => Promise<unknown> }>(a: A) => {
  opened.push(a)
  return a
}

const connection = () => ({ ...redisConnection(), maxRetriesPerRequest: null })

/** A Redis client closed after the test. */
const redisClient = () => {
  const redis = new Redis(connection())
  open({ close: async () => redis.disconnect() })
  return redis
}

const freshName = () => {
  const name = `jobs-test-${randomUUID().slice(0, 8)}`
  prefixes.push(name)
  return name
}

/** A job's stored hash without the fields that differ between any two adds (time, id). */
const storedJob = async (redis: Redis, queue: Queue, id: string) => {
  const { timestamp, ...rest } = await redis.hgetall(`${queue.keys[""]}${id}`)
  assert.match(timestamp!, /^\d+$/)
  return rest
}

/** The events of a queue's stream, without their ids, job ids and times. */
const events = async (redis: Redis, queue: Queue) =>
  (await redis.xrange(queue.keys.events!, "-", "+")).map(([, fields]) => {
    const event: Record<string, string> = {}
    for (let i = 0; i < fields.length; i += 2) {
      if (fields[i] !== "jobId" && fields[i] !== "prev") event[fields[i]!] = fields[i + 1]!
    }
    return event
  })

/**
 * A connection to answer on, and every command it sends as MONITOR (on `redis`) sees it: the command
 * lowercased, then its arguments. MONITOR picks the connection's commands out by its address.
 */
const watchedConnection = async (redis: Redis) => {
  const answering = redisClient()
  await answering.ping()
  const source = `${answering.stream.localAddress}:${answering.stream.localPort}`
  const sent: Array<ReadonlyArray<string>> = []
  const monitor = await redis.duplicate().monitor()
  open({ close: async () => monitor.disconnect() })
  monitor.on("monitor", (_time: string, args: Array<string>, from: string) => {
    if (from === source) sent.push([args[0]!.toLowerCase(), ...args.slice(1)])
  })
  return { answering, sent }
}

/** A step task as the engine dispatches it. */
const task = (i: number) => ({ runId: `run-${i}`, seq: 0, stepId: `run-${i}:0`, name: "s", input: { i }, attempt: 1 })

afterEach(async () => {
  for (const a of opened.splice(0).reverse()) await a.close().catch(() => undefined)
  const redis = new Redis(redisConnection())
  for (const name of prefixes.splice(0)) {
    const keys = await redis.keys(`bull:${name}*`)
    if (keys.length > 0) await redis.del(...keys)
  }
  redis.disconnect()
})

/** A task queue and its results queue, set up by `arrange`, the first task job taken under `token-1`. */
const queues = async (redis: Redis, arrange: Arrange) => {
  const name = freshName()
  const producer = open(new Queue(`${name}-tasks`, { connection: redis }))
  const results = open(new Queue(`${name}-results`, { connection: redis }))
  await arrange.before?.({ producer, results, redis })
  if (arrange.child === true) {
    const flows = open(new FlowProducer({ connection: redis }))
    await flows.add({
      name: "parent",
      queueName: `${name}-parents`,
      opts: { jobId: "parent-1" },
      children: [{ name: JobName.task, queueName: `${name}-tasks`, data: task(1), opts: { ...taskJobOptions(), jobId: "child-1" } }]
    })
  } else {
    await producer.add(JobName.task, task(1), { ...taskJobOptions(), ...arrange.first })
  }
  for (const [i, options] of (arrange.more ?? [{}]).entries()) {
    await producer.add(JobName.task, task(i + 2), { ...taskJobOptions(), ...options })
  }
  const worker = open(new Worker(`${name}-tasks`, undefined, { connection: redis, autorun: false }))
  const first = (await worker.getNextJob("token-1", { block: false }))!
  await arrange.after?.({ producer, results, redis, first })
  return { name, producer, results, worker, first }
}

/** What `Arrange` hooks are given. */
type Setup = { producer: Queue; results: Queue; redis: Redis; first?: Job }

/** How {@link queues} sets up the task queue (by default: two plain task jobs). */
interface Arrange {
  /** Options of the first task job. */
  readonly first?: Record<string, unknown>
  /** The first task job is the child of a job on another queue (a flow). */
  readonly child?: boolean
  /** Options of the task jobs added after the first (default: one plain job). */
  readonly more?: ReadonlyArray<Record<string, unknown>>
  /** Runs before any task job is added. */
  readonly before?: (setup: Setup) => Promise<unknown>
  /** Runs once the first task job is taken. */
  readonly after?: (setup: Setup & { first: Job }) => Promise<unknown>
  /** Whether the answer takes the next job (default true; read by the fast-path cases). */
  readonly fetchNext?: boolean
}

describe("BullMQ task-path calls", () => {
  it("a reply job is stored as Queue.add stores it: same fields, list and events", async () => {
    const redis = redisClient()
    const viaAdd = open(new Queue(freshName(), { connection: redis }))
    const viaWriter = open(new Queue(freshName(), { connection: redis }))
    const writer = await jobWriter(viaWriter, JobName.result, resultJobOptions)
    const data = { runId: "r-1", seq: 3, stepId: "r-1:3", status: "completed", output: { n: [1, "two"] }, startedAt: 17 }

    const added = await viaAdd.add(JobName.result, data, resultJobOptions)
    const written = await writer.write(data)

    assert.strictEqual(written, added.id)
    assert.deepStrictEqual(await storedJob(redis, viaWriter, written), await storedJob(redis, viaAdd, added.id!))
    assert.deepStrictEqual(await redis.lrange(viaWriter.keys.wait!, 0, -1), [written])
    assert.deepStrictEqual(await events(redis, viaWriter), await events(redis, viaAdd))
    const read = await Job.fromId(viaWriter, written)
    assert.deepStrictEqual(read?.data, data)
    assert.strictEqual(read?.name, JobName.result)
    // undefined data is stored as Queue.add stores it too
    assert.deepStrictEqual(
      await storedJob(redis, viaWriter, await writer.write(undefined)),
      await storedJob(redis, viaAdd, (await viaAdd.add(JobName.result, undefined, resultJobOptions)).id!)
    )
  })

  it("writeIfHeld adds the job as write does under its claim, records it there for as long as it is kept, and adds it once however often it is sent", async () => {
    const redis = redisClient()
    const viaWrite = open(new Queue(freshName(), { connection: redis }))
    const viaHeld = open(new Queue(freshName(), { connection: redis }))
    const plain = await jobWriter(viaWrite, JobName.result, resultJobOptions)
    const held = await jobWriter(viaHeld, JobName.result, resultJobOptions)
    const claim = (n: number) => `${viaHeld.keys.failed}:bridged:${n}:1000`
    const data = { runId: "r-1", seq: 3, stepId: "r-1:3", status: "failed", error: { message: "lost", retryable: true } }
    const kept = 86_400_000
    /** Whether the claim's expiry is the kept time, give or take the test's own time. */
    const keptFor = async (key: string) => {
      const ttl = await redis.pttl(key)
      return ttl > kept - 10_000 && ttl <= kept
    }

    // another worker's claim: nothing written, the claim left as it was
    await redis.set(claim(1), "theirs", "PX", 60_000)
    assert.isUndefined(await held.writeIfHeld(data, claim(1), "mine", kept))
    await redis.set(claim(1), "theirs:sent:4", "PX", 60_000)
    assert.isUndefined(await held.writeIfHeld(data, claim(1), "mine", kept), "another's sent report")
    assert.deepStrictEqual(await redis.lrange(viaHeld.keys.wait!, 0, -1), [], "nothing added under another's claim")
    assert.deepStrictEqual(await redis.xrange(viaHeld.keys.events!, "-", "+"), [])
    assert.strictEqual(await redis.get(claim(1)), "theirs:sent:4")
    assert.isAtMost(await redis.pttl(claim(1)), 60_000)

    // this worker's claim, seconds from lapsing: written as write writes it, and recorded in the claim
    // for the kept time, so that the call sent again however late finds it
    await redis.set(claim(2), "mine", "PX", 2_000)
    const written = await held.writeIfHeld(data, claim(2), "mine", kept)
    const added = await plain.write(data)
    assert.strictEqual(written, added, "the queue's first job, as the other queue's")
    assert.deepStrictEqual(await storedJob(redis, viaHeld, written!), await storedJob(redis, viaWrite, added))
    assert.deepStrictEqual(await events(redis, viaHeld), await events(redis, viaWrite))
    assert.deepStrictEqual((await Job.fromId(viaHeld, written!))?.data, data)
    assert.strictEqual(await redis.get(claim(2)), `mine:sent:${written}`)
    assert.isTrue(await keptFor(claim(2)), "recorded for the kept time, not the claim's last seconds")
    // the same call again (the client sending it again after a lost connection): its id, nothing added
    assert.strictEqual(await held.writeIfHeld(data, claim(2), "mine", kept), written)
    assert.deepStrictEqual(await redis.lrange(viaHeld.keys.wait!, 0, -1), [written], "added once")

    // a claim that lapsed with no one taking it: written, and recorded for the kept time
    const retaken = await held.writeIfHeld(data, claim(3), "mine", kept)
    assert.isString(retaken)
    assert.strictEqual(await redis.get(claim(3)), `mine:sent:${retaken}`)
    assert.isTrue(await keptFor(claim(3)))
    assert.deepStrictEqual(await redis.lrange(viaHeld.keys.wait!, 0, -1), [retaken, written])
    await redis.del(claim(1), claim(2), claim(3))
  })

  it("a writer refuses options that take another of BullMQ's add scripts", async () => {
    const queue = open(new Queue(freshName(), { connection: connection() }))
    for (const options of [{ delay: 10 }, { priority: 2 }, { jobId: "fixed" }, { deduplication: { id: "d" } }]) {
      const refused = await jobWriter(queue, JobName.result, options).then(() => undefined, (error: Error) => error.message)
      assert.match(refused ?? "accepted", /need Queue\.add/)
    }
  })

  it("acknowledge leaves the job and the queue as Job.moveToCompleted does, and hands over the next job as getNextJob reads it", async () => {
    const redis = redisClient()
    const { acknowledge } = jobAnswerer(redis)
    /** A task queue with two jobs, the first taken under `token-1`. */
    const queueWithTwo = (keepCompleted: boolean) =>
      queues(redis, { first: { removeOnComplete: !keepCompleted }, more: [taskJobOptions(4)] })

    for (const keepCompleted of [false, true]) {
      const bull = await queueWithTwo(keepCompleted)
      const ours = await queueWithTwo(keepCompleted)
      const theirs = await bull.first.moveToCompleted(undefined, "token-1", true) as [unknown, string]
      const { next } = await acknowledge(ours.worker, { id: ours.first.id!, options: ours.first.opts }, "token-1", true)

      assert.strictEqual(next?.id, theirs[1])
      const viaBull = Job.fromJSON(bull.worker, theirs[0] as never, theirs[1])
      assert.deepStrictEqual(decodeData(next!.fields), viaBull.data)
      assert.deepStrictEqual(next!.fields.opts, (theirs[0] as { opts: string }).opts)
      // a Job also normalises its (absent) backoff; the task path never reads it
      const { backoff, ...options } = viaBull.opts
      assert.isUndefined(backoff)
      assert.deepStrictEqual(decodeOptions(next!.fields.opts), options)
      assert.deepStrictEqual(decodeData(next!.fields), task(2))
      // the first job is gone (or kept as completed) alike; the next one is active under the token
      assert.strictEqual(await redis.exists(`${ours.producer.keys[""]}${ours.first.id}`), keepCompleted ? 1 : 0)
      assert.deepStrictEqual(await ours.producer.getJobCounts(), await bull.producer.getJobCounts())
      assert.strictEqual(await redis.get(`${ours.producer.keys[""]}${next!.id}:lock`), "token-1")
      assert.deepStrictEqual(await events(redis, ours.producer), await events(redis, bull.producer))

      // without fetching, nothing more comes; sent again, it is found applied (its record), writing nothing;
      // under a token that never held the job, it fails as BullMQ's does
      const nextJob = { id: next!.id, options: decodeOptions(next!.fields.opts) }
      assert.deepStrictEqual(await acknowledge(ours.worker, nextJob, "token-1", false), { next: undefined, replayed: false })
      assert.deepStrictEqual(await acknowledge(ours.worker, nextJob, "token-1", false), { next: undefined, replayed: true })
      const other = await acknowledge(ours.worker, nextJob, "token-2", false).then(
        () => "acknowledged under another token",
        (error: Error) => error.message
      )
      assert.match(other, /Missing key for job/)
    }
  })

  it("an answer leaves Redis as Queue.add of the reply then Job.moveToCompleted of the job do, in one command; a job not held gets no reply", async () => {
    const redis = redisClient()
    const { answering, sent } = await watchedConnection(redis)
    const commands = () => sent.map(([command]) => command)
    /** The commands `answering` sent while `f` ran (seen once a marker after them reached the monitor). */
    const sentDuring = async <A>(f: () => Promise<A>) => {
      const before = sent.length
      const result = await f()
      await answering.echo("marker")
      for (let i = 0; i < 500 && !commands().slice(before).includes("echo"); i++) await new Promise((r) => setTimeout(r, 10))
      return { result, sent: commands().slice(before, commands().lastIndexOf("echo")) }
    }
    const output = { runId: "run-1", seq: 0, stepId: "run-1:0", status: "completed", output: [1, { a: "b" }] }
    const bull = await queues(redis, {})
    const ours = await queues(redis, {})
    const answer = jobAnswerer(answering)
    const writer = await jobWriter(ours.results, JobName.result, resultJobOptions)

    const added = await bull.results.add(JobName.result, output, resultJobOptions)
    const theirs = await bull.first.moveToCompleted(undefined, "token-1", true) as [unknown, string]
    const { next } = await answer(writer, output, ours.worker, { id: ours.first.id!, options: ours.first.opts }, "token-1", true)

    const [reply] = await redis.lrange(ours.results.keys.wait!, 0, -1)
    assert.deepStrictEqual(await storedJob(redis, ours.results, reply!), await storedJob(redis, bull.results, added.id!))
    assert.deepStrictEqual(await events(redis, ours.results), await events(redis, bull.results))
    assert.deepStrictEqual(await events(redis, ours.producer), await events(redis, bull.producer))
    assert.deepStrictEqual(await ours.producer.getJobCounts(), await bull.producer.getJobCounts())
    assert.strictEqual(next?.id, theirs[1])
    assert.deepStrictEqual(decodeData(next!.fields), task(2))
    assert.strictEqual(await redis.get(`${ours.producer.keys[""]}${next!.id}:lock`), "token-1")

    // the last job (the script loaded by now): one command, no next job; the same answer sent again
    // (same job, same token) finds it applied and writes nothing; with another token, the job is not
    // this worker's: it fails as BullMQ's does, and gets no reply
    const nextOptions = { id: next!.id, options: decodeOptions(next!.fields.opts) }
    const last = await sentDuring(() => answer(writer, output, ours.worker, nextOptions, "token-1", true))
    assert.deepStrictEqual(last.result, { next: undefined, replayed: false })
    assert.deepStrictEqual(last.sent, ["evalsha"])
    assert.deepStrictEqual(await answer(writer, output, ours.worker, nextOptions, "token-1", true), { next: undefined, replayed: true })
    const again = await answer(writer, output, ours.worker, nextOptions, "token-9", true).then(
      () => "acknowledged twice",
      (error: Error) => error.message
    )
    assert.match(again, /Missing key for job 2/)
    assert.strictEqual(await redis.llen(ours.results.keys.wait!), 2)

    // a job whose lock another worker holds now: no reply, the job stays active under that lock
    const taken = await queues(redis, {})
    await redis.set(`${taken.producer.keys[""]}${taken.first.id}:lock`, "token-2")
    const stolen = await answer(writer, output, taken.worker, { id: taken.first.id!, options: taken.first.opts }, "token-1", true)
      .then(() => "acknowledged", (error: Error) => error.message)
    assert.match(stolen, /Lock mismatch for job 1/)
    assert.strictEqual(await redis.llen(ours.results.keys.wait!), 2)
    assert.deepStrictEqual(await redis.lrange(taken.producer.keys.active!, 0, -1), [taken.first.id])
    assert.strictEqual(await redis.get(`${taken.producer.keys[""]}${taken.first.id}:lock`), "token-2")
  })

  it("an answer sent again finds its record: no second reply, and the job it took while that job is still locked with the token", async () => {
    const redis = redisClient()
    const output = { runId: "run-1", seq: 0, stepId: "run-1:0", status: "completed", output: 1 }
    const answer = jobAnswerer(redis)
    // both paths: the fast one, and BullMQ's scripts (a job kept on completion)
    for (const first of [{}, { removeOnComplete: false }]) {
      const ours = await queues(redis, { first })
      const writer = await jobWriter(ours.results, JobName.result, resultJobOptions)
      const job = { id: ours.first.id!, options: ours.first.opts }
      const applied = await answer(writer, output, ours.worker, job, "token-1", true)
      assert.isFalse(applied.replayed)
      // the same answer again, as a retry that takes no next job would send it
      const again = await answer(writer, output, ours.worker, job, "token-1", false)
      assert.deepStrictEqual({ next: again.next?.id, replayed: again.replayed }, { next: applied.next!.id, replayed: true })
      assert.deepStrictEqual(decodeData(again.next!.fields), task(2))
      assert.strictEqual(await redis.llen(ours.results.keys.wait!), 1)
      // once the job it took is no longer locked with the token, it is not handed over again
      await redis.set(`${ours.producer.keys[""]}${applied.next!.id}:lock`, "token-2")
      assert.deepStrictEqual(await answer(writer, output, ours.worker, job, "token-1", true), { next: undefined, replayed: true })
      // another token finds no record of its own: the job is not its, as BullMQ says
      const stranger = await answer(writer, output, ours.worker, job, "token-3", true).then(() => "answered", (e: Error) => e.message)
      assert.match(stranger, /Missing lock for job 1|Missing key for job 1/)
      assert.strictEqual(await redis.llen(ours.results.keys.wait!), 1)
    }
  })

  it("decodeOptions decodes as Job.optsFromJSON and reuses the last result for the same text", () => {
    const a = JSON.stringify({ rmoc: true, rmof: { age: 3600 }, attempts: 0 })
    const b = JSON.stringify({ rmoc: true, attempts: 2, priority: 5 })
    assert.deepStrictEqual(decodeOptions(a), Job.optsFromJSON(a))
    assert.strictEqual(decodeOptions(a), decodeOptions(a))
    assert.deepStrictEqual(decodeOptions(b), Job.optsFromJSON(b))
    assert.deepStrictEqual(decodeOptions(undefined), Job.optsFromJSON(undefined))
    assert.deepStrictEqual(decodeOptions(a), Job.optsFromJSON(a))
  })

  it("decodeData parses as Job.fromJSON and throws on data that is not JSON", () => {
    const fields = { data: JSON.stringify({ a: 1 }) } as Parameters<typeof decodeData>[0]
    assert.deepStrictEqual(decodeData(fields), { a: 1 })
    assert.deepStrictEqual(decodeData({ ...fields, data: "" }), {})
    assert.throws(() => decodeData({ ...fields, data: "{not json" }))
  })
})

/** A time in milliseconds since the epoch, as BullMQ stores one (in fields, event fields and scores). */
const isTime = (value: string) => /^1\d{12}$/.test(value)

/**
 * Everything in Redis under `name`'s queues, with `name` replaced and times (which differ between
 * two identical runs) replaced by `<time>`; stream entries without their ids, sorted sets without
 * their scores but for the prioritised set (the scores of the others are times). The record an answer
 * leaves for itself (`<job>:answered`, which BullMQ has no counterpart of) is left out: the tests
 * check it on its own.
 */
const snapshot = async (redis: Redis, name: string) => {
  const keys = (await redis.keys(`bull:${name}*`)).filter((key) => !key.endsWith(":answered")).sort()
  const out: Record<string, unknown> = {}
  const times = (values: ReadonlyArray<string>) => values.map((value) => isTime(value) ? "<time>" : value)
  for (const key of keys) {
    const type = await redis.type(key)
    out[key] = type === "hash"
      ? Object.fromEntries(Object.entries(await redis.hgetall(key)).map(([field, value]) => [field, times([value])[0]]))
      : type === "list"
      ? await redis.lrange(key, 0, -1)
      : type === "zset"
      ? key.endsWith(":prioritized") ? await redis.zrange(key, 0, -1, "WITHSCORES") : await redis.zrange(key, 0, -1)
      : type === "set"
      ? (await redis.smembers(key)).sort()
      : type === "stream"
      ? (await redis.xrange(key, "-", "+")).map(([, fields]) => times(fields))
      : type === "string"
      ? await redis.get(key)
      : type
  }
  return JSON.parse(JSON.stringify(out).replaceAll(name, "<name>")) as Record<string, unknown>
}

describe("the answer's fast path", () => {
  const fastSha = createHash("sha1").update(FAST_ANSWER_LUA).digest("hex")
  const fastLine = FAST_ANSWER_LUA.split("\n")[1]!
  const output = { runId: "run-1", seq: 0, stepId: "run-1:0", status: "completed", output: [1, { a: "b" }] }
  const cases: ReadonlyArray<readonly [string, Arrange, "fast" | "stepped aside" | "not tried"]> = [
    ["a next job waiting", {}, "fast"],
    ["no next job: drained", { more: [] }, "fast"],
    ["no next job fetched, one waiting", { fetchNext: false }, "fast"],
    ["no next job but a delayed one", { more: [{ delay: 60_000 }] }, "fast"],
    ["the results queue paused", { before: ({ results }) => results.pause() }, "stepped aside"],
    ["the results queue held to a global concurrency", { before: ({ results }) => results.setGlobalConcurrency(3) }, "stepped aside"],
    ["the task queue paused", { after: ({ producer }) => producer.pause() }, "stepped aside"],
    ["the task queue held to a global concurrency", { before: ({ producer }) => producer.setGlobalConcurrency(5) }, "stepped aside"],
    ["the task queue rate-limited", { before: ({ producer }) => producer.setGlobalRateLimit(100, 1000) }, "stepped aside"],
    ["a prioritised job waiting", { more: [{ priority: 3 }] }, "stepped aside"],
    ["a prioritised job waiting beside a delayed one not due", { more: [{ delay: 60_000 }, { priority: 3 }] }, "stepped aside"],
    ["a delayed job due", {
      more: [],
      after: async ({ producer }) => {
        await producer.add(JobName.task, task(2), { ...taskJobOptions(), delay: 1 })
        await new Promise((r) => setTimeout(r, 20))
      }
    }, "stepped aside"],
    ["the task job locked by another worker", { after: ({ first, producer, redis }) => redis.set(`${producer.keys[""]}${first.id}:lock`, "token-2") }, "stepped aside"],
    ["the task job is a child in a flow", { child: true }, "stepped aside"],
    ["the task job has a deduplication id", { first: { deduplication: { id: "dedup-1" } } }, "stepped aside"],
    ["the task job is kept on completion", { first: { removeOnComplete: false } }, "not tried"],
    ["the task job is kept on completion up to a count", { first: { removeOnComplete: 10 } }, "not tried"]
  ]

  it("is written for the installed BullMQ's scripts", () => {
    const scripts = createRequire(import.meta.url)("bullmq/dist/cjs/scripts/index.js") as Record<string, { content: string }>
    const digest = createHash("sha256").update(scripts.addStandardJob!.content).update("\0").update(scripts.moveToFinished!.content).digest("hex")
    assert.strictEqual(digest, FAST_PATH_SCRIPTS)
  })

  for (const [title, arrange, path] of cases) {
    it(`${title}: Redis is left as BullMQ's Queue.add and Job.moveToCompleted leave it (${path})`, async () => {
      const redis = redisClient()
      const { answering, sent } = await watchedConnection(redis)
      const fetchNext = arrange.fetchNext ?? true
      const bull = await queues(redis, arrange)
      const ours = await queues(redis, arrange)

      const outcome = async <A>(f: () => Promise<A>) => f().then((value) => ({ value }), (error: Error) => ({ error: error.message }))
      // BullMQ's own calls, as the answer makes them: the reply, then the acknowledgement (no reply for
      // a job whose lock is not this worker's)
      const theirs = await outcome(async () => {
        if (await redis.get(`${bull.producer.keys[""]}${bull.first.id}:lock`) === "token-1") {
          await bull.results.add(JobName.result, output, resultJobOptions)
        }
        const finished = await bull.first.moveToCompleted(undefined, "token-1", fetchNext) as [unknown, string] | undefined
        return { id: await redis.get(bull.results.keys.id!), next: Array.isArray(finished) && finished[0] ? finished[1] : undefined }
      })
      const answer = jobAnswerer(answering)
      const writer = await jobWriter(ours.results, JobName.result, resultJobOptions)
      const mine = await outcome(async () => {
        const { next } = await answer(writer, output, ours.worker, { id: ours.first.id!, options: ours.first.opts }, "token-1", fetchNext)
        return { id: await redis.get(ours.results.keys.id!), next: next?.id }
      })
      // every command the answer sent has reached the monitor once a marker sent after them has
      await answering.echo("marker")
      for (let i = 0; i < 500 && !sent.some(([command]) => command === "echo"); i++) await new Promise((r) => setTimeout(r, 10))

      assert.deepStrictEqual(mine, theirs)
      assert.deepStrictEqual(await snapshot(redis, ours.name), await snapshot(redis, bull.name))
      // an applied answer leaves its record (token, the job it took, the reply), kept past the lock
      const recordKey = `${ours.producer.keys[""]}${ours.first.id}:answered`
      const record = await redis.get(recordKey)
      assert.deepStrictEqual(
        record === null ? null : JSON.parse(record),
        "value" in mine ? ["token-1", mine.value.next ?? "", mine.value.id] : null
      )
      if (record !== null) assert.isAbove(await redis.pttl(recordKey), 30_000)
      // a script is sent in full the first time on a connection (MONITOR shows its text escaped)
      const scripts = sent.flatMap(([command, script]) =>
        command === "evalsha" ? [script] : command === "eval" ? [script!.includes(fastLine) ? fastSha : "another script"] : []
      )
      const fast = scripts.filter((sha) => sha === fastSha).length
      const other = scripts.length - fast
      assert.deepStrictEqual({ fast, other }, path === "fast" ? { fast: 1, other: 0 } : path === "stepped aside" ? { fast: 1, other: 1 } : { fast: 0, other: 1 })
    })
  }
})
