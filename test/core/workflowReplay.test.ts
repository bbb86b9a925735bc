import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import * as Workflow from "../../src/core/Workflow.js"
import { replay as replayPromise } from "../../src/facade/workflowReplay.js"
import { type HistoryEvent, WorkflowTaskDecodeError } from "../../src/wire/WorkflowProtocol.js"
import { makeTask } from "./workflowSupport.js"

const T0 = 1_735_689_600_000

// One workflow in three authoring styles: Effect.gen, a plain Effect pipeline, and an async body.
// now → step "fetch" → sleep → step "store" → output.
const generatorStyle = Workflow.make("order", (id: string, ctx) =>
  Effect.gen(function*() {
    const at = yield* ctx.now()
    const item = yield* ctx.step<string>("fetch", { id })
    yield* ctx.sleep("1 minute")
    const stored = yield* ctx.step<number>("store", { item })
    return { at, item, stored }
  }))

const pipelineStyle = Workflow.make("order", (id: string, ctx) =>
  ctx.now().pipe(
    Effect.flatMap((at) =>
      ctx.step<string>("fetch", { id }).pipe(
        Effect.flatMap((item) =>
          ctx.sleep("1 minute").pipe(
            Effect.zipRight(ctx.step<number>("store", { item })),
            Effect.map((stored) => ({ at, item, stored }))
          )
        )
      )
    )
  ))

const asyncStyle = Workflow.fromPromise("order", async (ctx, id: string) => {
  const at = await ctx.now()
  const item = await ctx.step<string>("fetch", { id })
  await ctx.sleep("1 minute")
  const stored = await ctx.step<number>("store", { item })
  return { at, item, stored }
})

const styles = [
  ["Effect.gen", generatorStyle],
  ["Effect pipeline", pipelineStyle],
  ["async", asyncStyle]
] as const

const fullHistory: ReadonlyArray<HistoryEvent> = [
  { seq: 0, kind: "step", name: "now", output: T0 },
  { seq: 1, kind: "call", name: "fetch", output: "widget" },
  { seq: 2, kind: "timer", name: "sleep:2" },
  { seq: 3, kind: "call", name: "store", output: 7 }
]

/** The payload as the engine sends it: JSON, with the `null`s the engine writes for absent fields. */
const wirePayload = (history: ReadonlyArray<HistoryEvent>) =>
  JSON.parse(JSON.stringify({
    taskId: "run-1:wf:00000009",
    runId: "run-1",
    workflow: "order",
    workflowVersion: "1",
    input: "o-1",
    history: history.map((event) => ({ name: null, error: null, ...event })),
    group: "order",
    attempt: 1
  })) as unknown

const failureOf = <A, E>(effect: Effect.Effect<A, E>) => Effect.flip(effect)

