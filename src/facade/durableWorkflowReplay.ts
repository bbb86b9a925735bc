/**
 * The promise twins of `DurableWorkflow.replay`, `replayQuery` and `replayUpdate`: replay a
 * recorded Durable Workflow history offline against the current workflow code.
 *
 * @since 0.3.0
 */
import * as DurableWorkflow from "../core/DurableWorkflow.js"
import { settle } from "./internal/options.js"

/**
 * Replays a history offline and resolves with the commands the code produces for it. Rejects with
 * the typed error itself: a `NonDeterministicReplayError` (`_tag`, `workflowSequence`, `expected`
 * — what the code asked for —, `recorded` — what history recorded), a `PayloadDecodeError` (`code`,
 * e.g. `unsupported_payload_codec`) or a `ReplayError` (`reason`).
 *
 * @example
 * import { replayDurableWorkflow } from "effect-durable-worker/promise"
 *
 * const { commands } = await replayDurableWorkflow([checkout], JSON.parse(await readFile("history.json", "utf8")))
 *
 * @since 0.3.0
 * @category replay
 */
export const replay = (
  definitions: DurableWorkflow.ReplayDefinitions,
  history: DurableWorkflow.ReplayHistory,
  options?: DurableWorkflow.ReplayOptions
): Promise<DurableWorkflow.ReplayOutcome> => settle(DurableWorkflow.replay(definitions, history, options))

/**
 * Replays a history offline, then answers the query `name`; resolves with the handler's value.
 * Rejects like {@link replay}, or with a `QueryFailed` (`reason`).
 *
 * @since 0.3.0
 * @category replay
 */
export const replayQuery = (
  definitions: DurableWorkflow.ReplayDefinitions,
  history: DurableWorkflow.ReplayHistory,
  name: string,
  options?: DurableWorkflow.ReplayQueryOptions
): Promise<unknown> => settle(DurableWorkflow.replayQuery(definitions, history, name, options))

/**
 * Replays a history offline, then applies an update (the id of an accepted one in history, or
 * `{ name, args }`); resolves with its `complete_update` / `fail_update` command. Rejects like
 * {@link replay}.
 *
 * @since 0.3.0
 * @category replay
 */
export const replayUpdate = (
  definitions: DurableWorkflow.ReplayDefinitions,
  history: DurableWorkflow.ReplayHistory,
  update: DurableWorkflow.ReplayUpdate,
  options?: DurableWorkflow.ReplayOptions
): Promise<DurableWorkflow.ReplayUpdateOutcome> => settle(DurableWorkflow.replayUpdate(definitions, history, update, options))
