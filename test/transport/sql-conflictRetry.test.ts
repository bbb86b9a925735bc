/**
 * The timing rule of an SQL completion that finds an earlier result of its step still waiting for
 * the engine: tried again every 100 ms for up to a lease, then failed with a `TransportError` saying
 * so (the task stays claimed). On the TestClock, with a stub in place of the completion.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as TestClock from "effect/TestClock"
import { TransportError } from "../../src/seam/TransportError.js"
import { ResultConflict, untilNoConflict } from "../../src/transport/sql/internal/conflict.js"
import { exitNow, settle } from "../support/clock.js"

const STEP = "run-1:3"
const RESULTS = "durable_transport_results"

/**
 * A stub completion failing as `fail(n)` says on its n-th call (written where it gives `undefined`),
 * recording when each call ran.
 */
const stubCompletion = (fail: (n: number) => TransportError | ResultConflict | undefined) => {
  const at: Array<number> = []
  const attempt = Effect.gen(function*() {
    at.push(yield* Clock.currentTimeMillis)
    const error = fail(at.length)
    return error === undefined ? "written" : yield* error
  })
  return { at, attempt }
}

const conflict = () => new ResultConflict({ stepId: STEP })

/** Every 100 ms from `from` to `to`, both included. */
const every100 = (from: number, to: number) => Array.from({ length: (to - from) / 100 + 1 }, (_, i) => from + i * 100)

const stillWaiting = new TransportError({
  transport: "sql",
  operation: "complete",
  message: `an earlier result of step ${STEP} is still waiting in ${RESULTS} for the engine ` +
    "to read it; the task stays claimed and its result is written once that row is gone"
})

describe("SQL conflict retry (TestClock)", () => {
  it.effect("a completion that finds an earlier result waiting is tried again every 100 ms, not sooner", () =>
    Effect.gen(function*() {
      const { at, attempt } = stubCompletion((n) => (n < 5 ? conflict() : undefined))
      const fiber = yield* Effect.fork(untilNoConflict({ lease: Duration.seconds(30), results: RESULTS })(STEP, attempt))
      yield* settle
      // the conflict is seen; the first retry waits a spacing too (at once, the earlier result is still there)
      assert.deepStrictEqual(at, [0])
      yield* TestClock.adjust("99 millis")
      yield* settle
      assert.deepStrictEqual(at, [0], "no retry before 100 ms")
      yield* TestClock.adjust("1 millis")
      yield* settle
      assert.deepStrictEqual(at, [0, 100], "the retry at 100 ms")
      yield* TestClock.adjust("99 millis")
      yield* settle
      assert.deepStrictEqual(at, [0, 100])
      yield* TestClock.adjust("1 millis")
      yield* settle
      assert.deepStrictEqual(at, [0, 100, 200])
      yield* TestClock.adjust("200 millis")
      assert.deepStrictEqual(yield* exitNow(fiber, "written"), Exit.succeed("written"), "written once the earlier result is gone")
      assert.deepStrictEqual(at, [0, 100, 200, 300, 400])
    }))

  it.effect("the retries stop at one lease (upTo(lease)), with an error saying the earlier result still waits", () =>
    Effect.gen(function*() {
      const { at, attempt } = stubCompletion(conflict)
      const fiber = yield* Effect.fork(untilNoConflict({ lease: Duration.seconds(2), results: RESULTS })(STEP, attempt))
      yield* TestClock.adjust("1999 millis")
      yield* settle
      assert.isNull(fiber.unsafePoll(), "still retrying within the lease")
      assert.deepStrictEqual(at, every100(0, 1_900))
      yield* TestClock.adjust("1 millis")
      const exit = yield* exitNow(fiber, "given up at the cap")
      assert.deepStrictEqual(at, every100(0, 2_000), "the last retry at the lease (2 s)")
      assert.deepStrictEqual(exit, Exit.fail(stillWaiting))
      yield* TestClock.adjust("1 minute")
      assert.strictEqual(at.length, 21, "nothing more once given up")
    }))

  it.effect("the cap follows the lease: 5 s", () =>
    Effect.gen(function*() {
      const { at, attempt } = stubCompletion(conflict)
      const fiber = yield* Effect.fork(untilNoConflict({ lease: Duration.seconds(5), results: RESULTS })(STEP, attempt))
      yield* TestClock.adjust("4999 millis")
      yield* settle
      assert.isNull(fiber.unsafePoll(), "still retrying within the lease")
      yield* TestClock.adjust("1 millis")
      assert.deepStrictEqual(yield* exitNow(fiber, "given up at the lease"), Exit.fail(stillWaiting))
      assert.deepStrictEqual(at, every100(0, 5_000))
    }))

  it.effect("another error ends the retries at once and passes through untouched", () =>
    Effect.gen(function*() {
      const lost = new TransportError({ transport: "sql", operation: "writing a batch of results", message: "connection lost" })
      const { at, attempt } = stubCompletion((n) => (n < 4 ? conflict() : lost))
      const fiber = yield* Effect.fork(untilNoConflict({ lease: Duration.seconds(30), results: RESULTS })(STEP, attempt))
      yield* TestClock.adjust("1 minute")
      assert.deepStrictEqual(yield* exitNow(fiber, "done"), Exit.fail(lost))
      assert.deepStrictEqual(at, [0, 100, 200, 300])
    }))

  it.effect("a completion without a conflict is not retried", () =>
    Effect.gen(function*() {
      const lost = new TransportError({ transport: "sql", operation: "writing a batch of results", message: "connection lost" })
      const { at, attempt } = stubCompletion(() => lost)
      const fiber = yield* Effect.fork(untilNoConflict({ lease: Duration.seconds(30), results: RESULTS })(STEP, attempt))
      yield* TestClock.adjust("1 minute")
      assert.deepStrictEqual(yield* exitNow(fiber, "done"), Exit.fail(lost))
      assert.deepStrictEqual(at, [0])
    }))
})
