/**
 * The promise twins of replay verification and capture: `verify` for Durable Workflow and
 * nestjs-durable cases, `verifyDirectory` for a directory of history files (over `node:fs`), and the
 * capture options a promise-facade worker can take.
 *
 * @since 0.3.0
 */
import * as Effect from "effect/Effect"
import { layerWithPath as nodeFiles } from "../services/internal/nodeFiles.js"
import * as DurableWorkflow from "../core/DurableWorkflow.js"
import * as ReplayCapture from "../core/ReplayCapture.js"
import type * as ReplayReport from "../core/ReplayReport.js"
import * as ReplayVerify from "../core/ReplayVerify.js"
import * as Workflow from "../core/Workflow.js"
import { settle } from "./internal/options.js"

/**
 * Replays Durable Workflow cases against the definitions and resolves with the
 * `durable-workflow.v2.replay-diff` report (never rejects for a case: a case that cannot be
 * replayed is a `failed` case). See `DurableWorkflow.verify`.
 *
 * @example
 * import { verifyDurableWorkflows } from "effect-durable-worker/promise"
 *
 * const report = await verifyDurableWorkflows([greet], [{ id: "greet-ada", history, expected: { command_type: "CompleteWorkflow", result: "hello Ada" } }])
 * if (report.status !== "replayed") process.exitCode = 1
 *
 * @since 0.3.0
 * @category verify
 */
export const verifyDurableWorkflows = (
  definitions: Iterable<DurableWorkflow.DurableWorkflow> | DurableWorkflow.DurableWorkflowRegistry,
  cases: Iterable<DurableWorkflow.DurableWorkflowCase>,
  options?: DurableWorkflow.VerifyOptions
): Promise<ReplayReport.ReplayDiffReport> => settle(DurableWorkflow.verify(definitions, cases, options))

/**
 * Replays recorded nestjs-durable turns against the workflows and resolves with the report. See
 * `Workflow.verify`.
 *
 * @since 0.3.0
 * @category verify
 */
export const verifyWorkflows = (
  workflows: Workflow.Workflow<any, any> | Workflow.WorkflowRegistry,
  cases: Iterable<Workflow.WorkflowCase>,
  options?: Workflow.VerifyOptions
): Promise<ReplayReport.ReplayDiffReport> => settle(Workflow.verify(workflows, cases, options))

/**
 * Replays every history file of a directory (golden-history fixtures, captured Durable Workflow
 * tasks, nestjs-durable turns) and resolves with the report, as `effect-durable-worker verify` does.
 *
 * @since 0.3.0
 * @category verify
 */
export const verifyDirectory = (
  directory: string,
  definitions: ReplayVerify.Definitions,
  options?: ReplayVerify.VerifyOptions
): Promise<ReplayReport.ReplayDiffReport> =>
  settle(ReplayVerify.verifyDirectory(directory, definitions, options).pipe(Effect.provide(nodeFiles)))

/** @since 0.3.0 */
export type CaptureHistoriesOption = ReplayCapture.CaptureHistoriesOption

/** The capture layer of a {@link CaptureHistoriesOption} (`ReplayCapture.layerOption`). @since 0.3.0 */
export const captureLayer = ReplayCapture.layerOption
