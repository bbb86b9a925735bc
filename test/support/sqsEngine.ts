/**
 * A real nestjs-durable engine on SQS for integration tests, without NestJS: `WorkflowEngine` +
 * `InMemoryStateStore` + the published `SqsTransport` (`@dudousxd/nestjs-durable-transport-sqs`) on a
 * fauxqs server, under its own queue prefix, with `resumeDueTimers()` driven on a short interval.
 */
import {
  InMemoryStateStore,
  type RunResult,
  type StepCheckpoint,
  type WorkflowCtx,
  type WorkflowEngineDeps,
  WorkflowEngine
} from "@dudousxd/nestjs-durable-core"
import { SqsTransport, type SqsTransportOptions } from "@dudousxd/nestjs-durable-transport-sqs"
import { randomUUID } from "node:crypto"
import { type Fauxqs, sqsPrefix } from "./fauxqs.js"

/** A workflow body as the engine runs it. */
export type WorkflowBody = (ctx: WorkflowCtx, input: unknown) => Promise<unknown>

/** A running engine on its own queue prefix. */
export interface SqsEngine {
  readonly prefix: string
  readonly engine: WorkflowEngine
  readonly transport: SqsTransport
  readonly register: (name: string, fn: WorkflowBody) => void
  /** Starts a run, returns its id. */
  readonly start: (workflow: string, input: unknown, runId?: string) => Promise<string>
  /** Waits until the run is terminal. */
  readonly waitForRun: (runId: string, timeoutMs?: number) => Promise<RunResult>
  /** Starts a run and waits until it is terminal. */
  readonly run: (workflow: string, input: unknown, timeoutMs?: number) => Promise<RunResult>
  readonly checkpoint: (runId: string, seq: number) => Promise<StepCheckpoint | null>
  readonly close: () => Promise<void>
}

/** Options of {@link startSqsEngine}. */
export interface SqsEngineOptions {
  readonly prefix?: string
  /** Further options of the engine's `SqsTransport` (client, prefix and autoCreate are the harness's). */
  readonly transport?: Omit<SqsTransportOptions, "clientConfig" | "prefix">
  /** Further engine dependencies. */
  readonly engine?: Omit<WorkflowEngineDeps, "store" | "transport" | "transports">
}

/** Starts an engine on `server`; its transport creates the queues it uses (`autoCreate`). */
export const startSqsEngine = (server: Fauxqs, options: SqsEngineOptions = {}): SqsEngine => {
  const prefix = options.prefix ?? sqsPrefix()
  const store = new InMemoryStateStore()
  const transport = new SqsTransport({
    autoCreate: true,
    ...options.transport,
    ...(options.transport?.client === undefined ? { clientConfig: server.clientConfig } : {}),
    prefix
  })
  const engine = new WorkflowEngine({ ...options.engine, store, transport })
  let ticking: Promise<unknown> = Promise.resolve()
  let busy = false
  const timer = setInterval(() => {
    if (busy) return
    busy = true
    ticking = engine.resumeDueTimers().catch(() => undefined).finally(() => {
      busy = false
    })
  }, 100)
  let closing: Promise<void> | undefined
  const waitForRun = (runId: string, timeoutMs = 30_000) => engine.waitForRun(runId, { until: "terminal", timeoutMs })
  const start = async (workflow: string, input: unknown, runId = `run-${randomUUID()}`) => {
    await engine.start(workflow, input, runId)
    return runId
  }
  return {
    prefix,
    engine,
    transport,
    register: (name, fn) => engine.register(name, "1", fn),
    start,
    waitForRun,
    run: async (workflow, input, timeoutMs) => waitForRun(await start(workflow, input), timeoutMs),
    checkpoint: (runId, seq) => store.getCheckpoint(runId, seq),
    close: () => {
      closing ??= (async () => {
        clearInterval(timer)
        await ticking
        await engine.drain(2_000).catch(() => undefined)
        await transport.close()
      })()
      return closing
    }
  }
}
