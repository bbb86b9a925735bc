/**
 * How long a stop waits for the SQS long polls that interrupted polls left running, on the clock:
 * their wait time and a margin, within what is left of the shutdown deadline since the polls
 * stopped (the transport's own run of it is covered against fauxqs in sqs.test.ts).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as TestClock from "effect/TestClock"
import { awaitDetachedReceives } from "../../src/transport/sqs/internal/detachedReceives.js"
import { settle } from "../support/clock.js"

/** A stop's wait for `receives` long polls that never end, started at the clock's now. */
const stopWaiting = (options: { readonly waitSeconds: number; readonly shutdownMillis: number; readonly pollsStoppedAt?: number }) =>
  Effect.gen(function*() {
    const receives = yield* Effect.forEach([1, 2], () => Effect.fork(Effect.never))
    const waiting = yield* Effect.fork(
      Effect.uninterruptible(awaitDetachedReceives(receives, { pollsStoppedAt: undefined, ...options }))
    )
    yield* settle
    return waiting
  })

describe("SQS long polls left running at a stop", () => {
  it.effect("are waited for up to their wait time and 2 s, even as a finalizer runs (uninterruptibly)", () =>
    Effect.gen(function*() {
      const waiting = yield* stopWaiting({ waitSeconds: 5, shutdownMillis: 30_000 })
      yield* TestClock.adjust("6999 millis")
      yield* settle
      assert.isNull(waiting.unsafePoll(), "still waiting within 7 s")
      yield* TestClock.adjust("1 millis")
      yield* Fiber.join(waiting)
    }))

  it.effect("no longer than what is left of the shutdown deadline since the polls stopped", () =>
    Effect.gen(function*() {
      yield* TestClock.adjust("10 seconds")
      // the polls stopped at 7 s with a deadline of 5 s: 2 s are left at 10 s
      const waiting = yield* stopWaiting({ waitSeconds: 20, shutdownMillis: 5_000, pollsStoppedAt: 7_000 })
      yield* TestClock.adjust("1999 millis")
      yield* settle
      assert.isNull(waiting.unsafePoll())
      yield* TestClock.adjust("1 millis")
      yield* Fiber.join(waiting)
      // past the deadline already: not waited for at all
      const late = yield* stopWaiting({ waitSeconds: 20, shutdownMillis: 1_000, pollsStoppedAt: 0 })
      assert.isNotNull(late.unsafePoll())
    }))

  it.effect("nothing left running: nothing to wait for", () =>
    Effect.gen(function*() {
      const waiting = yield* Effect.fork(awaitDetachedReceives([], { waitSeconds: 20, shutdownMillis: 30_000, pollsStoppedAt: undefined }))
      yield* settle
      assert.isNotNull(waiting.unsafePoll())
    }))
})
