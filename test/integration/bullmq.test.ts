import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { Queue } from "bullmq"
import { Redis } from "ioredis"
import type { ChildProcess } from "node:child_process"
import { createServer as createHttpServer, Server as HttpServer } from "node:http"
import { createServer as createNetServer, type Server as NetServer, type Socket } from "node:net"
import { redis, Worker } from "../../src/promise.js"
import { type EngineHarness, startEngine } from "../support/engine.js"
import { fatalErrorFailsOnce, retryableErrorRecovers, whileServing } from "../support/interop.js"
import { freePort, startRedisServer } from "../support/local.js"

const quiet = { handleSignals: false, logLevel: (process.env.TEST_LOG_LEVEL ?? "None") as "None" } as const

/** Starts an engine on its own prefix and a worker on the same Redis and prefix. */
const setup = async (
  options: {
    namespace?: string
    partition?: string
    concurrency?: number
    stepBeatIntervalMs?: number
    lockDurationMs?: number
    stalledIntervalMs?: number
  } = {}
) => {
  const engine = await startEngine(options.namespace === undefined ? {} : { namespace: options.namespace })
  const worker = new Worker({ ...quiet, concurrency: options.concurrency ?? 8, shutdownTimeoutMs: 10_000 })
  const transport = redis({
    prefix: engine.prefix,
    ...(options.partition === undefined ? {} : { partition: options.partition }),
    ...(options.stepBeatIntervalMs === undefined ? {} : { stepBeatIntervalMs: options.stepBeatIntervalMs }),
    ...(options.lockDurationMs === undefined ? {} : { lockDurationMs: options.lockDurationMs }),
    stalledIntervalMs: options.stalledIntervalMs ?? 60_000
  })
  return { engine, worker, transport }
}

const harnesses: Array<EngineHarness> = []
const track = <T extends { engine: EngineHarness }>(value: T): T => {
  harnesses.push(value.engine)
  return value
}
afterAll(async () => {
  await Promise.all(harnesses.map((h) => h.close()))
})

/** A peer worker holding the step's task job, about to die with it: BullMQ then fails the job. */
const peerHolding = async (engine: EngineHarness, step: string) => {
  const { Worker: BullWorker } = await import("bullmq")
  const peer = new BullWorker(`${engine.prefix}-tasks-${step}`, undefined, {
    connection: { ...engine.connection, maxRetriesPerRequest: null },
    autorun: false
  })
  let job = await peer.getNextJob("peer-token", { block: true })
  for (let i = 0; i < 50 && job === undefined; i++) job = await peer.getNextJob("peer-token", { block: true })
  assert.isDefined(job)
  return {
    crash: async () => {
      await job!.moveToFailed(new Error("worker process crashed"), "peer-token")
    },
    close: () => peer.close()
  }
}

/** Waits until the worker has registered for the step (its descriptor is written). */
const registered = async (client: Redis, engine: EngineHarness, step: string, worker: Worker) => {
  const descriptorKey = `${engine.prefix}-worker-descriptor:${step}:${worker.id}`
  for (let i = 0; i < 200 && (await client.exists(descriptorKey)) === 0; i++) await new Promise((r) => setTimeout(r, 10))
}

