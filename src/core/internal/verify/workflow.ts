import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Predicate from "effect/Predicate"
import { isWorkflowTaskShape } from "../../../wire/StepProtocol.js"
import type { WorkflowDecision } from "../../../wire/WorkflowProtocol.js"
import * as ReplayReport from "../../ReplayReport.js"
import type { Workflow, WorkflowRegistry } from "../../Workflow.js"
import { NondeterminismError } from "../workflow/errors.js"
import { replay } from "../workflow/offline.js"
import { caseError, exitOf, firstDifference, jsonEqual } from "./shared.js"

/**
 * One nestjs-durable workflow turn to verify workflow code against: the task as the engine
 * delivered it (the JSON payload) and, usually, the `decision` a worker answered it with. With a
 * decision the case is `replayed` only when the code answers the same; without one, when the turn
 * replays without a non-determinism error.
 *
 * What a local op (`now`, `sideEffect`, a gather item) first ran in this very turn produced is not
 * compared (a `recordStep`'s `output`, `error`, times and events): the replay runs it anew.
 *
 * @since 0.3.0
 * @category verify
 */
export interface WorkflowCase {
  readonly id: string
  readonly task: unknown
  readonly decision?: unknown
  readonly family?: string | null | undefined
  readonly source?: Readonly<Record<string, unknown>> | null | undefined
}

/**
 * Options of `Workflow.verify`: the report's options, and the partition the worker ran with (the
 * `group` of a `call` without one; default `"default"`).
 *
 * @since 0.3.0
 * @category verify
 */
export interface VerifyOptions extends ReplayReport.ReportOptions {
  readonly partition?: string | undefined
}

const findWorkflow = <R>(registry: WorkflowRegistry<R>, name: string): Workflow<any, any, R> | undefined =>
  registry instanceof Map
    ? registry.get(name)
    : (registry as ReadonlyArray<Workflow<any, any, R>>).find((w) => w.name === name)

const names = <R>(registry: WorkflowRegistry<R>): Array<string> =>
  registry instanceof Map ? [...registry.keys()] : (registry as ReadonlyArray<Workflow<any, any, R>>).map((w) => w.name)

/** A decision as it is compared: what local ops computed anew is left out, and so is a stack. */
const comparable = (decision: unknown): Record<string, unknown> => {
  if (!Predicate.isRecord(decision)) return { decision }
  const commands = Array.isArray(decision["commands"]) ? decision["commands"] : []
  const { stack: _stack, ...error } = Predicate.isRecord(decision["error"]) ? decision["error"] : {}
  return {
    taskId: decision["taskId"],
    runId: decision["runId"],
    status: decision["status"],
    output: decision["output"],
    error: decision["error"] === undefined ? undefined : error,
    commands: commands.map((command) => {
      if (!Predicate.isRecord(command) || command["kind"] !== "recordStep") return command
      const { output: _o, error: _e, startedAt: _s, finishedAt: _f, events: _v, ...rest } = command
      return rest
    })
  }
}

const mismatchOf = (observed: Record<string, unknown>, expected: Record<string, unknown>): string | undefined => {
  if (observed["status"] !== expected["status"]) {
    return `the worker answered ${JSON.stringify(expected["status"])}, the code now answers ${JSON.stringify(observed["status"])}`
  }
  const got = observed["commands"] as ReadonlyArray<unknown>
  const want = expected["commands"] as ReadonlyArray<unknown>
  const at = firstDifference(got, want)
  if (at !== -1) {
    return `command ${at} differs: the worker answered ${JSON.stringify(want[at] ?? null)}, the code now answers ${JSON.stringify(got[at] ?? null)}`
  }
  if (!jsonEqual(observed["output"], expected["output"])) {
    return `the output differs: the worker answered ${JSON.stringify(expected["output"] ?? null)}, the code now answers ${JSON.stringify(observed["output"] ?? null)}`
  }
  if (!jsonEqual(observed["error"], expected["error"])) {
    return `the error differs: the worker answered ${JSON.stringify(expected["error"] ?? null)}, the code now answers ${JSON.stringify(observed["error"] ?? null)}`
  }
  return undefined
}

