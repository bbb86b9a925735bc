import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import { decodeStepTask, isWorkflowTaskShape, type StepResult } from "../../protocol/StepProtocol.js"
import { decodeWorkflowTask, type WorkflowDecision } from "../../protocol/WorkflowProtocol.js"
import { processStep } from "../Step.js"
import { processWorkflowTask } from "../Workflow.js"
import type { Handlers, Outcome, Protocol } from "./protocol.js"

/**
 * What a worker sends back to the nestjs-durable engine: a step result (`<P>-results`) or a
 * workflow decision (`<P>-decisions`).
 *
 * @internal
 */
export type NestReply =
  | { readonly _tag: "StepResult"; readonly result: StepResult }
  | { readonly _tag: "WorkflowDecision"; readonly decision: WorkflowDecision }

const stepReply = (result: StepResult): Outcome<NestReply> => ({ _tag: "Reply", reply: { _tag: "StepResult", result } })
const decisionReply = (decision: WorkflowDecision): Outcome<NestReply> => ({
  _tag: "Reply",
  reply: { _tag: "WorkflowDecision", decision }
})

const runStep = <R>(handlers: Handlers<R>, payload: unknown) =>
  Either.match(decodeStepTask(payload), {
    onRight: (task) => Effect.map(processStep(handlers.steps, task), stepReply),
    onLeft: (error): Effect.Effect<Outcome<NestReply>> =>
      Effect.as(
        Effect.logError("malformed step task", error.detail),
        error.identity === undefined
          ? { _tag: "Reject", reason: error.message }
          : stepReply({
            ...error.identity,
            status: "failed",
            error: { message: error.message, code: "malformed_task", retryable: false }
          })
      )
  })

const runTurn = <R>(handlers: Handlers<R>, payload: unknown, partition: string | undefined) =>
  Either.match(decodeWorkflowTask(payload), {
    onRight: (task) =>
      Effect.map(processWorkflowTask(handlers.workflows, task, { partition }), decisionReply).pipe(
        Effect.annotateLogs({ runId: task.runId, workflow: task.workflow, taskId: task.taskId })
      ),
    onLeft: (error): Effect.Effect<Outcome<NestReply>> =>
      Effect.as(
        Effect.logError("malformed workflow task", error.detail),
        error.identity === undefined
          ? { _tag: "Reject", reason: error.message }
          : decisionReply({
            ...error.identity,
            status: "failed",
            commands: [],
            error: { message: error.message, code: "malformed_task" }
          })
      )
  })

/**
 * The run and step a step-task payload names, when it names them, with its routing group. Read by
 * hand rather than decoded: transports read it for every task they take.
 *
 * @internal
 */
export const stepIdentity = (
  payload: unknown
): { readonly runId: string; readonly seq: number; readonly stepId: string; readonly group: string | undefined } | undefined => {
  if (typeof payload !== "object" || payload === null || isWorkflowTaskShape(payload)) return undefined
  const { runId, seq, stepId, group } = payload as Record<string, unknown>
  return typeof runId === "string" && Number.isInteger(seq) && typeof stepId === "string"
    ? { runId, seq: seq as number, stepId, group: typeof group === "string" ? group : undefined }
    : undefined
}

/**
 * The run (and task id) a workflow-turn payload names, when it is one, with its routing group.
 *
 * @internal
 */
export const turnIdentity = (
  payload: unknown
): { readonly runId: string; readonly taskId: string | undefined; readonly group: string | undefined } | undefined => {
  if (!isWorkflowTaskShape(payload)) return undefined
  const { runId, taskId, group } = payload as Record<string, unknown>
  return typeof runId === "string"
    ? { runId, taskId: typeof taskId === "string" ? taskId : undefined, group: typeof group === "string" ? group : undefined }
    : undefined
}

/** A step of a cancelled run fails for good; a turn of one is answered `cancelled`. */
const cancelledReply = (payload: unknown): Option.Option<NestReply> => {
  const turn = turnIdentity(payload)
  if (turn !== undefined) {
    return turn.taskId === undefined ? Option.none() : Option.some({
      _tag: "WorkflowDecision",
      decision: { taskId: turn.taskId, runId: turn.runId, status: "cancelled", commands: [] }
    })
  }
  const step = stepIdentity(payload)
  return step === undefined ? Option.none() : Option.some({
    _tag: "StepResult",
    result: {
      runId: step.runId,
      seq: step.seq,
      stepId: step.stepId,
      status: "failed",
      error: { message: `run ${step.runId} was cancelled`, code: "cancelled", retryable: false }
    }
  })
}

/**
 * The nestjs-durable engine's remote protocol: step tasks and workflow turns share queues and are
 * told apart by shape. `partition` is the one a workflow's `call` without a group is sent with.
 *
 * @internal
 */
export const nestDurable = (options: { readonly partition?: string | undefined } = {}): Protocol<NestReply> => ({
  name: "nestjs-durable",
  label: (payload) => {
    const workflow = isWorkflowTaskShape(payload)
    const name = (payload as { name?: unknown; workflow?: unknown } | null)?.[workflow ? "workflow" : "name"]
    return { kind: workflow ? "workflow" : "step", name: typeof name === "string" ? name : undefined }
  },
  process: (handlers, payload) =>
    isWorkflowTaskShape(payload) ? runTurn(handlers, payload, options.partition) : runStep(handlers, payload),
  cancelled: cancelledReply
})
