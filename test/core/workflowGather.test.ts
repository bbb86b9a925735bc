import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Workflow from "../../src/core/Workflow.js"
import type { HistoryEvent, WorkflowCommand, WorkflowDecision } from "../../src/wire/WorkflowProtocol.js"
import { applyCommands, makeTask } from "./workflowSupport.js"

const run = (wf: Workflow.Workflow, history: ReadonlyArray<HistoryEvent> = []) =>
  Workflow.processWorkflowTask([wf], makeTask(wf.name, history))

/** A workflow whose output is the gather's values, or `{ failed: <names>, aggregate }` when it raised. */
const catching = <A, E>(name: string, body: (ctx: Workflow.WorkflowContext) => Effect.Effect<A, E>) =>
  Workflow.make(name, (_: unknown, ctx) =>
    body(ctx).pipe(
      Effect.map((values) => ({ values })),
      Effect.catchIf(
        (e): e is E & Workflow.GatherFailed => e instanceof Workflow.GatherFailed,
        (e) => Effect.succeed({ failed: e.errors.map((f) => f.name), messages: e.errors.map((f) => f.error.message), aggregate: e.error })
      )
    ))

const recordSteps = (decision: WorkflowDecision) =>
  decision.commands.filter((c): c is Extract<WorkflowCommand, { kind: "recordStep" }> => c.kind === "recordStep")

const boom = (message: string) => Effect.fail(new Error(message))

describe("GatherFailed (D.2)", () => {
  it("is a StepFailed carrying every failure and an aggregate error that names every item", () => {
    const errors = [{ name: "a", error: { message: "x" } }, { name: "b", error: { message: "y", code: "c" } }]
    const failed = new Workflow.GatherFailed(errors)
    assert.instanceOf(failed, Workflow.StepFailed)
    assert.strictEqual(failed._tag, "StepFailed")
    assert.deepStrictEqual(failed.errors, errors)
    assert.deepStrictEqual(failed.error.errors, errors)
    assert.strictEqual(failed.message, "gather: 2 item(s) failed: a, b")
    const caught = Effect.runSync(Effect.fail(failed).pipe(Effect.catchTag("StepFailed", (e) => Effect.succeed(e.error.message))))
    assert.strictEqual(caught, "gather: 2 item(s) failed: a, b")
  })
})

describe("gather: local bodies (D.2 GatherStepsTest)", () => {
  it.effect("runs all and returns results in input order", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("g", (_: unknown, ctx) =>
        ctx.gather([["a", Effect.succeed(1)], ["b", Effect.succeed(2)], ["c", Effect.succeed(3)]]))
      const decision = yield* run(wf)
      assert.strictEqual(decision.status, "completed")
      assert.deepStrictEqual(decision.output, [1, 2, 3])
      const records = recordSteps(decision)
      assert.deepStrictEqual(records.map((r) => [r.seq, r.name, r.output]), [[0, "a", 1], [1, "b", 2], [2, "c", 3]])
      assert.deepStrictEqual([...new Set(records.map((r) => r.parallelGroup))], ["gather:0"])
    }))

  it.effect("replay does not rerun bodies", () =>
    Effect.gen(function*() {
      let runs = 0
      const body = (value: number) => Effect.sync(() => { runs++; return value })
      const wf = Workflow.make("g", (_: unknown, ctx) => ctx.gather([["a", body(1)], ["b", body(2)], ["c", body(3)]]))
      const decision = yield* run(wf, [
        { seq: 0, kind: "step", name: "a", output: 10 },
        { seq: 1, kind: "step", name: "b", output: 20 },
        { seq: 2, kind: "step", name: "c", output: 30 }
      ])
      assert.strictEqual(runs, 0)
      assert.deepStrictEqual(decision.commands, [])
      assert.deepStrictEqual(decision.output, [10, 20, 30])
    }))

  it.effect("waitAll aggregates failures and records every outcome", () =>
    Effect.gen(function*() {
      const wf = catching("g", (ctx) => ctx.gather([["ok", Effect.succeed(1)], ["bad", boom("nope")], ["ok2", Effect.succeed(3)]]))
      const decision = yield* run(wf)
      assert.deepStrictEqual(decision.output, {
        failed: ["bad"],
        messages: ["nope"],
        aggregate: (decision.output as { aggregate: unknown }).aggregate
      })
      const records = recordSteps(decision)
      assert.deepStrictEqual(records.map((r) => r.name), ["ok", "bad", "ok2"])
      assert.strictEqual(records[1]!.error?.message, "nope")
      assert.isUndefined(records[0]!.error)
    }))

  it.effect("empty items return [] and record nothing", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("g", (_: unknown, ctx) =>
        Effect.zip(ctx.gather([]), ctx.sideEffect(Effect.succeed("next"))))
      const decision = yield* run(wf)
      assert.deepStrictEqual(decision.output, [[], "next"])
      assert.deepStrictEqual(decision.commands.map((c) => c.seq), [0])
    }))

  it.effect("a single item behaves like one step", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("g", (_: unknown, ctx) => ctx.gather([["only", Effect.succeed(42)]]))
      const decision = yield* run(wf)
      assert.deepStrictEqual(decision.output, [42])
      const records = recordSteps(decision)
      assert.strictEqual(records.length, 1)
      assert.strictEqual(records[0]!.output, 42)
    }))

  it.effect("a wrong name in history raises a non-determinism error", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("g", (_: unknown, ctx) => ctx.gather([["a", Effect.succeed(1)], ["b", Effect.succeed(2)]]))
      const decision = yield* run(wf, [{ seq: 0, kind: "step", name: "a", output: 1 }, { seq: 1, kind: "step", name: "zzz", output: 2 }])
      assert.strictEqual(decision.status, "failed")
      assert.include(decision.error?.message, "history at seq 1 is step/\"zzz\", but replay reached step/\"b\"")
    }))

  it.effect("failFast signals a cooperative cancel to siblings and still raises GatherFailed", () =>
    Effect.gen(function*() {
      let siblingSawAbort: boolean | undefined
      const slow = (step: Workflow.LocalStep) =>
        Effect.gen(function*() {
          yield* Effect.yieldNow()
          siblingSawAbort = step.signal.aborted
          return "slow"
        })
      const wf = catching("g", (ctx) => ctx.gather([["slow", slow], ["bad", boom("fast failure")]], { mode: "failFast" }))
      const decision = yield* run(wf)
      assert.strictEqual(siblingSawAbort, true)
      assert.deepStrictEqual((decision.output as { failed: unknown }).failed, ["bad"])
      assert.deepStrictEqual(recordSteps(decision).map((r) => r.name), ["slow", "bad"])
    }))
})

