/**
 * Replay cost of one Durable Workflow task (a turn) against history length (100, 1,000, 10,000
 * activities), through the public offline replayer `DurableWorkflow.replay(definitions, history)`,
 * which runs the worker's own replay core (the same code a live workflow task runs). No server: each
 * turn is the pure history → commands function, the part of a turn whose cost grows with the run.
 *
 * The workflow: N activities, all completed in history (`ActivityScheduled` then `ActivityCompleted`,
 * each result an Avro blob, after one `WorkflowStarted` carrying the input), then one more that is
 * not, so every turn replays the N results and ends with one `schedule_activity` command — the turn a
 * long run pays on every resume. Cases:
 * - `Effect`, `generator`, `async`: the same workflow written with `DurableWorkflow.make`,
 *   `fromGenerator` and `fromAsync`;
 * - `… + updates`: the same, with an update handler returning an Effect (`Effect.sync`), and
 *   N/10 `UpdateApplied` events in history (one after the first completion of every ten): each turn
 *   applies them again, in history order, before the op that follows (the replayed-update path).
 * Every case's outcome is checked once before it is measured (one command, the right activity, and
 * every replayed update applied).
 *
 * Prints a markdown table: history events per turn, µs per turn (median of the runs) and µs per
 * history event. Per-event cost that stays flat as N grows is linear growth.
 *
 * `npm run bench:dw-replay` (builds, then measures the built package: our modules are imported by
 * the package name, which resolves to dist; the resolved path is printed); BENCH_SIZES (default
 * "100,1000,10000"), BENCH_MIN_MS (default 1500: time spent measuring each cell), BENCH_CASES (the
 * labels of the cases to run, comma-separated; default all).
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
// Our modules through the package's own name: `exports` resolves it to the built package (dist), so
// this measures what users run. `--conditions=source` would measure the TypeScript source instead.
import { DurableWorkflow, DurableWorkflowCodec } from "effect-durable-worker"
import { formatMicros, medianMicros } from "./support/stats.js"

const sizes = (process.env.BENCH_SIZES ?? "100,1000,10000").split(",").map(Number)
/** Only these cases (their labels, comma-separated), one per process for the least interference. */
const only = process.env.BENCH_CASES?.split(",").map((label) => label.trim())
const minMs = Number(process.env.BENCH_MIN_MS ?? 1_500)

/** One `UpdateApplied` after the first completion of every `UPDATE_EVERY`: K = N / 10. */
const UPDATE_EVERY = 10

/** The update handler's Effect: what the live update changed, applied again on replay. */
const addTo = (state: { bonus: number }) => (k: number) =>
  Effect.sync(() => {
    state.bonus += k
    return state.bonus
  })

const effectBody = (updates: boolean) => (ctx: DurableWorkflow.EffectWorkflowContext, n: number) =>
  Effect.gen(function*() {
    const state = { bonus: 0 }
    if (updates) ctx.onUpdate("add", addTo(state))
    let sum = 0
    for (let i = 0; i < n; i++) sum += yield* ctx.activity<number>("step", [i])
    return yield* ctx.activity("step", [n, sum, state.bonus])
  })

const generatorBody = (updates: boolean) =>
  function*(ctx: DurableWorkflow.GeneratorWorkflowContext, n: number): Generator<DurableWorkflow.Op, unknown, any> {
    const state = { bonus: 0 }
    if (updates) ctx.onUpdate("add", addTo(state))
    let sum = 0
    for (let i = 0; i < n; i++) sum += (yield ctx.activity("step", [i])) as number
    return yield ctx.activity("step", [n, sum, state.bonus])
  }

const asyncBody = (updates: boolean) => async (ctx: DurableWorkflow.AsyncWorkflowContext, n: number) => {
  const state = { bonus: 0 }
  if (updates) ctx.onUpdate("add", addTo(state))
  let sum = 0
  for (let i = 0; i < n; i++) sum += await ctx.activity<number>("step", [i])
  return ctx.activity("step", [n, sum, state.bonus])
}

interface Case {
  readonly label: string
  readonly workflow: DurableWorkflow.DurableWorkflow
  readonly updates: boolean
}

const cases: ReadonlyArray<Case> = [
  { label: "Effect", workflow: DurableWorkflow.make("bench.effect", effectBody(false)), updates: false },
  { label: "generator", workflow: DurableWorkflow.fromGenerator("bench.generator", generatorBody(false)), updates: false },
  { label: "async", workflow: DurableWorkflow.fromAsync("bench.async", asyncBody(false)), updates: false },
  { label: "Effect + updates", workflow: DurableWorkflow.make("bench.effect-updates", effectBody(true)), updates: true },
  {
    label: "generator + updates",
    workflow: DurableWorkflow.fromGenerator("bench.generator-updates", generatorBody(true)),
    updates: true
  },
  { label: "async + updates", workflow: DurableWorkflow.fromAsync("bench.async-updates", asyncBody(true)), updates: true }
]

