/**
 * The protocol of SQS deliveries: the nestjs-durable step protocol, answered with a bare step result.
 * The engine's `SqsTransport` cannot dispatch workflow turns (it has no `dispatchWorkflowTask` and no
 * decisions queue), so a workflow-shaped message on a step queue is rejected (logged, then deleted)
 * rather than answered with a decision nobody would read.
 *
 * @since 0.1.0
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { nestDurable } from "../../../core/internal/nestDurable.js"
import type { Outcome, Protocol } from "../../../core/internal/protocol.js"
import { isWorkflowTaskShape, type StepResult } from "../../../protocol/StepProtocol.js"

/**
 * Why a workflow turn found on an SQS queue is rejected.
 *
 * @since 0.1.0
 */
export const WORKFLOW_TURN_REJECTED =
  "a workflow turn arrived on an SQS step queue: the SQS transport carries step tasks only " +
  "(the engine's SqsTransport cannot dispatch workflow turns); serve workflows over BullMQ or SQL"

/**
 * The step-only nestjs-durable protocol.
 *
 * @since 0.1.0
 */
export const stepsOnly = (partition: string | undefined): Protocol<StepResult> => {
  const base = nestDurable({ partition })
  return {
    name: "nestjs-durable (sqs)",
    label: base.label,
    process: (handlers, payload) =>
      isWorkflowTaskShape(payload)
        ? Effect.succeed<Outcome<StepResult>>({ _tag: "Reject", reason: WORKFLOW_TURN_REJECTED })
        : Effect.map(base.process(handlers, payload), (outcome): Outcome<StepResult> =>
          outcome._tag === "Reject"
            ? outcome
            : outcome.reply._tag === "StepResult"
            ? { _tag: "Reply", reply: outcome.reply.result }
            : { _tag: "Reject", reason: WORKFLOW_TURN_REJECTED }),
    cancelled: (payload) =>
      Option.flatMap(base.cancelled(payload), (reply) =>
        reply._tag === "StepResult" ? Option.some(reply.result) : Option.none())
  }
}
