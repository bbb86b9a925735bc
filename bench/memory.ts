/**
 * `npm run bench:memory`: a real demonstration of the memory admission gate.
 *
 * For each mode (fixed concurrency 16, then `"adaptive"`), a worker process (`bench/memoryWorker.ts`)
 * is started inside a memory cgroup this script creates for it (limit 512 MiB, swap not allowed),
 * serving one step that holds about 100 MiB for a few seconds, over the real BullMQ transport on a
 * unique Redis prefix. 16 such tasks are enqueued as the engine dispatches them, and the script
 * watches for the OOM kill, counts the results on `<P>-results`, samples the cgroup's working set
 * (usage minus `inactive_file`), counts how many tasks ran at once, and times the run. Every mode is
 * bounded by a hard timeout; the worker, the cgroup and the Redis keys are removed even on failure.
 *
 * Needs root and a memory cgroup controller: cgroup v2 when `/sys/fs/cgroup` is the unified hierarchy
 * with the memory controller available (that is where the worker reads its own limit), else cgroup v1
 * under `/sys/fs/cgroup/memory`. Where neither can be created it says why and exits 0.
 *
 * Environment: `REDIS_HOST` / `REDIS_PORT` (default 127.0.0.1:6379), `MEMORY_BENCH_TIMEOUT_MS`
 * (per mode, default 120000), `MEMORY_BENCH_VERBOSE=1` (print the workers' status as they run),
 * `MEMORY_BENCH_EVENTS=<file>` (append every worker event line to a file).
 */
