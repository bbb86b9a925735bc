/**
 * Benchmark peer: the upstream TS thin worker (`@dudousxd/durable-worker` `runRedisWorker`) serving a
 * no-op step. It also subscribes to `<P>-control` and writes its liveness key, as it does in production.
 */
import { DurableWorkerRuntime, runRedisWorker } from "@dudousxd/durable-worker"
import { benchConnection, type PeerOptions, type RunningPeer } from "./peer.js"

/** Start the upstream worker serving `stepName` as a no-op step at `concurrency`. */
export const start = async (options: PeerOptions): Promise<RunningPeer> => {
  const runtime = new DurableWorkerRuntime().registerStep(options.stepName, async () => undefined)
  const worker = await runRedisWorker({
    runtime,
    connection: { ...(options.connection ?? benchConnection()), maxRetriesPerRequest: null },
    prefix: options.prefix,
    concurrency: options.concurrency
  })
  return { stop: () => worker.close() }
}