describe("Workflow.replay", () => {
  for (const [style, workflow] of styles) {
    describe(style, () => {
      it.effect("a matching history replays to the decision the live worker makes", () =>
        Effect.gen(function*() {
          yield* TestClock.setTime(T0)
          for (const length of [0, 1, 2, 3, 4]) {
            const task = makeTask("order", fullHistory.slice(0, length), { input: "o-1" })
            const offline = yield* Workflow.replay(workflow, task)
            const live = yield* Workflow.processWorkflowTask([workflow], task)
            assert.deepStrictEqual(offline, live, `history of ${length}`)
          }
          const done = yield* Workflow.replay(workflow, makeTask("order", fullHistory, { input: "o-1" }))
          assert.deepStrictEqual(done, {
            taskId: "run-1:wf:00000001",
            runId: "run-1",
            status: "completed",
            commands: [],
            output: { at: T0, item: "widget", stored: 7 }
          })
          const blocked = yield* Workflow.replay(workflow, makeTask("order", fullHistory.slice(0, 2), { input: "o-1" }))
          assert.deepStrictEqual(blocked.commands, [{ kind: "sleep", seq: 2, ms: 60_000 }])
          assert.strictEqual(blocked.status, "continue")
        }))

      it.effect("takes the payload as the engine sends it (JSON with null names and errors)", () =>
        Effect.gen(function*() {
          const decision = yield* Workflow.replay(workflow, wirePayload(fullHistory))
          assert.strictEqual(decision.status, "completed")
          assert.strictEqual(decision.taskId, "run-1:wf:00000009")
          assert.deepStrictEqual(decision.output, { at: T0, item: "widget", stored: 7 })
        }))

      it.effect("another step name where history recorded one fails with NondeterminismError naming both", () =>
        Effect.gen(function*() {
          const history: Array<HistoryEvent> = [...fullHistory]
          history[1] = { seq: 1, kind: "call", name: "fetchV1", output: "widget" }
          const error = yield* failureOf(Workflow.replay(workflow, makeTask("order", history, { input: "o-1" })))
          assert.instanceOf(error, Workflow.NondeterminismError)
          assert.strictEqual(error._tag, "NondeterminismError")
          if (error._tag !== "NondeterminismError") return
          assert.deepInclude(error, {
            runId: "run-1",
            seq: 1,
            recordedKind: "call",
            recordedName: "fetchV1",
            reachedKind: "call",
            reachedName: "fetch"
          })
          assert.strictEqual(
            error.message,
            `history at seq 1 is call/"fetchV1", but replay reached call/"fetch" (run run-1): the workflow code no longer ` +
              `matches this run's history; keep the old code path for runs started on it, or ship the change under a new workflow name`
          )
          // The live path answers the same divergence with a failed decision carrying that error.
          const live = yield* Workflow.processWorkflowTask([workflow], makeTask("order", history, { input: "o-1" }))
          assert.strictEqual(live.status, "failed")
          assert.strictEqual(live.error?.message, error.message)
          assert.deepStrictEqual(live.commands, [])
        }))

      it.effect("another kind at a seq (a timer where the code asks for a step) fails with NondeterminismError", () =>
        Effect.gen(function*() {
          const history: ReadonlyArray<HistoryEvent> = [
            { seq: 0, kind: "step", name: "now", output: T0 },
            { seq: 1, kind: "timer", name: "sleep:1" }
          ]
          const error = yield* failureOf(Workflow.replay(workflow, makeTask("order", history, { input: "o-1" })))
          assert.strictEqual(error._tag, "NondeterminismError")
          if (error._tag !== "NondeterminismError") return
          assert.deepInclude(error, { seq: 1, recordedKind: "timer", recordedName: "sleep:1", reachedKind: "call", reachedName: "fetch" })
        }))

      it.effect("code that ends before a recorded seq fails offline, while the live worker lets it pass", () =>
        Effect.gen(function*() {
          const history: ReadonlyArray<HistoryEvent> = [
            ...fullHistory,
            { seq: 4, kind: "call", name: "notify", output: null }
          ]
          const task = makeTask("order", history, { input: "o-1" })
          const error = yield* failureOf(Workflow.replay(workflow, task))
          assert.strictEqual(error._tag, "NondeterminismError")
          if (error._tag !== "NondeterminismError") return
          assert.deepInclude(error, { seq: 4, recordedKind: "call", recordedName: "notify", reachedKind: "end", reachedName: "completed" })
          assert.include(error.message, `history at seq 4 is call/"notify", but the code ended the turn (completed) before reaching it`)
          const live = yield* Workflow.processWorkflowTask([workflow], task)
          assert.strictEqual(live.status, "completed")
        }))

      it.effect("a task that is not a workflow task fails with WorkflowTaskDecodeError", () =>
        Effect.gen(function*() {
          const error = yield* failureOf(Workflow.replay(workflow, { taskId: "t", runId: "r", workflow: "order", history: [{ seq: "0" }] }))
          assert.instanceOf(error, WorkflowTaskDecodeError)
          assert.deepStrictEqual(error._tag === "WorkflowTaskDecodeError" ? error.identity : undefined, { taskId: "t", runId: "r" })
        }))
    })
  }

  it.effect("a divergence caught by workflow code still fails the replay (Effect)", () =>
    Effect.gen(function*() {
      const catching = Workflow.make("catching", (_: unknown, ctx) =>
        ctx.step("renamed").pipe(Effect.catchAllDefect(() => Effect.succeed("swallowed"))))
      const error = yield* failureOf(
        Workflow.replay(catching, makeTask("catching", [{ seq: 0, kind: "call", name: "original", output: 1 }]))
      )
      assert.strictEqual(error._tag, "NondeterminismError")
    }))

  it.effect("a divergence caught by workflow code still fails the replay (async)", () =>
    Effect.gen(function*() {
      const catching = Workflow.fromPromise("catching", async (ctx) => {
        try {
          return await ctx.step("renamed")
        } catch {
          return "swallowed"
        }
      })
      const error = yield* failureOf(
        Workflow.replay(catching, makeTask("catching", [{ seq: 0, kind: "call", name: "original", output: 1 }]))
      )
      assert.strictEqual(error._tag, "NondeterminismError")
    }))

  it.effect("a fan blocked on its unresolved items is not an early end, though history holds a later item", () =>
    Effect.gen(function*() {
      const fan = Workflow.make("fan", (_: unknown, ctx) => ctx.gatherCalls([["a", 1], ["b", 2], ["c", 3]]))
      const decision = yield* Workflow.replay(fan, makeTask("fan", [{ seq: 1, kind: "call", name: "b", output: 2 }]), {
        partition: "p1"
      })
      assert.strictEqual(decision.status, "continue")
      assert.deepStrictEqual(decision.commands.map((command) => [command.seq, command.kind, command.kind === "call" ? command.group : ""]), [
        [0, "call", "p1"],
        [2, "call", "p1"]
      ])
    }))

  it.effect("a registry picks the definition by the task's workflow name; an unknown name is the no_workflow decision", () =>
    Effect.gen(function*() {
      const other = Workflow.make("other", () => Effect.succeed("other ran"))
      const registry = [other, asyncStyle]
      const decision = yield* Workflow.replay(registry, makeTask("order", fullHistory, { input: "o-1" }))
      assert.deepStrictEqual(decision.output, { at: T0, item: "widget", stored: 7 })
      const fromMap = yield* Workflow.replay(new Map([["other", other]]), makeTask("other", []))
      assert.strictEqual(fromMap.output, "other ran")
      const unknown = yield* Workflow.replay(other, makeTask("order", fullHistory))
      assert.strictEqual(unknown.status, "failed")
      assert.strictEqual(unknown.error?.code, "no_workflow")
    }))

  it.effect("an unsupported op or a failing body is the failed decision, not an error", () =>
    Effect.gen(function*() {
      const unsupported = Workflow.make("u", (_: unknown, ctx) => ctx.continueAsNew())
      const decision = yield* Workflow.replay(unsupported, makeTask("u", []))
      assert.strictEqual(decision.status, "failed")
      assert.include(decision.error?.message, "ctx.continueAsNew is unsupported")
      const typed = Workflow.make("typed", (n: number) => Effect.succeed(n + 1), { input: Schema.Number })
      const refused = yield* Workflow.replay(typed, makeTask("typed", [], { input: "not a number" }))
      assert.strictEqual(refused.status, "failed")
    }))
})