const blob = (value: unknown) => Either.getOrThrow(DurableWorkflowCodec.encodeBlob(value))

/**
 * The recorded history of a run of `workflowType` that has completed `n` activities (with an
 * `UpdateApplied` of `add(1)` after the first completion of every ten when `updates`, so all of them
 * are applied before the code reads the total), as the server sends it on a task.
 */
const historyOf = (workflowType: string, n: number, updates: boolean): ReadonlyArray<Record<string, unknown>> => {
  const events: Array<Record<string, unknown>> = [{
    event_type: "WorkflowStarted",
    payload: {
      workflow_type: workflowType,
      workflow_id: `bench-${n}`,
      run_id: "run-1",
      task_queue: "bench",
      input: Either.getOrThrow(DurableWorkflowCodec.encodeEnvelope([n]))
    }
  }]
  for (let i = 0; i < n; i++) {
    events.push({ event_type: "ActivityScheduled", payload: { activity_type: "step" } })
    events.push({ event_type: "ActivityCompleted", payload: { activity_type: "step", result: blob(i) } })
    if (updates && i % UPDATE_EVERY === 0) {
      events.push({
        event_type: "UpdateApplied",
        payload: { update_id: `u-${i}`, update_name: "add", arguments: blob([1]) }
      })
    }
  }
  // as it arrives on the wire (JSON-parsed): no object shared with the code that built it
  return JSON.parse(JSON.stringify(events))
}

const turn = (workflow: DurableWorkflow.DurableWorkflow, history: ReadonlyArray<unknown>) =>
  Effect.runPromise(DurableWorkflow.replay(workflow, history))

/** A turn must replay everything and stop at activity n, with every recorded update applied. */
const check = async (c: Case, n: number, history: ReadonlyArray<unknown>) => {
  const outcome = await turn(c.workflow, history)
  const command = outcome.commands[0]
  const args = command === undefined || outcome.commands.length !== 1 || command.type !== "schedule_activity"
    ? undefined
    : Either.getOrUndefined(DurableWorkflowCodec.decodeEnvelope(command["arguments"] as DurableWorkflowCodec.PayloadEnvelope))
  const expected = [n, (n * (n - 1)) / 2, c.updates ? Math.ceil(n / UPDATE_EVERY) : 0]
  if (command?.["activity_type"] !== "step" || JSON.stringify(args) !== JSON.stringify(expected)) {
    throw new Error(`${c.label} at ${n}: unexpected outcome ${JSON.stringify(outcome.commands).slice(0, 300)} (arguments ${JSON.stringify(args)})`)
  }
}

const measure = (run: () => Promise<unknown>): Promise<number> => medianMicros(run, minMs)

interface Row {
  readonly label: string
  readonly n: number
  readonly events: number
  readonly perTurn: number
}

const measureSize = async (n: number): Promise<ReadonlyArray<Row>> => {
  const rows: Array<Row> = []
  for (const c of cases) {
    if (only !== undefined && !only.includes(c.label)) continue
    const history = historyOf(c.workflow.name, n, c.updates)
    await check(c, n, history)
    rows.push({ label: c.label, n, events: history.length, perTurn: await measure(() => turn(c.workflow, history)) })
  }
  return rows
}

const fmt = formatMicros

/** The markdown table of {@link main}. */
export const table = (rows: ReadonlyArray<Row>): string => {
  const lines = [
    "| case | activities | history events | µs/turn | µs/event |",
    "| --- | ---: | ---: | ---: | ---: |"
  ]
  for (const row of rows) {
    lines.push(
      `| ${row.label} | ${row.n.toLocaleString("en-US")} | ${row.events.toLocaleString("en-US")} | ` +
        `${fmt(row.perTurn)} | ${fmt(row.perTurn / row.events)} |`
    )
  }
  return lines.join("\n")
}

/** Runs every size and prints the table; returns the measured rows. */
export const main = async (): Promise<ReadonlyArray<Row>> => {
  const rows: Array<Row> = []
  for (const n of sizes) rows.push(...await measureSize(n))
  console.log(
    `Durable Workflow replay cost per turn (node ${process.version}, median of the runs over ${minMs} ms per cell; ` +
      `effect-durable-worker from ${import.meta.resolve("effect-durable-worker")})\n`
  )
  console.log(table(rows))
  return rows
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((error: unknown) => {
    console.error(error)
    process.exitCode = 1
  })
}
