import * as Effect from "effect/Effect"
import { decodeWorkflowTask, type WorkflowDecision, type WorkflowTaskDecodeError } from "../../../wire/WorkflowProtocol.js"
import type { Workflow, WorkflowRegistry } from "../../Workflow.js"
import { NondeterminismError } from "./errors.js"
import { runWorkflowTurn } from "./process.js"

/**
 * Options of {@link replay}.
 *
 * @since 0.3.0
 * @category models
 */
export interface ReplayOptions {
  /**
   * The partition the worker runs with: the `group` a `call` without an explicit `group` carries in
   * the decision. Default `"default"`, as for `processWorkflowTask`.
   */
  readonly partition?: string | undefined
}

const isRegistry = <R>(u: Workflow<any, any, R> | WorkflowRegistry<R>): u is WorkflowRegistry<R> =>
  Array.isArray(u) || u instanceof Map

/**
 * Replays one nestjs-durable workflow turn offline, the way a worker would answer it, and returns
 * its decision; fails with a {@link NondeterminismError} when the code asks, at some seq, for another
 * op than the one history recorded there (the error names the seq, the op the code reached and the
 * one history holds) or ends the turn before reaching a seq history recorded (code that dropped
 * trailing ops: the live worker, like the engine, lets that pass, and the run quietly ends
 * differently), and with a `WorkflowTaskDecodeError` when `task` is not a workflow task.
 *
 * `task` is the turn as the engine sends it (the JSON-parsed payload) or an already decoded
 * `WorkflowTask`. `workflow` is one definition or a registry of them; the task's `workflow` name picks
 * the definition, so a name the registry does not hold gives the `failed` decision (`no_workflow`) a
 * worker would answer. Every other way a turn fails (a body that throws, an unsupported op, an input
 * the schema refuses) is the `failed` decision itself, as the live worker answers it.
 *
 * The body runs for real: a `now`, `sideEffect` or `gather` body that history does not hold yet runs
 * (reading the `Clock` of the environment, so a `TestClock` pins recorded times), exactly as the next
 * live turn would run it.
 *
 * @example
 * import { Effect } from "effect"
 * import { Workflow } from "effect-durable-worker"
 *
 * const greet = Workflow.make("greet", (name: string, ctx) => ctx.step("hello", { name }))
 * const decision = Workflow.replay(greet, {
 *   taskId: "t1", runId: "r1", workflow: "greet", input: "Ada",
 *   history: [{ seq: 0, kind: "call", name: "hello", output: "hi Ada" }]
 * })
 * // Effect<WorkflowDecision, NondeterminismError | WorkflowTaskDecodeError>: completed with "hi Ada"
 *
 * @since 0.3.0
 * @category replay
 */
export const replay = <R = never>(
  workflow: Workflow<any, any, R> | WorkflowRegistry<R>,
  task: unknown,
  options?: ReplayOptions
): Effect.Effect<WorkflowDecision, NondeterminismError | WorkflowTaskDecodeError, R> =>
  Effect.flatMap(decodeWorkflowTask(task), (decoded) =>
    Effect.flatMap(
      runWorkflowTurn(isRegistry(workflow) ? workflow : [workflow], decoded, {
        partition: options?.partition
      }),
      (result) => {
        if (result.fatal instanceof NondeterminismError) return Effect.fail(result.fatal)
        const unreached = result.turn?.unreached(result.decision.status)
        return unreached === undefined ? Effect.succeed(result.decision) : Effect.fail(unreached)
      }
    ))