describe("all: child runs (D.2 GatherChildrenTest)", () => {
  const children = (mode?: "waitAll" | "failFast") =>
    catching("parent", (ctx) => ctx.all("child", [{ i: 0 }, { i: 1 }, { i: 2 }], mode === undefined ? undefined : { mode }))

  it.effect("the first turn dispatches all children, then suspends", () =>
    Effect.gen(function*() {
      const decision = yield* run(children())
      assert.strictEqual(decision.status, "continue")
      assert.deepStrictEqual(decision.commands, [0, 1, 2].map((i) => ({
        kind: "startChild",
        seq: i,
        workflow: "child",
        input: { i },
        parallelGroup: "gather:0"
      })))
    }))

  it.effect("suspends while any child is outstanding and re-emits only the missing one", () =>
    Effect.gen(function*() {
      const decision = yield* run(children(), [{ seq: 0, kind: "child", output: "r0" }, { seq: 2, kind: "child", output: "r2" }])
      assert.strictEqual(decision.status, "continue")
      assert.deepStrictEqual(decision.commands.map((c) => c.seq), [1])
    }))

  it.effect("returns all outputs in order when all are resolved", () =>
    Effect.gen(function*() {
      const decision = yield* run(children(), [2, 0, 1].map((i) => ({ seq: i, kind: "child" as const, output: `r${i}` })))
      assert.deepStrictEqual(decision.output, { values: ["r0", "r1", "r2"] })
      assert.deepStrictEqual(decision.commands, [])
    }))

  it.effect("waitAll aggregates child failures", () =>
    Effect.gen(function*() {
      const decision = yield* run(children(), [
        { seq: 0, kind: "child", output: "r0" },
        { seq: 1, kind: "child", error: { message: "child boom" } },
        { seq: 2, kind: "child", output: "r2" }
      ])
      assert.deepStrictEqual((decision.output as { failed: unknown }).failed, ["child"])
      assert.deepStrictEqual((decision.output as { messages: unknown }).messages, ["child boom"])
    }))

  it.effect("failFast raises on the first failed child seen, even while another is outstanding", () =>
    Effect.gen(function*() {
      const decision = yield* run(children("failFast"), [
        { seq: 0, kind: "child", output: "r0" },
        { seq: 2, kind: "child", error: { message: "child boom" } }
      ])
      assert.strictEqual(decision.status, "completed")
      assert.deepStrictEqual((decision.output as { messages: unknown }).messages, ["child boom"])
      assert.deepStrictEqual(decision.commands, [])
    }))

  it.effect("empty inputs return []", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("parent", (_: unknown, ctx) => ctx.all("child", []))
      const decision = yield* run(wf)
      assert.deepStrictEqual(decision.output, [])
      assert.deepStrictEqual(decision.commands, [])
    }))

  it.effect("a wrong kind in history raises a non-determinism error", () =>
    Effect.gen(function*() {
      const decision = yield* run(children(), [{ seq: 0, kind: "step", name: "child", output: 1 }])
      assert.strictEqual(decision.status, "failed")
      assert.include(decision.error?.message, "history at seq 0 is step/\"child\", but replay reached child/\"child\"")
    }))
})