import { Queue } from "bullmq"
import { type ChildProcess, spawn } from "node:child_process"
import { randomUUID } from "node:crypto"
import { appendFileSync, existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs"
import * as path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import { parseArgs } from "node:util"
import { JobName, resultsQueue } from "../src/transport/bullmq/internal/naming.js"
import { benchConnection } from "./peers/peer.js"
import { deletePrefixKeys, enqueueTasks } from "./support/load.js"

const MiB = 1024 * 1024
/** `MEMORY_BENCH_EVENTS=<file>`: append every line the workers print (tab-separated after the mode). */
const eventLog = process.env.MEMORY_BENCH_EVENTS
const STEP_NAME = "bench.hold-memory"
const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const WORKER = path.join(REPO, "bench", "memoryWorker.ts")

/** What the demonstration is made of. */
export interface MemoryBenchOptions {
  /** Tasks enqueued per mode. Default 16. */
  readonly tasks?: number
  /** MiB each task holds. Default 100. */
  readonly taskMib?: number
  /** How long each task holds it (ms). Default 3000. */
  readonly holdMs?: number
  /** The cgroup's memory limit (MiB). Default 512. */
  readonly limitMib?: number
  /** Hard timeout per mode (ms). Default 120 000 (`MEMORY_BENCH_TIMEOUT_MS`). */
  readonly timeoutMs?: number
  /** The modes run, in order: the `--concurrency` argument of the worker. Default `["16", "adaptive"]`. */
  readonly modes?: ReadonlyArray<string>
}

/** One mode's measurements. */
export interface ModeResult {
  readonly mode: string
  readonly outcome: string
  readonly completed: number
  readonly failed: number
  readonly maxAtOnce: number
  /** Highest sampled working set (usage minus inactive file cache), bytes. */
  readonly peakWorkingSet: number
  /** The kernel's high-water mark of the cgroup's charge (v1 `max_usage_in_bytes`, v2 `memory.peak`). */
  readonly peakCharge: number | undefined
  readonly limit: number
  readonly wallMs: number
  readonly oomKills: number
  readonly maxLimit: number | undefined
  readonly deferrals: number | undefined
  readonly learnedCostBytes: number | undefined
}

// ---------------------------------------------------------------------------------------------
// cgroups

interface CgroupFlavour {
  readonly version: 1 | 2
  /** Where the bench's cgroups are created. */
  readonly parent: string
}

interface Cgroup {
  readonly version: 1 | 2
  readonly dir: string
  /** Current charge and working set (charge minus inactive file cache), bytes. */
  readonly usage: () => { readonly charge: number; readonly workingSet: number } | undefined
  readonly peakCharge: () => number | undefined
  readonly oomKills: () => number
  readonly procs: () => ReadonlyArray<number>
}

const readText = (file: string): string | undefined => {
  try {
    return readFileSync(file, "utf8")
  } catch {
    return undefined
  }
}

const readInt = (file: string): number | undefined => {
  const text = readText(file)?.trim()
  return text !== undefined && /^\d+$/.test(text) ? Number(text) : undefined
}

const statValue = (file: string, ...keys: ReadonlyArray<string>): number | undefined => {
  const text = readText(file)
  if (text === undefined) return undefined
  const stat = new Map<string, number>()
  for (const line of text.split("\n")) {
    const [key, value] = line.trim().split(/\s+/)
    if (key !== undefined && value !== undefined && /^\d+$/.test(value)) stat.set(key, Number(value))
  }
  for (const key of keys) {
    const v = stat.get(key)
    if (v !== undefined) return v
  }
  return undefined
}

/** Tries to create (and remove) a cgroup under `parent`; the reason it cannot, or `undefined`. */
const probeCreate = (parent: string): string | undefined => {
  const dir = path.join(parent, `edw-membench-probe-${process.pid}`)
  try {
    mkdirSync(dir)
  } catch (error) {
    return `cannot create a cgroup under ${parent} (${(error as Error).message})`
  }
  try {
    rmdirSync(dir)
  } catch {
    // removed with the bench's own cgroups at worst; an empty cgroup holds nothing
  }
  return undefined
}

/** Finds a memory cgroup hierarchy this process may create cgroups in, or says why there is none. */
const detectCgroups = (): CgroupFlavour | string => {
  if (process.platform !== "linux") return `memory cgroups need Linux (this is ${process.platform})`
  if (typeof process.getuid === "function" && process.getuid() !== 0) return "creating a memory cgroup needs root"
  const reasons: Array<string> = []
  const v2 = "/sys/fs/cgroup"
  const controllers = readText(path.join(v2, "cgroup.controllers"))
  if (controllers !== undefined) {
    if (controllers.split(/\s+/).includes("memory")) {
      const subtree = readText(path.join(v2, "cgroup.subtree_control")) ?? ""
      if (!subtree.split(/\s+/).includes("memory")) {
        try {
          writeFileSync(path.join(v2, "cgroup.subtree_control"), "+memory")
        } catch (error) {
          reasons.push(`cgroup v2: cannot enable the memory controller for children (${(error as Error).message})`)
        }
      }
      if (reasons.length === 0) {
        const probe = probeCreate(v2)
        if (probe === undefined) return { version: 2, parent: v2 }
        reasons.push(`cgroup v2: ${probe}`)
      }
    } else {
      reasons.push("cgroup v2: the memory controller is not available in /sys/fs/cgroup")
    }
  }
  const v1 = "/sys/fs/cgroup/memory"
  if (existsSync(path.join(v1, "memory.limit_in_bytes"))) {
    const probe = probeCreate(v1)
    if (probe === undefined) return { version: 1, parent: v1 }
    reasons.push(`cgroup v1: ${probe}`)
  } else {
    reasons.push("cgroup v1: no memory controller mounted at /sys/fs/cgroup/memory")
  }
  return reasons.join("; ")
}

const createCgroup = (flavour: CgroupFlavour, name: string, limitBytes: number): Cgroup => {
  const dir = path.join(flavour.parent, name)
  mkdirSync(dir)
  try {
    if (flavour.version === 2) {
      writeFileSync(path.join(dir, "memory.max"), String(limitBytes))
      if (existsSync(path.join(dir, "memory.swap.max"))) writeFileSync(path.join(dir, "memory.swap.max"), "0")
      if (existsSync(path.join(dir, "memory.oom.group"))) writeFileSync(path.join(dir, "memory.oom.group"), "1")
    } else {
      writeFileSync(path.join(dir, "memory.limit_in_bytes"), String(limitBytes))
      // memory+swap at the same limit: swap cannot hide the limit (the file exists only with swap accounting)
      if (existsSync(path.join(dir, "memory.memsw.limit_in_bytes"))) {
        writeFileSync(path.join(dir, "memory.memsw.limit_in_bytes"), String(limitBytes))
      }
      if (existsSync(path.join(dir, "memory.swappiness"))) {
        try {
          writeFileSync(path.join(dir, "memory.swappiness"), "0")
        } catch {
          // not settable under some parents; memsw (when present) already bounds swap
        }
      }
    }
  } catch (error) {
    rmdirSync(dir)
    throw error
  }
  const v2 = flavour.version === 2
  return {
    version: flavour.version,
    dir,
    usage: () => {
      const charge = readInt(path.join(dir, v2 ? "memory.current" : "memory.usage_in_bytes"))
      if (charge === undefined) return undefined
      const inactive = v2
        ? statValue(path.join(dir, "memory.stat"), "inactive_file")
        : statValue(path.join(dir, "memory.stat"), "total_inactive_file", "inactive_file")
      return { charge, workingSet: inactive !== undefined && inactive < charge ? charge - inactive : charge }
    },
    peakCharge: () => readInt(path.join(dir, v2 ? "memory.peak" : "memory.max_usage_in_bytes")),
    oomKills: () =>
      (v2 ? statValue(path.join(dir, "memory.events"), "oom_kill") : statValue(path.join(dir, "memory.oom_control"), "oom_kill")) ?? 0,
    procs: () =>
      (readText(path.join(dir, "cgroup.procs")) ?? "").split("\n").filter((l) => /^\d+$/.test(l.trim())).map(Number)
  }
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** Kills what is left in the cgroup and removes it (a cgroup with live tasks cannot be removed). */
const removeCgroup = async (cgroup: Cgroup): Promise<void> => {
  for (let attempt = 0; attempt < 50; attempt++) {
    for (const pid of cgroup.procs()) {
      try {
        process.kill(pid, "SIGKILL")
      } catch {
        // already gone
      }
    }
    try {
      rmdirSync(cgroup.dir)
      return
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return
      await sleep(100)
    }
  }
  process.stderr.write(`bench:memory: could not remove ${cgroup.dir}\n`)
}

// ---------------------------------------------------------------------------------------------
// one mode

interface WorkerEvent {
  readonly ev: string
  readonly [key: string]: unknown
}

/** Spawns the worker inside the cgroup from its first instruction: `sh` joins the cgroup, then execs node. */
const spawnWorker = (cgroup: Cgroup, args: ReadonlyArray<string>): ChildProcess =>
  spawn(
    "/bin/sh",
    [
      "-c",
      `echo $$ > "$0" && exec "$@"`,
      path.join(cgroup.dir, "cgroup.procs"),
      process.execPath,
      "--import",
      "tsx",
      "--conditions=source",
      WORKER,
      ...args
    ],
    { cwd: REPO, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env } }
  )

const fmtMiB = (bytes: number | undefined) => (bytes === undefined ? "n/a" : `${Math.round(bytes / MiB)} MiB`)

const runMode = async (
  flavour: CgroupFlavour,
  mode: string,
  options: Required<Omit<MemoryBenchOptions, "modes">>,
  cleanups: Array<() => Promise<void>>
): Promise<ModeResult> => {
  const tag = randomUUID().slice(0, 8)
  const prefix = `edw-membench-${tag}`
  const limit = options.limitMib * MiB
  const label = /^\d+$/.test(mode) ? `fixed ${mode}` : mode
  const cgroup = createCgroup(flavour, `edw-membench-${process.pid}-${tag}`, limit)
  const connection = benchConnection()
  const results = new Queue(resultsQueue(prefix), { connection })
  let child: ChildProcess | undefined
  let stopSampler = () => {}
  const cleanup = async () => {
    stopSampler()
    if (child !== undefined && child.exitCode === null && child.signalCode === null) child.kill("SIGKILL")
    await removeCgroup(cgroup)
    await results.close().catch(() => undefined)
    await deletePrefixKeys(prefix, connection).catch((error) =>
      process.stderr.write(`bench:memory: could not delete Redis keys of ${prefix}: ${String(error)}\n`)
    )
  }
  cleanups.push(cleanup)
  try {
    child = spawnWorker(cgroup, [
      "--prefix",
      prefix,
      "--concurrency",
      mode,
      "--mib",
      String(options.taskMib),
      "--hold-ms",
      String(options.holdMs)
    ])
    const proc = child
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      proc.once("exit", (code, signal) => resolve({ code, signal }))
    )
    let stderrTail = ""
    proc.stderr!.setEncoding("utf8").on("data", (chunk: string) => {
      stderrTail = (stderrTail + chunk).slice(-4000)
    })
    let ready: () => void = () => {}
    const isReady = new Promise<void>((resolve) => (ready = resolve))
    let running = 0
    let maxAtOnce = 0
    let maxLimit: number | undefined
    let deferrals: number | undefined
    let learnedCostBytes: number | undefined
    let buffered = ""
    proc.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
      buffered += chunk
      let newline = buffered.indexOf("\n")
      while (newline >= 0) {
        const line = buffered.slice(0, newline)
        buffered = buffered.slice(newline + 1)
        newline = buffered.indexOf("\n")
        if (eventLog !== undefined) appendFileSync(eventLog, `${label}\t${line}\n`)
        let event: WorkerEvent
        try {
          event = JSON.parse(line) as WorkerEvent
        } catch {
          continue
        }
        if (event.ev === "ready") ready()
        else if (event.ev === "start") maxAtOnce = Math.max(maxAtOnce, ++running)
        else if (event.ev === "end") running -= 1
        else if (event.ev === "status") {
          const concurrency = event["concurrency"] as { limit?: number } | undefined
          if (typeof concurrency?.limit === "number") maxLimit = Math.max(maxLimit ?? 0, concurrency.limit)
          const memory = event["memory"] as { deferrals?: number; stepCostBytes?: Record<string, number> } | undefined
          if (typeof memory?.deferrals === "number") deferrals = memory.deferrals
          const cost = memory?.stepCostBytes?.[STEP_NAME]
          if (typeof cost === "number") learnedCostBytes = cost
          if (process.env.MEMORY_BENCH_VERBOSE === "1") {
            process.stderr.write(
              `  [${label}] limit=${concurrency?.limit} inFlight=${String(event["inFlight"])} ` +
                `rss=${fmtMiB(event["rssBytes"] as number | undefined)} gate=${String((memory as { gate?: string } | undefined)?.gate)} ` +
                `waiting=${String((memory as { waiting?: number } | undefined)?.waiting)} running=${running} ` +
                `idle=${fmtMiB((memory as { idleUsageBytes?: number } | undefined)?.idleUsageBytes)} cost=${fmtMiB(cost)}\n`
            )
          }
        }
      }
    })

    const readyOrExit = await Promise.race([
      isReady.then(() => "ready" as const),
      exited.then(() => "exited" as const),
      sleep(60_000).then(() => "timeout" as const)
    ])
    if (readyOrExit !== "ready") {
      throw new Error(`the ${label} worker did not start (${readyOrExit}):\n${stderrTail}`)
    }

    let peakWorkingSet = 0
    const sampler = setInterval(() => {
      const usage = cgroup.usage()
      if (usage !== undefined) peakWorkingSet = Math.max(peakWorkingSet, usage.workingSet)
    }, 25)
    stopSampler = () => clearInterval(sampler)

    const t0 = performance.now()
    await enqueueTasks({ prefix, stepName: STEP_NAME, n: options.tasks, connection })
    let outcome: string | undefined
    let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined
    void exited.then((e) => (exit = e))
    let count = 0
    while (outcome === undefined) {
      count = await results.count()
      if (count >= options.tasks) break
      if (exit !== undefined) break
      if (performance.now() - t0 > options.timeoutMs) outcome = `timed out after ${options.timeoutMs / 1000} s`
      else await sleep(50)
    }
    const wallMs = performance.now() - t0
    stopSampler()

    let completed = 0
    let failed = 0
    for (const job of await results.getWaiting(0, -1)) {
      const data = job.data as { status?: unknown }
      if (job.name !== JobName.result) continue
      if (data.status === "completed") completed += 1
      else failed += 1
    }

    if (exit === undefined) {
      proc.kill("SIGTERM")
      exit = await Promise.race([exited, sleep(15_000).then(() => undefined)])
      if (exit === undefined) {
        proc.kill("SIGKILL")
        exit = await exited
      }
    } else {
      // the worker died on its own
      await sleep(200)
    }
    const oomKills = cgroup.oomKills()
    const killed = exit.signal === "SIGKILL" && outcome === undefined
    if (outcome === undefined) {
      if (oomKills > 0 || killed) outcome = `OOM-killed${oomKills > 0 ? ` (oom_kill ${oomKills})` : " (SIGKILL)"}`
      else if (count < options.tasks) {
        outcome = `worker exited (${exit.signal ?? `code ${exit.code}`}) early:\n${stderrTail}`
      } else if (completed === options.tasks && failed === 0) outcome = "all completed"
      else outcome = `${failed} failed`
    } else if (oomKills > 0) outcome += `, OOM-killed (oom_kill ${oomKills})`

    return {
      mode: label,
      outcome,
      completed,
      failed,
      maxAtOnce,
      peakWorkingSet,
      peakCharge: cgroup.peakCharge(),
      limit,
      wallMs,
      oomKills,
      maxLimit,
      deferrals,
      learnedCostBytes
    }
  } finally {
    await cleanup()
    cleanups.splice(cleanups.indexOf(cleanup), 1)
  }
}

