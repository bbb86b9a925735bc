import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as TestClock from "effect/TestClock"
import * as Workflow from "../../src/core/Workflow.js"
import * as ReplayVerify from "../../src/core/ReplayVerify.js"

const order = Workflow.make("order", (id: string, ctx) =>
  Effect.gen(function*() {
    const item = yield* ctx.step<string>("fetch", { id })
    yield* ctx.sleep("1 minute")
    const stored = yield* ctx.step<number>("store", { item })
    return { item, stored }
  }))

/** A turn as the engine sends it (JSON, with its nulls). */
const task = (history: ReadonlyArray<Record<string, unknown>>, workflow = "order") =>
  JSON.parse(JSON.stringify({
    taskId: "run-1:wf:00000003",
    runId: "run-1",
    workflow,
    workflowVersion: "1",
    input: "o-1",
    history: history.map((event) => ({ name: null, error: null, ...event })),
    group: "order",
    attempt: 1
  })) as unknown

const afterFetch = [{ seq: 0, kind: "call", name: "fetch", output: "widget" }]
const full = [...afterFetch, { seq: 1, kind: "timer", name: "sleep:1" }, { seq: 2, kind: "call", name: "store", output: 7 }]

/** The decision the worker answered, as JSON. */
const answered = (workflow: Workflow.Workflow<any, any>, t: unknown) =>
  Effect.map(Workflow.replay(workflow, t), (decision) => JSON.parse(JSON.stringify(decision)) as unknown)

describe("Workflow.verify: case statuses", () => {
  it.effect("replayed when the code answers the recorded decision", () =>
    Effect.gen(function*() {
      const t = task(afterFetch)
      const decision = yield* answered(order, t)
      const report = yield* Workflow.verify([order], [{ id: "run-1", task: t, decision, family: "orders" }])
      const c = report.cases[0]!
      assert.strictEqual(c.status, "replayed")
      assert.strictEqual(c.reason, "none")
      assert.strictEqual(c.workflow_type, "order")
      assert.strictEqual(c.family, "orders")
      assert.deepStrictEqual(c.expected, decision)
      assert.strictEqual((c.observed as { status: string }).status, "continue")
      assert.strictEqual(report.status, "replayed")
      assert.strictEqual(report.schema, "durable-workflow.v2.replay-diff")
    }))

  it.effect("drifted / expectation_mismatch when the code answers another command", () =>
    Effect.gen(function*() {
      const t = task(afterFetch)
      const decision = yield* answered(order, t)
      const slower = Workflow.make("order", (id: string, ctx) =>
        Effect.gen(function*() {
          const item = yield* ctx.step<string>("fetch", { id })
          yield* ctx.sleep("2 minutes")
          return item
        }))
      const report = yield* Workflow.verify(slower, [{ id: "run-1", task: t, decision }])
      const c = report.cases[0]!
      assert.strictEqual(c.status, "drifted")
      assert.strictEqual(c.reason, "expectation_mismatch")
      assert.match(c.error!.message, /command 0 differs/)
      assert.strictEqual(report.promotion_decision, "block_until_compatible")
    }))

  it.effect("drifted / expectation_mismatch when the output differs", () =>
    Effect.gen(function*() {
      const t = task(full)
      const decision = yield* answered(order, t)
      assert.strictEqual((decision as { status: string }).status, "completed")
      const other = Workflow.make("order", (id: string, ctx) =>
        Effect.gen(function*() {
          const item = yield* ctx.step<string>("fetch", { id })
          yield* ctx.sleep("1 minute")
          const stored = yield* ctx.step<number>("store", { item })
          return { item, stored, extra: true }
        }))
      const report = yield* Workflow.verify([other], [{ id: "run-1", task: t, decision }])
      assert.strictEqual(report.cases[0]!.status, "drifted")
      assert.match(report.cases[0]!.error!.message, /output differs/)
    }))

  it.effect("drifted / shape_mismatch with the divergence when the code reaches another op at a seq", () =>
    Effect.gen(function*() {
      const t = task(full)
      const reordered = Workflow.make("order", (id: string, ctx) =>
        Effect.gen(function*() {
          yield* ctx.sleep("1 minute")
          return yield* ctx.step<string>("fetch", { id })
        }))
      const report = yield* Workflow.verify([reordered], [{ id: "run-1", task: t }])
      const c = report.cases[0]!
      assert.strictEqual(c.status, "drifted")
      assert.strictEqual(c.reason, "shape_mismatch")
      assert.strictEqual(c.error!.class, "NondeterminismError")
      assert.strictEqual(c.divergence!.workflow_sequence, 0)
      assert.match(c.divergence!.expected_shape!, /^timer|sleep/)
      assert.deepStrictEqual(c.divergence!.recorded_event_types, ["call fetch"])
    }))

  it.effect("failed / replay_error when the workflow is not among those given, or the task does not decode", () =>
    Effect.gen(function*() {
      const report = yield* Workflow.verify([order], [
        { id: "other", task: task(afterFetch, "invoice") },
        { id: "bad", task: { workflow: "order", history: [{ seq: "x" }] } }
      ])
      assert.deepStrictEqual(report.cases.map((c) => [c.id, c.status, c.reason, c.error?.class]), [
        ["other", "failed", "replay_error", "WorkflowNotRegistered"],
        ["bad", "failed", "replay_error", "WorkflowTaskDecodeError"]
      ])
      assert.strictEqual(report.status, "failed")
    }))

  it.effect("a local op run anew in the turn is not compared, what depends on history is", () =>
    Effect.gen(function*() {
      const stamped = Workflow.make("order", (_: string, ctx) => Effect.flatMap(ctx.now(), () => ctx.step("fetch", {})))
      const t = task([])
      yield* TestClock.setTime(1_000)
      const decision = yield* answered(stamped, t)
      yield* TestClock.setTime(5_000)
      const report = yield* Workflow.verify([stamped], [{ id: "run-1", task: t, decision }])
      assert.strictEqual(report.cases[0]!.status, "replayed")
    }))

  it.effect("without a recorded decision, a turn that replays is replayed", () =>
    Effect.gen(function*() {
      const report = yield* Workflow.verify([order], [{ id: "run-1", task: task(afterFetch) }])
      assert.strictEqual(report.cases[0]!.status, "replayed")
      assert.isNull(report.cases[0]!.expected)
    }))
})

describe("nestjs-durable history files", () => {
  it.effect("are told apart by schema and verified beside Durable Workflow files", () =>
    Effect.gen(function*() {
      const t = task(afterFetch)
      const decision = yield* answered(order, t)
      const file = (name: string, d: unknown) => ({
        name,
        content: JSON.stringify({ schema: "effect-durable-worker.nestjs-durable-history.v1", workflow: "order", run_id: "run-1", task: t, decision: d })
      })
      const wrong = { ...(decision as object), status: "completed" }
      const report = yield* ReplayVerify.verifyFiles({ workflows: [order] }, [file("ok.json", decision), file("drift.json", wrong)])
      assert.deepStrictEqual(report.cases.map((c) => [c.id, c.status]), [["ok", "replayed"], ["drift", "drifted"]])
      assert.strictEqual(report.status, "drifted")
      assert.strictEqual(report.summary.fixtures, 2)
    }))
})