describe("gatherCalls: dispatched steps (D.2 GatherCallsTest)", () => {
  const calls = (mode?: "waitAll" | "failFast") =>
    catching("fan", (ctx) =>
      ctx.gatherCalls(
        [{ name: "s0", input: 0, group: "ext" }, { name: "s1", input: 1, group: "ext" }, { name: "s2", input: 2, group: "ext" }],
        mode === undefined ? undefined : { mode }
      ))

  it.effect("the first turn dispatches all calls, then suspends", () =>
    Effect.gen(function*() {
      const decision = yield* run(calls())
      assert.strictEqual(decision.status, "continue")
      assert.deepStrictEqual(decision.commands, [0, 1, 2].map((i) => ({
        kind: "call",
        seq: i,
        name: `s${i}`,
        group: "ext",
        input: i,
        parallelGroup: "gather:0"
      })))
    }))

  it.effect("accepts the [name, input] and [name, input, group] shorthands", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("fan", (_: unknown, ctx) => ctx.gatherCalls([["a", 1, "ext"], ["b", 2]]))
      const decision = yield* Workflow.processWorkflowTask([wf], makeTask("fan"), { partition: "p" })
      assert.deepStrictEqual(decision.commands.map((c) => [c.seq, (c as { name?: string }).name, (c as { group?: string }).group, (c as { input?: unknown }).input]), [
        [0, "a", "ext", 1],
        [1, "b", "p", 2]
      ])
    }))

  it.effect("suspends while any call is outstanding and re-emits only the missing one", () =>
    Effect.gen(function*() {
      const decision = yield* run(calls(), [{ seq: 0, kind: "call", name: "s0", output: 0 }, { seq: 2, kind: "call", name: "s2", output: 2 }])
      assert.strictEqual(decision.status, "continue")
      assert.deepStrictEqual(decision.commands.map((c) => c.seq), [1])
    }))

  it.effect("returns all outputs in input order when all are resolved", () =>
    Effect.gen(function*() {
      const decision = yield* run(calls(), [2, 1, 0].map((i) => ({ seq: i, kind: "call" as const, name: `s${i}`, output: { r: i } })))
      assert.deepStrictEqual(decision.output, { values: [{ r: 0 }, { r: 1 }, { r: 2 }] })
    }))

  it.effect("waitAll aggregates call failures, labelled by the step name", () =>
    Effect.gen(function*() {
      const decision = yield* run(calls(), [
        { seq: 0, kind: "call", name: "s0", error: { message: "e0" } },
        { seq: 1, kind: "call", name: "s1", output: 1 },
        { seq: 2, kind: "call", name: "s2", error: { message: "e2" } }
      ])
      assert.deepStrictEqual((decision.output as { failed: unknown }).failed, ["s0", "s2"])
      assert.strictEqual((decision.output as { aggregate: { message: string } }).aggregate.message, "gather: 2 item(s) failed: s0, s2")
    }))

  it.effect("failFast raises on the first failed call seen", () =>
    Effect.gen(function*() {
      const decision = yield* run(calls("failFast"), [{ seq: 1, kind: "call", name: "s1", error: { message: "e1" } }])
      assert.strictEqual(decision.status, "completed")
      assert.deepStrictEqual((decision.output as { failed: unknown }).failed, ["s1"])
      assert.deepStrictEqual(decision.commands, [])
    }))

  it.effect("empty calls return []", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("fan", (_: unknown, ctx) => ctx.gatherCalls([]))
      const decision = yield* run(wf)
      assert.deepStrictEqual(decision.output, [])
      assert.deepStrictEqual(decision.commands, [])
    }))

  it.effect("a wrong kind in history raises a non-determinism error", () =>
    Effect.gen(function*() {
      const decision = yield* run(calls(), [{ seq: 0, kind: "child", output: 1 }])
      assert.strictEqual(decision.status, "failed")
      assert.include(decision.error?.message, "history at seq 0 is child/(no name), but replay reached call/\"s0\"")
    }))
})