// ---------------------------------------------------------------------------------------------
// report

/** The markdown table of the modes. */
export const table = (rows: ReadonlyArray<ModeResult>): string => {
  const lines = [
    "| mode | outcome | completed | failed | max at once | peak working set | limit | wall time |",
    "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
  ]
  for (const r of rows) {
    lines.push(
      `| ${r.mode} | ${r.outcome.split("\n")[0]} | ${r.completed} | ${r.failed} | ${r.maxAtOnce} | ` +
        `${fmtMiB(r.peakWorkingSet)} | ${fmtMiB(r.limit)} | ${(r.wallMs / 1000).toFixed(1)} s |`
    )
  }
  return lines.join("\n")
}

/** Runs the demonstration and prints its table; resolves with the rows (none when it cannot run here). */
export const main = async (options: MemoryBenchOptions = {}): Promise<ReadonlyArray<ModeResult>> => {
  const resolved = {
    tasks: options.tasks ?? 16,
    taskMib: options.taskMib ?? 100,
    holdMs: options.holdMs ?? 3000,
    limitMib: options.limitMib ?? 512,
    timeoutMs: options.timeoutMs ?? Number(process.env.MEMORY_BENCH_TIMEOUT_MS ?? 120_000)
  }
  const modes = options.modes ?? ["16", "adaptive"]
  const flavour = detectCgroups()
  if (typeof flavour === "string") {
    console.log(`bench:memory: skipped — cannot create a memory-limited cgroup here: ${flavour}`)
    return []
  }
  console.log(
    `bench:memory: cgroup v${flavour.version} under ${flavour.parent}, limit ${resolved.limitMib} MiB (no swap); ` +
      `${resolved.tasks} tasks each holding ${resolved.taskMib} MiB for ${resolved.holdMs / 1000} s, over BullMQ on ` +
      `${benchConnection().host}:${benchConnection().port}`
  )
  const cleanups: Array<() => Promise<void>> = []
  const onSignal = (signal: NodeJS.Signals) => {
    void Promise.allSettled(cleanups.map((c) => c())).then(() => process.exit(signal === "SIGINT" ? 130 : 143))
  }
  process.once("SIGINT", onSignal)
  process.once("SIGTERM", onSignal)
  const rows: Array<ModeResult> = []
  try {
    for (const mode of modes) {
      const label = /^\d+$/.test(mode) ? `fixed ${mode}` : mode
      console.log(`\n— ${label} …`)
      const row = await runMode(flavour, mode, resolved, cleanups)
      rows.push(row)
      console.log(
        `  ${row.outcome.split("\n")[0]}: ${row.completed} completed, ${row.failed} failed, ${row.maxAtOnce} at once, ` +
          `peak working set ${fmtMiB(row.peakWorkingSet)} (kernel peak charge ${fmtMiB(row.peakCharge)}), ` +
          `${(row.wallMs / 1000).toFixed(1)} s` +
          (row.maxLimit !== undefined ? `; highest limit ${row.maxLimit}` : "") +
          (row.deferrals !== undefined ? `, ${row.deferrals} deferrals` : "") +
          (row.learnedCostBytes !== undefined ? `, learned cost ${fmtMiB(row.learnedCostBytes)}` : "")
      )
      if (row.outcome.includes("\n")) console.log(row.outcome)
    }
  } finally {
    process.off("SIGINT", onSignal)
    process.off("SIGTERM", onSignal)
  }
  console.log(`\n${table(rows)}`)
  console.log(
    "\nmax at once: tasks holding their memory at the same moment (the worker's start/end lines); " +
      "peak working set: highest sampled cgroup usage minus inactive file cache; wall time: first enqueue " +
      "to the last result, or to the kill."
  )
  return rows
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  // Optional overrides: --tasks N --mib N --hold-ms N --limit-mib N --timeout-ms N --modes 16,adaptive
  const { values } = parseArgs({
    options: {
      tasks: { type: "string" },
      mib: { type: "string" },
      "hold-ms": { type: "string" },
      "limit-mib": { type: "string" },
      "timeout-ms": { type: "string" },
      modes: { type: "string" }
    }
  })
  const pick = <K extends string>(key: K, v: string | undefined): Partial<Record<K, number>> =>
    v === undefined ? {} : ({ [key]: Number(v) } as Record<K, number>)
  main({
    ...pick("tasks", values.tasks),
    ...pick("taskMib", values.mib),
    ...pick("holdMs", values["hold-ms"]),
    ...pick("limitMib", values["limit-mib"]),
    ...pick("timeoutMs", values["timeout-ms"]),
    ...(values.modes === undefined ? {} : { modes: values.modes.split(",").map((m) => m.trim()) })
  }).then(
    () => process.exit(0),
    (error) => {
      console.error(error)
      process.exit(1)
    }
  )
}
