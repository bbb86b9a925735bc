/**
 * `decodeWorkflowTask` decodes a turn's history by hand (a 10,000-entry history through the schema
 * held the event loop for 100+ ms). It must agree with the `WorkflowTask` schema on every input: the
 * same accepted values, the same rejections.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import { decodeWorkflowTask, WorkflowTask } from "../../src/wire/WorkflowProtocol.js"

const bySchema = Schema.decodeUnknownEither(WorkflowTask, { errors: "all" })

const base = { taskId: "run-1:wf:1", runId: "run-1", workflow: "wf", workflowVersion: "1", input: { a: 1 }, group: "wf", attempt: 1 }

const entries: ReadonlyArray<unknown> = [
  { seq: 0, kind: "step", name: "now", output: 1 },
  { seq: 1, kind: "call", name: "ingestion", output: { rows: [1, 2] } },
  { seq: 2, kind: "timer", name: "sleep:2" },
  { seq: 3, kind: "signal", output: { by: "ops" } },
  { seq: 4, kind: "child", output: null },
  { seq: 5, kind: "call", name: null, output: 1 },
  { seq: 6, kind: "call", name: "x", error: { message: "declined", code: "declined", retryable: false } },
  { seq: 7, kind: "call", name: "x", error: { message: "m", code: null, errors: [{ name: "a", error: { message: "b" } }] } },
  { seq: 8, kind: "child", error: { message: "child failed" }, extra: "dropped" },
  { seq: 9, kind: "step", name: "sideEffect", error: null, output: "ok" },
  { seq: 10, kind: "step", name: undefined, output: undefined, error: undefined },
  { seq: -0, kind: "timer" }
]

const invalid: ReadonlyArray<unknown> = [
  { seq: 1.5, kind: "step" },
  { seq: 2 ** 60, kind: "step" },
  { seq: "1", kind: "step" },
  { seq: 1, kind: "event" },
  { seq: 1, kind: "step", name: 3 },
  { seq: 1, kind: "step", error: { code: "no message" } },
  { seq: 1, kind: "step", error: { message: "m", retryable: "yes" } },
  { seq: 1, kind: "step", error: "boom" },
  null,
  "entry",
  [0, "step"]
]

const agree = (payload: unknown) => {
  const fast = decodeWorkflowTask(payload)
  const schema = bySchema(payload)
  assert.strictEqual(fast._tag, schema._tag, JSON.stringify(payload))
  if (Either.isRight(fast) && Either.isRight(schema)) assert.deepStrictEqual(fast.right, schema.right)
}

describe("decodeWorkflowTask agrees with the WorkflowTask schema", () => {
  it("on every valid history entry shape, one at a time and together", () => {
    for (const entry of entries) agree({ ...base, history: [entry] })
    agree({ ...base, history: entries })
    agree({ ...base, history: [] })
  })

  it("on every invalid entry, wherever it sits in the history", () => {
    for (const entry of invalid) {
      agree({ ...base, history: [entry] })
      agree({ ...base, history: [...entries, entry] })
    }
  })

  it("on invalid tasks around a valid history", () => {
    agree({ ...base, taskId: 1, history: entries })
    agree({ ...base, history: "none" })
    agree({ runId: "run-1", history: entries })
    agree({ ...base, pendingSignals: [{ seq: 1, signal: "s", payload: 1 }], history: entries })
    agree({ ...base, pendingSignals: [{ seq: "x" }], history: entries })
    agree(null)
    agree([])
    const failure = decodeWorkflowTask({ ...base, history: [{ seq: 1, kind: "event" }] })
    assert.isTrue(Either.isLeft(failure))
    if (Either.isLeft(failure)) {
      assert.match(failure.left.detail, /kind/)
      assert.deepStrictEqual(failure.left.identity, { taskId: base.taskId, runId: base.runId })
    }
  })
})
