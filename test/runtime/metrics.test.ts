import { assert, describe, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as TestClock from "effect/TestClock"
import { EventEmitter } from "node:events"
import { Redis } from "ioredis"
import { FatalError } from "../../src/core/FatalError.js"
import * as Step from "../../src/core/Step.js"
import * as Worker from "../../src/runtime/Worker.js"
import * as WorkerMetrics from "../../src/seam/WorkerMetrics.js"
import * as Memory from "../../src/services/Memory.js"
import { countLostConnections, waitingJobs } from "../../src/transport/bullmq/internal/backlog.js"
import * as InMemory from "../../src/transport/InMemoryTransport.js"
import { stepTask } from "../support/local.js"

const memory = Memory.layerTest({ usage: 1, limit: 1024 })
const settle = Effect.repeatN(Effect.yieldNow(), 50)

const tagged = <T, I, O>(metric: Metric.Metric<T, I, O>, tags: Record<string, string>) =>
  Object.entries(tags).reduce((m, [k, v]) => Metric.tagged(m, k, v), metric)
const count = (metric: Metric.Metric.Counter<number>, tags: Record<string, string>) =>
  Effect.map(Metric.value(tagged(metric, tags)), (state) => state.count)
const gauge = (metric: Metric.Metric.Gauge<number>, tags: Record<string, string> = {}) =>
  Effect.map(Metric.value(tagged(metric, tags)), (state) => state.value)

/** A unique suffix, so tests of one file never read each other's series. */
const unique = () => Math.random().toString(16).slice(2, 8)

const start = (broker: InMemory.InMemoryBroker, definition: Worker.WorkerDefinition) =>
  Effect.gen(function*() {
    const worker = yield* Worker.make(definition)
    yield* Effect.forkScoped(Effect.provide(worker.run, Layer.merge(broker.layer, memory)))
    yield* worker.registered
    return worker
  })

describe("worker metrics", () => {
  it.scoped("tasks started, completed and failed by kind, name and outcome, with their durations", () =>
    Effect.gen(function*() {
      const id = unique()
      const ok = Step.make(`ok-${id}`, () => Effect.sleep("2 seconds").pipe(Effect.as(1)))
      const boom = Step.make(`boom-${id}`, () => Effect.fail(new Error("boom")))
      const fatal = Step.make(`fatal-${id}`, () => Effect.fail(new FatalError("no", "bad")))
      const broker = yield* InMemory.make()
      const worker = yield* start(broker, { steps: [ok, boom, fatal] })
      yield* broker.enqueue(stepTask("r1", ok.name))
      yield* broker.enqueue(stepTask("r2", boom.name))
      yield* broker.enqueue(stepTask("r3", fatal.name))
      yield* settle
      yield* TestClock.adjust("2 seconds")
      for (let i = 0; i < 3; i++) yield* broker.takeReply
      yield* settle
      const step = (name: string) => ({ kind: "step", name })
      assert.strictEqual(yield* count(WorkerMetrics.tasksStarted, step(ok.name)), 1)
      assert.strictEqual(yield* count(WorkerMetrics.tasksCompleted, step(ok.name)), 1)
      assert.strictEqual(yield* count(WorkerMetrics.tasksFailed, { ...step(boom.name), outcome: "failed" }), 1)
      assert.strictEqual(yield* count(WorkerMetrics.tasksFailed, { ...step(fatal.name), outcome: "failed" }), 1)
      assert.strictEqual(yield* count(WorkerMetrics.tasksCompleted, step(boom.name)), 0)
      const okDuration = yield* Metric.value(tagged(WorkerMetrics.taskDuration, { ...step(ok.name), outcome: "completed" }))
      assert.strictEqual(okDuration.count, 1)
      assert.strictEqual(okDuration.sum, 2)
      const polls = yield* Metric.value(tagged(WorkerMetrics.pollDuration, { poller: "in-memory queue", outcome: "tasks" }))
      assert.isAtLeast(polls.count, 1)
      yield* worker.stop
    }))

  it.scoped("a task of half an hour lands in a bucket of its own, not in +Inf", () =>
    Effect.gen(function*() {
      const id = unique()
      const long = Step.make(`long-${id}`, () => Effect.sleep("30 minutes").pipe(Effect.as(1)))
      // nothing (sampler, poll, heartbeat, lease) waking every few seconds of the half hour the clock is moved on
      const broker = yield* InMemory.make({ heartbeatInterval: "1 hour", leaseRenewInterval: "1 hour" })
      const worker = yield* start(broker, { steps: [long], metricsInterval: "1 hour", pollTimeout: "1 hour" })
      yield* broker.enqueue(stepTask("r1", long.name))
      yield* settle
      yield* TestClock.adjust("30 minutes")
      yield* broker.takeReply
      yield* settle
      const { buckets, count } = yield* Metric.value(
        tagged(WorkerMetrics.taskDuration, { kind: "step", name: long.name, outcome: "completed" })
      )
      assert.strictEqual(count, 1)
      // cumulative: under 1,310.72 s none, under 2,621.44 s the one task
      assert.deepStrictEqual(buckets.filter(([bound]) => bound >= 1000 && bound < 3000), [[1310.72, 0], [2621.44, 1]])
      yield* worker.stop
    }))

  it.scoped("a rejected payload and a cancelled run are counted as such; onTaskEnd hears every end", () =>
    Effect.gen(function*() {
      const id = unique()
      const ends: Array<Worker.TaskEnd> = []
      const hang = Step.make(`hang-${id}`, () => Effect.never)
      const broker = yield* InMemory.make()
      const worker = yield* start(broker, { steps: [hang], onTaskEnd: (event) => void ends.push(event) })
      yield* broker.enqueue(stepTask(`run-${id}`, hang.name))
      yield* settle
      yield* broker.cancel(`run-${id}`)
      yield* broker.takeReply
      yield* broker.enqueue({ not: "a task" })
      yield* settle
      yield* Effect.repeat(broker.rejected, { until: (r) => r.length === 1 })
      yield* settle
      assert.strictEqual(yield* count(WorkerMetrics.tasksFailed, { kind: "step", name: hang.name, outcome: "cancelled" }), 1)
      assert.deepStrictEqual(ends.map((e) => [e.name, e.outcome]), [[hang.name, "cancelled"], ["unknown", "rejected"]])
      assert.strictEqual(ends[0]!.poller, "in-memory queue")
      yield* worker.stop
    }))

  it.scoped("in flight and slots per pool; an idle pool reports no permit in use", () =>
    Effect.gen(function*() {
      const id = unique()
      const gate = yield* Deferred.make<void>()
      const held = Step.make(`held-${id}`, () => Deferred.await(gate))
      const broker = yield* InMemory.make()
      const worker = yield* start(broker, { steps: [held], concurrency: 3 })
      yield* settle
      // the poll waiting for work holds every permit, yet nothing is in use
      assert.deepStrictEqual((yield* worker.status).slots?.["step"], { limit: 3, inUse: 0, running: 0 })
      assert.strictEqual(yield* gauge(WorkerMetrics.slots, { pool: "step" }), 3)
      yield* broker.enqueue(stepTask("r1", held.name))
      yield* broker.enqueue(stepTask("r2", held.name))
      yield* settle
      assert.strictEqual(yield* gauge(WorkerMetrics.inFlight, { pool: "step" }), 2)
      assert.deepStrictEqual((yield* worker.status).slots?.["step"], { limit: 3, inUse: 2, running: 2 })
      yield* Deferred.succeed(gate, undefined)
      yield* broker.takeReply
      yield* broker.takeReply
      yield* settle
      assert.strictEqual(yield* gauge(WorkerMetrics.inFlight, { pool: "step" }), 0)
      yield* worker.stop
    }))

  it.scoped("a reply whose send failed is counted retried, and lost once its retries are spent", () =>
    Effect.gen(function*() {
      const id = unique()
      const quick = Step.make(`quick-${id}`, () => Effect.succeed(1))
      const broker = yield* InMemory.make()
      const retried = yield* count(WorkerMetrics.repliesRetried, {})
      const lost = yield* count(WorkerMetrics.repliesLost, {})
      const worker = yield* start(broker, { steps: [quick] })
      yield* broker.setCompleteFault({ _tag: "Fail", message: "connection reset" })
      yield* broker.enqueue(stepTask("r1", quick.name))
      yield* settle
      assert.strictEqual((yield* count(WorkerMetrics.repliesRetried, {})) - retried, 1)
      assert.strictEqual((yield* count(WorkerMetrics.repliesLost, {})) - lost, 0)
      for (let i = 0; i < 10; i++) yield* Effect.zipRight(TestClock.adjust("1 second"), settle)
      assert.strictEqual((yield* count(WorkerMetrics.repliesLost, {})) - lost, 1)
      yield* broker.setCompleteFault(undefined)
      yield* worker.stop
    }))

  it.scoped("deferrals by the memory gate, by step name", () =>
    Effect.gen(function*() {
      const id = unique()
      const heavy = Step.make(`heavy-${id}`, () => Effect.sleep("20 seconds"))
      const broker = yield* InMemory.make()
      const worker = yield* Worker.make({
        steps: [heavy],
        concurrency: { min: 1, max: 4, start: 4 },
        metricsInterval: "1 second",
        shutdownTimeout: 0
      })
      const tight = Memory.layerTest({ usage: 900 * 1024 * 1024, limit: 1024 * 1024 * 1024 })
      yield* Effect.forkScoped(Effect.provide(worker.run, Layer.merge(broker.layer, tight)))
      yield* worker.registered
      yield* broker.enqueue(stepTask("r1", heavy.name))
      yield* broker.enqueue(stepTask("r2", heavy.name))
      yield* settle
      yield* TestClock.adjust("1 second")
      assert.strictEqual(yield* gauge(WorkerMetrics.deferred), 1, "one task waits at the gate")
      assert.strictEqual(yield* count(WorkerMetrics.deferrals, { name: heavy.name }), 0, "counted once let through")
      for (let i = 0; i < 25; i++) yield* Effect.zipRight(TestClock.adjust("1 second"), settle)
      assert.strictEqual(yield* count(WorkerMetrics.deferrals, { name: heavy.name }), 1)
      assert.strictEqual(yield* gauge(WorkerMetrics.deferred), 0)
      yield* worker.forceStop.pipe(Effect.timeout("1 second"), Effect.fork)
      yield* TestClock.adjust("10 seconds")
    }))

  it.scoped("saturation and backlog are sampled every metricsInterval: (in flight + deferred + backlog) / slots", () =>
    Effect.gen(function*() {
      const id = unique()
      const gate = yield* Deferred.make<void>()
      const held = Step.make(`sat-${id}`, () => Deferred.await(gate))
      const broker = yield* InMemory.make()
      const worker = yield* start(broker, { steps: [held], concurrency: 2, metricsInterval: "10 seconds" })
      yield* settle
      // the first sample is taken at once: idle
      assert.strictEqual(yield* gauge(WorkerMetrics.saturation), 0)
      for (let i = 0; i < 5; i++) yield* broker.enqueue(stepTask(`r${i}`, held.name))
      yield* settle
      yield* TestClock.adjust("9 seconds")
      assert.strictEqual(yield* gauge(WorkerMetrics.saturation), 0, "not sampled before the interval")
      yield* TestClock.adjust("1 second")
      // 2 running + 3 waiting in the queue, over 2 slots
      assert.strictEqual(yield* gauge(WorkerMetrics.backlog, { poller: "in-memory queue" }), 3)
      assert.strictEqual(yield* gauge(WorkerMetrics.saturation), 2.5)
      yield* Deferred.succeed(gate, undefined)
      for (let i = 0; i < 5; i++) yield* broker.takeReply
      yield* settle
      yield* TestClock.adjust("10 seconds")
      assert.strictEqual(yield* gauge(WorkerMetrics.saturation), 0)
      yield* worker.stop
    }))

  it.effect("a lost connection is counted once per loss (ioredis announces every reconnection attempt)", () =>
    Effect.gen(function*() {
      const before = yield* count(WorkerMetrics.connectionsLost, { transport: "bullmq" })
      const client = new EventEmitter()
      countLostConnections(client as unknown as Redis)
      client.emit("reconnecting") // never ready: a failed first connection is not a loss
      client.emit("ready")
      client.emit("reconnecting")
      client.emit("reconnecting")
      client.emit("ready")
      client.emit("reconnecting")
      assert.strictEqual((yield* count(WorkerMetrics.connectionsLost, { transport: "bullmq" })) - before, 2)
    }))

  it.live("a real Redis connection killed by the server is counted lost", () =>
    Effect.gen(function*() {
      const before = yield* count(WorkerMetrics.connectionsLost, { transport: "bullmq" })
      const client = new Redis({ port: 6379, host: "127.0.0.1", lazyConnect: true, retryStrategy: () => 20 })
      client.on("error", () => {})
      countLostConnections(client)
      const admin = new Redis({ port: 6379, host: "127.0.0.1" })
      yield* Effect.promise(async () => {
        await client.connect()
        const clientId = await client.client("ID")
        await admin.client("KILL", "ID", String(clientId))
        // reconnected: answers again
        await client.ping()
      })
      yield* Effect.promise(async () => {
        client.disconnect()
        admin.disconnect()
      })
      assert.strictEqual((yield* count(WorkerMetrics.connectionsLost, { transport: "bullmq" })) - before, 1)
    }))

  it.live("the BullMQ backlog is the wait list plus the prioritized set, read from Redis", () =>
    Effect.gen(function*() {
      const client = new Redis({ port: 6379, host: "127.0.0.1" })
      const key = `backlog-test-${unique()}`
      const keys = { wait: `${key}:wait`, prioritized: `${key}:prioritized` }
      yield* Effect.promise(async () => {
        await client.rpush(keys.wait, "1", "2", "3")
        await client.zadd(keys.prioritized, 1, "4", 2, "5")
      })
      const backlog = yield* waitingJobs(client, keys, "bullmq")
      assert.deepStrictEqual(backlog, Option.some(5))
      yield* Effect.promise(async () => {
        await client.del(keys.wait, keys.prioritized)
        client.disconnect()
      })
    }))
})
