/**
 * The promise twin of `Workflow.replay`: replays one recorded nestjs-durable workflow turn offline
 * against the current workflow code.
 *
 * @since 0.3.0
 */
import * as Workflow from "../core/Workflow.js"
import type { WorkflowDecision } from "../wire/WorkflowProtocol.js"
import { settle } from "./internal/options.js"

/**
 * Replays one workflow turn offline and resolves with the decision the code makes for it (what a
 * worker would answer the engine). Rejects with the typed error itself, not a wrapper: a
 * `NondeterminismError` (`_tag: "NondeterminismError"`; its `seq`, `reachedKind`/`reachedName` and
 * `recordedKind`/`recordedName` say where the code left the recorded history) or a
 * `WorkflowTaskDecodeError` when `task` is not a workflow task.
 *
 * `task` is the turn as the engine sends it (JSON-parsed) or a decoded `WorkflowTask`; `workflow` is
 * one definition or a list of them, picked by the task's `workflow` name.
 *
 * @example
 * import { replayWorkflow } from "effect-durable-worker/promise"
 *
 * const decision = await replayWorkflow(myWorkflows, JSON.parse(await readFile("turn.json", "utf8")))
 * if (decision.status === "failed") console.error(decision.error)
 *
 * @since 0.3.0
 * @category replay
 */
export const replay = (
  workflow: Workflow.Workflow<any, any> | Workflow.WorkflowRegistry,
  task: unknown,
  options?: Workflow.ReplayOptions
): Promise<WorkflowDecision> =>
  settle(Workflow.replay(workflow, task, options))