describe("replay (promise facade)", () => {
  it("resolves with the decision", async () => {
    const decision = await replayPromise([asyncStyle], wirePayload(fullHistory))
    assert.strictEqual(decision.status, "completed")
  })

  it("rejects with the typed NondeterminismError itself", async () => {
    const history: Array<HistoryEvent> = [...fullHistory]
    history[3] = { seq: 3, kind: "call", name: "archive", output: 7 }
    const error = await replayPromise(asyncStyle, wirePayload(history)).then(
      () => assert.fail("replay should have rejected"),
      (error: unknown) => error
    )
    assert.instanceOf(error, Workflow.NondeterminismError)
    assert.strictEqual((error as Workflow.NondeterminismError).seq, 3)
  })

  it("rejects with WorkflowTaskDecodeError for a payload that is not a task", async () => {
    const error = await replayPromise(asyncStyle, "not a task").then(() => undefined, (error: unknown) => error)
    assert.instanceOf(error, WorkflowTaskDecodeError)
  })
})

describe("replay core details the fast paths must keep", () => {
  it.effect("an op built once and run twice takes two seqs, under yield* and through pipe alike", () =>
    Effect.gen(function*() {
      const twice = Workflow.make("twice", (_: unknown, ctx) =>
        Effect.gen(function*() {
          const step = ctx.step<number>("s")
          const a = yield* step
          const b = yield* step
          const c = yield* Effect.flatMap(Effect.void, () => step)
          return [a, b, c]
        }))
      const history: ReadonlyArray<HistoryEvent> = [
        { seq: 0, kind: "call", name: "s", output: 1 },
        { seq: 1, kind: "call", name: "s", output: 2 }
      ]
      const decision = yield* Workflow.replay(twice, makeTask("twice", history))
      assert.strictEqual(decision.status, "continue")
      assert.deepStrictEqual(decision.commands, [{ kind: "call", seq: 2, name: "s", group: "default", input: undefined }])
      const done = yield* Workflow.replay(twice, makeTask("twice", [...history, { seq: 2, kind: "call", name: "s", output: 3 }]))
      assert.deepStrictEqual(done.output, [1, 2, 3])
    }))

  it.effect("history out of order, with gaps, duplicates or far-apart seqs resolves by seq (last duplicate wins)", () =>
    Effect.gen(function*() {
      const fan = Workflow.fromPromise("fan", (ctx) => ctx.gatherCalls([["a", 0], ["b", 1], ["c", 2], ["d", 3]]))
      const shuffled: ReadonlyArray<HistoryEvent> = [
        { seq: 3, kind: "call", name: "d", output: "d" },
        { seq: 0, kind: "call", name: "a", output: "stale" },
        { seq: 1, kind: "call", name: "b", output: "b" },
        { seq: 0, kind: "call", name: "a", output: "a" }
      ]
      const decision = yield* Workflow.replay(fan, makeTask("fan", shuffled))
      assert.strictEqual(decision.status, "continue")
      assert.deepStrictEqual(decision.commands.map((command) => command.seq), [2])
      const complete = yield* Workflow.replay(fan, makeTask("fan", [...shuffled, { seq: 2, kind: "call", name: "c", output: "c" }]))
      assert.deepStrictEqual(complete.output, ["a", "b", "c", "d"])
      // a seq far beyond the history's length (indexed by a map, not an array)
      const far = yield* failureOf(
        Workflow.replay(fan, makeTask("fan", [...shuffled, { seq: 2, kind: "call", name: "c", output: "c" }, { seq: 1e9, kind: "timer" }]))
      )
      assert.strictEqual(far._tag === "NondeterminismError" ? far.seq : undefined, 1e9)
    }))
})
