/**
 * What the chaos scenarios share: processes they start (a redis-server on a spare loopback port,
 * worker processes), stopped by PID only; the record of which handler ran where; and how runs are
 * watched and judged (lost, duplicated, late).
 */
import { type ChildProcess, fork, spawn } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { Redis } from "ioredis"
import type { Report, WorkerSpec } from "./worker.js"

/** `small` (CI: fewer runs) or `full`. */
export const SCALE = process.env.CHAOS_SCALE === "small" ? "small" : "full"

/** `full` value, or `small` under `CHAOS_SCALE=small`. */
export const scaled = (full: number, small: number): number => SCALE === "small" ? small : full

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

/** A TCP port nothing listens on right now, on 127.0.0.1. */
export const freePort = (): Promise<number> =>
  new Promise<number>((resolve, reject) => {
    const server = createServer()
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      server.close(() => typeof address === "object" && address !== null ? resolve(address.port) : reject(new Error("no port")))
    })
  })

/** Every process the suite started and has not seen exit, by PID: stopped on the way out. */
const started = new Map<number, ChildProcess>()

/** Sends `signal` to a process the suite started (by its PID) and waits for it to exit. */
export const stop = async (child: ChildProcess, signal: NodeJS.Signals = "SIGTERM", timeoutMs = 15_000): Promise<number> => {
  const began = Date.now()
  if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return 0
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()))
  process.kill(child.pid, signal)
  const timer = sleep(timeoutMs).then(() => "timeout" as const)
  if (await Promise.race([exited.then(() => "exited" as const), timer]) === "timeout") {
    process.kill(child.pid, "SIGKILL")
    await exited
    throw new Error(`process ${child.pid} did not exit within ${timeoutMs} ms of ${signal}; killed`)
  }
  return Date.now() - began
}

const track = (child: ChildProcess) => {
  if (child.pid !== undefined) started.set(child.pid, child)
  child.once("exit", () => child.pid !== undefined && started.delete(child.pid))
  return child
}

/** Stops (SIGKILL, by PID) whatever the suite started and is still running. */
export const stopAll = async (): Promise<void> => {
  await Promise.all(Array.from(started.values(), (child) => stop(child, "SIGKILL").catch(() => 0)))
}

/** A redis-server of the suite's own: loopback, a spare port, every write in its AOF before it is answered. */
export interface OwnRedis {
  readonly port: number
  readonly process: () => ChildProcess
  /** SIGKILLs it (by PID) and starts it again on the same port and data; resolves when it answers again, with that time. */
  readonly restart: (downMs: number) => Promise<number>
  readonly close: () => Promise<void>
}

