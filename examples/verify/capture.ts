/**
 * Growing the corpus from production: a worker that records 5% of the workflow turns it replays
 * into `./histories` (each run's latest captured turn, with the decision it answered), which
 * `effect-durable-worker verify` then replays against the next build. Run it with
 * `npx tsx --conditions=source examples/verify/capture.ts` (in-memory transport; nothing arrives).
 */
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import { Layer } from "effect"
import { InMemoryTransport, ReplayCapture, Worker } from "effect-durable-worker"
import { greet, order } from "./workflows.js"

const WorkerLive = Worker.layer({ workflows: [order], durableWorkflows: [greet] }).pipe(
  Layer.provide(ReplayCapture.layerDirectory("./histories", { sampleRate: 0.05 })),
  Layer.provide(InMemoryTransport.layer()),
  Layer.provide(NodeContext.layer)
)

NodeRuntime.runMain(Layer.launch(WorkerLive))
