/**
 * The chaos suite: faults from outside the worker, each against real brokers and the real
 * nestjs-durable engine, with worker processes of the suite's own. Every scenario prints what it saw
 * and fails on any run lost, duplicated (a step run to its end twice) or late (past the bound the
 * README states). `CHAOS_SCALE=small` is the bounded form CI runs; `CHAOS_ONLY=a,b` picks scenarios.
 *
 * Run with `npm run chaos` (the library from source, through `tsx --conditions=source`).
 */
import { Queue } from "bullmq"
import { Redis } from "ioredis"
import { createHash, randomUUID } from "node:crypto"
import { connect, createServer, type Server, type Socket } from "node:net"
import pg from "pg"
import { startEngine } from "../test/support/engine.js"
import { buildApp } from "fauxqs"
import { InMemoryStateStore, type WorkflowCtx, WorkflowEngine } from "@dudousxd/nestjs-durable-core"
import { SqsTransport } from "@dudousxd/nestjs-durable-transport-sqs"
import { databaseUrl, startSqlEngine } from "../test/support/sqlEngine.js"
import {
  freePort,
  Ledger,
  percentile,
  RunWatch,
  scaled,
  SCALE,
  scenario,
  sleep,
  startRedis,
  startWorker,
  stop,
  stopAll,
  type Verdict
} from "./lib.js"
import type { WorkerSpec } from "./worker.js"
import { routingToken, tasksQueue } from "../src/transport/bullmq/internal/naming.js"

type Say = (line: string) => void
type Fail = (why: string) => void

/** Judges a finished load: every run completed, none twice, and (when given) each within `bound` of `since`. */
const judge = (
  watch: RunWatch,
  ledger: Ledger,
  open: ReadonlyArray<string>,
  say: Say,
  fail: Fail,
  late?: { readonly since: number; readonly boundMs: number; readonly what: string },
  tasks?: TaskJobCount
) => {
  const runs = Array.from(watch.startedAt.keys())
  const completed = runs.filter((id) => watch.status.get(id) === "completed")
  const notCompleted = runs.filter((id) => watch.endedAt.has(id) && watch.status.get(id) !== "completed")
  say(`${runs.length} runs: ${completed.length} completed, ${notCompleted.length} ended otherwise, ${open.length} still open`)
  if (open.length > 0) fail(`${open.length} runs lost (not terminal): ${open.slice(0, 3).join(", ")}`)
  if (notCompleted.length > 0) fail(`${notCompleted.length} runs did not complete: ${notCompleted.slice(0, 3).map((id) => `${id} ${watch.status.get(id)}`).join(", ")}`)
  const duplicates = ledger.duplicates()
  say(`step executions run to their end: ${ledger.ended().reduce((sum, key) => sum + ledger.ends(key), 0)}, twice or more: ${duplicates.length}`)
  if (duplicates.length > 0) {
    // each task job is run once: a step with two jobs (an add the engine's client sent again) runs twice
    const extraRuns = duplicates.reduce((sum, key) => sum + ledger.ends(key) - 1, 0)
    const extraJobs = tasks === undefined ? 0 : Math.max(0, tasks.added - tasks.dispatched)
    const verdict = extraRuns <= extraJobs
      ? (why: string) => {
        const engine = `${why}; the engine's client added ${extraJobs} task job${extraJobs === 1 ? "" : "s"} more than the ` +
          `${tasks!.dispatched} steps the engine dispatched (an add sent again after Redis went away before replying; an ` +
          "add is not idempotent), and no more steps ran twice than that: each task job ran once (CHAOS_STRICT=1 fails on this too)"
        if (process.env.CHAOS_STRICT === "1") fail(engine)
        else say(`WARN ${engine}`)
      }
      : fail
    verdict(`${duplicates.length} steps ran to their end more than once: ${
      duplicates.slice(0, 3).map((key) => {
        const since = late === undefined ? undefined : { at: late.since, what: late.what }
        // beside the run's events as the engine reported them
        const runId = key.slice(0, key.lastIndexOf(":"))
        return `${key} (${ledger.describeExecutions(key, since)}; engine: ${watch.describe(runId, since?.at ?? watch.startedAt.get(runId) ?? 0)})`
      }).join("; ")
    }`)
  }
  if (late !== undefined) {
    const after = runs.filter((id) => (watch.endedAt.get(id) ?? Infinity) > late.since)
    const delays = after.map((id) => (watch.endedAt.get(id) ?? Infinity) - late.since)
    const worst = delays.length === 0 ? 0 : Math.max(...delays)
    say(`${after.length} runs ended after ${late.what}; the last ${(worst / 1000).toFixed(2)} s after it (bound ${late.boundMs / 1000} s)`)
    const tooLate = after.filter((_, i) => delays[i]! > late.boundMs)
    // the workers' share of a run: how long after its dispatch (or the fault's end) each of its steps
    // was taken by a worker
    const pickup = (id: string) =>
      Math.max(0, ...(watch.events.get(id) ?? []).filter((e) => e.type === "step.started").map((e) => {
        const taken = ledger.lastAt(`${id}:${String(e.seq)}`, "started")
        return taken === undefined ? Infinity : taken - Math.max(e.at, late.since)
      }))
    say(`the workers took every step of those runs within ${(Math.max(0, ...after.map(pickup)) / 1000).toFixed(2)} s of its dispatch (or of ${late.what})`)
    if (tooLate.length > 0) {
      const workerLate = tooLate.filter((id) => pickup(id) > late.boundMs)
      if (workerLate.length > 0) {
        fail(`${workerLate.length} runs ended more than ${late.boundMs / 1000} s after ${late.what}, a step taken late by the workers`)
      }
      // the rest: every step taken in time; the engine took its results late
      const lags = tooLate.flatMap((id) =>
        (watch.events.get(id) ?? []).filter((e) => e.type === "step.completed").map((e) => {
          const done = ledger.lastAt(`${id}:${String(e.seq)}`, "done")
          return done === undefined ? 0 : e.at - done
        })
      )
      const engineLate = tooLate.length - workerLate.length
      if (engineLate > 0) {
        const why = `${engineLate} runs ended more than ${late.boundMs / 1000} s after ${late.what} with every step taken by ` +
          `a worker within ${late.boundMs / 1000} s of its dispatch: the engine took a result up to ${
            (Math.max(0, ...lags) / 1000).toFixed(2)
          } s after the worker ran its step to its end (the engine's own BullMQ consumer; CHAOS_STRICT=1 fails on this too)`
        if (process.env.CHAOS_STRICT === "1") fail(why)
        else say(`WARN ${why}`)
      }
      for (const id of tooLate.slice(0, 3)) {
        say(`late: ${id} ended ${(((watch.endedAt.get(id) ?? NaN) - late.since) / 1000).toFixed(2)} s after; worker: ${ledger.describe(id, late.since)}; engine: ${watch.describe(id, late.since)}`)
      }
    }
    return worst
  }
  return 0
}

