/**
 * The replay core against the real nestjs-durable engine (`@dudousxd/nestjs-durable-core`), in
 * process: the engine owns the run (in-memory store, in-memory step transport, an injected clock for
 * its timers) and advances each turn through an `advance` executor that hands the engine's own
 * history to `processWorkflowTask`, as JSON, and applies the decision that comes back. No broker, no
 * wall-clock sleep: the test waits by turning the event loop until the engine reaches a state.
 */
import {
  InMemoryStateStore,
  InMemoryTransport,
  type WorkflowExecutor,
  type WorkflowRun,
  WorkflowEngine
} from "@dudousxd/nestjs-durable-core"
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Runtime from "effect/Runtime"
import * as TestClock from "effect/TestClock"
import * as Workflow from "../../src/core/Workflow.js"
import * as WorkflowProtocol from "../../src/wire/WorkflowProtocol.js"

const T0 = 1_735_689_600_000

interface Harness {
  readonly engine: WorkflowEngine
  readonly turns: Array<{ readonly task: WorkflowProtocol.WorkflowTask; readonly decision: WorkflowProtocol.WorkflowDecision }>
  readonly advanceClock: (ms: number) => Promise<void>
  readonly until: (runId: string, predicate: (run: WorkflowRun | null) => boolean) => Promise<WorkflowRun | null>
}

const makeHarness = (registry: Workflow.WorkflowRegistry, remote: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const runtime = yield* Effect.runtime<never>()
    let now = T0
    const transport = new InMemoryTransport()
    transport.handle("ingestion", (input) => ({ rows: String((input as { key: string }).key).length }))
    transport.handle("pay", () => {
      throw Object.assign(new Error("card declined"), { code: "declined" })
    })
    const engine = new WorkflowEngine({ store: new InMemoryStateStore(), transport, controlPlane: transport, clock: () => now })
    const turns: Harness["turns"] = []
    const executor: WorkflowExecutor = {
      advance: async (run, history, pendingSignals) => {
        const wire = JSON.parse(JSON.stringify({
          taskId: `${run.id}:wf:${turns.length}`,
          runId: run.id,
          workflow: run.workflow,
          workflowVersion: run.workflowVersion,
          input: run.input,
          history,
          group: run.workflow,
          attempt: 1,
          ...(pendingSignals === undefined ? {} : { pendingSignals })
        }))
        const task = Either.getOrThrow(WorkflowProtocol.decodeWorkflowTask(wire))
        const decision = await Runtime.runPromise(runtime)(Workflow.processWorkflowTask(registry, task))
        turns.push({ task, decision })
        return JSON.parse(JSON.stringify(Either.getOrThrow(WorkflowProtocol.encodeWorkflowDecision(decision))))
      }
    }
    for (const name of remote) engine.registerRemote(name, "1", { group: name, executor })
    const until: Harness["until"] = async (runId, predicate) => {
      for (let tick = 0; tick < 2_000; tick++) {
        const run = await engine.getRun(runId)
        if (predicate(run)) return run
        await new Promise((resolve) => setImmediate(resolve))
      }
      throw new Error(`run ${runId} never reached the expected state`)
    }
    const advanceClock = async (ms: number) => {
      now += ms
      await engine.resumeDueTimers(now)
    }
    return { engine, turns, advanceClock, until } satisfies Harness
  })

const order = Workflow.make("order", (base: string, ctx) =>
  Effect.gen(function*() {
    const startedAt = yield* ctx.now()
    const id = yield* ctx.sideEffect(Effect.succeed(`id-${base}`))
    const rows = yield* ctx.step("ingestion", { key: `/${base}/data.csv` })
    const paid = yield* ctx.step("pay", {}).pipe(
      Effect.catchTag("StepFailed", (failed) => Effect.succeed(`refused: ${failed.error.message} (${failed.error.code})`))
    )
    yield* ctx.sleep("1 minute")
    const approval = yield* ctx.waitForSignal("approve-order")
    const shipped = yield* ctx.child("ship", { id })
    const local = yield* ctx.gather([["a", Effect.succeed(1)], ["b", Effect.succeed(2)]])
    const fanned = yield* ctx.gatherCalls([["ingestion", { key: "x" }], ["ingestion", { key: "yy" }]])
    const labels = yield* ctx.all("ship", [{ id: "k1" }, { id: "k2" }])
    return { startedAt, id, rows, paid, approval, shipped, local, fanned, labels }
  }))

