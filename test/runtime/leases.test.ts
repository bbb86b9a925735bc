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

describe("leases", () => {
  it.effect("a task's lease is renewed on its interval while it runs and while its reply is retried, and not after", () =>
    Effect.gen(function*() {
      const broker = yield* InMemory.make({ leaseRenewInterval: "100 millis" })
      const worker = yield* Worker.make({ steps: [Step.make("work", () => Effect.sleep("250 millis"))] })
      const fiber = yield* Effect.forkDaemon(Effect.provide(worker.run, Layer.merge(broker.layer, memory)))
      yield* worker.registered
      yield* broker.setCompleteFault({ _tag: "Fail", message: "broker away" })
      yield* broker.enqueue(stepTask("r1", "work", {}))
      const ops = Effect.map(broker.journal, (j) => j.map((e) => e.op))
      const renewals = Effect.map(ops, (o) => o.filter((op) => op === "renew").length)
      yield* ops.pipe(Effect.repeat({ until: (o) => o.includes("deliver") }))
      yield* TestClock.adjust("250 millis")
      assert.strictEqual(yield* renewals, 2, "renewed at 100 and 200 ms while running")
      // the reply fails; its retries wait 100, 200, 400 and 800 ms: the lease is kept meanwhile
      yield* TestClock.adjust("500 millis")
      assert.isAtLeast(yield* renewals, 6, "renewed while the reply is retried")
      yield* broker.setCompleteFault(undefined)
      yield* TestClock.adjust("1 second")
      assert.isTrue((yield* ops).includes("complete"))
      const settled = yield* renewals
      yield* TestClock.adjust("1 second")
      assert.strictEqual(yield* renewals, settled, "no renewal once the task is answered")
      yield* worker.stop
      yield* Fiber.join(fiber)
    }))
})