describe("gathers through processWorkflowTask (D.2 GatherProcessTaskTest)", () => {
  it.effect("a waitAll failure becomes a failed decision with the aggregate, keeping every recordStep", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("g", (_: unknown, ctx) => ctx.gather([["ok", Effect.succeed(1)], ["bad", boom("bad thing")]]))
      const decision = yield* run(wf)
      assert.strictEqual(decision.status, "failed")
      const errors = decision.error?.errors as ReadonlyArray<{ name: string; error: { message: string } }>
      assert.strictEqual(errors[0]!.name, "bad")
      assert.strictEqual(decision.error?.message, "gather: 1 item(s) failed: bad")
      assert.deepStrictEqual(recordSteps(decision).map((r) => [r.name, r.error === undefined]), [["ok", true], ["bad", false]])
    }))

  it.effect("gatherCalls' first turn is a continue with call commands", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("fan", (_: unknown, ctx) => ctx.gatherCalls([{ name: "a", input: 1 }, { name: "b", input: 2 }]))
      const decision = yield* run(wf)
      assert.strictEqual(decision.status, "continue")
      assert.deepStrictEqual(decision.commands.map((c) => c.seq), [0, 1])
      assert.deepStrictEqual([...new Set(decision.commands.map((c) => (c as { parallelGroup?: string }).parallelGroup))], ["gather:0"])
    }))

  it.effect("gatherCalls resolves in order from history", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("fan", (_: unknown, ctx) => ctx.gatherCalls([{ name: "a", input: 1 }, { name: "b", input: 2 }]))
      const decision = yield* run(wf, [{ seq: 1, kind: "call", name: "b", output: { r: 2 } }, { seq: 0, kind: "call", name: "a", output: { r: 1 } }])
      assert.strictEqual(decision.status, "completed")
      assert.deepStrictEqual(decision.output, [{ r: 1 }, { r: 2 }])
    }))

  it.effect("a gatherCalls failure becomes a failed decision with the aggregate", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("fan", (_: unknown, ctx) => ctx.gatherCalls([{ name: "a", input: 1 }, { name: "b", input: 2 }]))
      const decision = yield* run(wf, [{ seq: 0, kind: "call", name: "a", error: { message: "boom" } }, { seq: 1, kind: "call", name: "b", output: 2 }])
      assert.strictEqual(decision.status, "failed")
      const errors = decision.error?.errors as ReadonlyArray<{ name: string; error: { message: string } }>
      assert.strictEqual(errors[0]!.error.message, "boom")
    }))

  it.effect("a successful gather replays deterministically from its recorded history without rerunning bodies", () =>
    Effect.gen(function*() {
      let runs = 0
      const body = (value: string) => Effect.sync(() => { runs++; return value })
      const wf = Workflow.make("g", (_: unknown, ctx) => ctx.gather([["a", body("A")], ["b", body("B")]]))
      const first = yield* run(wf)
      assert.strictEqual(runs, 2)
      const history = applyCommands([], first.commands, () => undefined)
      const second = yield* run(wf, history)
      assert.strictEqual(runs, 2)
      assert.deepStrictEqual(second.output, first.output)
      assert.deepStrictEqual(second.commands, [])
    }))

  it.effect("a partly recorded local gather reruns and re-records every item", () =>
    Effect.gen(function*() {
      let runs = 0
      const body = (value: string) => Effect.sync(() => { runs++; return value })
      const wf = Workflow.make("g", (_: unknown, ctx) => ctx.gather([["a", body("A")], ["b", body("B")]]))
      const decision = yield* run(wf, [{ seq: 0, kind: "step", name: "a", output: "old" }])
      assert.strictEqual(runs, 2)
      assert.deepStrictEqual(decision.output, ["A", "B"])
      assert.deepStrictEqual(recordSteps(decision).map((r) => r.seq), [0, 1])
    }))

  it.effect("an async gather runs concurrently and matches the Effect gather", () =>
    Effect.gen(function*() {
      const order: Array<string> = []
      const wf = Workflow.fromPromise("g", (ctx) =>
        ctx.gather([
          ["a", async () => { await new Promise((r) => setImmediate(r)); order.push("a"); return 1 }],
          ["b", () => { order.push("b"); return 2 }]
        ]))
      const decision = yield* run(wf)
      assert.deepStrictEqual(order, ["b", "a"])
      assert.deepStrictEqual(decision.output, [1, 2])
      assert.deepStrictEqual(recordSteps(decision).map((r) => [r.seq, r.name, r.parallelGroup]), [[0, "a", "gather:0"], [1, "b", "gather:0"]])
    }))
})
