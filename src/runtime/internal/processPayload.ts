import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import { processStep, type StepRegistry } from "../../core/Step.js"
import { decodeStepTask, isWorkflowTaskShape, type StepResult, TaskDecodeError } from "../../protocol/StepProtocol.js"
import type { Reply } from "../../transport/Transport.js"

/**
 * What the runtime does with a delivered payload: answer it, or acknowledge it as unanswerable.
 *
 * @internal
 */
export type Outcome =
  | { readonly _tag: "Reply"; readonly reply: Reply }
  | { readonly _tag: "Reject"; readonly error: TaskDecodeError }

/** @internal */
export const stepReply = (result: StepResult): Outcome => ({ _tag: "Reply", reply: { _tag: "StepResult", result } })

/**
 * Decodes a payload and runs it. A step task that does not decode but names its run and step gets a
 * non-retryable failed result (so the run does not hang); one that names nothing is rejected, after
 * it was logged with the reason.
 *
 * @internal
 */
export const processPayload = <R>(steps: StepRegistry<R>) =>
(payload: unknown, cancelled: Effect.Effect<void>): Effect.Effect<Outcome, never, R> => {
  if (isWorkflowTaskShape(payload)) {
    const name = (payload as { workflow: string }).workflow
    return Effect.succeed({
      _tag: "Reject",
      error: new TaskDecodeError({ kind: "workflow", detail: `no workflow "${name}" is registered on this worker` })
    })
  }
  return Either.match(decodeStepTask(payload), {
    onRight: (task) =>
      Effect.map(
        Effect.raceFirst(
          processStep(steps, task),
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
    onLeft: (error) =>
      Effect.as(
        Effect.logError("malformed step task", error.detail),
        error.identity === undefined
          ? { _tag: "Reject", error } as const
          : stepReply({
            ...error.identity,
            status: "failed",
            error: { message: error.message, code: "malformed_task", retryable: false }
          })
      )
  })
}
