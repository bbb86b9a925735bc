/**
 * `npm run bench:formats`: the package's two builds against each other, so that an application
 * pays nothing for its module format: `dist/esm` imported, `dist/cjs` required (as a NestJS
 * application with its default tsconfig loads it), each in a fresh `node` per sample, in alternating
 * rounds, from the built package:
 *
 * - the load of `/promise` and `/bullmq` once `bullmq` and `effect` are loaded (what this package adds
 *   to an application that has its peers);
 * - the facade's task path in one process, without a broker: `FORMATS_TASKS` (default 20,000)
 *   `processTask` calls of a no-op step, timed after as many to warm up.
 *
 * Prints the medians and each ratio as the median of the rounds' ratios. `ROUNDS` (default 10);
 * `FORMATS_ROOT` (default this checkout) is the package directory to load, e.g. a worktree of an
 * earlier commit, built, for a before/after.
 */
import { execFile } from "node:child_process"
import { mkdtemp, rm, writeFile } from "node:fs/promises"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"
import { median, roundRatio } from "./support/stats.js"

const exec = promisify(execFile)
const ROUNDS = Number(process.env.ROUNDS ?? 10)
const TASKS = Number(process.env.FORMATS_TASKS ?? 20_000)
const ROOT = path.resolve(process.env.FORMATS_ROOT ?? path.join(path.dirname(fileURLToPath(import.meta.url)), ".."))

// The probe, once per format: it loads the peers, then the package through its own \`exports\` map
// (the probes lie in a directory of the package's own, where its name refers to itself; not under
// node_modules, where it would not).
const probe = (format: "esm" | "cjs") => {
  const load = format === "esm" ? "await import" : "require"
  return `${format === "esm" ? "" : "(async () => {"}
const [what, tasks] = process.argv.slice(2)
${load}("bullmq")
${load}("effect")
if (what === "load") {
  const t0 = performance.now()
  ${load}("effect-durable-worker/promise")
  ${load}("effect-durable-worker/bullmq")
  console.log(performance.now() - t0)
} else {
  const { Worker } = ${load}("effect-durable-worker/promise")
  const worker = new Worker({ handleSignals: false, logLevel: "None" })
  worker.step("bench.noop", () => undefined)
  const n = Number(tasks)
  const task = (i) => ({ runId: "r", seq: i, name: "bench.noop", stepId: "r:" + i, group: "bench.noop", input: i, attempt: 1 })
  for (let i = 0; i < n; i++) await worker.processTask(task(i))
  const t0 = performance.now()
  for (let i = 0; i < n; i++) await worker.processTask(task(i))
  console.log(performance.now() - t0)
}
${format === "esm" ? "" : "})()"}`
}

const main = async () => {
  const dir = await mkdtemp(path.join(ROOT, ".bench-formats-"))
  try {
    const files = { esm: path.join(dir, "probe.mjs"), cjs: path.join(dir, "probe.cjs") }
    await writeFile(files.esm, probe("esm"))
    await writeFile(files.cjs, probe("cjs"))
    const sample = async (format: "esm" | "cjs", what: "load" | "tasks") => {
      const { stdout } = await exec(process.execPath, [files[format], what, String(TASKS)], { cwd: ROOT })
      return Number(stdout.trim())
    }
    console.log(`Node ${process.version}, ${os.cpus().length} CPUs, ${ROUNDS} alternating rounds (medians), ${ROOT}\n`)
    console.log("| measure | ES module, ms | CommonJS, ms | CommonJS / ES module |")
    console.log("| --- | ---: | ---: | ---: |")
    for (const [what, label] of [["load", "load `/promise` + `/bullmq` (peers loaded)"], ["tasks", `${TASKS} tasks through \`processTask\`, warm`]] as const) {
      const esm: Array<number> = []
      const cjs: Array<number> = []
      for (let round = 0; round < ROUNDS; round++) {
        // the order alternates, so drift of the machine hits both alike
        if (round % 2 === 0) {
          esm.push(await sample("esm", what))
          cjs.push(await sample("cjs", what))
        } else {
          cjs.push(await sample("cjs", what))
          esm.push(await sample("esm", what))
        }
      }
      const ratio = roundRatio(cjs, esm)
      console.log(`| ${label} | ${median(esm).toFixed(1)} | ${median(cjs).toFixed(1)} | ${ratio.toFixed(2)}x |`)
    }
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})
