/**
 * A Durable Workflow worker: one workflow (`orders.greet`) that schedules one activity
 * (`greeting.compose`), run with `runUntil` until the workflow reaches a terminal state.
 *
 *   npx tsx --conditions=source examples/durable-workflow.ts
 *
 * (in an application: `npm install effect-durable-worker effect@3 @effect/platform@0.97`; no other driver)
 *
 * With `DURABLE_WORKFLOW_SERVER_URL` set it serves a real server (also reads
 * `DURABLE_WORKFLOW_NAMESPACE`, `DURABLE_WORKFLOW_AUTH_TOKEN`, `DURABLE_WORKFLOW_TASK_QUEUE` and
 * `DURABLE_WORKFLOW_WORKFLOW_ID`, the run to wait for; start it from your client or CLI). Without it,
 * run from a clone of this repository, it starts the repository's protocol-faithful test server on
 * loopback and plays the orchestrator itself (imported only then: copied into an application, the
 * file needs nothing but the package).
 */
import { Effect, Either, type Layer } from "effect"
import { DurableWorkflow, DurableWorkflowCodec as Codec, type Transport, Worker } from "effect-durable-worker"
import { DurableWorkflowTransport } from "effect-durable-worker/durable-workflow"

const greet = DurableWorkflow.make("orders.greet", (ctx, name: string) =>
  Effect.gen(function*() {
    const greeting = yield* ctx.activity<string>("greeting.compose", [name], { startToCloseTimeout: 30 })
    return { greeting, at: ctx.now().toISOString() }
  }))

const compose = DurableWorkflow.activity("greeting.compose", (name: string) =>
  Effect.gen(function*() {
    const ctx = yield* DurableWorkflow.ActivityContext
    yield* Effect.logInfo(`composing a greeting for ${name} (attempt ${ctx.info.attemptNumber})`)
    return `hello ${name}`
  }))

const serve = <E>(
  workflowId: string,
  layer: Layer.Layer<Transport.Transport | DurableWorkflowTransport.DurableWorkflowClient, E>,
  taskQueue: string
) =>
  Effect.gen(function*() {
    const worker = yield* Worker.make({ steps: [compose], durableWorkflows: [greet], shutdownTimeout: "30 seconds" })
    yield* Effect.logInfo(`serving ${taskQueue}; waiting for workflow ${workflowId}`)
    const description = yield* worker.runUntil(DurableWorkflowTransport.workflowTerminal(workflowId, { pollInterval: "500 millis" }), {
      timeout: "2 minutes"
    })
    yield* Effect.logInfo(`workflow ${workflowId} ended: ${String(description["status"])}`)
    return description
  }).pipe(Effect.provide(layer))

const real = (url: string) => {
  const taskQueue = process.env["DURABLE_WORKFLOW_TASK_QUEUE"] ?? "orders"
  const workflowId = process.env["DURABLE_WORKFLOW_WORKFLOW_ID"]
  if (workflowId === undefined) {
    console.log(
      `Set DURABLE_WORKFLOW_WORKFLOW_ID to the workflow to wait for (start an "orders.greet" run on queue "${taskQueue}" at ${url}).`
    )
    return Effect.void
  }
  return serve(workflowId, DurableWorkflowTransport.layerConfig({ taskQueue }), taskQueue)
}

/** Plays the orchestrator on the test server: workflow task → activity task → workflow task. */
const local = Effect.gen(function*() {
  const TestServer = yield* Effect.promise(() => import("../test/support/durableWorkflowServer.js"))
  const server = yield* TestServer.scoped({ maxPollHoldMs: 1_000 })
  const taskQueue = "orders"
  const workflowId = "greet-ada"
  server.onEvent((event) => {
    if (event._tag === "WorkflowTaskCompleted") {
      for (const command of event.completion.commands) {
        if (command["type"] !== "schedule_activity") continue
        const args = Either.getOrThrow(Codec.decodeEnvelope(command["arguments"] as Codec.PayloadEnvelope)) as Array<unknown>
        server.enqueueActivityTask({ activityType: String(command["activity_type"]), taskQueue, workflowId, input: args })
      }
    }
    if (event._tag === "ActivityTaskCompleted") {
      server.enqueueWorkflowTask({
        workflowType: "orders.greet",
        taskQueue,
        workflowId,
        input: ["Ada"],
        historyEvents: [
          { event_type: "WorkflowStarted", payload: { timestamp: "2026-01-01T00:00:00.000Z" } },
          { event_type: "ActivityScheduled", payload: { activity_type: event.completion.activityType } },
          { event_type: "ActivityCompleted", payload: { activity_type: event.completion.activityType, result: event.completion.result } }
        ]
      })
    }
  })
  server.enqueueWorkflowTask({
    workflowType: "orders.greet",
    taskQueue,
    workflowId,
    input: ["Ada"],
    historyEvents: [{ event_type: "WorkflowStarted", payload: { timestamp: "2026-01-01T00:00:00.000Z" } }]
  })
  const description = yield* serve(
    workflowId,
    DurableWorkflowTransport.layer({
      baseUrl: server.url,
      workerToken: server.tokens.worker!,
      controlToken: server.tokens.operator!,
      taskQueue
    }),
    taskQueue
  )
  const result = Either.getOrThrow(Codec.decodeEnvelope(description["result"] as Codec.PayloadEnvelope))
  console.log("result:", result)
  console.log("requests:", server.requests.map((r) => `${r.method} ${r.path} → ${String(r.status)}`).join("\n  "))
})

const url = process.env["DURABLE_WORKFLOW_SERVER_URL"]
Effect.runPromise(Effect.scoped(url === undefined ? local : real(url))).catch((error) => {
  console.error(error)
  process.exitCode = 1
})