/** Starts `count` runs of `workflow`, `input(i)` each, watched. */
const startRuns = async (
  engine: { readonly start: (workflow: string, input: unknown) => Promise<string> },
  watch: RunWatch,
  workflow: string,
  count: number,
  input: (i: number) => unknown
) => {
  const ids: Array<string> = []
  for (let i = 0; i < count; i += 50) {
    ids.push(...await Promise.all(Array.from({ length: Math.min(50, count - i) }, async (_, j) => {
      const id = await engine.start(workflow, input(i + j))
      watch.watch(id)
      return id
    })))
  }
  return ids
}


/** Task jobs added to a task queue, against the steps the engine reports it dispatched. */
interface TaskJobCount {
  readonly added: number
  readonly dispatched: number
}

/**
 * Counts the task jobs added to step `step`'s queue (the `added` entries of its events stream) and
 * the steps the engine dispatched (its `step.started` events): the engine's BullMQ client sends a
 * command again when Redis went away before replying, so an add applied before the outage adds a
 * second job for the same step. The dispatches are those of every step of the watched runs (the
 * events do not name the step): meant for runs whose only step is `step`; other steps would only
 * leave fewer extra jobs, never more.
 */
const countTaskJobs = async (port: number, prefix: string, step: string, watch: RunWatch): Promise<TaskJobCount> => {
  const client = new Redis({ host: "127.0.0.1", port, maxRetriesPerRequest: 3 })
  try {
    const entries = await client.xrange(`bull:${tasksQueue(prefix, routingToken(step))}:events`, "-", "+")
    const added = entries.filter(([, fields]) => fields[fields.indexOf("event") + 1] === "added").length
    const dispatched = Array.from(watch.events.values()).flat().filter((e) => e.type === "step.started").length
    return { added, dispatched }
  } finally {
    client.disconnect()
  }
}

