/**
 * The README's Effect quickstart shape, whose poll loop dies after the worker registered (a broker
 * error that is not retried): it must exit non-zero with the loop's error rather than live on with
 * a dead worker.
 */
import { NodeRuntime } from "@effect/platform-node"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Worker from "../../src/runtime/Worker.js"
import * as InMemoryTransport from "../../src/transport/InMemoryTransport.js"

const broker = Effect.runSync(InMemoryTransport.make())
const WorkerLive = Worker.layer({ steps: [], pollTimeout: "100 millis" })
// well after the registration: the next poll fails with an error the loop does not retry
setTimeout(() => {
  console.log("worker registered; breaking the broker")
  Effect.runFork(broker.setPollFault({ _tag: "Fail", message: "NOPERM this user has no permissions", fatal: true }))
}, 500)
NodeRuntime.runMain(Layer.launch(WorkerLive.pipe(Layer.provide(broker.layer))))
