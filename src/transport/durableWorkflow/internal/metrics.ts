import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as WorkerMetrics from "../../../seam/WorkerMetrics.js"

// one set of metric definitions: the Durable Workflow series live with the worker's in WorkerMetrics

/** `durable_workflow_client_requests`: every HTTP call (its retries count as one). @internal */
export const clientRequests = WorkerMetrics.durableWorkflow.clientRequests
/** `durable_workflow_client_request_duration_seconds`. @internal */
export const clientRequestDuration = WorkerMetrics.durableWorkflow.clientRequestDuration
/** `durable_workflow_worker_polls`: polls by task_kind, task_queue, outcome (task, empty, error). @internal */
export const workerPolls = WorkerMetrics.durableWorkflow.workerPolls
/** `durable_workflow_worker_poll_duration_seconds`. @internal */
export const workerPollDuration = WorkerMetrics.durableWorkflow.workerPollDuration
/** `durable_workflow_worker_tasks`: tasks by task_kind, task_queue, outcome. @internal */
export const workerTasks = WorkerMetrics.durableWorkflow.workerTasks
/** `durable_workflow_worker_task_duration_seconds`. @internal */
export const workerTaskDuration = WorkerMetrics.durableWorkflow.workerTaskDuration

const tagged = <M extends Metric.Metric<any, any, any>>(metric: M, tags: Record<string, string>): M =>
  Object.entries(tags).reduce((m, [k, v]) => Metric.tagged(m, k, v) as M, metric)

/** Records one counter increment and one duration observation with the same tags. @internal */
export const record = (
  counter: Metric.Metric.Counter<number>,
  histogram: Metric.Metric.Histogram<number>,
  tags: Record<string, string>,
  seconds: number
): Effect.Effect<void> =>
  Effect.zipRight(
    Metric.increment(tagged(counter, tags)),
    Metric.update(tagged(histogram, tags), seconds)
  )

/**
 * The route of a path with ids replaced, as the Python client normalises it (the third segment of a
 * `/worker/<kind>/<x>` path is always replaced, `poll` included). @internal
 */
export const routeForMetrics = (path: string): string => {
  const parts = path.split("/")
  // ["", "worker", "workflow-tasks", "<id>", ...]
  if (parts[1] === "worker" && parts.length >= 4) {
    if (parts[2] === "registrations") parts[3] = "{worker_id}"
    else if (parts[2] === "workflow-tasks" || parts[2] === "activity-tasks" || parts[2] === "query-tasks") parts[3] = "{task_id}"
  } else if (parts[1] === "workers" && parts.length >= 3) parts[2] = "{worker_id}"
  else if (parts[1] === "workflows" && parts.length >= 3) parts[2] = "{workflow_id}"
  return parts.join("/")
}