/** A BullMQ scenario's stage: its own redis-server, the real engine on it, a ledger and a run watch, all torn down after `body`. */
const onBullmqStage = async <A>(
  body: (stage: {
    readonly redis: Awaited<ReturnType<typeof startRedis>>
    readonly engine: Awaited<ReturnType<typeof startEngine>>
    readonly ledger: Ledger
    readonly watch: RunWatch
  }) => Promise<A>
): Promise<A> => {
  const redis = await startRedis()
  const engine = await startEngine({ connection: { host: "127.0.0.1", port: redis.port } })
  const ledger = new Ledger()
  const watch = new RunWatch(engine.engine)
  try {
    return await body({ redis, engine, ledger, watch })
  } finally {
    watch.close()
    await engine.close().catch(() => undefined)
    await redis.close()
  }
}

/** A Redis restart (SIGKILL, every write in the AOF) under a load of 200 three-step runs on two workers. */
const redisRestart = () =>
  scenario("Redis restart under a 200-run load (BullMQ)", async (say, fail) => {
    await onBullmqStage(async ({ engine, ledger, redis, watch }) => {
      engine.register("load", async (ctx, input) => {
        const { i } = input as { i: number }
        for (let s = 0; s < 3; s++) await ctx.step("work", { i, sleepMs: 20 + (i % 7) * 10 })
        return i
      })
      const spec = { transport: "bullmq", prefix: engine.prefix, redisPort: redis.port, concurrency: 8 } as const
      const workers = await Promise.all([startWorker(spec, ledger), startWorker(spec, ledger)])
      const runs = 200
      await startRuns(engine, watch, "load", runs, (i) => ({ i }))
      // restart once about a third of the steps have run
      while (ledger.ended().length < runs) await sleep(10)
      const before = watch.endedAt.size
      const answering = await redis.restart(1_000)
      say(`Redis SIGKILLed (PID) with ${before} runs ended; answering again after a 1 s outage`)
      const open = await watch.settle(60_000)
      const tasks = await countTaskJobs(redis.port, engine.prefix, "work", watch)
      say(`task jobs added: ${tasks.added}, steps the engine dispatched: ${tasks.dispatched}`)
      const worst = judge(watch, ledger, open, say, fail, { since: answering, boundMs: 5_000, what: "Redis answered again" }, tasks)
      figures.push(["Redis restart under load", `every run within ${(worst / 1000).toFixed(2)} s of Redis answering again`])
      for (const worker of workers) await stop(worker)
    })
  })

/**
 * Starts a worker whose step hangs and a second one beside it, SIGKILLs the first once its step has
 * started, and judges the run against `boundMs` from the kill: the survivor, the run and the worst delay.
 */
const killMidStep = async (
  engine: Parameters<typeof startRuns>[0] & { readonly register: (name: string, body: (ctx: WorkflowCtx, input: unknown) => Promise<unknown>) => void },
  watch: RunWatch,
  ledger: Ledger,
  spec: WorkerSpec,
  boundMs: number,
  say: Say,
  fail: Fail
) => {
  engine.register("blocking", async (ctx, input) => ctx.step("blocker", input))
  const doomed = await startWorker(spec, ledger, { CHAOS_BLOCK: "1" })
  const runId = (await startRuns(engine, watch, "blocking", 1, () => ({ i: 1 })))[0]!
  await ledger.next((report) => report.kind === "started" && report.key.startsWith(runId))
  const other = await startWorker(spec, ledger)
  await stop(doomed, "SIGKILL")
  const killed = Date.now()
  say(`worker ${doomed.pid} SIGKILLed while its step ran; worker ${other.pid} is up`)
  const open = await watch.settle(30_000)
  return { other, runId, worst: judge(watch, ledger, open, say, fail, { since: killed, boundMs, what: "the kill" }) }
}

