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
import * as NestDurableProtocol from "../../../protocol/NestDurableProtocol.js"
import * as Protocol from "../../../seam/Protocol.js"
import { isWorkflowTaskShape, type StepResult } from "../../../wire/StepProtocol.js"

/**
 * Why a workflow turn found on an SQS queue is rejected.
 *
 * @since 0.1.0
 */
export const WORKFLOW_TURN_REJECTED =
  "a workflow turn arrived on an SQS step queue: the SQS transport carries step tasks only " +
  "(the engine's SqsTransport cannot dispatch workflow turns); serve workflows over BullMQ or SQL"

const stepResultOf = (reply: NestDurableProtocol.NestReply): Option.Option<StepResult> =>
  reply._tag === "StepResult" ? Option.some(reply.result) : Option.none()

/**
 * The step-only nestjs-durable protocol.
 *
 * @since 0.1.0
 */
export const stepsOnly = (partition: string | undefined): Protocol.Protocol<StepResult> => {
  const base = NestDurableProtocol.make({ partition })
  return {
    name: "nestjs-durable (sqs)",
    pools: base.pools,
    label: base.label,
    process: (handlers, task) =>
      isWorkflowTaskShape(task.payload)
        ? Effect.succeed(Protocol.reject(WORKFLOW_TURN_REJECTED))
        : Effect.map(base.process(handlers, task), (outcome): Protocol.Outcome<StepResult> =>
          outcome._tag === "Reject"
            ? outcome
            : outcome.reply._tag === "StepResult"
            ? Protocol.reply(outcome.reply.result, outcome.ok)
            : Protocol.reject(WORKFLOW_TURN_REJECTED)),
    cancelled: (payload) => Option.flatMap(base.cancelled(payload), stepResultOf),
    crashed: (payload, message) => Option.flatMap(base.crashed?.(payload, message) ?? Option.none(), stepResultOf)
  }
}
