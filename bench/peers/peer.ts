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