/** A worker SIGKILLed mid-step: another worker runs the task within the lock duration plus one stalled check. */
const sigkillMidStep = () =>
  scenario("SIGKILL of a worker mid-step (BullMQ)", async (say, fail) => {
    await onBullmqStage(async ({ engine, ledger, redis, watch }) => {
      const lockDurationMs = 5_000
      const stalledIntervalMs = 2_000
      const spec = { transport: "bullmq", prefix: engine.prefix, redisPort: redis.port, lockDurationMs, stalledIntervalMs } as const
      const bound = lockDurationMs + stalledIntervalMs + 1_000
      const { other, runId, worst } = await killMidStep(engine, watch, ledger, spec, bound, say, fail)
      say(`lock ${lockDurationMs / 1000} s, stalled check every ${stalledIntervalMs / 1000} s: bound ${bound / 1000} s (1 s for the run's own round trips)`)
      figures.push(["worker SIGKILLed mid-step (BullMQ, lock 5 s, stalled check 2 s)", `task run by another worker ${(worst / 1000).toFixed(2)} s after the kill`])
      const output = (await engine.getRun(runId))?.output as { pid?: number } | undefined
      if (output?.pid !== other.pid) fail(`the run's step was not run by the surviving worker (${output?.pid} vs ${other.pid})`)
      await stop(other)
    })
  })

/** The same on PostgreSQL: another worker claims the task once its lease has run out (plus one poll). */
const sigkillMidStepSql = () =>
  scenario("SIGKILL of a worker mid-step (SQL, PostgreSQL)", async (say, fail) => {
    const engine = await startSqlEngine("postgres")
    const ledger = new Ledger()
    const watch = new RunWatch(engine.engine)
    const leaseMs = 5_000
    const pollMs = 200
    try {
      const spec = { transport: "postgres", prefix: engine.prefix, databaseUrl: databaseUrl("postgres"), leaseMs } as const
      const bound = leaseMs + pollMs + 1_000
      const { other, worst } = await killMidStep(engine, watch, ledger, spec, bound, say, fail)
      say(`lease ${leaseMs / 1000} s, polled every ${pollMs} ms: bound ${bound / 1000} s (1 s for the run's own round trips)`)
      figures.push(["worker SIGKILLed mid-step (PostgreSQL, lease 5 s, poll 200 ms)", `task run by another worker ${(worst / 1000).toFixed(2)} s after the kill`])
      await stop(other)
    } finally {
      watch.close()
      await engine.close().catch(() => undefined)
    }
  })

/** Raw jobs the engine never writes: not JSON, no identity, an unknown step. */
const malformedJobs = () =>
  scenario("raw malformed jobs (BullMQ)", async (say, fail) => {
    const redis = await startRedis()
    const engine = await startEngine({ connection: { host: "127.0.0.1", port: redis.port } })
    const ledger = new Ledger()
    const watch = new RunWatch(engine.engine)
    const connection = { host: "127.0.0.1", port: redis.port }
    const tasks = new Queue(`${engine.effectivePrefix}-tasks-work`, { connection })
    try {
      engine.register("plain", async (ctx, input) => ctx.step("work", input))
      const notJson = await tasks.add("task", { placeholder: true })
      await engine.redis.hset(`bull:${engine.effectivePrefix}-tasks-work:${notJson.id}`, "data", "{not json")
      const noIdentity = await tasks.add("task", {})
      const unknownStep = await tasks.add("task", {
        runId: "run-nobody",
        seq: 0,
        name: "no.such.step",
        stepId: "run-nobody:0",
        group: "work",
        attempt: 1,
        transport: "default"
      })
      const worker = await startWorker({ transport: "bullmq", prefix: engine.prefix, redisPort: redis.port }, ledger)
      await startRuns(engine, watch, "plain", 20, (i) => ({ i }))
      const open = await watch.settle(20_000)
      judge(watch, ledger, open, say, fail)
      for (const [what, job] of [["not JSON", notJson], ["no identity", noIdentity], ["unknown step", unknownStep]] as const) {
        let state = await tasks.getJobState(job.id!)
        for (let i = 0; i < 50 && (state === "active" || state === "waiting"); i++) {
          await sleep(100)
          state = await tasks.getJobState(job.id!)
        }
        say(`job ${what}: ${state}`)
        if (state === "active" || state === "waiting") fail(`the ${what} job is still ${state}`)
      }
      if (worker.exitCode !== null) fail(`the worker exited (${worker.exitCode})`)
      await stop(worker)
    } finally {
      watch.close()
      await tasks.close()
      await engine.close().catch(() => undefined)
      await redis.close()
    }
  })