const ship = Workflow.fromPromise("ship", async (ctx, input: { readonly id: string }) => {
  await ctx.now()
  return { shipped: input.id }
})

describe("processWorkflowTask driven by the real nestjs-durable engine", () => {
  it.effect("runs a workflow using every op to completion, replaying the engine's own history", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(T0)
      const harness = yield* makeHarness([order, ship], ["order", "ship"])
      const run = yield* Effect.promise(async () => {
        await harness.engine.start("order", "b1", "run-1")
        await harness.until("run-1", (r) => r?.status === "suspended" && harness.turns.length >= 3)
        await harness.advanceClock(61_000)
        await harness.until("run-1", () => harness.turns.some((t) => t.decision.commands.some((c) => c.kind === "waitSignal")))
        await harness.engine.signal("approve-order", { by: "davi" })
        return harness.until("run-1", (r) => r?.status === "completed" || r?.status === "failed")
      })
      assert.strictEqual(run?.status, "completed")
      assert.deepStrictEqual(run?.output, {
        startedAt: T0,
        id: "id-b1",
        rows: { rows: 12 },
        paid: "refused: card declined (declined)",
        approval: { by: "davi" },
        shipped: { shipped: "id-b1" },
        local: [1, 2],
        fanned: [{ rows: 1 }, { rows: 2 }],
        labels: [{ shipped: "k1" }, { shipped: "k2" }]
      })
      const last = harness.turns.filter((t) => t.task.workflow === "order").at(-1)!
      assert.deepStrictEqual(
        last.task.history.slice(0, 7).map((e) => [e.seq, e.kind, e.name ?? null]),
        [[0, "step", "now"], [1, "step", "sideEffect"], [2, "call", "ingestion"], [3, "call", "pay"], [4, "timer", "sleep:4"], [5, "signal", null], [6, "child", null]]
      )
      assert.deepStrictEqual(last.task.history[3]!.error, { message: "card declined", code: "declined" })
      assert.isTrue(harness.turns.every((t) => t.decision.status !== "failed"))
    }))

  it.effect("a body that catches the suspension of concurrent steps waits for them on the engine", () =>
    Effect.gen(function*() {
      const fan = Workflow.make("fan", (_: unknown, ctx) =>
        Effect.gen(function*() {
          const exit = yield* Effect.exit(Effect.all([
            ctx.step("ingestion", { key: "a" }),
            ctx.step("ingestion", { key: "bb" })
          ], { concurrency: "unbounded" }))
          return exit._tag === "Success" ? exit.value : "fallback"
        }))
      const harness = yield* makeHarness([fan], ["fan"])
      const run = yield* Effect.promise(async () => {
        await harness.engine.start("fan", null, "run-4")
        return harness.until("run-4", (r) => r?.status === "completed" || r?.status === "failed")
      })
      assert.strictEqual(run?.status, "completed")
      assert.deepStrictEqual(run?.output, [{ rows: 1 }, { rows: 2 }])
      assert.deepStrictEqual(harness.turns[0]!.decision.status, "continue")
    }))

  it.effect("a replay that no longer matches the history fails the run on the engine", () =>
    Effect.gen(function*() {
      let changed = false
      const drifting = Workflow.fromPromise("drift", async (ctx) => {
        await (changed ? ctx.sleep(5) : ctx.step("ingestion", { key: "k" }))
        return "done"
      })
      const harness = yield* makeHarness([drifting], ["drift"])
      const run = yield* Effect.promise(async () => {
        await harness.engine.start("drift", null, "run-2")
        await harness.until("run-2", () => harness.turns.length >= 1)
        changed = true
        return harness.until("run-2", (r) => r?.status === "completed" || r?.status === "failed")
      })
      assert.strictEqual(run?.status, "failed")
      assert.include(run?.error?.message, "history at seq 0 is call/\"ingestion\", but replay reached timer/(no name)")
    }))

  it.effect("an unknown workflow fails the run on the engine with no_workflow", () =>
    Effect.gen(function*() {
      const harness = yield* makeHarness([order], ["missing"])
      const run = yield* Effect.promise(async () => {
        await harness.engine.start("missing", null, "run-3")
        return harness.until("run-3", (r) => r?.status === "failed")
      })
      assert.strictEqual(run?.error?.code, "no_workflow")
    }))
})
