/**
 * Pollers that share a pool (one per step name): an idle one waits holding one permit, not all the
 * free ones, so a busy subscription is not held up behind idle long polls.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Queue from "effect/Queue"
import * as TestClock from "effect/TestClock"
import { NestDurableProtocol, Step, Transport, Worker } from "../../src/index.js"
import * as Memory from "../../src/services/Memory.js"
import { stepTask } from "../support/local.js"

const memory = Memory.layerTest({ usage: 1, limit: 1024 })

/**
 * Two subscriptions on the step pool: `idle` long-polls 20 s and finds nothing (it records how many
 * permits each of its polls held), `busy` hands over what is enqueued. Replies are recorded.
 */
const twoQueues = (pollers: ReadonlyArray<"idle" | "busy">) =>
  Effect.gen(function*() {
    const busy = yield* Queue.unbounded<unknown>()
    const replies = yield* Queue.unbounded<unknown>()
    const idleHeld: Array<number> = []
    const protocol = NestDurableProtocol.make()
    const poller = (which: "idle" | "busy") =>
      Transport.Poller.make({
        name: which,
        pool: protocol.pools.step,
        poll: (max) =>
          which === "idle"
            ? Effect.sync(() => idleHeld.push(max)).pipe(Effect.zipRight(Effect.interruptible(Effect.sleep("20 seconds"))), Effect.as([]))
            : Effect.map(Effect.interruptible(Queue.take(busy)), (payload) => [
              Transport.Delivery.make({ id: String((payload as { stepId: string }).stepId), payload, protocol, complete: (reply) => Queue.offer(replies, reply) })
            ])
      })
    const layer = Layer.succeed(Transport.Transport, {
      name: "two queues",
      protocol,
      register: () => Effect.succeed(Transport.Registration.make({ pollers: pollers.map(poller) }))
    })
    return { busy, replies, idleHeld, layer }
  })

describe("pollers sharing a pool", () => {
  it.effect("an idle poller holds one permit while it waits, so the busy one runs the rest at once", () =>
    Effect.gen(function*() {
      const { busy, idleHeld, layer, replies } = yield* twoQueues(["idle", "idle", "busy"])
      const worker = yield* Worker.make({ steps: [Step.make("s", () => Effect.sleep("1 second"))], concurrency: 4 })
      const running = yield* Effect.fork(Effect.provide(worker.run, Layer.merge(layer, memory)))
      yield* worker.registered
      for (const id of ["a", "b"]) yield* Queue.offer(busy, stepTask(id, "s"))
      // both idle pollers wait (20 s each) holding one permit apiece; two are left, and both tasks run now
      yield* TestClock.adjust("1 second")
      assert.strictEqual(yield* Queue.size(replies), 2, "both tasks answered within their own second")
      assert.isTrue(idleHeld.length >= 2 && idleHeld.every((n) => n === 1), `idle polls held ${JSON.stringify(idleHeld)}`)
      yield* worker.stop
      yield* Fiber.join(running)
    }))

  it.effect("a poller alone on its pool takes every free permit", () =>
    Effect.gen(function*() {
      const { idleHeld, layer } = yield* twoQueues(["idle"])
      const worker = yield* Worker.make({ steps: [Step.make("s", () => Effect.void)], concurrency: 4 })
      const running = yield* Effect.fork(Effect.provide(worker.run, Layer.merge(layer, memory)))
      yield* worker.registered
      yield* TestClock.adjust("1 second")
      assert.deepStrictEqual(idleHeld, [4])
      yield* worker.stop
      yield* Fiber.join(running)
    }))
})