/** Results JSON cannot carry and throws of every odd kind: each run ends at once, the worker lives on. */
const hostileHandlers = () =>
  scenario("hostile handler results and throws (BullMQ)", async (say, fail) => {
    await onBullmqStage(async ({ engine, ledger, redis, watch }) => {
      engine.register("hostile", async (ctx, input) => ctx.step("hostile", input, { retries: 1 }))
      engine.register("plain", async (ctx, input) => ctx.step("work", input))
      const worker = await startWorker({ transport: "bullmq", prefix: engine.prefix, redisPort: redis.port }, ledger)
      const kinds = ["bigint", "cycle", "function", "symbol", "nonFinite", "throwString", "throwNull", "throwGetter", "throwHuge", "throwCyclic", "toJSONThrows"]
      const ids = await startRuns(engine, watch, "hostile", kinds.length, (i) => ({ kind: kinds[i] }))
      const open = await watch.settle(20_000)
      for (const [i, id] of ids.entries()) {
        const run = await engine.getRun(id)
        const error = (run?.error as { message?: string } | undefined)?.message ?? ""
        say(`${kinds[i]}: ${run?.status} ${error.slice(0, 90)}`)
        if (run?.status !== "failed") fail(`${kinds[i]}: the run is ${run?.status}, not failed`)
      }
      if (open.length > 0) fail(`${open.length} hostile runs hang`)
      // and the worker still serves
      const plain = new RunWatch(engine.engine)
      await startRuns(engine, plain, "plain", 5, (i) => ({ i }))
      judge(plain, new Ledger(), await plain.settle(10_000), say, fail)
      plain.close()
      if (worker.exitCode !== null) fail(`the worker exited (${worker.exitCode})`)
      await stop(worker)
    })
  })

/**
 * A handler that never settles and ignores its abort: the stop fails once the deadline and
 * `interruptTimeout` have passed, naming the task (exit 1). The task is not given back while its
 * handler may still run; the process's exit ends the handler, and another worker runs the task once
 * its lock has expired.
 */
const hungAtShutdown = () =>
  scenario("a hung handler at shutdown (BullMQ)", async (say, fail) => {
    await onBullmqStage(async ({ engine, ledger, redis, watch }) => {
      const shutdownTimeoutMs = 2_000
      const interruptTimeoutMs = 1_000
      const lockDurationMs = 5_000
      const stalledIntervalMs = 2_000
      engine.register("blocking", async (ctx, input) => ctx.step("blocker", input))
      const locks = { transport: "bullmq", prefix: engine.prefix, redisPort: redis.port, lockDurationMs, stalledIntervalMs } as const
      const hung = await startWorker({ ...locks, shutdownTimeoutMs, interruptTimeoutMs }, ledger, { CHAOS_BLOCK: "1" })
      const runId = (await startRuns(engine, watch, "blocking", 1, () => ({ i: 1 })))[0]!
      await ledger.next((report) => report.kind === "started" && report.key.startsWith(runId))
      const took = await stop(hung, "SIGTERM", 15_000)
      say(`SIGTERM with the handler hung: the worker exited after ${(took / 1000).toFixed(2)} s (exit ${hung.exitCode}; shutdownTimeout ${shutdownTimeoutMs / 1000} s, interruptTimeout ${interruptTimeoutMs / 1000} s)`)
      figures.push(["hung handler at shutdown (shutdownTimeout 2 s, interruptTimeout 1 s)", `worker exited after ${(took / 1000).toFixed(2)} s, exit ${hung.exitCode}`])
      if (took > shutdownTimeoutMs + interruptTimeoutMs + 2_000) fail(`the stop took ${took} ms, past the deadline and interruptTimeout`)
      if (hung.exitCode !== 1) fail(`the worker exited with ${hung.exitCode}: a stop that left a task running must not end clean`)
      const stopped = Date.now()
      const other = await startWorker(locks, ledger)
      const open = await watch.settle(30_000)
      // not given back while its handler could still run: the next worker takes it once its lock has expired
      const bound = lockDurationMs + stalledIntervalMs + 1_000
      judge(watch, ledger, open, say, fail, { since: stopped, boundMs: bound, what: "the stop" })
      await stop(other)
    })
  })

