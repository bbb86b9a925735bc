/**
 * A workflow turn's live local-step events over BullMQ, on the real Redis: a local step's
 * `completed`/`failed` event (never its `running` event) is a
 * `stepEvent` job on `<P>-step-events`, in order and in Redis before the turn's decision; an event Redis refuses is logged once and the turn is answered
 * all the same; a turn that runs no local step writes none.
 */
import { assert, describe, it } from "@effect/vitest"
import { Queue } from "bullmq"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import { Redis } from "ioredis"
import * as Workflow from "../../src/core/Workflow.js"
import type { Handlers } from "../../src/seam/Protocol.js"
import * as BullMQTransport from "../../src/transport/BullMQTransport.js"
import { deletePrefixKeys, redisConnection, uniquePrefix } from "../support/engine.js"
import { describedWorker, untilTrue } from "../support/handlers.js"

/** Waits on the wall clock for Redis I/O (not for a timing rule): re-checks every 10 ms, up to 10 s. */
const until = untilTrue

/**
 * A local op that ends at once, one that waits on a timer, then a dispatched step: the turn ends
 * `continue` with the call.
 */
const flow = Workflow.make("flow", (_: unknown, ctx) =>
  Effect.gen(function*() {
    const a = yield* ctx.sideEffect(Effect.sync(() => 1))
    const b = yield* ctx.sideEffect(Effect.promise(() => new Promise<number>((resolve) => setTimeout(() => resolve(a + 1), 20))))
    return yield* ctx.step<number>("ingest", { b })
  }))

/** No local op: the turn only dispatches a step. */
const remoteOnly = Workflow.make("remote-only", (_: unknown, ctx) => ctx.step<number>("ingest", {}))

const handlers: Handlers = {
  steps: new Map(),
  workflows: new Map([["flow", flow], ["remote-only", remoteOnly]]),
  durableWorkflows: new Map()
}

const description = describedWorker("worker-a", handlers, Duration.seconds(1))

/**
 * A fresh prefix with one turn of `workflow` waiting, a Redis client, and the order in which Redis
 * runs the adds of step events and decisions (each add takes the next id of its queue); keys
 * deleted at the end.
 */
const fixture = (workflow: string) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const prefix = uniquePrefix("edwse")
      const redis = new Redis(redisConnection())
      const queue = new Queue(`${prefix}-tasks-${workflow}`, { connection: redisConnection() })
      const runId = `run-${prefix}`
      await queue.add("workflow", {
        taskId: `${runId}:wf:1`,
        runId,
        workflow,
        workflowVersion: "1",
        input: null,
        history: [],
        group: workflow,
        attempt: 1
      }, { removeOnComplete: true })
      await queue.close()
      const monitor = await redis.monitor()
      const order: Array<"stepEvent" | "decision"> = []
      monitor.on("monitor", (_time: string, args: Array<string>) => {
        if (args[0]?.toLowerCase() !== "incr") return
        if (args[1] === `bull:${prefix}-step-events:id`) order.push("stepEvent")
        else if (args[1] === `bull:${prefix}-decisions:id`) order.push("decision")
      })
      return { prefix, redis, monitor, order, runId }
    }),
    ({ monitor, prefix, redis }) =>
      Effect.promise(async () => {
        monitor.disconnect()
        await deletePrefixKeys(redis, prefix)
        await redis.quit()
      })
  )

/** Takes the one waiting turn, runs it as the runtime does (the protocol over the delivery) and answers it. */
const serveTurn = (prefix: string) =>
  Effect.gen(function*() {
    const transport = yield* BullMQTransport.make({ url: `redis://${redisConnection().host}:${redisConnection().port}`, prefix })
    const registration = yield* transport.register(description)
    let taken: ReadonlyArray<import("../../src/seam/Transport.js").Delivery> = []
    for (const poller of registration.pollers) {
      taken = yield* poller.poll(1)
      if (taken.length > 0) break
    }
    const [delivery] = taken
    assert.isDefined(delivery)
    const outcome = yield* delivery!.protocol.process(handlers, delivery!)
    assert.strictEqual(outcome._tag, "Reply")
    if (outcome._tag !== "Reply") return outcome
    yield* delivery!.complete(outcome.reply)
    return outcome
  })

