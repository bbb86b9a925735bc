/**
 * This library's worker, through the promise facade, serving one no-op step on the BullMQ transport.
 */
import { Redis } from "ioredis"
import { redis, Worker } from "effect-durable-worker/promise"
import { workerDescriptorKey, routingToken } from "../../src/transport/bullmq/internal/naming.js"
import { benchConnection, type PeerOptions, type RunningPeer } from "./peer.js"

/** Start our worker serving `stepName` as a no-op step at `concurrency`; resolves once it consumes. */
export const start = async (options: PeerOptions): Promise<RunningPeer> => {
  const connection = options.connection ?? benchConnection()
  const worker = new Worker({ concurrency: options.concurrency, handleSignals: false, logLevel: "None" })
  worker.step(options.stepName, () => undefined)
  const running = worker.run(redis({ url: `redis://${connection.host}:${connection.port}`, prefix: options.prefix }))
  const probe = new Redis(connection)
  const key = workerDescriptorKey(options.prefix, routingToken(options.stepName), worker.id)
  try {
    for (let i = 0; i < 500 && (await probe.exists(key)) === 0; i++) await new Promise((r) => setTimeout(r, 10))
  } finally {
    probe.disconnect()
  }
  return {
    stop: async () => {
      await worker.stop()
      await running
    }
  }
}