/** 5 MB in, 5 MB out. */
const bigPayloads = () =>
  scenario("5 MB payloads (BullMQ)", async (say, fail) => {
    await onBullmqStage(async ({ engine, ledger, redis, watch }) => {
      engine.register("big", async (ctx, input) => ctx.step("big", input))
      const worker = await startWorker({ transport: "bullmq", prefix: engine.prefix, redisPort: redis.port, concurrency: 2 }, ledger)
      const count = scaled(4, 2)
      const blobs = Array.from({ length: count }, (_, i) => `${i}`.repeat(5 * 1024 * 1024).slice(0, 5 * 1024 * 1024))
      const ids = await startRuns(engine, watch, "big", count, (i) => ({ blob: blobs[i] }))
      const open = await watch.settle(60_000)
      judge(watch, ledger, open, say, fail)
      for (const [i, id] of ids.entries()) {
        const output = (await engine.getRun(id))?.output as { digest?: string; blob?: string } | undefined
        const ok = output?.digest === createHash("sha256").update(blobs[i]!).digest("hex") && output.blob?.length === blobs[i]!.length
        if (!ok) fail(`run ${id}: the 5 MB output is not the input's`)
      }
      say(`${count} runs of 5 MB in and out, outputs checked`)
      await stop(worker)
    })
  })

/** PostgreSQL: the worker's backends killed mid-run; every run ends within 5 s of the next connection. */
const postgresKill = () =>
  scenario("PostgreSQL backends killed mid-run (SQL)", async (say, fail) => {
    const engine = await startSqlEngine("postgres")
    const ledger = new Ledger()
    const watch = new RunWatch(engine.engine)
    const application = `edw-chaos-${randomUUID().slice(0, 8)}`
    const admin = new pg.Client({ connectionString: databaseUrl("postgres") })
    await admin.connect()
    try {
      engine.register("load", async (ctx, input) => {
        for (let s = 0; s < 3; s++) await ctx.step("work", { ...(input as object), sleepMs: 20 })
        return input
      })
      const url = new URL(databaseUrl("postgres"))
      url.searchParams.set("application_name", application)
      const worker = await startWorker({ transport: "postgres", prefix: engine.prefix, databaseUrl: url.toString(), concurrency: 8 }, ledger)
      const runs = scaled(100, 60)
      await startRuns(engine, watch, "load", runs, (i) => ({ i }))
      while (ledger.ended().length < runs) await sleep(10)
      const killed = await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, [application])
      const killedAt = Date.now()
      if (killed.rowCount === 0) fail("no backend of the worker was found to kill")
      // the next connection: when the worker has a backend again
      let reconnected = killedAt
      for (let i = 0; i < 500; i++) {
        const { rows } = await admin.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1`, [application])
        if (rows[0].n > 0) {
          reconnected = Date.now()
          break
        }
        await sleep(10)
      }
      say(`killed ${killed.rowCount} backends of the worker; it connected again ${reconnected - killedAt} ms later`)
      const open = await watch.settle(60_000)
      const worst = judge(watch, ledger, open, say, fail, { since: reconnected, boundMs: 5_000, what: "the next connection" })
      figures.push(["PostgreSQL backends killed (pg_terminate_backend)", `every run within ${(worst / 1000).toFixed(2)} s of the next connection`])
      await stop(worker)
    } finally {
      watch.close()
      await admin.end()
      await engine.close().catch(() => undefined)
    }
  })

/**
 * A TCP forwarder on a fixed port that can be taken down (every connection dropped, the port
 * closed) and brought back: the SQS endpoint as the worker sees it.
 */
const forwarder = async (target: number) => {
  const port = await freePort()
  const sockets = new Set<Socket>()
  let server: Server | undefined
  const up = () =>
    new Promise<void>((resolve, reject) => {
      server = createServer((client) => {
        const upstream = connect(target, "127.0.0.1")
        for (const socket of [client, upstream]) {
          sockets.add(socket)
          socket.on("error", () => {})
          socket.on("close", () => sockets.delete(socket))
        }
        client.pipe(upstream)
        upstream.pipe(client)
        client.on("close", () => upstream.destroy())
        upstream.on("close", () => client.destroy())
      })
      server.once("error", reject)
      server.listen(port, "127.0.0.1", () => resolve())
    })
  const down = () =>
    new Promise<void>((resolve) => {
      for (const socket of sockets) socket.destroy()
      server!.close(() => resolve())
    })
  await up()
  return { port, up, down }
}

/** A fauxqs server on a loopback port of its own (the package's `startFauxqs` binds every interface). */
const startFauxqs = async () => {
  const app = buildApp({ logger: false })
  await app.listen({ port: 0, host: "127.0.0.1" })
  const address = app.server.address()
  if (typeof address !== "object" || address === null) throw new Error("fauxqs did not report its port")
  return {
    port: address.port,
    clientConfig: {
      endpoint: `http://127.0.0.1:${address.port}`,
      region: "us-east-1",
      credentials: { accessKeyId: "test", secretAccessKey: "test" }
    },
    stop: () => app.close()
  }
}