/** The step-event jobs of `prefix`, by id (the order they were added), with their options. */
const stepEventJobs = (redis: Redis, prefix: string) =>
  Effect.promise(async () => {
    const ids = (await redis.lrange(`bull:${prefix}-step-events:wait`, 0, -1)).map(Number).sort((a, b) => a - b)
    return Promise.all(ids.map(async (id) => {
      const [name, data, opts] = await redis.hmget(`bull:${prefix}-step-events:${id}`, "name", "data", "opts")
      return { name, data: JSON.parse(data!), opts: JSON.parse(opts!) }
    }))
  })

describe("BullMQ transport: live step events of a workflow turn", () => {
  it.scoped("local steps' events are stepEvent jobs, in order, in Redis before the decision", () =>
    Effect.gen(function*() {
      const { order, prefix, redis, runId } = yield* fixture("flow")
      const outcome = yield* serveTurn(prefix)
      assert.strictEqual(outcome._tag === "Reply" && outcome.reply._tag === "WorkflowDecision" && outcome.reply.decision.status, "continue")
      yield* until("the adds to reach the monitor", async () => order.length === 3)
      assert.deepStrictEqual(order, ["stepEvent", "stepEvent", "decision"])
      const jobs = yield* stepEventJobs(redis, prefix)
      assert.deepStrictEqual(jobs.map((job) => job.name), ["stepEvent", "stepEvent"])
      for (const job of jobs) assert.deepInclude(job.opts, { removeOnComplete: true, removeOnFail: true })
      const events = jobs.map((job) => job.data)
      // the op that ended at once and the one that waited: each its end only
      assert.deepStrictEqual(events.map(({ name, phase, runId, seq }) => ({ runId, seq, name, phase })), [
        { runId, seq: 0, name: "sideEffect", phase: "completed" },
        { runId, seq: 1, name: "sideEffect", phase: "completed" }
      ])
      // completed: the output, the window and its (empty) events
      assert.strictEqual(events[0].output, 1)
      assert.strictEqual(events[1].output, 2)
      assert.deepStrictEqual(events[1].events, [])
      assert.isAtLeast(events[1].finishedAt, events[1].startedAt)
    }))

  it.scoped("a step event Redis refuses is logged once; the turn is answered all the same", () =>
    Effect.gen(function*() {
      const { order, prefix, redis } = yield* fixture("flow")
      // the step-events queue's id counter is not a number: every add fails inside its script
      yield* Effect.promise(() => redis.set(`bull:${prefix}-step-events:id`, "not a number"))
      const warnings: Array<string> = []
      const logger = Logger.make(({ logLevel, message }) => {
        if (logLevel._tag === "Warning") warnings.push(String(Array.isArray(message) ? message[0] : message))
      })
      const outcome = yield* serveTurn(prefix).pipe(Effect.provide(Logger.replace(Logger.defaultLogger, logger)))
      assert.strictEqual(outcome._tag === "Reply" && outcome.reply._tag === "WorkflowDecision" && outcome.reply.decision.status, "continue")
      yield* until("the adds to reach the monitor", async () => order.length === 3)
      assert.deepStrictEqual(order, ["stepEvent", "stepEvent", "decision"])
      assert.strictEqual(yield* Effect.promise(() => redis.llen(`bull:${prefix}-decisions:wait`)), 1)
      assert.strictEqual(yield* Effect.promise(() => redis.llen(`bull:${prefix}-step-events:wait`)), 0)
      yield* until("the warning", async () => warnings.length > 0)
      const stepEventWarnings = warnings.filter((line) => line.includes("live step event"))
      assert.strictEqual(stepEventWarnings.length, 1, warnings.join("\n"))
      assert.match(stepEventWarnings[0]!, /could not be added to the step-events queue/)
    }))

  it.scoped("a turn that runs no local step writes no step event", () =>
    Effect.gen(function*() {
      const { order, prefix, redis } = yield* fixture("remote-only")
      yield* serveTurn(prefix)
      yield* until("the decision to reach the monitor", async () => order.includes("decision"))
      assert.deepStrictEqual(order, ["decision"])
      assert.strictEqual(yield* Effect.promise(() => redis.exists(`bull:${prefix}-step-events:id`)), 0)
    }))
})
