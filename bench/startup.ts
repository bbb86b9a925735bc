/**
 * `npm run bench:startup`: what a user pays before the first task, measured on the package as a user
 * gets it (packed with `npm pack`, installed from the tarball into a throwaway project):
 *
 * 1. cold import, in a fresh `node` each time: `effect-durable-worker/bullmq` against `bullmq` plus
 *    `effect` (its root barrel, as an Effect application imports it), time and RSS; the root and
 *    `/promise` entries for information, and the CommonJS build `require`d (as a NestJS application
 *    loads it) against `require` of `bullmq` + `effect`;
 * 2. from just before `run()` (or a plain BullMQ worker's `new Worker`) to the first result on a
 *    pre-filled queue, in a fresh process each time, each process's imports done before the clock starts,
 *    once as a user's process meets that window and once with the imports' garbage collected before the
 *    clock (`--expose-gc`), which leaves in the window only what `run()` itself does;
 *    beside them the upstream worker (`@dudousxd/durable-worker`'s `runRedisWorker`, installed in a
 *    project of its own), and, for reference, the plain worker acquired and answering in a bare Effect
 *    program: what the Effect runtime's own start adds before any worker built on it does anything;
 * 3. install size and package count of a Redis-only and a Postgres-only project.
 *
 * Variants alternate within each round (their order rotating). Absolute figures are medians over the
 * rounds; a ratio is the median over the rounds of that round's ratio (the shared machine's speed
 * drifts far more between rounds, seconds apart, than within one). Each round runs in one of
 * several copies of the projects, the copy rotating with the round (see `LAYOUTS` for why).
 * Budgets: import time ≤ 1.15x, import RSS ≤ 1.1x, first task ≤ 1.3x.
 *
 * `ROUNDS` (default 15), `LAYOUTS` (default 5) and `FIRST_TASK_PREFILL` (default 100) tune it;
 * `REDIS_HOST`/`REDIS_PORT` as the other benchmarks.
 */
import { execFile } from "node:child_process"
import { cp, mkdtemp, rm, writeFile } from "node:fs/promises"
import * as os from "node:os"
import * as path from "node:path"
import { promisify } from "node:util"
import { JobName, resultJobOptions, resultsQueue, routingToken, tasksQueue } from "../src/transport/bullmq/internal/naming.js"
import { cleanEnv, installProject, packageCount, packProject, treeBytes } from "../test/package/pack.js"
import { deletePrefixKeys, enqueueTasks } from "./support/load.js"
import { median, roundRatio } from "./support/stats.js"
import { benchConnection } from "./peers/peer.js"

const exec = promisify(execFile)
const ROUNDS = Number(process.env.ROUNDS ?? 15)
const PREFILL = Number(process.env.FIRST_TASK_PREFILL ?? 100)
/**
 * How many copies of each project the rounds rotate over. Where a project lies moves the first-task
 * timings as a user meets them: the same install copied to other directories (nothing but the path
 * differing) gave the Effect programs' first task up to a quarter faster or slower, consistently so in
 * that directory. Most likely the cause is the young-generation collection of the imports' garbage,
 * which V8 runs as a task of its own, inside the window or just before it, as the amount the imports
 * allocated decides: with that garbage collected before the clock, no copy stands out. One directory
 * would lend the as-met figures its bias.
 */
const LAYOUTS = Number(process.env.LAYOUTS ?? 5)
const STEP = "bench.startup"

const REDIS_ONLY = ["effect", "@effect/platform", "bullmq", "ioredis"]
const POSTGRES_ONLY = ["effect", "@effect/platform", "@effect/sql", "@effect/sql-pg", "@effect/experimental", "pg"]
/** The upstream worker's project (its required peer, the engine's core, comes with it). */
const UPSTREAM = ["bullmq", "ioredis", "@dudousxd/durable-worker"]

// --- the scripts run in the installed project -------------------------------------------------

/**
 * How a cold-import sample loads its specifiers: `import` (an ES module application) or `require`
 * (CommonJS, as a NestJS application with its default tsconfig loads the package), and the script
 * that does it.
 */
