/**
 * Shared set-up of the workflow integration tests: a real nestjs-durable engine on its own Redis
 * prefix, and our worker on the same prefix serving workflows (and their steps) either through the
 * promise facade (async bodies) or the Effect API (`Workflow.make` bodies).
 */
import type { StepCheckpoint } from "@dudousxd/nestjs-durable-core"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import { type Step, type Workflow, Worker as EffectWorker } from "../../src/index.js"
import { BullMQTransport } from "../../src/bullmq.js"
import { redis, Worker } from "../../src/promise.js"
import { routingToken } from "../../src/transport/bullmq/internal/naming.js"
import { type EngineHarness, type EngineHarnessOptions, startEngine } from "./engine.js"

const logLevel = (process.env.TEST_LOG_LEVEL ?? "None") as "None"
let workerCounter = 0
const nextWorkerId = (label: string) => `${label}-${process.pid}-${++workerCounter}`

/** A worker serving an engine; `stop()` drains it and waits for `run` to settle. */
export interface Served {
  readonly id: string
  readonly stop: () => Promise<void>
}

/** Options of the Redis transport used by the served workers (milliseconds). */
export interface ServeTransportOptions {
  readonly lockDurationMs?: number
  readonly stalledIntervalMs?: number
}

/**
 * Runs a promise-facade worker on `engine`'s prefix, configured by `configure`, and waits until the
 * engine sees a live heartbeat for every workflow it registered (convention routing needs one).
 */
export const serveFacade = async (
  engine: EngineHarness,
  configure: (worker: Worker) => void,
  options: { readonly workflows: ReadonlyArray<string>; readonly concurrency?: number } & ServeTransportOptions
): Promise<Served> => {
  const worker = new Worker({
    handleSignals: false,
    logLevel,
    workerId: nextWorkerId("facade"),
    concurrency: options.concurrency ?? 16,
    shutdownTimeoutMs: 10_000
  })
  configure(worker)
  const running = worker.run(redis({
    prefix: engine.prefix,
    url: `redis://${engine.connection.host}:${engine.connection.port}`,
    stalledIntervalMs: options.stalledIntervalMs ?? 60_000,
    ...(options.lockDurationMs === undefined ? {} : { lockDurationMs: options.lockDurationMs })
  }))
  running.catch(() => undefined)
  await Promise.race([
    Promise.all(options.workflows.map((name) => engine.waitForWorkerGroup(routingToken(name, undefined)))),
    running.then(() => Promise.reject(new Error("the worker stopped before it registered")))
  ])
  return {
    id: worker.id,
    stop: async () => {
      await worker.stop()
      await running
    }
  }
}

/** Runs an Effect-API worker (`Worker.make({ steps, workflows })`) on `engine`'s prefix. */
export const serveEffect = async (
  engine: EngineHarness,
  config: { readonly steps: ReadonlyArray<Step.Step>; readonly workflows: ReadonlyArray<Workflow.Workflow<any, any>> } & {
    readonly concurrency?: number
  } & ServeTransportOptions
): Promise<Served> => {
  const worker = await Effect.runPromise(EffectWorker.make({
    workerId: nextWorkerId("effect"),
    steps: config.steps,
    workflows: config.workflows,
    concurrency: config.concurrency ?? 16,
    shutdownTimeout: "10 seconds"
  }))
  const running = Effect.runPromise(
    worker.run.pipe(
      Effect.provide(BullMQTransport.layer({
        prefix: engine.prefix,
        url: `redis://${engine.connection.host}:${engine.connection.port}`,
        stalledInterval: config.stalledIntervalMs ?? 60_000,
        ...(config.lockDurationMs === undefined ? {} : { lockDuration: config.lockDurationMs })
      })),
      Logger.withMinimumLogLevel(LogLevel.fromLiteral(logLevel))
    )
  )
  running.catch(() => undefined)
  await Promise.race([
    Promise.all(config.workflows.map((workflow) => engine.waitForWorkerGroup(routingToken(workflow.name, undefined)))),
    running.then(() => Promise.reject(new Error("the worker stopped before it registered")))
  ])
  return {
    id: worker.id,
    stop: async () => {
      await Effect.runPromise(worker.stop)
      await running
    }
  }
}

/** Engines started by a test file, closed (keys deleted) by {@link closeAll}. */
export const engines = () => {
  const started: Array<EngineHarness> = []
  const workers: Array<Served> = []
  return {
    start: async (options?: EngineHarnessOptions) => {
      const engine = await startEngine(options)
      started.push(engine)
      return engine
    },
    track: <S extends Served>(served: S): S => {
      workers.push(served)
      return served
    },
    closeAll: async () => {
      await Promise.allSettled(workers.map((served) => served.stop()))
      await Promise.allSettled(started.map((engine) => engine.close()))
    }
  }
}

/** A checkpoint as plain JSON (dates as strings, undefined keys gone). */
export const plain = (checkpoint: StepCheckpoint): Record<string, any> => JSON.parse(JSON.stringify(checkpoint))

/** The ordered `(seq, name, kind)` of a run's checkpoints. */
export const trace = (checkpoints: ReadonlyArray<StepCheckpoint>) =>
  [...checkpoints].sort((a, b) => a.seq - b.seq).map(({ kind, name, seq }) => ({ seq, name, kind }))
