/**
 * Benchmark load: enqueue N no-op step tasks exactly as the engine dispatches them (job `task`, data =
 * the `RemoteTask` JSON, the engine's job options) and time how long the worker under test takes until
 * N `result` jobs have arrived on `<P>-results`. Results are counted, not consumed, so the measurement
 * adds no competing consumer; a sample is checked, then the results are drained.
 */
import { Queue } from "bullmq"
import { Redis } from "ioredis"
import { randomUUID } from "node:crypto"
import {
  BULL_KEY_PREFIX,
  JobName,
  resultsQueue,
  routingToken,
  taskJobOptions,
  tasksQueue
} from "../../src/transport/bullmq/internal/naming.js"
import { type BenchConnection, benchConnection } from "../peers/peer.js"

/** A step task as the engine's BullMQ transport puts it in the job's `data`, keys in its order. */
export interface RemoteTaskData {
  readonly runId: string
  readonly seq: number
  readonly name: string
  readonly stepId: string
  readonly group: string
  readonly input?: unknown
  readonly priority?: number
  readonly attempt: number
  readonly transport: string
}

/** Build one task the way the engine does (`stepId = runId:seq`, group = routing token, pool id `default`). */
export const remoteTask = (options: {
  readonly runId: string
  readonly seq: number
  readonly stepName: string
  readonly partition?: string | undefined
  readonly input?: unknown
  readonly priority?: number | undefined
  readonly attempt?: number | undefined
}): RemoteTaskData => ({
  runId: options.runId,
  seq: options.seq,
  name: options.stepName,
  stepId: `${options.runId}:${options.seq}`,
  group: routingToken(options.stepName, options.partition),
  ...(options.input !== undefined ? { input: options.input } : {}),
  ...(options.priority !== undefined ? { priority: options.priority } : {}),
  attempt: options.attempt ?? 1,
  transport: "default"
})

/** Options for {@link runLoad}. */
export interface LoadOptions {
  /** Transport key prefix the peer consumes. */
  readonly prefix: string
  /** The step name the peer serves. */
  readonly stepName: string
  /** How many tasks to enqueue. */
  readonly n: number
  readonly connection?: BenchConnection | undefined
  /** Worker partition: tasks go to `<P>-tasks-<name>@<partition>`. */
  readonly partition?: string | undefined
  /** Tasks per `addBulk` call (default 1000). */
  readonly batchSize?: number | undefined
  /** Give up after this many ms (default 120 000). */
  readonly timeoutMs?: number | undefined
  /** How often the results queue is counted (ms, default 5). */
  readonly pollMs?: number | undefined
}

/** What one load run measured. */
export interface LoadResult {
  readonly n: number
  /** From the first enqueue until N results were counted. */
  readonly elapsedMs: number
  /** Time spent enqueueing (included in `elapsedMs`). */
  readonly enqueueMs: number
  /** `n / elapsedMs * 1000`. */
  readonly stepsPerSec: number
  /** Result jobs counted when the run ended (more than `n` means duplicates). */
  readonly results: number
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** Add `n` no-op tasks for `stepName` to its task queue; returns the step ids enqueued. */
export const enqueueTasks = async (
  options: Pick<LoadOptions, "prefix" | "stepName" | "n" | "connection" | "partition" | "batchSize"> & {
    readonly runIdPrefix?: string | undefined
  }
): Promise<Set<string>> => {
  const connection = options.connection ?? benchConnection()
  const runIdPrefix = options.runIdPrefix ?? `bench-${randomUUID().slice(0, 8)}`
  const batchSize = options.batchSize ?? 1000
  const queue = new Queue(tasksQueue(options.prefix, routingToken(options.stepName, options.partition)), { connection })
  const stepIds = new Set<string>()
  try {
    for (let from = 0; from < options.n; from += batchSize) {
      const jobs = []
      for (let i = from; i < Math.min(options.n, from + batchSize); i++) {
        const data = remoteTask({ runId: `${runIdPrefix}-${i}`, seq: 0, stepName: options.stepName, partition: options.partition, input: { i } })
        stepIds.add(data.stepId)
        jobs.push({ name: JobName.task, data, opts: taskJobOptions() })
      }
      await queue.addBulk(jobs)
    }
  } finally {
    await queue.close()
  }
  return stepIds
}

/**
 * Enqueue `n` tasks and time until `n` results are on `<P>-results`. Fails if results were already
 * waiting there, on timeout, or if a sampled result is not a completed result for an enqueued step.
 * The counted results are removed afterwards.
 */
export const runLoad = async (options: LoadOptions): Promise<LoadResult> => {
  const connection = options.connection ?? benchConnection()
  const timeoutMs = options.timeoutMs ?? 120_000
  const pollMs = options.pollMs ?? 5
  const results = new Queue(resultsQueue(options.prefix), { connection })
  try {
    const before = await results.count()
    if (before !== 0) throw new Error(`${resultsQueue(options.prefix)} already holds ${before} results; use a fresh prefix`)
    const t0 = performance.now()
    const stepIds = await enqueueTasks({ ...options, connection })
    const enqueueMs = performance.now() - t0
    let count = await results.count()
    while (count < options.n) {
      if (performance.now() - t0 > timeoutMs) {
        throw new Error(`only ${count} of ${options.n} results arrived on ${resultsQueue(options.prefix)} within ${timeoutMs}ms`)
      }
      await sleep(pollMs)
      count = await results.count()
    }
    const elapsedMs = performance.now() - t0
    for (const job of await results.getWaiting(0, 99)) {
      const data = job.data as { stepId?: unknown; status?: unknown; runId?: unknown; seq?: unknown }
      if (
        job.name !== JobName.result || data.status !== "completed" || typeof data.stepId !== "string" ||
        !stepIds.has(data.stepId) || data.stepId !== `${String(data.runId)}:${String(data.seq)}`
      ) {
        throw new Error(`unexpected result job ${job.name}: ${JSON.stringify(job.data)}`)
      }
    }
    await results.drain(true)
    return { n: options.n, elapsedMs, enqueueMs, stepsPerSec: (options.n / elapsedMs) * 1000, results: count }
  } finally {
    await results.close()
  }
}

/** Delete every Redis key of `prefix` (`bull:<prefix>-*` and `<prefix>-*`); returns how many. */
export const deletePrefixKeys = async (prefix: string, connection: BenchConnection = benchConnection()): Promise<number> => {
  const redis = new Redis({ host: connection.host, port: connection.port })
  const escaped = prefix.replace(/[*?[\]\\]/g, "\\$&")
  let removed = 0
  try {
    for (const pattern of [`${BULL_KEY_PREFIX}:${escaped}-*`, `${escaped}-*`]) {
      let cursor = "0"
      do {
        const [next, keys] = await redis.scan(cursor, "MATCH", pattern, "COUNT", 1000)
        cursor = next
        if (keys.length > 0) removed += await redis.unlink(...keys)
      } while (cursor !== "0")
    }
  } finally {
    redis.disconnect()
  }
  return removed
}