const divergenceOf = (error: NondeterminismError): ReplayReport.Divergence => ({
  workflow_sequence: error.seq,
  expected_shape: error.reachedName === undefined ? error.reachedKind : `${error.reachedKind} ${error.reachedName}`,
  recorded_event_types: [error.recordedName === undefined ? error.recordedKind : `${error.recordedKind} ${error.recordedName}`],
  message: error.message
})

/** Replays one case into its report. @internal */
export const verifyCase = <R>(
  registry: WorkflowRegistry<R>,
  c: WorkflowCase,
  options: VerifyOptions
): Effect.Effect<ReplayReport.CaseReport, never, R> =>
  Effect.gen(function*() {
    const name = isWorkflowTaskShape(c.task) && typeof (c.task as { workflow?: unknown }).workflow === "string"
      ? (c.task as { workflow: string }).workflow
      : undefined
    const base = { id: c.id, workflowType: name, family: c.family, source: c.source, expected: c.decision }
    if (name !== undefined && findWorkflow(registry, name) === undefined) {
      const registered = names(registry)
      return ReplayReport.makeCase({
        ...base,
        status: "failed",
        reason: "replay_error",
        error: {
          class: "WorkflowNotRegistered",
          message: `no workflow named ${JSON.stringify(name)} was given to verify against` +
            (registered.length === 0 ? "" : ` (given: ${registered.sort().join(", ")})`)
        }
      })
    }
    const exit = yield* exitOf(replay(registry, c.task, { partition: options.partition }))
    if (Exit.isFailure(exit)) {
      const error = exit.cause._tag === "Fail" ? exit.cause.error : undefined
      return error instanceof NondeterminismError
        ? ReplayReport.makeCase({ ...base, status: "drifted", reason: "shape_mismatch", divergence: divergenceOf(error), error: caseError(error) })
        : ReplayReport.makeCase({ ...base, status: "failed", reason: "replay_error", error: caseError(error) })
    }
    const decision: WorkflowDecision = exit.value
    if (c.decision === undefined) {
      return ReplayReport.makeCase({ ...base, status: "replayed", reason: "none", observed: decision })
    }
    const mismatch = mismatchOf(comparable(decision), comparable(c.decision))
    return mismatch === undefined
      ? ReplayReport.makeCase({ ...base, status: "replayed", reason: "none", observed: decision })
      : ReplayReport.makeCase({
        ...base,
        status: "drifted",
        reason: "expectation_mismatch",
        observed: decision,
        error: { class: "ExpectationMismatch", message: mismatch }
      })
  })

/**
 * Replays recorded nestjs-durable workflow turns against the given workflow definitions and reports
 * the result as a `durable-workflow.v2.replay-diff` report, the same shape as
 * `DurableWorkflow.verify`'s (see `ReplayReport`). Never fails. A case's status:
 *
 * - `drifted` / `shape_mismatch` when the code reaches another op than history holds at a seq
 *   (a {@link NondeterminismError}; `divergence` names the seq, the op reached and the one recorded);
 * - `drifted` / `expectation_mismatch` when it answers another decision than the recorded one;
 * - `failed` / `replay_error` when it cannot replay (no such workflow given, a task that does not decode);
 * - `replayed` otherwise.
 *
 * @example
 * import { Effect } from "effect"
 * import { Workflow } from "effect-durable-worker"
 *
 * const report = yield* Workflow.verify([pipeline], [{ id: "run-1", task, decision }])
 *
 * @since 0.3.0
 * @category verify
 */
export const verify = <R = never>(
  workflows: Workflow<any, any, R> | WorkflowRegistry<R>,
  cases: Iterable<WorkflowCase>,
  options: VerifyOptions = {}
): Effect.Effect<ReplayReport.ReplayDiffReport, never, R> => {
  const registry: WorkflowRegistry<R> = Array.isArray(workflows) || workflows instanceof Map
    ? workflows as WorkflowRegistry<R>
    : [workflows as Workflow<any, any, R>]
  return Effect.map(
    Effect.forEach(cases, (c) => verifyCase(registry, c, options)),
    (reports) => ReplayReport.make(reports, options)
  )
}
