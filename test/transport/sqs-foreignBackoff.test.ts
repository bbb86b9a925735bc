/**
 * The timing rule of the SQS transport's pause after a receive that brought only foreign messages
 * (no marker): 200 ms after the first, doubling with each one in a row, at most 2 s; a receive that
 * brings work (or nothing) starts it over. On the TestClock.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as TestClock from "effect/TestClock"
import * as ForeignBackoff from "../../src/transport/sqs/internal/foreignBackoff.js"
import { exitNow, settle } from "../support/clock.js"

/** Asserts that `wait` ends after exactly `millis`, not a millisecond sooner. */
const waitsExactly = (wait: Effect.Effect<void>, millis: number) =>
  Effect.gen(function*() {
    const fiber = yield* Effect.fork(wait)
    yield* settle
    yield* TestClock.adjust(millis - 1)
    yield* settle
    assert.isNull(fiber.unsafePoll(), `still waiting at ${millis - 1} ms`)
    yield* TestClock.adjust(1)
    assert.isTrue(Exit.isSuccess(yield* exitNow(fiber, `done at ${millis} ms`)))
  })

describe("SQS pause after foreign-only receives (TestClock)", () => {
  it("starts at 200 ms and never exceeds 2 s", () => {
    assert.strictEqual(Duration.toMillis(ForeignBackoff.FOREIGN_BACKOFF_FIRST), 200)
    assert.strictEqual(Duration.toMillis(ForeignBackoff.FOREIGN_BACKOFF_AT_MOST), 2_000)
  })

  it.effect("waits 200 ms, then doubles with each foreign-only receive in a row, capped at 2 s", () =>
    Effect.gen(function*() {
      const backoff = yield* ForeignBackoff.make
      for (const millis of [200, 400, 800, 1_600, 2_000, 2_000, 2_000]) yield* waitsExactly(backoff.wait, millis)
    }))

  it.effect("a receive that brings work or nothing starts it over at 200 ms", () =>
    Effect.gen(function*() {
      const backoff = yield* ForeignBackoff.make
      for (const millis of [200, 400, 800]) yield* waitsExactly(backoff.wait, millis)
      yield* backoff.reset
      yield* waitsExactly(backoff.wait, 200)
      yield* waitsExactly(backoff.wait, 400)
    }))

  it.effect("each poller has its own: one's streak does not lengthen another's wait", () =>
    Effect.gen(function*() {
      const one = yield* ForeignBackoff.make
      const other = yield* ForeignBackoff.make
      for (const millis of [200, 400]) yield* waitsExactly(one.wait, millis)
      yield* waitsExactly(other.wait, 200)
    }))
})
