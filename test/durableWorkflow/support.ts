import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import type * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import * as DurableWorkflow from "../../src/core/DurableWorkflow.js"
import * as Step from "../../src/core/Step.js"
import * as Worker from "../../src/runtime/Worker.js"
import * as DW from "../../src/transport/DurableWorkflowTransport.js"
import type { Transport } from "../../src/transport/Transport.js"
import { type DurableWorkflowServer, type DurableWorkflowServerOptions, scoped } from "../support/durableWorkflowServer.js"

export const QUEUE = "orders"

/** Waits (wall clock) for a server condition: an event to happen, never a timing rule. */
export const until = (server: DurableWorkflowServer, check: () => boolean, timeoutMs = 10_000) =>
  Effect.promise(() => server.waitUntil(check, timeoutMs))

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
  config: Worker.WorkerConfig<R>,
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

export { DurableWorkflow, DW, Step, Worker }
