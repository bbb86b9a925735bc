/**
 * The runtime tells each poll whether the poller's previous one failed, so a transport whose broker
 * holds an empty poll can answer at once when the broker may just be back (`Poller.poll`'s `after`).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as Queue from "effect/Queue"
import * as TestClock from "effect/TestClock"
import { Step, Transport, Worker } from "../../src/index.js"
import * as Memory from "../../src/services/Memory.js"
import { scriptedTransport } from "../support/scriptedTransport.js"

describe("a poll is told how the previous one went", () => {
  it.effect("failure after a failed poll, not after one that worked or at the first", () =>
    Effect.gen(function*() {
      // each poll takes its outcome from here: true fails it, false finds nothing
      const outcomes = yield* Queue.unbounded<boolean>()
      const told: Array<boolean | undefined> = []
      const transport = scriptedTransport("scripted", {
        poll: () => (_, after) =>
          Effect.flatMap(Effect.interruptible(Queue.take(outcomes)), (fails) => {
            told.push(after?.failure)
            return fails
              ? Effect.fail(new Transport.TransportError({ transport: "scripted", operation: "poll", message: "refused" }))
              : Effect.succeed([])
          })
      })
      const worker = yield* Worker.make({ steps: [Step.make("s", () => Effect.void)], pollRetryDelay: "1 second" })
      yield* Effect.forkDaemon(
        Effect.provide(worker.run, Layer.mergeAll(transport, Memory.layerTest({ usage: 1, limit: 1024 }), Logger.remove(Logger.defaultLogger)))
      )
      yield* worker.registered
      for (const fails of [false, true, true, false, false, true, false]) {
        yield* Queue.offer(outcomes, fails)
        // past the pause after a failed poll
        yield* TestClock.adjust("1 second")
      }
      assert.deepStrictEqual(told, [false, false, true, true, false, false, true])
      yield* worker.stop
    }))
})
