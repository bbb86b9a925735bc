/**
 * This library's worker, through the promise facade, serving one no-op step on the BullMQ transport:
 * imported as an ES module (`dist/esm`), and required as CommonJS (`dist/cjs`, as a NestJS
 * application with its default tsconfig loads it).
 */
import * as esm from "effect-durable-worker/promise"
import { Redis } from "ioredis"
import { createRequire } from "node:module"
import { workerDescriptorKey, routingToken } from "../../src/transport/bullmq/internal/naming.js"
import { benchConnection, type PeerOptions, type RunningPeer } from "./peer.js"

type Facade = typeof esm

/** Start our worker serving `stepName` as a no-op step at `concurrency`; resolves once it consumes. */
const startWith = ({ redis, Worker }: Facade) => async (options: PeerOptions): Promise<RunningPeer> => {
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

/** The worker of the ES module build. */
export const start = startWith(esm)

/**
 * The same worker from the CommonJS build (with Effect's CommonJS build under it), required on first
 * use: the benchmarks that do not run it load no second copy.
 */
export const startCommonJs = (options: PeerOptions): Promise<RunningPeer> =>
  startWith(createRequire(import.meta.url)("effect-durable-worker/promise") as Facade)(options)
