/**
 * What each protocol answers for a task that died of a defect (`Protocol.crashed`): a failure the
 * orchestrator handles by its own rules, never nothing for a task it can answer (a task given back
 * would die again wherever it is delivered). How the runtime uses it: test/runtime/defects.test.ts.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Option from "effect/Option"
import * as DurableWorkflowProtocol from "../../src/protocol/DurableWorkflowProtocol.js"
import * as NestDurableProtocol from "../../src/protocol/NestDurableProtocol.js"
import { stepsOnly } from "../../src/transport/sqs/internal/protocol.js"
import { stepTask } from "../support/local.js"

const turn = { runId: "r1", taskId: "t7", workflow: "order", history: [], input: {} }

describe("a task that died of a defect", () => {
  const nest = NestDurableProtocol.make()

  it("nestjs-durable: a step fails retryable as worker_defect, a turn fails its run, an unidentifiable payload has no answer", () => {
    const step = Option.getOrThrow(nest.crashed!(stepTask("r1", "charge", {}), "boom"))
    assert.deepStrictEqual(step, {
      _tag: "StepResult",
      result: {
        runId: "r1",
        seq: 0,
        stepId: "r1:0",
        status: "failed",
        error: { message: "the worker crashed on this task (a defect, not the handler's): boom", code: "worker_defect", retryable: true }
      }
    })
    const decision = Option.getOrThrow(nest.crashed!(turn, "boom"))
    assert.deepStrictEqual(decision, {
      _tag: "WorkflowDecision",
      decision: {
        taskId: "t7",
        runId: "r1",
        status: "failed",
        commands: [],
        error: { message: "the worker crashed on this task (a defect, not the handler's): boom", code: "worker_defect" }
      }
    })
    assert.isTrue(Option.isNone(nest.crashed!({ not: "a task" }, "boom")))
    assert.isTrue(Option.isNone(nest.crashed!({ ...turn, taskId: undefined }, "boom")), "a turn with no task id cannot be answered")
  })

  it("nestjs-durable over SQS: a step's bare result; a turn, which SQS does not carry, has none", () => {
    const sqs = stepsOnly(undefined)
    const result = Option.getOrThrow(sqs.crashed!(stepTask("r1", "charge", {}), "boom"))
    assert.strictEqual(result.status, "failed")
    assert.strictEqual(result.error?.code, "worker_defect")
    assert.isTrue(Option.isNone(sqs.crashed!(turn, "boom")))
  })

  it("Durable Workflow: an activity's attempt fails retryable, a workflow task fails, a query and an update validation are refused", () => {
    const dw = DurableWorkflowProtocol.make()
    const of = (kind: string) => Option.map(dw.crashed!({ kind, task: {} }, "boom"), (reply) => [reply._tag, reply.outcome])
    assert.deepStrictEqual(of("activity"), Option.some(["ActivityFailed", "failed"]))
    assert.deepStrictEqual(of("workflow"), Option.some(["WorkflowFailed", "failed"]))
    assert.deepStrictEqual(of("query"), Option.some(["QueryFailed", "failed"]))
    assert.deepStrictEqual(of("update_validation"), Option.some(["UpdateRejected", "failed"]))
    assert.isTrue(Option.isNone(dw.crashed!({ kind: "unknown", task: {} }, "boom")))
    const activity = Option.getOrThrow(dw.crashed!({ kind: "activity", task: {} }, "boom"))
    assert.strictEqual(activity._tag === "ActivityFailed" && activity.failure.non_retryable, undefined, "the server's retry policy decides")
  })
})
