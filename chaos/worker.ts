/**
 * A chaos worker process: the library's promise facade on the transport named by `CHAOS_WORKER`
 * (JSON, see {@link WorkerSpec}), with the handlers the scenarios use. It reports to its parent over
 * IPC when a handler starts and when it returns, so the parent can tell a lost run from a duplicated
 * one without asking a broker it may be restarting.
 */
import { createHash } from "node:crypto"
import { postgres, redis, sqs, Worker } from "../src/promise.js"

/** What the parent asks for. */
export interface WorkerSpec {
  readonly transport: "bullmq" | "postgres" | "sqs"
  readonly prefix: string
  readonly concurrency?: number
  readonly redisPort?: number
  readonly lockDurationMs?: number
  readonly stalledIntervalMs?: number
  readonly databaseUrl?: string
  readonly leaseMs?: number
  readonly sqsEndpoint?: string
  readonly visibilityTimeoutMs?: number
  readonly shutdownTimeoutMs?: number
  readonly interruptTimeoutMs?: number
}

/** A message to the parent. */
export type Report =
  | { readonly kind: "ready"; readonly pid: number }
  | { readonly kind: "started" | "done"; readonly step: string; readonly key: string; readonly attempt: number; readonly pid: number }

const spec = JSON.parse(process.env.CHAOS_WORKER ?? "{}") as WorkerSpec
const report = (message: Report) => process.send?.(message)
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

const worker = new Worker({
  concurrency: spec.concurrency ?? 8,
  shutdownTimeoutMs: spec.shutdownTimeoutMs ?? 10_000,
  ...(spec.interruptTimeoutMs === undefined ? {} : { interruptTimeoutMs: spec.interruptTimeoutMs }),
  logLevel: (process.env.CHAOS_LOG_LEVEL ?? "None") as "None",
  // the parent stops it with SIGTERM: a graceful stop, as in production
  handleSignals: true
})

type Ctx = { readonly runId: string; readonly seq: number; readonly attempt: number }

/** The steps to serve (`CHAOS_STEPS`, comma-separated), or all. */
const only = process.env.CHAOS_STEPS?.split(",")

/** A handler that reports when it starts and when it returns. */
const tracked = <I, O>(name: string, body: (input: I, ctx: Ctx) => Promise<O>) =>
  only !== undefined && !only.includes(name) ? undefined : worker.step(name, async (input: I, ctx) => {
    const key = `${ctx.runId}:${ctx.seq}`
    report({ kind: "started", step: name, key, attempt: ctx.attempt, pid: process.pid })
    const output = await body(input, ctx)
    report({ kind: "done", step: name, key, attempt: ctx.attempt, pid: process.pid })
    return output
  })

// an ordinary step: sleeps a while and echoes its input
tracked("work", async (input: { readonly i: number; readonly sleepMs?: number }) => {
  await sleep(input.sleepMs ?? 20)
  return { i: input.i }
})

// with CHAOS_BLOCK=1, never settles on its first attempt and ignores its abort signal (the parent
// SIGKILLs or stops the worker meanwhile); otherwise returns at once
tracked("blocker", async (input: { readonly i: number }, ctx) => {
  if (ctx.attempt === 1 && process.env.CHAOS_BLOCK === "1") await new Promise(() => {})
  return { i: input.i, pid: process.pid }
})

// a 5 MB input in, a 5 MB output out; the output's digest is checked by the parent
tracked("big", async (input: { readonly blob: string }) => ({
  digest: createHash("sha256").update(input.blob).digest("hex"),
  blob: input.blob.split("").reverse().join("")
}))

/** Results and throws a handler should not be able to break the worker with. */
const hostile: Record<string, () => unknown> = {
  bigint: () => ({ n: 10n }),
  cycle: () => {
    const a: Record<string, unknown> = {}
    a.self = a
    return a
  },
  function: () => ({ f: () => 1 }),
  symbol: () => ({ s: Symbol("x") }),
  nonFinite: () => ({ n: Number.NaN }),
  throwString: () => {
    throw "a string"
  },
  throwNull: () => {
    throw null
  },
  throwGetter: () => {
    const error = new Error("boom")
    Object.defineProperty(error, "message", {
      get() {
        throw new Error("the message getter throws")
      }
    })
    throw error
  },
  throwHuge: () => {
    throw new Error("x".repeat(2_000_000))
  },
  throwCyclic: () => {
    const error = new Error("cyclic") as Error & { self?: unknown }
    error.self = error
    throw error
  },
  toJSONThrows: () => ({
    toJSON() {
      throw new Error("toJSON throws")
    }
  })
}
tracked("hostile", async (input: { readonly kind: string }) => hostile[input.kind]!())

const transport = spec.transport === "bullmq"
  ? redis({
    url: `redis://127.0.0.1:${spec.redisPort}`,
    prefix: spec.prefix,
    ...(spec.lockDurationMs === undefined ? {} : { lockDurationMs: spec.lockDurationMs }),
    ...(spec.stalledIntervalMs === undefined ? {} : { stalledIntervalMs: spec.stalledIntervalMs })
  })
  : spec.transport === "postgres"
  ? postgres({
    url: spec.databaseUrl!,
    prefix: spec.prefix,
    pollInterval: 200,
    ...(spec.leaseMs === undefined ? {} : { lease: spec.leaseMs })
  })
  : sqs({
    clientConfig: { endpoint: spec.sqsEndpoint!, region: "us-east-1", credentials: { accessKeyId: "test", secretAccessKey: "test" } },
    prefix: spec.prefix,
    autoCreate: true,
    ...(spec.visibilityTimeoutMs === undefined ? {} : { visibilityTimeout: spec.visibilityTimeoutMs })
  })

// a suite that went away (killed) leaves no worker behind
process.on("disconnect", () => process.exit(1))

const running = worker.run(transport)
report({ kind: "ready", pid: process.pid })
running.then(
  () => process.exit(0),
  (error: unknown) => {
    console.error("chaos worker stopped with an error:", error)
    process.exit(1)
  }
)