/** The real engine on SQS (its published transport, creating its queues), its timers driven. */
const startSqsEngine = (clientConfig: NonNullable<ConstructorParameters<typeof SqsTransport>[0]["clientConfig"]>) => {
  const prefix = `edw-${randomUUID().slice(0, 12)}`
  const transport = new SqsTransport({ autoCreate: true, clientConfig, prefix })
  const engine = new WorkflowEngine({ store: new InMemoryStateStore(), transport })
  const timer = setInterval(() => void engine.resumeDueTimers().catch(() => undefined), 100)
  return {
    prefix,
    engine,
    register: (name: string, body: (ctx: WorkflowCtx, input: unknown) => Promise<unknown>) => engine.register(name, "1", body),
    start: async (workflow: string, input: unknown) => {
      const runId = `run-${randomUUID()}`
      await engine.start(workflow, input, runId)
      return runId
    },
    close: async () => {
      clearInterval(timer)
      await engine.drain(2_000).catch(() => undefined)
      await transport.close()
    }
  }
}

/** SQS: the endpoint restarted mid-run (every connection cut, refused for 2 s). */
const sqsRestart = () =>
  scenario("SQS endpoint restarted mid-run (fauxqs)", async (say, fail) => {
    const server = await startFauxqs()
    const engine = startSqsEngine(server.clientConfig)
    const ledger = new Ledger()
    const watch = new RunWatch(engine.engine)
    const endpoint = await forwarder(server.port)
    const visibilityTimeoutMs = 10_000
    try {
      engine.register("load", async (ctx, input) => {
        for (let s = 0; s < 2; s++) await ctx.step("work", { ...(input as object), sleepMs: 20 })
        return input
      })
      const worker = await startWorker({
        transport: "sqs",
        prefix: engine.prefix,
        sqsEndpoint: `http://127.0.0.1:${endpoint.port}`,
        concurrency: 8,
        visibilityTimeoutMs
      }, ledger, { CHAOS_STEPS: "work" })
      // one step name only: with several, the pollers of idle queues hold the permits through their
      // 20 s long polls and starve the busy one (a separate defect, measured by sqs-starvation)
      say("the worker serves the one step name the runs use")
      const runs = scaled(60, 30)
      await startRuns(engine, watch, "load", runs, (i) => ({ i }))
      const loaded = Date.now()
      while (ledger.ended().length < runs / 2) await sleep(10)
      say(`half the first steps ran ${((Date.now() - loaded) / 1000).toFixed(2)} s after the runs were started`)
      await endpoint.down()
      await sleep(2_000)
      await endpoint.up()
      const back = Date.now()
      say("the worker's SQS endpoint went down for 2 s (connections cut, then refused) and came back")
      const open = await watch.settle(90_000)
      // a receive cut mid-flight may still be served by the server: the messages it takes stay
      // invisible for the visibility timeout before anyone sees them again (SQS's rule, not ours)
      const worst = judge(watch, ledger, open, say, fail, {
        since: back,
        boundMs: visibilityTimeoutMs + 5_000,
        what: "the endpoint came back"
      })
      figures.push([
        "SQS endpoint restarted (fauxqs, visibility 10 s)",
        `every run within ${(worst / 1000).toFixed(2)} s of the endpoint coming back`
      ])
      const stopped = await stop(worker)
      say(`worker stopped in ${(stopped / 1000).toFixed(2)} s`)
    } finally {
      watch.close()
      const closing = Date.now()
      await endpoint.down().catch(() => undefined)
      await engine.close().catch(() => undefined)
      await server.stop()
      console.log(`   engine and fauxqs closed in ${((Date.now() - closing) / 1000).toFixed(2)} s`)
    }
  })