type Load = "import" | "require"
const LOAD_SCRIPTS: Record<Load, { readonly file: string; readonly load: string }> = {
  import: { file: "import.mjs", load: "await import(specifier)" },
  require: { file: "require.cjs", load: "require(specifier)" }
}
const loadScript = (load: Load) => `
const specifiers = process.argv.slice(2)
const cpu0 = process.cpuUsage()
const t0 = performance.now()
for (const specifier of specifiers) ${LOAD_SCRIPTS[load].load}
const ms = performance.now() - t0
const cpu = process.cpuUsage(cpu0)
console.log(JSON.stringify({ ms, cpuMs: (cpu.user + cpu.system) / 1000, rss: process.memoryUsage().rss }))
`

// Every first-task script watches the results queue's event stream on a connection opened before the
// clock starts, and stop the clock at the first job added to it.
const WATCH = `
import { Redis } from "ioredis"
const env = JSON.parse(process.env.EDW_BENCH)
const watcher = new Redis(env.url)
await watcher.ping()
const firstResult = (async () => {
  let last = "0"
  for (;;) {
    const reply = await watcher.xread("BLOCK", 0, "STREAMS", "bull:" + env.resultsQueue + ":events", last)
    for (const [, entries] of reply) {
      for (const [id, fields] of entries) {
        last = id
        for (let i = 0; i < fields.length; i += 2) if (fields[i] === "event" && fields[i + 1] === "added") return
      }
    }
  }
})()
// Under --expose-gc, the garbage the imports left is collected before the clock starts: otherwise
// V8 collects it in a task of its own that lands inside the window, in some variants and not others.
const start = () => {
  globalThis.gc?.()
  return performance.now()
}
const done = async (t0) => {
  await firstResult
  console.log(JSON.stringify({ ms: performance.now() - t0 }))
  process.exit(0)
}
`

const FIRST_OURS = `
import { Worker } from "effect-durable-worker/promise"
import { redis } from "effect-durable-worker/bullmq"
${WATCH}
const worker = new Worker({ concurrency: 10, handleSignals: false, logLevel: "None" })
worker.step(env.step, () => undefined)
const t0 = start()
worker.run(redis({ url: env.url, prefix: env.prefix }))
await done(t0)
`

const FIRST_PLAIN = `
import { Queue, Worker } from "bullmq"
${WATCH}
const t0 = start()
const connection = { host: env.host, port: env.port, maxRetriesPerRequest: null }
const results = new Queue(env.resultsQueue, { connection })
new Worker(env.tasksQueue, async (job) => {
  const task = job.data
  await results.add(env.resultJobName, { runId: task.runId, seq: task.seq, stepId: task.stepId, status: "completed", startedAt: Date.now() }, env.resultJobOptions)
}, { connection, concurrency: 10 })
await done(t0)
`

// The upstream worker imports bullmq inside runRedisWorker: imported here first, so that its module
// is loaded before the clock starts, as every other variant's is.
const FIRST_UPSTREAM = `
import "bullmq"
import { DurableWorkerRuntime, runRedisWorker } from "@dudousxd/durable-worker"
${WATCH}
const runtime = new DurableWorkerRuntime().registerStep(env.step, async () => undefined)
const t0 = start()
runRedisWorker({ runtime, connection: { host: env.host, port: env.port, maxRetriesPerRequest: null }, prefix: env.prefix, concurrency: 10 })
await done(t0)
`

// The least an Effect worker does on top of plain BullMQ: the same worker, acquired in a scope of an
// Effect program, each job handled by an effect. Not a competitor: the floor the Effect runtime's
// own start sets under any worker built on it.
const FIRST_EFFECT_FLOOR = `
import { Queue, Worker } from "bullmq"
import { Effect } from "effect"
${WATCH}
const t0 = start()
const connection = { host: env.host, port: env.port, maxRetriesPerRequest: null }
Effect.runFork(Effect.scoped(Effect.gen(function*() {
  const results = yield* Effect.acquireRelease(
    Effect.sync(() => new Queue(env.resultsQueue, { connection })),
    (queue) => Effect.promise(() => queue.close())
  )
  const answer = (task) => Effect.tryPromise(() =>
    results.add(env.resultJobName, { runId: task.runId, seq: task.seq, stepId: task.stepId, status: "completed", startedAt: Date.now() }, env.resultJobOptions))
  yield* Effect.acquireRelease(
    Effect.sync(() => new Worker(env.tasksQueue, (job) => Effect.runPromise(answer(job.data)), { connection, concurrency: 10 })),
    (worker) => Effect.promise(() => worker.close())
  )
  return yield* Effect.never
})))
await done(t0)
`

