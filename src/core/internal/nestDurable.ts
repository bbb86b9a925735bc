import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Fiber from "effect/Fiber"
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

const runStep = <R>(handlers: Handlers<R>, payload: unknown, cancelled: Effect.Effect<void>) =>
  Either.match(decodeStepTask(payload), {
    onRight: (task) =>
      Effect.map(
        Effect.raceFirst(
          processStep(handlers.steps, task),
          Effect.as(cancelled, {
            runId: task.runId,
            seq: task.seq,
            stepId: task.stepId,
            status: "failed",
            error: { message: `run ${task.runId} was cancelled`, code: "cancelled", retryable: false }
          } satisfies StepResult)
        ),
        stepReply
      ),
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

const runTurn = <R>(
  handlers: Handlers<R>,
  payload: unknown,
  cancelled: Effect.Effect<void>,
  partition: string | undefined
) =>
  Either.match(decodeWorkflowTask(payload), {
    onRight: (task) =>
      Effect.gen(function*() {
        let isCancelled = false
        const watcher = yield* Effect.fork(Effect.zipRight(cancelled, Effect.sync(() => (isCancelled = true))))
        const decision = yield* processWorkflowTask(handlers.workflows, task, {
          partition,
          isCancelled: () => isCancelled
        })
        yield* Fiber.interrupt(watcher)
        return decisionReply(decision)
      }).pipe(Effect.annotateLogs({ runId: task.runId, workflow: task.workflow, taskId: task.taskId })),
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
  process: (handlers, payload, cancelled) =>
    isWorkflowTaskShape(payload)
      ? runTurn(handlers, payload, cancelled, options.partition)
      : runStep(handlers, payload, cancelled)
})
