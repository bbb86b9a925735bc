import * as Cause from "effect/Cause"
import * as Chunk from "effect/Chunk"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import type * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import type * as MetricState from "effect/MetricState"
import * as Schedule from "effect/Schedule"
import * as TestClock from "effect/TestClock"
import type * as Scope from "effect/Scope"
import * as DurableWorkflow from "../../src/core/DurableWorkflow.js"
import type { ReplayInput } from "../../src/core/internal/durableWorkflow/run.js"
import * as Step from "../../src/core/Step.js"
import * as Codec from "../../src/wire/DurableWorkflowCodec.js"
import * as Worker from "../../src/runtime/Worker.js"
import * as DW from "../../src/transport/DurableWorkflowTransport.js"
import type { Transport } from "../../src/seam/Transport.js"
import { type DurableWorkflowServer, type DurableWorkflowServerOptions, scoped } from "../support/durableWorkflowServer.js"

export const QUEUE = "orders"

/** Waits (wall clock) for a server condition: an event to happen, never a timing rule. */
export const until = (server: DurableWorkflowServer, check: () => boolean, timeoutMs = 10_000) =>
  Effect.promise(() => server.waitUntil(check, timeoutMs))

/**
 * Waits (wall clock) until some fiber sleeps until exactly `after` from the test clock's now (the
 * worker has handled the last heartbeat reply and started waiting for the next one, say). Without
 * it, a `TestClock.adjust` could run before the wait is scheduled and would not move it.
 */
export const waitScheduled = (after: Duration.DurationInput) =>
  Effect.gen(function*() {
    const deadline = (yield* TestClock.currentTimeMillis) + Duration.toMillis(after)
    for (let i = 0; i < 1_000; i++) {
      if (Chunk.some(yield* TestClock.sleeps(), (at) => at === deadline)) return
      yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 5)))
    }
    return yield* Effect.dieMessage(`nothing was scheduled ${Duration.format(after)} from now`)
  })

export const transportLayer = (
  server: DurableWorkflowServer,
  options: Partial<DW.DurableWorkflowOptions> = {}
): Layer.Layer<Transport | DW.DurableWorkflowClient, DW.DurableWorkflowConfigError> =>
  DW.layer({ baseUrl: server.url, token: server.tokens.worker, taskQueue: QUEUE, ...options })

/** A started server plus helpers to run a worker against it in daemon fibers. */
export const setup = (serverOptions: DurableWorkflowServerOptions = {}) =>
  Effect.gen(function*() {
    const server = yield* scoped({ maxPollHoldMs: 2_000, ...serverOptions })
    return { server }
  })

export const greet = DurableWorkflow.activity("greeting.compose", (name: string) => Effect.succeed(`hello ${name}`))

/** Builds a worker and forks `run` (daemon) with the transport layer; returns both. */
export const startWorker = <R>(
  server: DurableWorkflowServer,
  config: Worker.WorkerDefinition<R>,
  transport: Partial<DW.DurableWorkflowOptions> = {}
): Effect.Effect<
  { readonly worker: Worker.Worker<R>; readonly running: Fiber.RuntimeFiber<void, Worker.RunError> },
  never,
  Scope.Scope | R
> =>
  Effect.gen(function*() {
    const worker = yield* Effect.orDie(Worker.make({ interruptTimeout: "2 seconds", ...config }))
    const running = yield* Effect.forkDaemon(
      Effect.provide(worker.run, transportLayer(server, transport)) as Effect.Effect<void, Worker.RunError, R>
    )
    // not awaited: a test may leave a worker stuck on purpose
    yield* Effect.addFinalizer(() => Fiber.interruptFork(running))
    return { worker, running }
  })

/** A worker that registered (its register call answered 201). */
export const registered = (server: DurableWorkflowServer) => until(server, () => server.requestsTo("register").some((r) => r.status === 201))

/** The error an exit failed with (squashed). */
export const failureOf = (exit: Exit.Exit<unknown, unknown>) => Cause.squash((exit as Exit.Failure<unknown, unknown>).cause)

/** A value as an Avro payload blob, as the server stores arguments. */
export const blob = (value: unknown) => Either.getOrThrow(Codec.encodeBlob(value))

/** History events as the server records them: an update applied or accepted, an activity completed. */
export const applied = (updateId: string, name: string, args: ReadonlyArray<unknown>) => ({
  event_type: "UpdateApplied",
  payload: { update_id: updateId, update_name: name, arguments: blob(args) }
})
export const accepted = (updateId: string, name: string, args: ReadonlyArray<unknown>) => ({
  event_type: "UpdateAccepted",
  payload: { update_id: updateId, update_name: name, arguments: blob(args) }
})
export const completed = (activityType: string, result: unknown) => ({
  event_type: "ActivityCompleted",
  payload: { activity_type: activityType, result: blob(result) }
})

/** The value of a payload envelope a worker sent. */
export const value = (envelope: unknown) => Either.getOrThrow(Codec.decodeEnvelope(envelope as Codec.PayloadEnvelope))

/** What a replay, query or update is run with: run `wf-1`/`run-1` of type `t` on `orders`, Avro, at time 0. */
export const replayInput = (history: ReadonlyArray<unknown>, args: ReadonlyArray<unknown> = []): ReplayInput => ({
  workflowId: "wf-1",
  runId: "run-1",
  workflowType: "t",
  taskQueue: "orders",
  codec: "avro",
  args,
  history,
  now: 0,
  encode: (v) => Either.getOrThrow(Codec.encodeEnvelope(v))
})

const series = {
  durable_workflow_worker_tasks: DW.metrics.workerTasks,
  durable_workflow_worker_polls: DW.metrics.workerPolls,
  durable_workflow_client_requests: DW.metrics.clientRequests
}

/** The count of one of the transport's counter series, for these tags. */
export const counterValue = (name: keyof typeof series, tags: Record<string, string>) =>
  Effect.map(
    Metric.value(Object.entries(tags).reduce((m, [k, v]) => Metric.tagged(m, k, v), series[name])),
    (state: MetricState.MetricState.Counter<number>) => state.count
  )

/** Waits (wall clock) until a metric reaches a value: it is recorded once the client processed the answer. */
export const eventually = (effect: Effect.Effect<number>, holds: (n: number) => boolean) =>
  effect.pipe(
    Effect.filterOrFail(holds),
    Effect.retry({ times: 400, schedule: Schedule.fixed("5 millis") }),
    Effect.withClock(Clock.make())
  )

export { DurableWorkflow, DW, Step, Worker }
