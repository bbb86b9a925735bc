/**
 * Replay cost of one workflow turn against history length (100, 1,000, 10,000 entries), for this
 * worker's replay core (async body and Effect body) beside the upstream TS worker's `WorkflowWorker`
 * (`@dudousxd/durable-worker@0.8.0`) on the same histories. No broker: each turn is the pure
 * history → decision function, the part of a turn whose cost grows with the run.
 *
 * The workflow: N dispatched steps, all in history (`call` entries), then one more that is not, so
 * every turn replays the N entries and ends `continue` with one `call` command — the turn a long run
 * pays on every resume. Columns:
 * - `replay`: `processWorkflowTask(registry, task)` on an already-decoded task (what upstream's
 *   `processTask` does: it takes the task as given, with no validation);
 * - `decode + replay`: plus `decodeWorkflowTask` of the JSON-parsed payload, which our transport does
 *   on every turn (the JSON parse itself, done by BullMQ for both workers, is left out).
 *
 * Prints a markdown table: µs per turn (median of the runs), µs per history entry, and the ratio to
 * upstream (below 1 is faster). Per-entry cost that stays flat as N grows is linear growth.
 *
 * `npm run bench:replay` (builds, then measures the built package: our modules are imported by the
 * package name, which resolves to dist); BENCH_SIZES (default "100,1000,10000"),
 * BENCH_MIN_MS (default 1500: time spent measuring each cell). Young-generation GC makes the
 * per-entry cost of both workers creep up at 10,000 entries and beyond; with
 * `NODE_OPTIONS=--max-semi-space-size=64` it stays flat, so that creep is the collector, not the replay.
 */
import { WorkflowWorker } from "@dudousxd/durable-worker"
import type { WorkflowTask as UpstreamTask } from "@dudousxd/nestjs-durable-core"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
// Our modules through the package's own name: `exports` resolves it to the built package (dist), so
// this measures what users run. `--conditions=source` would measure the TypeScript source instead.
import { Workflow, WorkflowProtocol } from "effect-durable-worker"
import { formatMicros, medianMicros } from "./support/stats.js"

type WorkflowDecision = WorkflowProtocol.WorkflowDecision
type WorkflowTask = WorkflowProtocol.WorkflowTask
const { decodeWorkflowTask } = WorkflowProtocol

const sizes = (process.env.BENCH_SIZES ?? "100,1000,10000").split(",").map(Number)
const minMs = Number(process.env.BENCH_MIN_MS ?? 1_500)

const asyncWorkflow = Workflow.fromPromise("replay", async (ctx, n: number) => {
  let sum = 0
  for (let i = 0; i < n; i++) sum += (await ctx.step<{ readonly i: number }>("step", { i })).i
  return ctx.step("step", { i: n, sum })
})

const effectWorkflow = Workflow.make("replay", (n: number, ctx) =>
  Effect.gen(function*() {
    let sum = 0
    for (let i = 0; i < n; i++) sum += (yield* ctx.step<{ readonly i: number }>("step", { i })).i
    return yield* ctx.step("step", { i: n, sum })
  }))

const upstream = new WorkflowWorker("bench").register("replay", async (ctx, input) => {
  const n = input as number
  let sum = 0
  for (let i = 0; i < n; i++) sum += (await ctx.step<{ readonly i: number }>("step", { i })).i
  return ctx.step("step", { i: n, sum })
})

/** The turn's payload as it arrives on the wire (JSON-parsed), with `n` replayed `call` entries. */
const payload = (n: number) =>
  JSON.parse(JSON.stringify({
    taskId: `bench:wf:${n}`,
    runId: "bench",
    workflow: "replay",
    workflowVersion: "1",
    input: n,
    history: Array.from({ length: n }, (_, seq) => ({ seq, kind: "call", name: "step", output: { i: seq } })),
    group: "replay",
    attempt: 1
  })) as Record<string, unknown>

/** A turn must replay everything and stop at op n: `continue` with one `call` at seq n. */
const check = (label: string, n: number, decision: { readonly status: string; readonly commands: ReadonlyArray<{ readonly seq: number }> }) => {
  if (decision.status !== "continue" || decision.commands.length !== 1 || decision.commands[0]!.seq !== n) {
    throw new Error(`${label} at ${n}: unexpected decision ${JSON.stringify(decision).slice(0, 300)}`)
  }
}

const measure = (run: () => Promise<unknown>): Promise<number> => medianMicros(run, minMs)

interface Row {
  readonly n: number
  readonly upstream: number
  readonly async: number
  readonly effect: number
  readonly asyncDecoded: number
  readonly effectDecoded: number
}

const decoded = (raw: Record<string, unknown>): WorkflowTask => Either.getOrThrow(decodeWorkflowTask(raw))
const ours = (workflow: Workflow.Workflow<number, unknown>, task: WorkflowTask): Promise<WorkflowDecision> =>
  Effect.runPromise(Workflow.processWorkflowTask([workflow], task))

const measureSize = async (n: number): Promise<Row> => {
  const raw = payload(n)
  const task = decoded(raw)
  const upstreamTask = raw as unknown as UpstreamTask
  check("upstream", n, await upstream.processTask(upstreamTask))
  check("async", n, await ours(asyncWorkflow, task))
  check("effect", n, await ours(effectWorkflow, task))
  return {
    n,
    upstream: await measure(() => upstream.processTask(upstreamTask)),
    async: await measure(() => ours(asyncWorkflow, task)),
    effect: await measure(() => ours(effectWorkflow, task)),
    asyncDecoded: await measure(() => ours(asyncWorkflow, decoded(raw))),
    effectDecoded: await measure(() => ours(effectWorkflow, decoded(raw)))
  }
}

const fmt = formatMicros

/** The markdown table of {@link main}. */
export const table = (rows: ReadonlyArray<Row>): string => {
  const lines = [
    "| history entries | upstream µs/turn | async µs/turn | Effect µs/turn | upstream µs/entry | async µs/entry | Effect µs/entry | async / upstream | Effect / upstream | async decode+replay µs/turn | Effect decode+replay µs/turn |",
    "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  ]
  for (const row of rows) {
    lines.push(
      `| ${row.n.toLocaleString("en-US")} | ${fmt(row.upstream)} | ${fmt(row.async)} | ${fmt(row.effect)} | ` +
        `${fmt(row.upstream / row.n)} | ${fmt(row.async / row.n)} | ${fmt(row.effect / row.n)} | ` +
        `${(row.async / row.upstream).toFixed(2)} | ${(row.effect / row.upstream).toFixed(2)} | ` +
        `${fmt(row.asyncDecoded)} | ${fmt(row.effectDecoded)} |`
    )
  }
  return lines.join("\n")
}

/** Runs every size and prints the table; returns the measured rows. */
export const main = async (): Promise<ReadonlyArray<Row>> => {
  const rows: Array<Row> = []
  for (const n of sizes) rows.push(await measureSize(n))
  console.log(`Replay cost per turn (node ${process.version}, median of the runs over ${minMs} ms per cell)\n`)
  console.log(table(rows))
  return rows
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((error: unknown) => {
    console.error(error)
    process.exitCode = 1
  })
}
