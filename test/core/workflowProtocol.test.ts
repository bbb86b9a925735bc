import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import * as Workflow from "../../src/core/Workflow.js"
import * as WorkflowProtocol from "../../src/wire/WorkflowProtocol.js"

/** Turn 2 of the reference's worked example, as the engine sends it. */
const engineTask = {
  taskId: "run-1:wf:8b0e77aa",
  runId: "run-1",
  workflow: "pipeline",
  workflowVersion: "1",
  input: "b1",
  history: [
    { seq: 0, kind: "step", name: "now", output: 1735689600000 },
    { seq: 1, kind: "call", name: "ingestion", output: 42 },
    { seq: 2, kind: "call", name: "pay", error: { message: "card declined", code: "declined", retryable: false } },
    { seq: 3, kind: "timer", name: "sleep:3" },
    { seq: 4, kind: "signal", output: { by: "davi" } },
    { seq: 5, kind: "child", output: { r: 1 } }
  ],
  group: "py-workflows",
  attempt: 1,
  priority: 5,
  somethingNew: true
}

describe("WorkflowProtocol decoding", () => {
  it("decodes the engine's workflow task with every history entry kind", () => {
    const task = Either.getOrThrow(WorkflowProtocol.decodeWorkflowTask(engineTask))
    assert.strictEqual(task.taskId, "run-1:wf:8b0e77aa")
    assert.deepStrictEqual(task.history.map((e) => e.kind), ["step", "call", "call", "timer", "signal", "child"])
    assert.deepStrictEqual(task.history[2]!.error, { message: "card declined", code: "declined", retryable: false })
    assert.isUndefined(task.history[4]!.name)
    assert.strictEqual(task.priority, 5)
    assert.isFalse("somethingNew" in task)
  })

  it("accepts a minimal task (what the Python worker reads) and pendingSignals", () => {
    const task = Either.getOrThrow(WorkflowProtocol.decodeWorkflowTask({
      taskId: "t",
      runId: "r",
      workflow: "w",
      history: [],
      pendingSignals: [{ seq: 0, signal: "approve", payload: { ok: true } }]
    }))
    assert.deepStrictEqual(task.pendingSignals, [{ seq: 0, signal: "approve", payload: { ok: true } }])
    assert.isUndefined(task.input)
  })

  it("keeps extra error keys, a null code, and treats a null error or name as absent", () => {
    const task = Either.getOrThrow(WorkflowProtocol.decodeWorkflowTask({
      ...engineTask,
      history: [
        { seq: 0, kind: "call", name: "a", error: { message: "fatal", code: null, retryable: false, detail: { x: 1 } } },
        { seq: 1, kind: "call", name: null, output: 1, error: null }
      ]
    }))
    assert.deepStrictEqual(task.history[0]!.error, { message: "fatal", code: null, retryable: false, detail: { x: 1 } })
    assert.deepStrictEqual(task.history[1], { seq: 1, kind: "call", output: 1 })
  })

  it("fails with a typed WorkflowTaskDecodeError naming the bad fields, and keeps taskId/runId", () => {
    const result = WorkflowProtocol.decodeWorkflowTask({
      ...engineTask,
      history: [{ seq: 0.5, kind: "step" }, { seq: 1, kind: "bogus" }, { seq: 2, kind: "call", error: { code: "x" } }]
    })
    assert.isTrue(Either.isLeft(result))
    const error = Either.getLeft(result).pipe((o) => o._tag === "Some" ? o.value : assert.fail("expected a decode error"))
    assert.instanceOf(error, WorkflowProtocol.WorkflowTaskDecodeError)
    assert.strictEqual(error._tag, "WorkflowTaskDecodeError")
    assert.deepStrictEqual(error.identity, { taskId: "run-1:wf:8b0e77aa", runId: "run-1" })
    assert.include(error.message, "malformed workflow task")
    assert.include(error.detail, "bogus")
    assert.include(error.detail, "message")
  })

  it("never throws on garbage", () => {
    for (const garbage of [undefined, null, 42, "task", [], { workflow: "w" }, { taskId: 1, runId: 2, workflow: 3, history: {} }]) {
      const result = WorkflowProtocol.decodeWorkflowTask(garbage)
      assert.isTrue(Either.isLeft(result))
    }
    const noIdentity = WorkflowProtocol.decodeWorkflowTask({ workflow: "w", history: [] })
    assert.isTrue(Either.isLeft(noIdentity) && noIdentity.left.identity === undefined)
  })

  it("isWorkflowTaskShape tells a workflow turn from a step task", () => {
    assert.isTrue(WorkflowProtocol.isWorkflowTaskShape(engineTask))
    assert.isTrue(WorkflowProtocol.isWorkflowTaskShape({ workflow: "w", history: [] }))
    assert.isFalse(WorkflowProtocol.isWorkflowTaskShape({ runId: "r", seq: 0, name: "s", stepId: "r:0", group: "s", attempt: 1 }))
    assert.isFalse(WorkflowProtocol.isWorkflowTaskShape({ workflow: "w", history: {} }))
    assert.isFalse(WorkflowProtocol.isWorkflowTaskShape({ workflow: 1, history: [] }))
    assert.isFalse(WorkflowProtocol.isWorkflowTaskShape(null))
    assert.isFalse(WorkflowProtocol.isWorkflowTaskShape("workflow"))
  })

  it("decodes every command kind and rejects an unknown one", () => {
    const decode = Schema.decodeUnknownEither(WorkflowProtocol.WorkflowCommand)
    const commands = [
      { kind: "call", seq: 1, name: "ingestion", group: "pipeline", input: { key: "/b1/data.csv" } },
      { kind: "call", seq: 2, name: "a", group: "", input: 1, parallelGroup: "gather:2" },
      { kind: "recordStep", seq: 0, name: "now", output: 1, startedAt: 1, finishedAt: 2 },
      { kind: "recordStep", seq: 3, name: "x", error: { message: "m" }, events: [{ at: 1, level: "info", message: "hi" }], parallelGroup: "gather:3" },
      { kind: "sleep", seq: 4, ms: 60000 },
      { kind: "waitSignal", seq: 5, signal: "approve" },
      { kind: "startChild", seq: 6, workflow: "child", input: null, parallelGroup: "gather:6" }
    ]
    for (const command of commands) assert.deepStrictEqual<unknown>(Either.getOrThrow(decode(command)), command)
    assert.isTrue(Either.isLeft(decode({ kind: "continueAsNew", seq: 7 })))
    assert.isTrue(Either.isLeft(decode({ kind: "sleep", seq: 7, untilMs: 5 })))
  })

  it.effect("every decision processWorkflowTask makes encodes against the decision schema", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("pipeline", (_: unknown, ctx) =>
        Effect.gen(function*() {
          yield* ctx.gather([["a", Effect.succeed(1)], ["b", Effect.fail("x")]]).pipe(Effect.ignore)
          yield* ctx.gatherCalls([["c", 1]])
        }))
      const task = Either.getOrThrow(WorkflowProtocol.decodeWorkflowTask(engineTask))
      const decisions = [
        yield* Workflow.processWorkflowTask([wf], { ...task, history: [] }),
        yield* Workflow.processWorkflowTask([wf], task),
        yield* Workflow.processWorkflowTask([], task)
      ]
      assert.deepStrictEqual(decisions.map((d) => d.status), ["continue", "failed", "failed"])
      for (const decision of decisions) {
        const encoded = WorkflowProtocol.encodeWorkflowDecision(decision)
        assert.isTrue(Either.isRight(encoded))
        assert.deepStrictEqual(JSON.parse(JSON.stringify(Either.getOrThrow(encoded))), JSON.parse(JSON.stringify(decision)))
      }
      assert.isTrue(Either.isLeft(WorkflowProtocol.encodeWorkflowDecision({ ...decisions[0]!, status: "done" as "failed" })))
    }))
})
