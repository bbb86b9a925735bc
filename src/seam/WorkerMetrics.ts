/**
 * The worker's metrics, as Effect `Metric`s: one set for every transport. The runtime records the
 * task, poll, pool, gate, reply and saturation series itself, so a transport gets them without
 * doing anything; a transport reports only what the runtime cannot see, a lost broker connection,
 * with {@link connectionLost}. Export them with any Effect metrics exporter (`@effect/opentelemetry`
 * `NodeSdk` with a metric reader, for one), or read them with `Metric.value` / `Metric.snapshot`.
 *
 * | metric | type | tags |
 * | --- | --- | --- |
 * | `durable_worker_tasks_started` | counter | `kind`, `name` |
 * | `durable_worker_tasks_completed` | counter | `kind`, `name` |
 * | `durable_worker_tasks_failed` | counter | `kind`, `name`, `outcome` (`failed`, `rejected`, `cancelled`, `abandoned`) |
 * | `durable_worker_task_duration_seconds` | histogram | `kind`, `name`, `outcome` (`completed` or one of the above) |
 * | `durable_worker_poll_duration_seconds` | histogram | `poller`, `outcome` (`tasks`, `empty`, `error`) |
 * | `durable_worker_tasks_in_flight` | gauge | `pool` |
 * | `durable_worker_slots` | gauge | `pool` |
 * | `durable_worker_deferrals` | counter | `name` |
 * | `durable_worker_tasks_deferred` | gauge | — |
 * | `durable_worker_backlog` | gauge | `poller` |
 * | `durable_worker_saturation` | gauge | — |
 * | `durable_worker_replies_retried` | counter | — |
 * | `durable_worker_replies_lost` | counter | — |
 * | `durable_worker_connections_lost` | counter | `transport` |
 * | `durable_worker_event_loop_delay_seconds` | gauge | — (only with the health server) |
 *
 * The runtime publishes every registered handler's task counters and the reply counters at 0 when
 * the worker starts; a transport that counts lost connections publishes its series at 0 as it
 * registers ({@link connectionsLostFrom}), so a first event is an increase an alert sees.
 *
 * The Durable Workflow transport's series, named and tagged as the Durable Workflow Python SDK
 * names them, are defined here too ({@link durableWorkflow}).
 *
 * @since 0.3.0
 */
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as MetricBoundaries from "effect/MetricBoundaries"
import * as MetricLabel from "effect/MetricLabel"

/** 5 ms to 163.84 s (about 2.7 minutes), doubling: polls and requests, bounded by their timeouts. */
const seconds = MetricBoundaries.exponential({ start: 0.005, factor: 2, count: 17 })

/**
 * 5 ms to 2,621.44 s (about 44 minutes), doubling: a step or activity may run for minutes, and one
 * past the last bound is seen only as `+Inf`.
 */
const taskSeconds = MetricBoundaries.exponential({ start: 0.005, factor: 2, count: 21 })

/**
 * Tasks taken and started, by `kind` (`step`, `workflow`) and `name` (the step or workflow name,
 * `unknown` when the payload names none).
 *
 * @since 0.3.0
 * @category metrics
 */
export const tasksStarted = Metric.counter("durable_worker_tasks_started", {
  description: "Tasks started, by kind and name",
  incremental: true
})

/**
 * Tasks answered with a successful result, by `kind` and `name`. A reply the broker did not take
 * after its retries counts here too, and in {@link repliesLost}: its task is redelivered and may be
 * counted again when it runs again (`completed - replies_lost` is what the broker has recorded).
 *
 * @since 0.3.0
 * @category metrics
 */
export const tasksCompleted = Metric.counter("durable_worker_tasks_completed", {
  description: "Tasks answered with a successful result, by kind and name (a reply then lost counts in durable_worker_replies_lost too)",
  incremental: true
})

/**
 * Tasks that did not succeed, by `kind`, `name` and `outcome`: `failed` (answered with a failure,
 * a `FatalError` included), `rejected` (a payload that could not be answered at all), `cancelled`
 * (its run was cancelled while it ran), `abandoned` (given back to the broker: shutdown deadline, a
 * defect).
 *
 * @since 0.3.0
 * @category metrics
 */
