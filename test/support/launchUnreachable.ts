/**
 * The README's Effect quickstart shape, over a Redis that nothing listens on: it must exit non-zero
 * with the registration error rather than live on without a worker.
 */
import { NodeRuntime } from "@effect/platform-node"
import * as Layer from "effect/Layer"
import * as BullMQTransport from "../../src/transport/BullMQTransport.js"
import * as Worker from "../../src/runtime/Worker.js"

const WorkerLive = Worker.layer({ steps: [] })
NodeRuntime.runMain(
  Layer.launch(WorkerLive.pipe(Layer.provide(BullMQTransport.layer({ url: "redis://127.0.0.1:1", connectTimeout: "1 second" }))))
)
