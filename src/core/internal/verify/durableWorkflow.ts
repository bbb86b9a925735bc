import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Predicate from "effect/Predicate"
import { NonDeterministicReplayError } from "../durableWorkflow/errors.js"
import { replayOffline, updateOffline } from "../durableWorkflow/offline.js"
import { type Command, decodeValue } from "../durableWorkflow/replay.js"
import type { Definition } from "../durableWorkflow/run.js"
import * as ReplayReport from "../../ReplayReport.js"
import { caseError, exitOf, firstDifference, jsonEqual, toJson } from "./shared.js"

/**
 * What a golden-history case expects of the first command the code answers: its `command_type`
 * (`CompleteWorkflow` with `result`, `ScheduleActivity` with `activity_type` and `arguments`,
 * `StartChildWorkflow` with `workflow_type`; other types by name alone), values decoded.
 *
 * @since 0.3.0
 * @category verify
 */
export interface GoldenExpectation {
  readonly command_type: string
  readonly result?: unknown
  readonly activity_type?: string
  readonly arguments?: ReadonlyArray<unknown>
  readonly workflow_type?: string
  readonly [key: string]: unknown
}

/**
 * One history to verify Durable Workflow code against.
 *
 * - `expected`: a golden-history expectation of the first command (see {@link GoldenExpectation});
 * - `expectedCommands`: every command a worker answered this history with, as it sent them
 *   (payloads encoded), e.g. from a captured history; compared in full, except the value a
 *   `record_side_effect` recorded (it is computed anew by every run of a new side effect);
 * - neither: the case is `replayed` when the history replays without error.
 *
 * `workflowType`, `startInput`, `workflowId`, `runId`, `taskQueue` and `payloadCodec` are passed to
 * the replay (by default read from the history, see `DurableWorkflow.replay`).
 *
 * @since 0.3.0
 * @category verify
 */
export interface DurableWorkflowCase {
  readonly id: string
  readonly history: unknown
  readonly workflowType?: string | undefined
  readonly startInput?: ReadonlyArray<unknown> | undefined
  readonly workflowId?: string | undefined
  readonly runId?: string | undefined
  /** Replays an accepted-update task: the `update_id` of the `UpdateAccepted` the history holds. */
  readonly updateId?: string | undefined
  readonly taskQueue?: string | undefined
  readonly payloadCodec?: string | null | undefined
  readonly expected?: GoldenExpectation | null | undefined
  readonly expectedCommands?: ReadonlyArray<Command> | undefined
  readonly family?: string | null | undefined
  readonly source?: Readonly<Record<string, unknown>> | null | undefined
}

/**
 * Options of `DurableWorkflow.verify`.
 *
 * @since 0.3.0
 * @category verify
 */
export interface VerifyOptions extends ReplayReport.ReportOptions {}

const pascal = (type: string): string => type.split("_").map((w) => w.charAt(0).toUpperCase() + w.slice(1)).join("")

const decoded = (raw: unknown): unknown => {
  try {
    return toJson(decodeValue(raw, "avro"))
  } catch {
    return raw
  }
}

/** The first command as golden expectations describe it: its type and the values that identify it, decoded. */
const summarize = (commands: ReadonlyArray<Command>): Record<string, unknown> => {
  const command = commands[0]
  if (command === undefined) return { command_type: null }
  const commandType = pascal(command.type)
  switch (command.type) {
    case "complete_workflow":
      return { command_type: commandType, result: decoded(command["result"]) }
    case "schedule_activity": {
      const args = decoded(command["arguments"])
      return { command_type: commandType, activity_type: command["activity_type"], arguments: Array.isArray(args) ? args : args === null ? [] : [args] }
    }
    case "start_child_workflow":
      return { command_type: commandType, workflow_type: command["workflow_type"] }
    default:
      return { command_type: commandType }
  }
}

/** Why the first command is not the expected one, if it is not. */
const mismatchOf = (observed: Record<string, unknown>, expected: GoldenExpectation): string | undefined => {
  const type = expected.command_type
  if (observed["command_type"] === null) return `expected ${JSON.stringify(type)} but the workflow answered no command`
  if (observed["command_type"] !== type) return `expected ${type} but the workflow answered ${String(observed["command_type"])}`
  switch (type) {
    case "CompleteWorkflow":
      return jsonEqual(observed["result"], expected.result ?? null)
        ? undefined
        : `the workflow result ${JSON.stringify(observed["result"])} does not match the expected ${JSON.stringify(expected.result ?? null)}`
    case "ScheduleActivity":
      if (observed["activity_type"] !== expected.activity_type) {
        return `activity_type ${JSON.stringify(observed["activity_type"])} does not match the expected ${JSON.stringify(expected.activity_type)}`
      }
      return jsonEqual(observed["arguments"], expected.arguments ?? [])
        ? undefined
        : `the activity arguments ${JSON.stringify(observed["arguments"])} do not match the expected ${JSON.stringify(expected.arguments ?? [])}`
    case "StartChildWorkflow":
      return observed["workflow_type"] === expected.workflow_type
        ? undefined
        : `the child workflow_type ${JSON.stringify(observed["workflow_type"])} does not match the expected ${JSON.stringify(expected.workflow_type)}`
    default:
      return undefined
  }
}

