import * as Effect from "effect/Effect"
import type * as Metric from "effect/Metric"
import { type Handlers, names, type TaskLabel } from "../../seam/Protocol.js"
import * as WorkerMetrics from "../../seam/WorkerMetrics.js"
import type { TaskOutcome } from "../WorkerConfig.js"

/** The series of one kind and name, tagged once (the task path only updates them). */
interface Series {
  readonly started: Metric.Metric.Counter<number>
  readonly completed: Metric.Metric.Counter<number>
  readonly failed: (outcome: TaskOutcome) => Metric.Metric.Counter<number>
  readonly duration: (outcome: TaskOutcome) => Metric.Metric.Histogram<number>
}

const started = WorkerMetrics.taggedCache(WorkerMetrics.tasksStarted)
const completed = WorkerMetrics.taggedCache(WorkerMetrics.tasksCompleted)
const failed = WorkerMetrics.taggedCache(WorkerMetrics.tasksFailed)
const duration = WorkerMetrics.taggedCache(WorkerMetrics.taskDuration)
const polls = WorkerMetrics.taggedCache(WorkerMetrics.pollDuration)
const deferrals = WorkerMetrics.taggedCache(WorkerMetrics.deferrals)
const failedOutcomes: ReadonlyArray<Exclude<TaskOutcome, "completed">> = ["failed", "rejected", "cancelled", "abandoned"]

/** `make(key)`, tagged once per key: the task path only looks the series up. */
const byOutcome = <K extends string, M>(make: (key: K) => M): (key: K) => M => {
  const made = new Map<K, M>()
  return (key) => {
    let metric = made.get(key)
    if (metric === undefined) {
      metric = make(key)
      made.set(key, metric)
    }
    return metric
  }
}

/**
 * Records the task, poll, reply and gate series of `WorkerMetrics` for one dispatcher; the
 * tagged metrics are built once per kind and name.
 *
 * @internal
 */
export const taskSeries = () => {
  const byName = new Map<string, Series>()
  // most tasks are of the kind and name of the one before: that series is kept at hand
  let last: { readonly kind: string; readonly name: string | undefined; readonly series: Series } | undefined
  const of = (label: TaskLabel): Series => {
    if (last !== undefined && last.kind === label.kind && last.name === label.name) return last.series
    const name = label.name ?? "unknown"
    const key = `${label.kind}\u0000${name}`
    let series = byName.get(key)
    if (series === undefined) {
      const tags = { kind: label.kind, name }
      series = {
        started: started(tags),
        completed: completed(tags),
        failed: byOutcome((outcome) => failed({ ...tags, outcome })),
        duration: byOutcome((outcome) => duration({ ...tags, outcome }))
      }
      byName.set(key, series)
    }
    last = { kind: label.kind, name: label.name, series }
    return series
  }
  const byPoller = new Map<string, (outcome: "tasks" | "empty" | "error") => Metric.Metric.Histogram<number>>()
  return {
    /**
     * Publishes the counters an alert is written on at 0 (every handler's started, completed and
     * failed by outcome; replies retried and lost), and every handler's completed and failed
     * duration histograms empty: a series that first appears at 1 is no increase to `increase()` or
     * `rate()`, so the first failure of a step would go unseen. The rarer outcomes' histograms
     * (rejected, cancelled, abandoned) appear with their first task: a histogram is some twenty
     * series, and their counters already say when they happen.
     */
    atZero: (handlers: Handlers<any>): Effect.Effect<void> =>
      Effect.sync(() => {
        const labels: Array<TaskLabel> = [
          ...names(handlers.steps).map((name) => ({ kind: "step" as const, name })),
          ...[...names(handlers.workflows), ...names(handlers.durableWorkflows)].map((name) => ({ kind: "workflow" as const, name }))
        ]
        for (const label of labels) {
          const series = of(label)
          series.started.unsafeUpdate(0, [])
          series.completed.unsafeUpdate(0, [])
          for (const outcome of failedOutcomes) series.failed(outcome).unsafeUpdate(0, [])
          // read, not updated: a histogram that exists with no observation, so the first batch of
          // durations is an increase of its buckets too
          series.duration("completed").unsafeValue([])
          series.duration("failed").unsafeValue([])
        }
        WorkerMetrics.repliesRetried.unsafeUpdate(0, [])
        WorkerMetrics.repliesLost.unsafeUpdate(0, [])
      }),
    started: (label: TaskLabel): void => of(label).started.unsafeUpdate(1, []),
    ended: (label: TaskLabel, outcome: TaskOutcome, durationMs: number): void => {
      const series = of(label)
      if (outcome === "completed") series.completed.unsafeUpdate(1, [])
      else series.failed(outcome).unsafeUpdate(1, [])
      series.duration(outcome).unsafeUpdate(durationMs / 1000, [])
    },
    polled: (poller: string, outcome: "tasks" | "empty" | "error", seconds: number): void => {
      let of = byPoller.get(poller)
      if (of === undefined) {
        of = byOutcome((outcome) => polls({ poller, outcome }))
        byPoller.set(poller, of)
      }
      of(outcome).unsafeUpdate(seconds, [])
    },
    deferred: (name: string | undefined): Effect.Effect<void> =>
      Effect.sync(() => deferrals({ name: name ?? "unknown" }).unsafeUpdate(1, [])),
    replyRetried: Effect.sync(() => WorkerMetrics.repliesRetried.unsafeUpdate(1, [])),
    replyLost: Effect.sync(() => WorkerMetrics.repliesLost.unsafeUpdate(1, []))
  }
}
