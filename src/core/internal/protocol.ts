import type * as Effect from "effect/Effect"
import type * as Option from "effect/Option"
import type { DurableWorkflowRegistry } from "../DurableWorkflow.js"
import type { StepRegistry } from "../Step.js"
import type { WorkflowRegistry } from "../Workflow.js"

/**
 * The handlers a worker serves, as protocols look them up.
 *
 * @internal
 */
export interface Handlers<R> {
  readonly steps: StepRegistry<R>
  readonly workflows: WorkflowRegistry<R>
  /** Durable Workflow server workflows (replayed by the `durable-workflow` protocol). */
  readonly durableWorkflows?: DurableWorkflowRegistry<R>
}

/**
 * What the runtime does with a delivered payload: answer it, or acknowledge it as unanswerable
 * (after logging why).
 *
 * @internal
 */
export type Outcome<Reply> =
  | { readonly _tag: "Reply"; readonly reply: Reply }
  | { readonly _tag: "Reject"; readonly reason: string }

/**
 * How the runtime should treat a task before running it: steps are admitted by name (memory gate),
 * workflow turns are never gated.
 *
 * @internal
 */
export interface TaskLabel {
  readonly kind: "step" | "workflow"
  readonly name: string | undefined
}

/**
 * An orchestrator's task protocol: how a payload is decoded, run against the handlers and answered.
 * A transport says which protocol its deliveries speak; the runtime never looks inside payloads.
 *
 * @internal
 */
export interface Protocol<Reply> {
  readonly name: string
  readonly label: (payload: unknown) => TaskLabel
  readonly process: <R>(handlers: Handlers<R>, payload: unknown) => Effect.Effect<Outcome<Reply>, never, R>
  /** The answer for a task whose run was cancelled while it ran (none: give the task back). */
  readonly cancelled: (payload: unknown) => Option.Option<Reply>
}
