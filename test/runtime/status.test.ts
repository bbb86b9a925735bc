import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as TestClock from "effect/TestClock"
import * as Step from "../../src/core/Step.js"
import * as Worker from "../../src/runtime/Worker.js"
import * as Memory from "../../src/services/Memory.js"
import * as InMemory from "../../src/transport/InMemoryTransport.js"
import { stepTask } from "../support/local.js"

const memory = Memory.layerTest({ usage: 1, limit: 1024 })
const slow = Step.make("slow", () => Effect.sleep("10 seconds"))

describe("worker status: lifecycle state", () => {
  it.effect("starting, registering, running, draining, stopped", () =>
    Effect.gen(function*() {
      const broker = yield* InMemory.make()
      const worker = yield* Worker.make({ steps: [slow], shutdownTimeout: "1 minute" })
      const state = Effect.map(worker.status, (s) => s.state)
      assert.strictEqual(yield* state, "starting")
      yield* broker.setRegisterFault({ _tag: "Hang" })
      const running = yield* Effect.forkDaemon(Effect.provide(worker.run, Layer.merge(broker.layer, memory)))
      yield* broker.journal.pipe(Effect.repeat({ until: (j) => j.some((e) => e.op === "register") }))
      assert.strictEqual(yield* state, "registering")
      yield* Fiber.interrupt(running).pipe(Effect.timeout("1 second"), Effect.ignore, Effect.forkDaemon)

      const second = yield* Worker.make({ steps: [slow], shutdownTimeout: "1 minute" })
      const secondState = Effect.map(second.status, (s) => s.state)
      const broker2 = yield* InMemory.make()
      yield* Effect.forkDaemon(Effect.provide(second.run, Layer.merge(broker2.layer, memory)))
      yield* second.registered
      assert.strictEqual(yield* secondState, "running")
      yield* broker2.enqueue(stepTask("r1", "slow", {}))
      yield* broker2.journal.pipe(Effect.repeat({ until: (j) => j.some((e) => e.op === "deliver") }))
      const stopping = yield* Effect.fork(second.stop)
      assert.strictEqual(yield* secondState.pipe(Effect.repeat({ until: (s) => s !== "running" })), "draining")
      yield* TestClock.adjust("10 seconds")
      yield* Fiber.join(stopping)
      assert.strictEqual(yield* secondState, "stopped")
    }))

  it.effect("failed, with why, when registration fails; stopped when stopped before it ran", () =>
    Effect.gen(function*() {
      const broker = yield* InMemory.make()
      yield* broker.setRegisterFault({ _tag: "Fail", message: "NOAUTH Authentication required" })
      const worker = yield* Worker.make({})
      yield* Effect.flip(Effect.provide(worker.run, Layer.merge(broker.layer, memory)))
      const status = yield* worker.status
      assert.strictEqual(status.state, "failed")
      assert.include(status.failure, "NOAUTH")
      const never = yield* Worker.make({})
      yield* never.stop
      assert.strictEqual((yield* never.status).state, "stopped")
    }))
})
