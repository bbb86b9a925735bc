import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
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

const Identity = Schema.Struct({ runId: Schema.String, seq: Schema.Int, stepId: Schema.String })
const TurnIdentity = Schema.Struct({ runId: Schema.String, taskId: Schema.String })
const stepIdentity = Schema.decodeUnknownOption(Identity)
const turnIdentity = Schema.decodeUnknownOption(TurnIdentity)

/** A step of a cancelled run fails for good; a turn of one is answered `cancelled`. */
const cancelledReply = (payload: unknown): Option.Option<NestReply> =>
  isWorkflowTaskShape(payload)
    ? Option.map(turnIdentity(payload), (turn) => ({
      _tag: "WorkflowDecision",
      decision: { taskId: turn.taskId, runId: turn.runId, status: "cancelled", commands: [] }
    }))
    : Option.map(stepIdentity(payload), (step) => ({
      _tag: "StepResult",
      result: {
        ...step,
        status: "failed",
        error: { message: `run ${step.runId} was cancelled`, code: "cancelled", retryable: false }
      }
    }))

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