/**
 * SQS with several step names and one idle queue among them: the busy queue's tasks must be taken
 * within a few seconds, not after the other queues' long polls (20 s each) let go of the permits.
 */
const sqsStarvation = () =>
  scenario("SQS: a busy queue beside idle ones (fauxqs)", async (say, fail) => {
    const server = await startFauxqs()
    const engine = startSqsEngine(server.clientConfig)
    const ledger = new Ledger()
    const watch = new RunWatch(engine.engine)
    try {
      engine.register("one", async (ctx, input) => ctx.step("work", input))
      const worker = await startWorker({ transport: "sqs", prefix: engine.prefix, sqsEndpoint: server.clientConfig.endpoint, concurrency: 8 }, ledger)
      await sleep(1_000)
      await startRuns(engine, watch, "one", 10, (i) => ({ i }))
      const open = await watch.settle(5_000)
      say(`4 step names served, 1 busy: ${10 - open.length} of 10 runs ended within 5 s`)
      if (open.length > 0) fail(`${open.length} runs not ended within 5 s: the busy queue waits behind the idle queues' long polls`)
      await stop(worker)
    } finally {
      watch.close()
      await engine.close().catch(() => undefined)
      await server.stop()
    }
  })

/** Many runs on two workers: none lost, none run twice. */
const soak = () =>
  scenario(`soak of ${scaled(5_000, 500)} runs (BullMQ)`, async (say, fail) => {
    await onBullmqStage(async ({ engine, ledger, redis, watch }) => {
      engine.register("one", async (ctx, input) => ctx.step("work", input))
      const spec = { transport: "bullmq", prefix: engine.prefix, redisPort: redis.port, concurrency: 16 } as const
      const workers = await Promise.all([startWorker(spec, ledger), startWorker(spec, ledger)])
      const runs = scaled(5_000, 500)
      const began = Date.now()
      await startRuns(engine, watch, "one", runs, (i) => ({ i, sleepMs: i % 5 }))
      const open = await watch.settle(scaled(300_000, 60_000))
      const took = Date.now() - began
      judge(watch, ledger, open, say, fail)
      const latencies = Array.from(watch.endedAt, ([id, at]) => at - watch.startedAt.get(id)!)
      say(`${(runs / (took / 1000)).toFixed(0)} runs/s; run latency p50 ${percentile(latencies, 50)} ms, p99 ${percentile(latencies, 99)} ms`)
      for (const worker of workers) await stop(worker)
    })
  })

/** Measured figures, printed at the end. */
const figures: Array<[string, string]> = []

const scenarios: Record<string, () => Promise<Verdict>> = {
  "redis-restart": redisRestart,
  "sigkill": sigkillMidStep,
  "sigkill-sql": sigkillMidStepSql,
  "malformed": malformedJobs,
  "hostile": hostileHandlers,
  "hung-shutdown": hungAtShutdown,
  "big-payloads": bigPayloads,
  "postgres-kill": postgresKill,
  "sqs-restart": sqsRestart,
  "sqs-starvation": sqsStarvation,
  "soak": soak
}

const main = async () => {
  const only = process.env.CHAOS_ONLY?.split(",").map((s) => s.trim()).filter((s) => s !== "")
  const picked = Object.entries(scenarios).filter(([name]) => only === undefined || only.includes(name))
  console.log(`chaos suite, scale ${SCALE}: ${picked.map(([name]) => name).join(", ")}`)
  const verdicts: Array<Verdict> = []
  for (const [, run] of picked) verdicts.push(await run())
  await stopAll()
  console.log("\n== figures")
  for (const [what, figure] of figures) console.log(`   ${what}: ${figure}`)
  const failed = verdicts.filter((v) => v.failures.length > 0)
  console.log(`\nchaos: ${verdicts.length - failed.length} held, ${failed.length} failed${failed.length > 0 ? ` (${failed.map((v) => v.name).join("; ")})` : ""}`)
  process.exit(failed.length > 0 ? 1 : 0)
}

for (const signal of ["SIGINT", "SIGTERM"] as const) process.on(signal, () => void stopAll().then(() => process.exit(130)))
void main().catch(async (error) => {
  console.error(error)
  await stopAll()
  process.exit(1)
})