/** A command as captured commands are compared: a new side effect's value is not part of the comparison. */
const comparable = (command: unknown): unknown => {
  if (!Predicate.isRecord(command)) return command
  if (command["type"] === "record_side_effect") {
    const { result: _result, ...rest } = command
    return rest
  }
  return command
}

const divergenceOf = (error: NonDeterministicReplayError): ReplayReport.Divergence => ({
  workflow_sequence: error.workflowSequence,
  expected_shape: error.expected,
  recorded_event_types: [error.recorded],
  message: error.message
})

/** Replays one case into its report. @internal */
export const verifyCase = <R>(
  definitions: Definition<R> | Iterable<Definition<R>> | ReadonlyMap<string, Definition<R>>,
  c: DurableWorkflowCase
): Effect.Effect<ReplayReport.CaseReport, never, R> =>
  Effect.gen(function*() {
    const base = { id: c.id, workflowType: c.workflowType, family: c.family, source: c.source }
    const expected = c.expectedCommands !== undefined ? c.expectedCommands : c.expected ?? undefined
    const options = {
      workflowType: c.workflowType,
      input: c.startInput,
      workflowId: c.workflowId,
      runId: c.runId,
      taskQueue: c.taskQueue,
      ...(c.payloadCodec === undefined ? {} : { payloadCodec: c.payloadCodec })
    }
    const exit = yield* exitOf<{ readonly workflowType: string; readonly commands: ReadonlyArray<Command> }, unknown, R>(
      c.updateId === undefined
        ? replayOffline(definitions, c.history, options)
        : Effect.map(updateOffline(definitions, c.history, c.updateId, options), (o) => ({ workflowType: o.workflowType, commands: [o.command] }))
    )
    if (Exit.isFailure(exit)) {
      const error = exit.cause._tag === "Fail" ? exit.cause.error : undefined
      if (error instanceof NonDeterministicReplayError) {
        return ReplayReport.makeCase({
          ...base,
          status: "drifted",
          reason: "shape_mismatch",
          divergence: divergenceOf(error),
          expected,
          error: caseError(error)
        })
      }
      return ReplayReport.makeCase({ ...base, status: "failed", reason: "replay_error", expected, error: caseError(error) })
    }
    const outcome = exit.value
    const workflowType = outcome.workflowType
    if (c.expectedCommands !== undefined) {
      const want = c.expectedCommands.map(comparable)
      const got = outcome.commands.map(comparable)
      const at = firstDifference(got, want)
      return at === -1
        ? ReplayReport.makeCase({ ...base, workflowType, status: "replayed", reason: "none", expected: c.expectedCommands, observed: outcome.commands })
        : ReplayReport.makeCase({
          ...base,
          workflowType,
          status: "drifted",
          reason: "expectation_mismatch",
          expected: c.expectedCommands,
          observed: outcome.commands,
          error: {
            class: "ExpectationMismatch",
            message: `command ${at} differs: the worker answered ${JSON.stringify(want[at] ?? null)}, the code now answers ${JSON.stringify(got[at] ?? null)}`
          }
        })
    }
    const observed = summarize(outcome.commands)
    if (c.expected === undefined || c.expected === null) {
      return ReplayReport.makeCase({ ...base, workflowType, status: "replayed", reason: "none", observed })
    }
    const mismatch = mismatchOf(observed, c.expected)
    return mismatch === undefined
      ? ReplayReport.makeCase({ ...base, workflowType, status: "replayed", reason: "none", expected: c.expected, observed })
      : ReplayReport.makeCase({
        ...base,
        workflowType,
        status: "drifted",
        reason: "expectation_mismatch",
        expected: c.expected,
        observed,
        error: { class: "ExpectationMismatch", message: mismatch }
      })
  })

/**
 * Replays each case against the given Durable Workflow definitions and reports the result as a
 * `durable-workflow.v2.replay-diff` report (see `ReplayReport` for the statuses, verdicts,
 * promotion decisions and how they aggregate). Never fails: a case that cannot be replayed is a
 * `failed` case. A case's status:
 *
 * - `drifted` / `shape_mismatch` when the code asks for another operation than history recorded
 *   (`divergence` names the sequence, what the code asked for and what history holds);
 * - `drifted` / `expectation_mismatch` when it replays but answers otherwise than expected;
 * - `failed` / `replay_error` when it cannot replay (unregistered type, undecodable payload, a defect);
 * - `replayed` otherwise.
 *
 * @example
 * import { Effect } from "effect"
 * import { DurableWorkflow, ReplayReport } from "effect-durable-worker"
 *
 * const report = yield* DurableWorkflow.verify([greet], [
 *   { id: "greet-ada", history, expected: { command_type: "CompleteWorkflow", result: "hello Ada" } }
 * ])
 * process.exitCode = ReplayReport.exitCode(report)
 *
 * @since 0.3.0
 * @category verify
 */
export const verify = <R = never>(
  definitions: Definition<R> | Iterable<Definition<R>> | ReadonlyMap<string, Definition<R>>,
  cases: Iterable<DurableWorkflowCase>,
  options: VerifyOptions = {}
): Effect.Effect<ReplayReport.ReplayDiffReport, never, R> =>
  Effect.map(
    Effect.forEach(cases, (c) => verifyCase(definitions, c)),
    (reports) => ReplayReport.make(reports, options)
  )