// --- measuring ----------------------------------------------------------------------------------

const nodeJson = async <A>(cwd: string, args: ReadonlyArray<string>, env: Record<string, string> = {}): Promise<A> => {
  const { stdout } = await exec(process.execPath, args, { cwd, env: cleanEnv(env), maxBuffer: 16 * 1024 * 1024 })
  return JSON.parse(stdout.trim().split("\n").at(-1)!) as A
}

/**
 * Each variant once per round, the order rotating, so drift of the machine hits all alike; `once`
 * gets the round's copy of the projects (see `LAYOUTS`).
 */
const alternate = async <K extends string, A>(
  variants: ReadonlyArray<K>,
  once: (variant: K, layout: number) => Promise<A>
): Promise<Record<K, Array<A>>> => {
  const samples = Object.fromEntries(variants.map((v) => [v, [] as Array<A>])) as Record<K, Array<A>>
  for (let round = 0; round < ROUNDS; round++) {
    for (let i = 0; i < variants.length; i++) {
      const variant = variants[(round + i) % variants.length]!
      samples[variant].push(await once(variant, round % LAYOUTS))
    }
  }
  return samples
}

/** `dir` and its `LAYOUTS - 1` copies beside it, each path a few characters longer than the last. */
const layoutsOf = async (dir: string): Promise<ReadonlyArray<string>> => {
  const copies = Array.from({ length: LAYOUTS - 1 }, (_, i) => `${dir}-${"l".repeat(3 * (i + 1))}`)
  for (const copy of copies) await cp(dir, copy, { recursive: true, verbatimSymlinks: true })
  return [dir, ...copies]
}


const mb = (bytes: number) => (bytes / 1024 / 1024).toFixed(1)
const x = (value: number) => `${value.toFixed(2)}x`
const verdict = (value: number, budget: number) => (value <= budget ? `≤ ${budget}x: holds` : `≤ ${budget}x: **does not hold**`)