export const tasksFailed = Metric.counter("durable_worker_tasks_failed", {
  description: "Tasks that did not succeed, by kind, name and outcome (failed, rejected, cancelled, abandoned)",
  incremental: true
})

/**
 * How long a task took from being taken to being answered, seconds, by `kind`, `name` and `outcome`.
 *
 * @since 0.3.0
 * @category metrics
 */
export const taskDuration = Metric.histogram(
  "durable_worker_task_duration_seconds",
  taskSeconds,
  "Duration of tasks from taken to answered, seconds, by kind, name and outcome"
)

/**
 * How long one poll took, seconds, by `poller` and `outcome` (`tasks`, `empty`, `error`). A long
 * poll that found nothing lasts the poll timeout.
 *
 * @since 0.3.0
 * @category metrics
 */
export const pollDuration = Metric.histogram(
  "durable_worker_poll_duration_seconds",
  seconds,
  "Duration of polls, seconds, by poller and outcome (tasks, empty, error)"
)

/**
 * Tasks running now, by `pool`.
 *
 * @since 0.3.0
 * @category metrics
 */
export const inFlight = Metric.gauge("durable_worker_tasks_in_flight", {
  description: "Tasks running now, by pool"
})

/**
 * The concurrency limit of each `pool` (the controller's limit for adaptive pools).
 *
 * @since 0.3.0
 * @category metrics
 */
export const slots = Metric.gauge("durable_worker_slots", {
  description: "Concurrency limit, by pool"
})

/**
 * Tasks the memory gate made wait before they ran, by step `name`, counted when the gate lets
 * them through (`durable_worker_tasks_deferred` shows those waiting now).
 *
 * @since 0.3.0
 * @category metrics
 */
export const deferrals = Metric.counter("durable_worker_deferrals", {
  description: "Tasks deferred by the memory admission gate, by name",
  incremental: true
})

/**
 * Tasks waiting at the memory gate now.
 *
 * @since 0.3.0
 * @category metrics
 */
export const deferred = Metric.gauge("durable_worker_tasks_deferred", {
  description: "Tasks waiting at the memory admission gate now"
})

/**
 * Tasks waiting in the broker for a subscription, by `poller`, where the broker says so cheaply
 * (BullMQ's waiting count, the in-memory queue); sampled with the saturation.
 *
 * @since 0.3.0
 * @category metrics
 */
export const backlog = Metric.gauge("durable_worker_backlog", {
  description: "Tasks waiting in the broker, by poller, where the broker tells it cheaply"
})

/**
 * (tasks in flight + tasks deferred + backlog) / slots, over every pool the worker polls, sampled
 * every `metricsInterval`: 1 is a worker exactly busy; above 1 work waits for it. An autoscaler's
 * signal where queue depth alone misleads (a fast fleet keeps the backlog near zero).
 *
 * @since 0.3.0
 * @category metrics
 */
export const saturation = Metric.gauge("durable_worker_saturation", {
  description: "(in flight + deferred + backlog) / slots, sampled"
})

/**
 * Replies whose first send failed and were retried.
 *
 * @since 0.3.0
 * @category metrics
 */
export const repliesRetried = Metric.counter("durable_worker_replies_retried", {
  description: "Replies whose first send failed and were retried",
  incremental: true
})

/**
 * Replies that could not be sent after their retries (the broker redelivers the task).
 *
 * @since 0.3.0
 * @category metrics
 */
export const repliesLost = Metric.counter("durable_worker_replies_lost", {
  description: "Replies not delivered after their retries (the task is redelivered)",
  incremental: true
})

/**
 * Broker connections lost, by `transport`; counted by the transports through {@link connectionLost}.
 * What one count means depends on the transport: BullMQ counts each reconnection of its Redis client;
 * SQL counts each statement that failed on a lost connection (a killed backend, a reset socket) and
 * each loss of the `LISTEN` connection; SQS counts each call (receive, send, delete, visibility) that
 * failed without an answer from SQS (a refused, reset, hung-up or timed-out connection).
 *
 * @since 0.3.0
 * @category metrics
 */
export const connectionsLost = Metric.counter("durable_worker_connections_lost", {
  description: "Broker connections lost, by transport",
  incremental: true
})