export const startRedis = async (): Promise<OwnRedis> => {
  const port = await freePort()
  const dir = mkdtempSync(join(tmpdir(), "edw-chaos-redis-"))
  let child: ChildProcess
  const launch = async () => {
    child = track(spawn("redis-server", [
      "--port", String(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "",
      "--appendonly", "yes", "--appendfsync", "always"
    ], { stdio: "ignore" }))
    const probe = new Redis({ port, lazyConnect: true, retryStrategy: () => 20, maxRetriesPerRequest: null })
    probe.on("error", () => {})
    await probe.connect().catch(() => undefined)
    // answering means loaded: Redis refuses commands with LOADING while it reads its AOF
    for (;;) {
      const pong = await probe.ping().catch(() => "")
      if (pong === "PONG") break
      await sleep(10)
    }
    probe.disconnect()
    return Date.now()
  }
  await launch()
  return {
    port,
    process: () => child,
    restart: async (downMs) => {
      await stop(child, "SIGKILL")
      await sleep(downMs)
      return launch()
    },
    close: async () => {
      await stop(child, "SIGKILL")
      rmSync(dir, { recursive: true, force: true })
    }
  }
}

/** One start or end of a step execution, as a worker process reported it. */
interface Execution {
  readonly kind: "started" | "done"
  readonly attempt: number
  readonly pid: number
  readonly at: number
}

/** Which handler ran, where and how often, as the worker processes report it. */
export class Ledger {
  /** Every start and end reported of each step execution, in order: the counts and times derive from it. */
  readonly executions = new Map<string, Array<Execution>>()
  readonly listeners: Array<(report: Report) => void> = []

  record(report: Report): void {
    if (report.kind === "ready") return
    const executions = this.executions.get(report.key) ?? []
    executions.push({ kind: report.kind, attempt: report.attempt, pid: report.pid, at: Date.now() })
    this.executions.set(report.key, executions)
    for (const listener of this.listeners) listener(report)
  }

  /** How often step execution `key` was reported run to its end. */
  ends(key: string): number {
    return (this.executions.get(key) ?? []).filter((e) => e.kind === "done").length
  }

  /** The step executions run to their end at least once. */
  ended(): Array<string> {
    return Array.from(this.executions.keys()).filter((key) => this.ends(key) > 0)
  }

  /** When step execution `key` was last reported `kind`. */
  lastAt(key: string, kind: Execution["kind"]): number | undefined {
    const executions = this.executions.get(key) ?? []
    for (let i = executions.length - 1; i >= 0; i--) if (executions[i]!.kind === kind) return executions[i]!.at
    return undefined
  }

  /** The steps of `runId` as `seq: started +Xs, done +Ys` relative to `since`. */
  describe(runId: string, since: number): string {
    const at = (t: number | undefined) => t === undefined ? "never" : `${((t - since) / 1000).toFixed(2)} s`
    return Array.from(this.executions.keys()).filter((key) => key.startsWith(`${runId}:`)).map((key) =>
      `seq ${key.slice(runId.length + 1)} started ${at(this.lastAt(key, "started"))} done ${at(this.lastAt(key, "done"))}`
    ).join("; ")
  }

  /**
   * The starts and ends of step execution `key`: which attempt, in which worker, and when, in seconds
   * from `since` (`what`), or from the first report.
   */
  describeExecutions(key: string, since?: { readonly at: number; readonly what: string }): string {
    const executions = this.executions.get(key) ?? []
    const from = since?.at ?? executions[0]?.at ?? 0
    const when = (at: number) => `${at >= from ? "+" : ""}${((at - from) / 1000).toFixed(2)} s`
    return executions.map(({ at, attempt, kind, pid }) => `${kind === "done" ? "ended" : "started"} attempt ${attempt} in worker ${pid} at ${when(at)}`)
      .join(", ") + (since === undefined ? "" : ` (from ${since.what})`)
  }

  /** Step executions that ran to their end more than once. */
  duplicates(): Array<string> {
    return Array.from(this.executions.keys()).filter((key) => this.ends(key) > 1)
  }

  /** Resolves with the first report `predicate` accepts. */
  next(predicate: (report: Report) => boolean): Promise<Report> {
    return new Promise((resolve) => {
      const listener = (report: Report) => {
        if (!predicate(report)) return
        this.listeners.splice(this.listeners.indexOf(listener), 1)
        resolve(report)
      }
      this.listeners.push(listener)
    })
  }
}

const workerEntry = fileURLToPath(new URL("./worker.ts", import.meta.url))

/** Starts a worker process (the library from source, through tsx) reporting to `ledger`. */
export const startWorker = (spec: WorkerSpec, ledger: Ledger, env: Record<string, string> = {}): Promise<ChildProcess> => {
  const child = track(fork(workerEntry, [], {
    execArgv: ["--import", "tsx", "--conditions=source"],
    env: { ...process.env, ...env, CHAOS_WORKER: JSON.stringify(spec) },
    stdio: ["ignore", "inherit", "inherit", "ipc"]
  }))
  return new Promise((resolve, reject) => {
    child.on("message", (report: Report) => {
      if (report.kind === "ready") resolve(child)
      ledger.record(report)
    })
    child.once("exit", (code) => reject(new Error(`worker exited with ${code} before it was ready`)))
  })
}

/** The engine events a watcher needs (nestjs-durable's `engine.subscribe`). */
export interface EngineLike {
  readonly subscribe: (listener: (event: { readonly type: string; readonly runId: string }) => void) => () => void
  readonly getRun: (runId: string) => Promise<{ readonly status: string; readonly output?: unknown; readonly error?: unknown } | null>
}

/** When each watched run reached a terminal state, from the engine's events (and a slow poll as backstop). */
export class RunWatch {
  readonly startedAt = new Map<string, number>()
  readonly endedAt = new Map<string, number>()
  readonly status = new Map<string, string>()
  /** The engine's events of each watched run, with when they came (for the account of a late run). */
  readonly events = new Map<string, Array<{ readonly type: string; readonly seq: unknown; readonly at: number }>>()
  private readonly off: () => void

  constructor(private readonly engine: EngineLike) {
    this.off = engine.subscribe((event) => {
      if (this.startedAt.has(event.runId)) {
        const list = this.events.get(event.runId) ?? []
        list.push({ type: event.type, seq: (event as { seq?: unknown }).seq, at: Date.now() })
        this.events.set(event.runId, list)
      }
      if (!this.startedAt.has(event.runId) || this.endedAt.has(event.runId)) return
      if (event.type === "run.completed" || event.type === "run.failed") void this.check(event.runId)
    })
  }

  watch(runId: string): void {
    this.startedAt.set(runId, Date.now())
  }

  private async check(runId: string) {
    const run = await this.engine.getRun(runId)
    if (run === null || this.endedAt.has(runId)) return
    if (["completed", "failed", "cancelled", "dead"].includes(run.status)) {
      this.endedAt.set(runId, Date.now())
      this.status.set(runId, run.status)
    }
  }

  /** The engine's events of `runId` as `type(seq) +Xs` relative to `since`. */
  describe(runId: string, since: number): string {
    return (this.events.get(runId) ?? []).map((e) =>
      `${e.type}${e.seq === undefined ? "" : `(${String(e.seq)})`} ${((e.at - since) / 1000).toFixed(2)} s`
    ).join(", ")
  }

  /** Waits until every watched run is terminal or `timeoutMs` passes; returns the runs still open. */
  async settle(timeoutMs: number): Promise<Array<string>> {
    const deadline = Date.now() + timeoutMs
    for (;;) {
      const open = Array.from(this.startedAt.keys()).filter((id) => !this.endedAt.has(id))
      if (open.length === 0 || Date.now() > deadline) return open
      // the backstop: events can be missed while the broker is away
      await Promise.all(open.slice(0, 500).map((id) => this.check(id)))
      await sleep(250)
    }
  }

  close(): void {
    this.off()
  }
}

/** One scenario's verdict: what it saw, and the failures (none when it held). */
export interface Verdict {
  readonly name: string
  readonly saw: Array<string>
  readonly failures: Array<string>
  readonly ms: number
}

/** Runs a scenario, catching what it throws as a failure. */
export const scenario = async (name: string, body: (say: (line: string) => void, fail: (why: string) => void) => Promise<void>): Promise<Verdict> => {
  const saw: Array<string> = []
  const failures: Array<string> = []
  const began = Date.now()
  console.log(`\n== ${name}`)
  try {
    await body((line) => {
      saw.push(line)
      console.log(`   ${line}`)
    }, (why) => {
      failures.push(why)
      console.log(`   FAIL ${why}`)
    })
  } catch (error) {
    failures.push(`threw: ${error instanceof Error ? error.stack ?? error.message : String(error)}`)
    console.log(`   FAIL threw: ${error instanceof Error ? error.message : String(error)}`)
  }
  const ms = Date.now() - began
  console.log(`   ${failures.length === 0 ? "held" : "FAILED"} (${(ms / 1000).toFixed(1)} s)`)
  return { name, saw, failures, ms }
}

/** Percentile `p` (0-100) of `values`. */
export const percentile = (values: ReadonlyArray<number>, p: number): number => {
  if (values.length === 0) return 0
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!
}