const main = async () => {
  const root = await mkdtemp(path.join(os.tmpdir(), "edw-bench-startup-"))
  try {
    console.error(`packing and installing in ${root} ...`)
    const tarball = await packProject(root)
    const redisDir = path.join(root, "redis-only")
    const postgresDir = path.join(root, "postgres-only")
    const upstreamDir = path.join(root, "upstream")
    await installProject(redisDir, { tarball, packages: REDIS_ONLY, manifest: { type: "module" } })
    await installProject(postgresDir, { tarball, packages: POSTGRES_ONLY, manifest: { type: "module" } })
    await installProject(upstreamDir, { packages: UPSTREAM, manifest: { type: "module" } })
    for (const load of ["import", "require"] as const) await writeFile(path.join(redisDir, LOAD_SCRIPTS[load].file), loadScript(load))
    await writeFile(path.join(redisDir, "first-ours.mjs"), FIRST_OURS)
    await writeFile(path.join(redisDir, "first-plain.mjs"), FIRST_PLAIN)
    await writeFile(path.join(redisDir, "first-effect-floor.mjs"), FIRST_EFFECT_FLOOR)
    await writeFile(path.join(upstreamDir, "first-upstream.mjs"), FIRST_UPSTREAM)
    const redisLayouts = await layoutsOf(redisDir)
    const upstreamLayouts = await layoutsOf(upstreamDir)

    // 1. cold imports
    // the `require` rows are CommonJS (dist/cjs, Effect's CommonJS build), against `require` of
    // `bullmq` + `effect`
    const imports = {
      "bullmq + effect": { load: "import", specifiers: ["bullmq", "effect"] },
      "effect-durable-worker/bullmq": { load: "import", specifiers: ["effect-durable-worker/bullmq"] },
      "effect + effect-durable-worker/bullmq": { load: "import", specifiers: ["effect", "effect-durable-worker/bullmq"] },
      "effect-durable-worker": { load: "import", specifiers: ["effect-durable-worker"] },
      "effect-durable-worker/promise": { load: "import", specifiers: ["effect-durable-worker/promise"] },
      "effect": { load: "import", specifiers: ["effect"] },
      "require: bullmq + effect": { load: "require", specifiers: ["bullmq", "effect"] },
      "require: effect-durable-worker/bullmq": { load: "require", specifiers: ["effect-durable-worker/bullmq"] },
      "require: effect-durable-worker/promise + /bullmq": {
        load: "require",
        specifiers: ["effect-durable-worker/promise", "effect-durable-worker/bullmq"]
      }
    } as const
    type ImportVariant = keyof typeof imports
    const BASES: Record<Load, ImportVariant> = { import: "bullmq + effect", require: "require: bullmq + effect" }
    const BASE = BASES.import
    console.error(`cold imports: ${ROUNDS} rounds ...`)
    const importSamples = await alternate(Object.keys(imports) as Array<ImportVariant>, (variant, layout) => {
      const { load, specifiers } = imports[variant]
      return nodeJson<{ ms: number; cpuMs: number; rss: number }>(redisLayouts[layout]!, [LOAD_SCRIPTS[load].file, ...specifiers])
    })
    const field = (variant: ImportVariant, key: "ms" | "cpuMs" | "rss") => importSamples[variant].map((s) => s[key])

    // 2. first task on a pre-filled queue
    const connection = benchConnection()
    console.error(`first task after run(): ${ROUNDS} rounds, ${PREFILL} tasks waiting ...`)
    const FIRST_SCRIPTS = {
      "plain bullmq": [redisLayouts, "first-plain.mjs"],
      "bullmq in an Effect program": [redisLayouts, "first-effect-floor.mjs"],
      "upstream durable-worker": [upstreamLayouts, "first-upstream.mjs"],
      "effect-durable-worker": [redisLayouts, "first-ours.mjs"]
    } as const
    type FirstVariant = keyof typeof FIRST_SCRIPTS
    const firstVariants = Object.keys(FIRST_SCRIPTS) as Array<FirstVariant>
    // Each variant twice a round: as a user's process meets the window, and with the imports' garbage
    // collected before the clock (see `start` in the scripts), which leaves only what `run()` itself does.
    const COLLECTED = " (collected first)"
    type FirstRun = FirstVariant | `${FirstVariant}${typeof COLLECTED}`
    const firstRuns: Array<FirstRun> = firstVariants.flatMap((v) => [v, `${v}${COLLECTED}` as const])
    const firstSamples = await alternate(firstRuns, async (run, layout) => {
      const collected = run.endsWith(COLLECTED)
      const variant = (collected ? run.slice(0, -COLLECTED.length) : run) as FirstVariant
      const prefix = `edw-bench-startup-${Math.random().toString(16).slice(2, 10)}`
      try {
        await enqueueTasks({ prefix, stepName: STEP, n: PREFILL, connection })
        const env = {
          url: `redis://${connection.host}:${connection.port}`,
          host: connection.host,
          port: connection.port,
          prefix,
          step: STEP,
          tasksQueue: tasksQueue(prefix, routingToken(STEP)),
          resultsQueue: resultsQueue(prefix),
          resultJobName: JobName.result,
          resultJobOptions
        }
        const [dirs, script] = FIRST_SCRIPTS[variant]
        const args = collected ? ["--expose-gc", script] : [script]
        return (await nodeJson<{ ms: number }>(dirs[layout]!, args, { EDW_BENCH: JSON.stringify(env) })).ms
      } finally {
        await deletePrefixKeys(prefix, connection)
      }
    })
    const firstOf = (suffix: "" | typeof COLLECTED) => {
      const samples = (variant: FirstVariant) => firstSamples[`${variant}${suffix}`]
      const row = (variant: FirstVariant) => ({ ms: median(samples(variant)), ratio: roundRatio(samples(variant), samples("plain bullmq")) })
      return {
        rows: Object.fromEntries(firstVariants.map((v) => [v, row(v)])) as Record<FirstVariant, { ms: number; ratio: number }>,
        oursVsUpstream: roundRatio(samples("effect-durable-worker"), samples("upstream durable-worker"))
      }
    }
    const firstMet = firstOf("")
    const firstCollected = firstOf(COLLECTED)
    const firstRatio = firstMet.rows["effect-durable-worker"].ratio

    // 3. install size
    const installs = []
    for (const [label, dir, packages] of [
      ["Redis only", redisDir, REDIS_ONLY],
      ["PostgreSQL only", postgresDir, POSTGRES_ONLY]
    ] as const) {
      installs.push({
        label,
        packages: packages.join(", "),
        count: await packageCount(dir),
        bytes: await treeBytes(path.join(dir, "node_modules")),
        own: await treeBytes(path.join(dir, "node_modules/effect-durable-worker"))
      })
    }

    const lines: Array<string> = []
    lines.push(`Node ${process.version}, ${os.cpus().length} CPUs, ${ROUNDS} alternating rounds (medians) over ${LAYOUTS} copies of the projects, the packed package installed from the npm cache.`, "")
    lines.push("| cold import (fresh `node`) | time, ms | ratio | CPU, ms | ratio | RSS, MB | ratio |")
    lines.push("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (const variant of Object.keys(imports) as Array<ImportVariant>) {
      const { load, specifiers } = imports[variant]
      const base = BASES[load]
      const cells = (["ms", "cpuMs"] as const).map((key) =>
        `${median(field(variant, key)).toFixed(0)} | ${x(roundRatio(field(variant, key), field(base, key)))}`
      )
      const rss = `${mb(median(field(variant, "rss")))} | ${x(roundRatio(field(variant, "rss"), field(base, "rss")))}`
      const label = `\`${specifiers.join("` + `")}\``
      lines.push(`| ${load === "require" ? `\`require\`: ${label}` : label} | ${cells.join(" | ")} | ${rss} |`)
    }
    const ENTRY = "effect-durable-worker/bullmq" as const
    const timeRatio = roundRatio(field(ENTRY, "ms"), field(BASE, "ms"))
    const rssRatio = roundRatio(field(ENTRY, "rss"), field(BASE, "rss"))
    lines.push("", "Ratios against `bullmq` + `effect`, imported; the `require` rows (CommonJS) against `require` of them.", "")
    lines.push(`Budgets: import time ${x(timeRatio)} (${verdict(timeRatio, 1.15)}), RSS ${x(rssRatio)} (${verdict(rssRatio, 1.1)}).`, "")
    const FIRST_LABELS: Record<FirstVariant, string> = {
      "plain bullmq": "plain bullmq Worker",
      "bullmq in an Effect program": "the same Worker acquired and answering in an Effect program (the Effect runtime's floor, for reference)",
      "upstream durable-worker": "upstream durable-worker (`runRedisWorker`)",
      "effect-durable-worker": "effect-durable-worker (promise facade, `redis` of `/bullmq`)"
    }
    lines.push(`| first task on a queue of ${PREFILL} (fresh process, from \`run()\` / \`new Worker\`) | ms | ratio | imports' garbage collected first, ms | ratio |`)
    lines.push("| --- | ---: | ---: | ---: | ---: |")
    for (const variant of firstVariants) {
      const cells = [firstMet, firstCollected].map(({ rows }) => `${rows[variant].ms.toFixed(0)} | ${x(rows[variant].ratio)}`)
      lines.push(`| ${FIRST_LABELS[variant]} | ${cells.join(" | ")} |`)
    }
    lines.push("", `Budget: first task ${x(firstRatio)} (${verdict(firstRatio, 1.3)}); ${x(firstCollected.rows["effect-durable-worker"].ratio)} with the imports' garbage collected first. Against the upstream worker ${x(firstMet.oursVsUpstream)} (${x(firstCollected.oursVsUpstream)}).`, "")
    lines.push("| install | packages installed | packages | node_modules, MB | of which effect-durable-worker, MB |")
    lines.push("| --- | --- | ---: | ---: | ---: |")
    for (const install of installs) {
      lines.push(`| ${install.label} | ${install.packages} + effect-durable-worker | ${install.count} | ${mb(install.bytes)} | ${mb(install.own)} |`)
    }
    console.log(lines.join("\n"))
    console.error(`raw import ms: ${JSON.stringify(Object.fromEntries(Object.entries(importSamples).map(([k, v]) => [k, (v as Array<{ ms: number }>).map((s) => Math.round(s.ms))])))}`)
    console.error(`raw first-task ms: ${JSON.stringify(Object.fromEntries(Object.entries(firstSamples).map(([k, v]) => [k, v.map((ms) => Math.round(ms))])))}`)
  } finally {
    await rm(root, { recursive: true, force: true })
  }
}

await main()
