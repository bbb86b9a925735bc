import * as Effect from "effect/Effect"
import { durableWorkflowHistorySchema } from "../../core/internal/verify/files.js"
import * as ReplayCapture from "../../core/ReplayCapture.js"
import type { Task } from "../../seam/Protocol.js"

/** The parts of a Durable Workflow delivery and reply a capture reads (kept structural: no import cycle). */
interface WorkflowTaskPayload {
  readonly workerId: string
  readonly taskQueue: string
  readonly task: Record<string, unknown>
}

const str = (value: unknown): string | undefined => (typeof value === "string" && value !== "" ? value : undefined)

/**
 * Records an answered Durable Workflow workflow task for `verify` when the capture in force samples
 * it: the task's ids and codec, its start input and every history event (all pages, parts kept in
 * external storage fetched; payloads left encoded), and the commands the worker answered (payloads
 * it stored externally recorded inline, as an offline replay produces them). An accepted-update task
 * keeps its `workflow_update_id`. A task whose answer failed (no commands) is not recorded.
 *
 * @internal
 */
export const captureWorkflowTask = (
  t: WorkflowTaskPayload,
  delivered: Task,
  reply: { readonly _tag: string; readonly commands?: ReadonlyArray<unknown> }
): Effect.Effect<void> =>
  reply._tag !== "WorkflowCompleted" || reply.commands === undefined
    ? Effect.void
    : ReplayCapture.capture(Effect.gen(function*() {
      const { task } = t
      const firstPage = Array.isArray(task["history_events"]) ? task["history_events"] : []
      const rest = yield* delivered.rest
      const events = yield* Effect.forEach([...firstPage, ...rest], (event) => delivered.resolve(event))
      const args = task["arguments"] === undefined || task["arguments"] === null ? undefined : yield* delivered.resolve(task["arguments"])
      // a payload the worker put in external storage is recorded inline, as replay produces it
      const commands = yield* delivered.resolve(reply.commands)
      const codec = task["payload_codec"]
      const record: ReplayCapture.CapturedHistory = {
        schema: durableWorkflowHistorySchema,
        workflow_type: str(task["workflow_type"]) ?? "",
        ...(str(task["workflow_id"]) === undefined ? {} : { workflow_id: str(task["workflow_id"])! }),
        ...(str(task["run_id"]) === undefined ? {} : { run_id: str(task["run_id"])! }),
        ...(str(task["workflow_update_id"]) === undefined ? {} : { workflow_update_id: str(task["workflow_update_id"])! }),
        task_queue: str(task["task_queue"]) ?? t.taskQueue,
        ...(typeof codec === "string" || codec === null ? { payload_codec: codec } : {}),
        captured_at: yield* ReplayCapture.capturedAt,
        source: { runtime: "effect-durable-worker", protocol: "durable-workflow", worker_id: t.workerId },
        ...(args === undefined ? {} : { arguments: args }),
        history_events: events,
        commands: commands as ReadonlyArray<Record<string, unknown>>
      }
      return record
    }))

/**
 * Runs a workflow task's processing, then records it (see {@link captureWorkflowTask}).
 *
 * @internal
 */
export const capturing = <A extends { readonly _tag: string; readonly commands?: ReadonlyArray<unknown> }, E, R>(
  t: WorkflowTaskPayload,
  delivered: Task,
  run: Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> => Effect.tap(run, (reply) => captureWorkflowTask(t, delivered, reply))
