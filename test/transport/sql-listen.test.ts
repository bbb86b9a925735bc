/**
 * The LISTEN connection's close, on the clock: bounded even though it runs as a release.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as TestClock from "effect/TestClock"
import { closeWithin } from "../../src/transport/sql/internal/listen.js"

describe("closing the LISTEN connection", () => {
  it.effect("a close that hangs (the database gone mid-close) is left after 1 second, even as a scope's release", () =>
    Effect.gen(function*() {
      let ended = 0
      const hangs = () => {
        ended++
        return new Promise<never>(() => {})
      }
      // as the stream's resource is released: uninterruptibly, when its scope closes
      const closing = yield* Effect.fork(Effect.scoped(Effect.acquireRelease(Effect.void, () => closeWithin(hangs))))
      yield* TestClock.adjust("999 millis")
      assert.isNull(closing.unsafePoll(), "still waiting for the close")
      assert.strictEqual(ended, 1)
      yield* TestClock.adjust("1 millis")
      yield* Fiber.join(closing)
    }))

  it.effect("a close that ends is waited for", () =>
    Effect.gen(function*() {
      let closed = false
      yield* Effect.scoped(Effect.acquireRelease(Effect.void, () =>
        closeWithin(() =>
          Promise.resolve().then(() => {
            closed = true
          })
        )))
      assert.isTrue(closed)
    }))
})
