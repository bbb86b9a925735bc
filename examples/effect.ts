/**
 * The Effect quickstart: a worker as a layer, on the in-memory transport, stopped gracefully by
 * SIGTERM/SIGINT. Run it with `npx tsx --conditions=source examples/effect.ts`.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import { FatalError, InMemoryTransport, Step, Worker } from "effect-durable-worker"

const chargeCard = Step.make("payments.charge-card", (input: { amount: number }, ctx) =>
  Effect.gen(function*() {
    yield* Effect.logInfo(`charging ${input.amount}`)
    if (input.amount > 10_000) return yield* Effect.fail(new FatalError("card declined", "card_declined"))
    return { chargeId: `ch_${ctx.stepId}` }
  }))

const WorkerLive = Worker.layer({ steps: [chargeCard], concurrency: 4, shutdownTimeout: "30 seconds" })

NodeRuntime.runMain(Layer.launch(WorkerLive.pipe(Layer.provide(InMemoryTransport.layer()))))
