/**
 * The runtime's retries of a reply the transport could not deliver, on the clock: four, 100 ms
 * apart and doubling, then the task is left to the broker (lifecycle.test.ts covers what the worker
 * does around them).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as TestClock from "effect/TestClock"
import { replyRetry } from "../../src/runtime/internal/replyRetry.js"

describe("reply retry", () => {
  it.effect("tries again after 100, 200, 400 and 800 ms, then gives up with the last failure", () =>
    Effect.gen(function*() {
      const at: Array<number> = []
      const send = Effect.flatMap(Clock.currentTimeMillis, (now) => {
        at.push(now)
        return Effect.fail(`attempt ${at.length}`)
      })
      const fiber = yield* Effect.fork(Effect.retry(send, replyRetry))
      yield* TestClock.adjust("99 millis")
      assert.deepStrictEqual(at, [0], "not again before 100 ms")
      yield* TestClock.adjust("1 millis")
      assert.deepStrictEqual(at, [0, 100])
      yield* TestClock.adjust("199 millis")
      assert.deepStrictEqual(at, [0, 100], "then 200 ms later, not sooner")
      yield* TestClock.adjust("1 millis")
      yield* TestClock.adjust("400 millis")
      yield* TestClock.adjust("800 millis")
      assert.deepStrictEqual(at, [0, 100, 300, 700, 1_500])
      assert.deepStrictEqual(yield* Fiber.await(fiber), Exit.fail("attempt 5"))
      yield* TestClock.adjust("1 minute")
      assert.strictEqual(at.length, 5, "nothing more once given up")
    }))
})
