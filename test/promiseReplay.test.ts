/**
 * The promise facade's replay, verify and capture, through the facade alone: a worker capturing the
 * turns it answers, the captured turn replayed offline with `replayWorkflow`, and verified.
 */
import { assert, describe, it } from "vitest"
import {
  inMemory,
  NondeterminismError,
  replayWorkflow,
  verifyDurableWorkflows,
  verifyWorkflows,
  Worker
} from "../src/promise.js"
import * as Workflow from "../src/core/Workflow.js"

const turn = (runId: string, history: ReadonlyArray<Record<string, unknown>>) => ({
  taskId: `${runId}:wf:${history.length + 1}`,
  runId,
  workflow: "order",
  workflowVersion: "1",
  input: "o-1",
  history: history.map((event) => ({ name: null, error: null, ...event })),
  group: "order",
  attempt: 1
})

const body = async (ctx: Workflow.AsyncWorkflowContext, id: string) => {
  const item = await ctx.step<string>("fetch", { id })
  return ctx.step<number>("store", { item })
}

describe("promise facade: replay and capture", () => {
  it("verify rejects with the error itself, never throws: cases whose iteration fails", async () => {
    const broke = new Error("the cases broke")
    const broken = {
      [Symbol.iterator]: (): Iterator<never> => {
        throw broke
      }
    }
    for (const verify of [() => verifyWorkflows([], broken), () => verifyDurableWorkflows([], broken)]) {
      let result: Promise<unknown> | undefined
      assert.doesNotThrow(() => (result = verify()))
      const error = await result!.then(() => undefined, (e: unknown) => e)
      assert.strictEqual(error, broke, "the error, not a FiberFailure around it")
    }
  })

  it("captureHistories records the turns a worker answers; replayWorkflow and verifyWorkflows replay them", async () => {
    const records: Array<{ readonly task?: unknown; readonly decision?: unknown }> = []
    const worker = new Worker({
      handleSignals: false,
      logLevel: "None",
      captureHistories: { onCapture: (record) => void records.push(record as never), sampleRate: 1 }
    })
    worker.workflow("order", body)
    const broker = inMemory()
    const running = worker.run(broker)
    await broker.enqueue(turn("run-1", [{ seq: 0, kind: "call", name: "fetch", output: "widget" }]))
    const reply = await broker.takeReply()
    await worker.stop()
    await running
    assert.strictEqual(reply._tag, "WorkflowDecision")
    assert.strictEqual(records.length, 1, "the answered turn was captured (written when the run's layer closed)")
    const captured = records[0] as { readonly task: unknown; readonly decision: unknown }

    const workflow = Workflow.fromPromise("order", body)
    const decision = await replayWorkflow(workflow, captured.task)
    assert.deepStrictEqual(JSON.parse(JSON.stringify(decision)), captured.decision)

    // changed code: the turn's history holds `fetch` at seq 0, the new code asks for `load`
    const changed = Workflow.fromPromise("order", async (ctx, id: string) => ctx.step("load", { id }))
    const error = await replayWorkflow(changed, captured.task).then(() => undefined, (e: unknown) => e)
    assert.instanceOf(error, NondeterminismError)

    const report = await verifyWorkflows(changed, [{ id: "run-1", ...(captured as object) } as never])
    assert.strictEqual(report.status, "drifted")
  })

  it("transport options added in 0.3.0 pass through the facade's constructors (no unknown-key refusal)", async () => {
    const { redis } = await import("../src/bullmq.js")
    const { durableWorkflow } = await import("../src/durable-workflow.js")
    const worker = new Worker({ handleSignals: false, logLevel: "None" })
    worker.step("noop", () => undefined)
    // waitForBroker: a bad value is the transport's own config error, so the key itself was accepted
    const bad = await worker.run(redis({ waitForBroker: "yes" as never })).then(() => undefined, (e: unknown) => e)
    assert.match(String((bad as Error)?.message), /waitForBroker/)
    assert.notMatch(String((bad as Error)?.message), /unknown/)
    const dw = await new Worker({ handleSignals: false, logLevel: "None" }).run(
      durableWorkflow({ baseUrl: "http://127.0.0.1:1", taskQueue: "q", waitForBroker: "yes" as never })
    ).then(() => undefined, (e: unknown) => e)
    assert.match(String((dw as Error)?.message), /waitForBroker/)
    assert.notMatch(String((dw as Error)?.message), /unknown/)
  })
})
