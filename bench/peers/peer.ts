/**
 * What every benchmark peer exposes: start a worker serving one no-op step on a prefix, stop it.
 */

/** Redis host/port for the benchmark (`REDIS_HOST` / `REDIS_PORT`, default 127.0.0.1:6379). */
export interface BenchConnection {
  readonly host: string
  readonly port: number
}

/** The Redis the benchmark uses unless told otherwise. */
export const benchConnection = (): BenchConnection => ({
  host: process.env.REDIS_HOST ?? "127.0.0.1",
  port: Number(process.env.REDIS_PORT ?? 6379)
})

/** The connection options a BullMQ worker of a peer uses: `maxRetriesPerRequest: null`, as BullMQ asks. */
export const workerConnection = (options: { readonly connection?: BenchConnection | undefined }) => ({
  ...(options.connection ?? benchConnection()),
  maxRetriesPerRequest: null
})

/** What the bare peers read of a task. */
export interface TaskData {
  readonly runId: string
  readonly seq: number
  readonly stepId: string
}

/** The result a bare peer answers a no-op task with, as this worker answers it. */
export const completedResult = (task: TaskData) => ({
  runId: task.runId,
  seq: task.seq,
  stepId: task.stepId,
  status: "completed" as const,
  startedAt: Date.now()
})

/** Options every peer's `start` takes. */
export interface PeerOptions {
  /** Transport key prefix (no namespace folding). */
  readonly prefix: string
  /** Tasks run at once. */
  readonly concurrency: number
  /** The step name served (the queue is `<prefix>-tasks-<sanitised name>`). */
  readonly stepName: string
  readonly connection?: BenchConnection | undefined
}

/** A started peer. */
export interface RunningPeer {
  /** Stop consuming and close every connection the peer opened. */
  readonly stop: () => Promise<void>
}