describe("BullMQ transport against the real nestjs-durable engine", () => {
  it("a step completes with the handler's output", async () => {
    const { engine, worker, transport } = track(await setup())
    worker.step("payments.charge-card", async (input: { amount: number }, ctx) => ({
      chargeId: `ch_${input.amount}`,
      attempt: ctx.attempt
    }))
    engine.register("checkout", async (ctx, input) =>
      (await ctx.step("payments.charge-card", input)) as unknown)
    const result = await whileServing(worker, transport, () => engine.run("checkout", { amount: 99 }))
    assert.strictEqual(result.status, "completed")
    assert.deepStrictEqual(result.output, { chargeId: "ch_99", attempt: 1 })
  })

  it("a FatalError fails the run after exactly one attempt and keeps its code on the checkpoint", async () => {
    const { engine, worker, transport } = track(await setup())
    await fatalErrorFailsOnce(engine, worker, transport, "payments.charge-card")
  })

  it("a retryable error recovers within retries: 3", async () => {
    const { engine, worker, transport } = track(await setup())
    await retryableErrorRecovers(engine, worker, transport)
  })

  it("priority is honoured: higher priority runs first", async () => {
    const { engine, worker, transport } = track(await setup({ concurrency: 1 }))
    const order: Array<number> = []
    worker.step("prio", async (input: { p: number }) => {
      order.push(input.p)
      return input.p
    })
    engine.register("wf", async (ctx, input) => ctx.step("prio", input, { priority: (input as { p: number }).p }))
    const runIds = []
    for (const p of [1, 5, 3, 9]) runIds.push(await engine.start("wf", { p }))
    // all four tasks wait in the queue before the worker starts
    const tasks = new Queue(`${engine.effectivePrefix}-tasks-prio`, { connection: engine.connection })
    for (let i = 0; i < 100 && (await tasks.getWaitingCount()) + (await tasks.getPrioritizedCount()) < 4; i++) {
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
    await tasks.close()
    const running = worker.run(transport)
    for (const runId of runIds) assert.strictEqual((await engine.waitForRun(runId)).status, "completed")
    await worker.stop()
    await running
    assert.deepStrictEqual(order, [9, 5, 3, 1])
  })

  it("an engine namespace (@tenant) reaches a worker with that partition", async () => {
    const { engine, worker, transport } = track(await setup({ namespace: "acme", partition: "acme" }))
    worker.step("billing:charge", async (_input: unknown, ctx) => ctx.group)
    engine.register("wf", async (ctx) => ctx.step("billing:charge", {}))
    const result = await whileServing(worker, transport, () => engine.run("wf", {}))
    assert.strictEqual(result.status, "completed")
    assert.strictEqual(result.output, "billing-charge@acme")
  })

  it("a cancel reaches the running handler: its signal aborts and no success is reported", async () => {
    const { engine, worker, transport } = track(await setup())
    let started!: () => void
    const running = new Promise<void>((resolve) => (started = resolve))
    let aborted = false
    worker.step("slow", (_input: unknown, ctx) =>
      new Promise((_, reject) => {
        started()
        ctx.signal.addEventListener("abort", () => {
          aborted = true
          reject(new Error("aborted"))
        })
      }))
    engine.register("wf", async (ctx) => ctx.step("slow", {}))
    const run = worker.run(transport)
    const runId = await engine.start("wf", {})
    await running
    await engine.cancel(runId)
    for (let i = 0; i < 100 && !aborted; i++) await new Promise((resolve) => setTimeout(resolve, 20))
    assert.isTrue(aborted)
    const final = await engine.getRun(runId)
    assert.strictEqual(final?.status, "cancelled")
    const checkpoint = await engine.checkpoint(runId, 0)
    assert.notStrictEqual(checkpoint?.status, "completed")
    await worker.stop()
    await run
  })

  it("a step that outlives its BullMQ lock three times over keeps it: it runs once and completes", async () => {
    // the stalled checker looks every 300 ms and takes back any job whose 1 s lock expired
    const { engine, worker, transport } = track(await setup({ lockDurationMs: 1_000, stalledIntervalMs: 300 }))
    let calls = 0
    worker.step("long", async () => {
      calls++
      await new Promise((resolve) => setTimeout(resolve, 3_000))
      return "done"
    })
    engine.register("wf", async (ctx) => ctx.step("long", {}))
    const result = await whileServing(worker, transport, () => engine.run("wf", {}))
    assert.strictEqual(result.status, "completed")
    assert.strictEqual(result.output, "done")
    assert.strictEqual(calls, 1)
    const failed = new Queue(`${engine.prefix}-tasks-long`, { connection: engine.connection })
    try {
      assert.strictEqual(await failed.getFailedCount(), 0)
    } finally {
      await failed.close()
    }
  })

  it("step beats keep a step alive past the engine's timeoutMs; without them the engine times it out", async () => {
    /** A step of 2.5 s under an engine-side `timeoutMs` of 1 s, with no retries. */
    const slowStep = async (options: { stepBeatIntervalMs?: number }) => {
      const { engine, worker, transport } = track(await setup(options))
      worker.step("slow", async () => {
        await new Promise((resolve) => setTimeout(resolve, 2_500))
        return { done: true }
      })
      engine.register("wf", async (ctx) => ctx.step("slow", {}, { timeoutMs: 1_000, retries: 0 }))
      const result = await whileServing(worker, transport, () => engine.run("wf", {}))
      return result
    }
    const [beating, silent] = await Promise.all([slowStep({ stepBeatIntervalMs: 300 }), slowStep({})])
    assert.strictEqual(beating.status, "completed")
    assert.deepStrictEqual(beating.output, { done: true })
    assert.strictEqual(silent.status, "failed")
    assert.match(JSON.stringify(silent.error), /within 1000ms/)
  })

  it("a fan-out of 500 steps completes with exactly 500 results and no duplicate execution", async () => {
    const { engine, worker, transport } = track(await setup({ concurrency: 32 }))
    const seen = new Map<string, number>()
    worker.step("item", async (input: { i: number }, ctx) => {
      seen.set(ctx.stepId, (seen.get(ctx.stepId) ?? 0) + 1)
      return input.i * 2
    })
    engine.register("fanout", async (ctx) => {
      const outputs = await Promise.all(Array.from({ length: 500 }, (_, i) => ctx.step("item", { i })))
      return (outputs as Array<number>).reduce((a, b) => a + b, 0)
    })
    const result = await whileServing(worker, transport, () => engine.run("fanout", {}, { timeoutMs: 60_000 }))
    assert.strictEqual(result.status, "completed")
    assert.strictEqual(result.output, 2 * (499 * 500) / 2)
    assert.strictEqual(seen.size, 500)
    assert.isTrue([...seen.values()].every((n) => n === 1))
  })

  it("registers the descriptor and heartbeat keys; stop() under load finishes accepted work, then they are gone", async () => {
    const { engine, worker, transport } = track(await setup({ concurrency: 4 }))
    let finished = 0
    worker.step("work", async () => {
      await new Promise((resolve) => setTimeout(resolve, 200))
      return ++finished
    })
    engine.register("wf", async (ctx) => ctx.step("work", {}))
    const runIds = await Promise.all(Array.from({ length: 12 }, () => engine.start("wf", {})))
    for (const runId of runIds) await engine.waitForCheckpoint(runId, 0, { status: "pending" })
    const running = worker.run(transport)
    const client = new Redis(engine.connection)
    const heartbeatKey = `${engine.prefix}-worker-heartbeat:work:${worker.id}`
    const descriptorKey = `${engine.prefix}-worker-descriptor:work:${worker.id}`
    for (let i = 0; i < 100 && finished === 0; i++) await new Promise((resolve) => setTimeout(resolve, 20))
    const beat = JSON.parse((await client.get(heartbeatKey))!)
    const descriptor = JSON.parse((await client.get(descriptorKey))!)
    assert.strictEqual(descriptor.instanceId, worker.id)
    assert.deepStrictEqual(descriptor.steps, ["work"])
    assert.deepStrictEqual(descriptor.protocol, { version: 1, range: [1, 1] })
    assert.strictEqual(beat.status.runtime, "node")
    assert.match(beat.descriptorHash, /^[0-9a-f]{16}$/)
    const ttl = await client.ttl(heartbeatKey)
    assert.isTrue(ttl > 25 && ttl <= 35, `ttl ${ttl}`)
    await worker.stop()
    await running
    // every task the worker finished before it stopped was answered: the engine records each result
    // (it consumes the results queue on its own schedule, so wait for it)
    const completedCount = async () =>
      (await Promise.all(runIds.map((id) => engine.checkpoint(id, 0)))).filter((c) => c?.status === "completed").length
    let completed = await completedCount()
    for (let i = 0; i < 200 && completed < finished; i++) {
      await new Promise((resolve) => setTimeout(resolve, 25))
      completed = await completedCount()
    }
    assert.isTrue(completed >= 4, `${completed} completed`)
    assert.strictEqual(finished, completed)
    assert.strictEqual(await client.exists(heartbeatKey, descriptorKey), 0)
    // what was not taken is still queued for other workers
    const tasks = new Queue(`${engine.prefix}-tasks-work`, { connection: engine.connection })
    const counts = await tasks.getJobCounts()
    assert.strictEqual(await tasks.getWaitingCount(), 12 - completed, JSON.stringify(counts))
    await tasks.close()
    await client.quit()
  })

  it("Redis unreachable at start fails run fast with an error that says what to check", async () => {
    const port = await freePort()
    const worker = new Worker(quiet)
    worker.step("x", () => 1)
    const started = Date.now()
    const error = await worker.run(redis({ url: `redis://127.0.0.1:${port}`, connectTimeoutMs: 1_000 })).then(
      () => assert.fail("run should fail"),
      (e: Error) => e
    )
    assert.isBelow(Date.now() - started, 5_000)
    assert.strictEqual((error as { _tag?: string })._tag, "RegistrationError")
    assert.match(error.message, new RegExp(`could not connect to Redis at redis://127.0.0.1:${port}`))
    assert.match(error.message, /REDIS_URL/)
  })

  /**
   * Listens `server`, a test's own, on loopback where Redis was meant to be, and runs a worker at it:
   * its run must fail with a RegistrationError, whose message comes back with the port.
   */
  const failedStartAt = async (server: NetServer) => {
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    const port = (server.address() as { port: number }).port
    try {
      const worker = new Worker(quiet)
      worker.step("x", () => 1)
      const error = await worker.run(redis({ url: `redis://127.0.0.1:${port}`, connectTimeoutMs: 2_000 })).then(
        () => assert.fail("run should fail"),
        (e: Error) => e
      )
      assert.strictEqual((error as { _tag?: string })._tag, "RegistrationError")
      return { port, message: error.message }
    } finally {
      if (server instanceof HttpServer) server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
    }
  }

  it("a Redis URL at another service's port says so, not ioredis's \"Please report this\"", async () => {
    // an HTTP server where Redis was meant to be
    const { message, port } = await failedStartAt(createHttpServer((_, res) => res.end("not redis")))
    assert.match(message, new RegExp(`^the server at redis://127\\.0\\.0\\.1:${port} does not speak Redis's protocol \\(Protocol error, got "H" as reply type byte\\); check that Redis is running and that REDIS_URL \\(or the url/connection option\\) points at it, not at another service's port$`))
  })

  it("a Redis URL at a server that drops the connection at the first command (a database's port, a TLS-only Redis) says so", async () => {
    // TCP servers that close a connection at its first bytes, as PostgreSQL does to a client that
    // does not speak its protocol, or reset it
    for (const [drop, what] of [[(socket: Socket) => socket.end(), "Connection is closed\\."], [(socket: Socket) => socket.resetAndDestroy(), "read ECONNRESET"]] as const) {
      const { message, port } = await failedStartAt(createNetServer((socket) => socket.once("data", () => drop(socket))))
      assert.match(
        message,
        new RegExp(`^the server at redis://127\\.0\\.0\\.1:${port} took the connection and dropped it without an answer \\(${what}\\); check that Redis is running and that REDIS_URL \\(or the url/connection option\\) points at it, not at another service's port, and whether it takes only TLS \\(a rediss:// URL\\); behind a proxy or a container's port, Redis may not be up yet \\(waitForBroker waits for it\\)$`)
      )
    }
  })

  it("a commandsPerWrite that is not a whole number of at least 1 fails run with the reason", async () => {
    for (const commandsPerWrite of [0, 2.5, Number.NaN]) {
      const worker = new Worker(quiet)
      worker.step("x", () => 1)
      const error = await worker.run(redis({ prefix: `cpw-${Date.now()}`, commandsPerWrite })).then(
        () => assert.fail("run should fail"),
        (e: Error) => e
      )
      assert.strictEqual((error as { _tag?: string })._tag, "BullMQConfigError")
      assert.match(error.message, /commandsPerWrite must be a whole number of at least 1/)
    }
  })

  it("a workflow-shaped task on a step queue is recognised, not crashed on, and the worker goes on", async () => {
    const { engine, worker, transport } = track(await setup())
    worker.step("shared", async () => "step-ok")
    engine.register("wf", async (ctx) => ctx.step("shared", {}))
    const running = worker.run(transport)
    const tasks = new Queue(`${engine.prefix}-tasks-shared`, { connection: engine.connection })
    await tasks.add("workflow", { taskId: "t1", runId: "w1", workflow: "shared", history: [], group: "shared", attempt: 1 })
    const result = await engine.run("wf", {})
    assert.strictEqual(result.status, "completed")
    // the turn is answered (a failed "no workflow registered" decision on <P>-decisions, which the
    // engine drops for an unknown run) and acknowledged: nothing waits, runs or fails on the queue
    let counts = await tasks.getJobCounts("wait", "active", "failed", "prioritized")
    for (let i = 0; i < 100 && Object.values(counts).some((n) => n > 0); i++) {
      await new Promise((r) => setTimeout(r, 20))
      counts = await tasks.getJobCounts("wait", "active", "failed", "prioritized")
    }
    assert.deepStrictEqual(counts, { wait: 0, active: 0, failed: 0, prioritized: 0 })
    await tasks.close()
    await worker.stop()
    await running
  })

  it("a step job failed at the infrastructure level gets a synthetic retryable failure, so the run does not hang", async () => {
    const { engine, worker } = track(await setup())
    const transport = redis({ prefix: engine.prefix, stalledIntervalMs: 200 })
    let calls = 0
    worker.step("doomed", () => ++calls)
    engine.register("wf", async (ctx) => ctx.step("doomed", {}, { retries: 1 }))
    const runId = await engine.start("wf", {})
    // a peer worker takes the job before ours starts, then dies: BullMQ fails the job
    const peer = await peerHolding(engine, "doomed")
    const running = worker.run(transport)
    const client = new Redis(engine.connection)
    await registered(client, engine, "doomed", worker)
    await peer.crash()
    const result = await engine.waitForRun(runId, { timeoutMs: 15_000 })
    assert.strictEqual(result.status, "failed")
    const checkpoint = JSON.parse(JSON.stringify(await engine.checkpoint(runId, 0)))
    assert.strictEqual(checkpoint.error.message, "remote step worker failed: worker process crashed")
    assert.strictEqual(checkpoint.error.retryable, true)
    assert.strictEqual(calls, 0)
    await peer.close()
    await client.quit()
    await worker.stop()
    await running
  })
  it("a step job failed while no worker served its queue is reported by the worker started after it", async () => {
    const { engine, worker } = track(await setup())
    let calls = 0
    worker.step("orphaned", () => ++calls)
    engine.register("wf", async (ctx) => ctx.step("orphaned", {}))
    const runId = await engine.start("wf", {})
    // the last worker of the queue fails the job (its stalled check, say) and stops before its next
    // scan: nobody is left to report it
    const peer = await peerHolding(engine, "orphaned")
    await peer.crash()
    await peer.close()
    const running = worker.run(redis({ prefix: engine.prefix, stalledIntervalMs: 200 }))
    const result = await engine.waitForRun(runId, { timeoutMs: 15_000 })
    assert.strictEqual(result.status, "failed")
    const checkpoint = JSON.parse(JSON.stringify(await engine.checkpoint(runId, 0)))
    assert.strictEqual(checkpoint.error.message, "remote step worker failed: worker process crashed")
    assert.strictEqual(calls, 0)
    await worker.stop()
    await running
  })
  it("a step job failed since the last worker's previous scan is reported by that worker as it stops", async () => {
    // scans a minute apart: the stop comes long before the first
    const { engine, transport, worker } = track(await setup({ stalledIntervalMs: 60_000 }))
    let calls = 0
    worker.step("failed-before-stop", () => ++calls)
    engine.register("wf", async (ctx) => ctx.step("failed-before-stop", {}))
    const runId = await engine.start("wf", {})
    const peer = await peerHolding(engine, "failed-before-stop")
    const running = worker.run(transport)
    const client = new Redis(engine.connection)
    await registered(client, engine, "failed-before-stop", worker)
    // the job fails (another worker's stalled check, or this one's) and then every worker of the queue
    // stops: a deploy, a scale to zero; none started within the window after it would report it
    await peer.crash()
    await peer.close()
    await worker.stop()
    await running
    const result = await engine.waitForRun(runId, { timeoutMs: 5_000 })
    assert.strictEqual(result.status, "failed")
    const checkpoint = JSON.parse(JSON.stringify(await engine.checkpoint(runId, 0)))
    assert.strictEqual(checkpoint.error.message, "remote step worker failed: worker process crashed")
    assert.strictEqual(calls, 0)
    // reported under a kept claim: a worker started later leaves it
    const [claim] = await client.keys(`bull:${engine.prefix}-tasks-failed-before-stop:failed:bridged:*`)
    assert.match((await client.get(claim!)) ?? "", /:sent:\d+$/)
    await client.quit()
  })
})

describe("BullMQ failed-job bridge among several workers", () => {
  it("a step job failed at the infrastructure level is reported once among the workers, so a duplicate does not fail its retry", async () => {
    const { engine } = track(await setup())
    // every worker on the queue reads the same failed set; the engine takes a result for any pending
    // attempt: a second report of attempt 1's failure, arriving while attempt 2 runs, would fail it
    const workers = [0, 1].map(() => new Worker({ ...quiet, concurrency: 4, shutdownTimeoutMs: 10_000 }))
    const attempts: Array<number> = []
    for (const worker of workers) {
      worker.step("doomed-twice", async (_input: unknown, ctx) => {
        attempts.push(ctx.attempt)
        // long enough for the other worker's scan to meet the failure meanwhile
        await new Promise((resolve) => setTimeout(resolve, 3_000))
        return { attempt: ctx.attempt }
      })
    }
    engine.register("wf", async (ctx) => ctx.step("doomed-twice", {}, { retries: 2 }))
    const runId = await engine.start("wf", {})
    // a peer worker takes the job before ours start, then dies: BullMQ fails the job
    const peer = await peerHolding(engine, "doomed-twice")
    // the workers' scans every 2 s, a second apart: the second meets the failure about a second after
    // the first reported it and the engine dispatched attempt 2
    const client = new Redis(engine.connection)
    const running: Array<Promise<void>> = []
    for (const worker of workers) {
      // not a whole number of milliseconds: Redis takes whole ones for the claims' lifetimes
      running.push(worker.run(redis({ prefix: engine.prefix, stalledIntervalMs: 2_000.3 })))
      await registered(client, engine, "doomed-twice", worker)
      if (worker === workers[0]) await new Promise((r) => setTimeout(r, 1_000))
    }
    await peer.crash()
    const result = await engine.waitForRun(runId, { timeoutMs: 20_000 })
    assert.strictEqual(result.status, "completed", JSON.stringify(result))
    assert.deepStrictEqual(result.output, { attempt: 2 })
    assert.deepStrictEqual(attempts, [2])
    // the claim of the one report, kept past every window (beyond the 30 s it holds while publishing)
    const claims = await client.keys(`bull:${engine.prefix}-tasks-doomed-twice:failed:bridged:*`)
    assert.strictEqual(claims.length, 1, JSON.stringify(claims))
    assert.isAbove(await client.pttl(claims[0]!), 60_000)
    assert.match((await client.get(claims[0]!))!, /:sent:\d+$/, "the claim records the report it sent")
    await peer.close()
    await client.quit()
    await Promise.all(workers.map((worker) => worker.stop()))
    await Promise.all(running)
  })
  it("a failure another worker reported before this one started is not reported again by it", async () => {
    const { engine } = track(await setup())
    const attempts: Array<number> = []
    const [first, second] = [0, 1].map(() => {
      const worker = new Worker({ ...quiet, concurrency: 4, shutdownTimeoutMs: 10_000 })
      worker.step("reported-once", (_input: unknown, ctx) => {
        attempts.push(ctx.attempt)
        return { attempt: ctx.attempt }
      })
      return worker
    })
    // the retry waits long enough for the second worker's scans to meet the failure first
    engine.register("wf", async (ctx) => ctx.step("reported-once", {}, { retries: 2, backoffMs: 3_000 }))
    const runId = await engine.start("wf", {})
    const peer = await peerHolding(engine, "reported-once")
    const client = new Redis(engine.connection)
    const transport = () => redis({ prefix: engine.prefix, stalledIntervalMs: 300 })
    const firstRun = first!.run(transport())
    await registered(client, engine, "reported-once", first!)
    await peer.crash()
    await peer.close()
    // the first worker reports it, then stops before the retry is dispatched
    const claimed = `bull:${engine.prefix}-tasks-reported-once:failed:bridged:*`
    const sent = async () => {
      const keys = await client.keys(claimed)
      return keys.length === 1 && /:sent:\d+$/.test((await client.get(keys[0]!)) ?? "")
    }
    for (let i = 0; i < 300 && !(await sent()); i++) await new Promise((r) => setTimeout(r, 10))
    assert.isTrue(await sent(), "the first worker reported the failure")
    await first!.stop()
    await firstRun
    assert.deepStrictEqual(attempts, [])
    // the second worker's scans read the failure (in their window), find it reported, and leave it
    const secondRun = second!.run(transport())
    const result = await engine.waitForRun(runId, { timeoutMs: 20_000 })
    assert.strictEqual(result.status, "completed", JSON.stringify(result))
    assert.deepStrictEqual(result.output, { attempt: 2 })
    assert.deepStrictEqual(attempts, [2])
    // on the results queue: the one report of the failure and attempt 2's result
    const events = await client.xrange(`bull:${engine.prefix}-results:events`, "-", "+")
    const added = events.filter(([, fields]) => fields[0] === "event" && fields[1] === "added")
    assert.strictEqual(added.length, 2, JSON.stringify(events))
    await client.quit()
    await second!.stop()
    await secondRun
  })
})

describe("BullMQ transport when Redis goes away", () => {
  let server: ChildProcess | undefined
  let port = 0
  const startServer = async () => {
    server = await startRedisServer(port)
  }
  beforeAll(async () => {
    port = await freePort()
    await startServer()
  })
  afterAll(() => {
    server?.kill("SIGKILL")
  })

  it("reconnects and goes on after Redis restarts; accepted work is not lost", async () => {
    const engine = await startEngine({ connection: { host: "127.0.0.1", port } })
    try {
    const worker = new Worker({ ...quiet, concurrency: 4 })
    let calls = 0
    worker.step("echo", async (input: { i: number }) => {
      calls++
      return input.i
    })
    engine.register("wf", async (ctx, input) => ctx.step("echo", input))
    const running = worker.run(redis({ url: `redis://127.0.0.1:${port}`, prefix: engine.prefix }))
    assert.strictEqual((await engine.run("wf", { i: 1 })).output, 1)
    server!.kill("SIGKILL")
    await new Promise((resolve) => server!.once("exit", resolve))
    await new Promise((resolve) => setTimeout(resolve, 500))
    await startServer()
    // the restarted server is empty: the engine's state lives in its own memory store, its queues are new
    const result = await engine.run("wf", { i: 2 }, { timeoutMs: 30_000 })
    assert.strictEqual(result.status, "completed")
    assert.strictEqual(result.output, 2)
    await worker.stop()
    await running
    assert.isAtLeast(calls, 2)
    } finally {
      await engine.close()
    }
  })
})