/**
 * How late the event loop woke up, seconds: the longest delay over the last samples, the ones the
 * health server's `/livez` judges by (recorded by the health server; a block stays visible for about
 * two and a half `loopDelayThreshold`s after it ends).
 *
 * @since 0.3.0
 * @category metrics
 */
export const eventLoopDelay = Metric.gauge("durable_worker_event_loop_delay_seconds", {
  description: "Longest event loop delay over the last samples, seconds"
})

/**
 * Counts one lost connection of `transport` (`bullmq`, `sql`, ...). Safe to call from a client's
 * event handler: it runs no fiber.
 *
 * @since 0.3.0
 * @category transports
 */
export const connectionLost = (transport: string): void => {
  Metric.tagged(connectionsLost, "transport", transport).unsafeUpdate(1, [])
}

/**
 * Publishes `transport`'s {@link connectionsLost} at 0, for a transport to run as it registers: a
 * series that first appears at 1 is no increase to `increase()` or `rate()`, so an alert on the
 * first lost connection would never fire.
 *
 * @since 0.3.0
 * @category transports
 */
export const connectionsLostFrom = (transport: string): Effect.Effect<void> =>
  Effect.sync(() => Metric.tagged(connectionsLost, "transport", transport).unsafeUpdate(0, []))

/**
 * The Durable Workflow transport's series, as the Durable Workflow Python SDK names and tags them
 * (`task_kind`, `task_queue`, `outcome`; `method`, `route`, `plane`, `status_code` for requests).
 * They are recorded beside the worker series above, which every transport has.
 *
 * @since 0.3.0
 * @category metrics
 */
export const durableWorkflow = {
  clientRequests: Metric.counter("durable_workflow_client_requests", {
    description: "HTTP requests to the Durable Workflow server, by method, route, plane, status_code and outcome",
    incremental: true
  }),
  clientRequestDuration: Metric.histogram(
    "durable_workflow_client_request_duration_seconds",
    seconds,
    "Duration of HTTP requests to the Durable Workflow server, seconds"
  ),
  workerPolls: Metric.counter("durable_workflow_worker_polls", {
    description: "Worker polls, by task_kind, task_queue and outcome",
    incremental: true
  }),
  workerPollDuration: Metric.histogram(
    "durable_workflow_worker_poll_duration_seconds",
    seconds,
    "Duration of worker polls, seconds"
  ),
  workerTasks: Metric.counter("durable_workflow_worker_tasks", {
    description: "Worker tasks, by task_kind, task_queue and outcome",
    incremental: true
  }),
  workerTaskDuration: Metric.histogram(
    "durable_workflow_worker_task_duration_seconds",
    taskSeconds,
    "Duration of worker tasks, seconds"
  )
} as const

/**
 * A metric with these tags, the tagged metric kept per distinct tag set so a hot path does not
 * build one per update.
 *
 * @since 0.3.0
 * @category utils
 */
export const taggedCache = <Type, In, Out>(metric: Metric.Metric<Type, In, Out>) => {
  const cache = new Map<string, Metric.Metric<Type, In, Out>>()
  return (tags: Readonly<Record<string, string>>): Metric.Metric<Type, In, Out> => {
    const key = JSON.stringify(tags)
    let tagged = cache.get(key)
    if (tagged === undefined) {
      tagged = Metric.taggedWithLabels(
        metric,
        Object.entries(tags).map(([k, v]) => MetricLabel.make(k, v))
      )
      cache.set(key, tagged)
    }
    return tagged
  }
}

/**
 * Updates a metric with these tags, outside any fiber (the value is recorded at once).
 *
 * @since 0.3.0
 * @category utils
 */
export const unsafeRecord = <In>(
  metric: (tags: Readonly<Record<string, string>>) => Metric.Metric<any, In, any>,
  tags: Readonly<Record<string, string>>,
  value: In
): void => metric(tags).unsafeUpdate(value, [])

/**
 * `unsafeRecord` as an effect.
 *
 * @since 0.3.0
 * @category utils
 */
export const record = <In>(
  metric: (tags: Readonly<Record<string, string>>) => Metric.Metric<any, In, any>,
  tags: Readonly<Record<string, string>>,
  value: In
): Effect.Effect<void> => Effect.sync(() => unsafeRecord(metric, tags, value))
