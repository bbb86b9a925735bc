/**
 * The timing rule of the SQS transport's answers: a result sent or a message deleted that reached no
 * SQS endpoint is tried again every 500 ms, for up to a third of the visibility timeout (at most
 * 10 s), then given up with the last attempt's error; what SQS itself refused is not tried again.
 * On the TestClock, with a stub in place of the SQS call.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as TestClock from "effect/TestClock"
import { TransportError } from "../../src/seam/TransportError.js"
import { answerRetryFor, untilAnswered } from "../../src/transport/sqs/internal/answerRetry.js"
import { exitNow, settle } from "../support/clock.js"

/** What the SDK throws when the endpoint is away: no `$fault`, so no answer from SQS. */
const connectionRefused = () => Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:4566"), { code: "ECONNREFUSED" })

/** What the SDK throws for an answer SQS gave (a service error carries `$fault`). */
const serviceError = () => Object.assign(new Error("Access to the resource is denied"), { name: "AccessDenied", $fault: "client" })

/**
 * A stub SQS call failing as `fail(n)` says on its n-th call (succeeding where it gives `undefined`),
 * recording when each call ran.
 */
const stubCall = (fail: (n: number) => TransportError | undefined) => {
  const at: Array<number> = []
  const errors: Array<TransportError> = []
  const call: Effect.Effect<void, TransportError> = Effect.gen(function*() {
    at.push(yield* Clock.currentTimeMillis)
    const error = fail(at.length)
    if (error === undefined) return
    errors.push(error)
    return yield* error
  })
  return { at, errors, call }
}

const unreachable = (n: number) =>
  new TransportError({ transport: "sqs", operation: "sending results", message: `attempt ${n}: no endpoint`, cause: connectionRefused() })

/** 0, 500, 1000, ... up to `lastMillis`. */
const every500 = (lastMillis: number) => Array.from({ length: lastMillis / 500 + 1 }, (_, i) => i * 500)

describe("SQS answer retry (TestClock)", () => {
  it("retries for a third of the visibility timeout, at most 10 s", () => {
    assert.strictEqual(Duration.toMillis(answerRetryFor(12)), 4_000)
    assert.strictEqual(Duration.toMillis(answerRetryFor(30)), 10_000)
    assert.strictEqual(Duration.toMillis(answerRetryFor(60)), 10_000)
    assert.strictEqual(Duration.toMillis(answerRetryFor(3_600)), 10_000)
  })

  it.effect("an answer that reached no endpoint is tried again after 500 ms, not sooner, and again every 500 ms", () =>
    Effect.gen(function*() {
      const { at, call } = stubCall((n) => (n < 4 ? unreachable(n) : undefined))
      const fiber = yield* Effect.fork(untilAnswered(60)(call))
      yield* settle
      assert.deepStrictEqual(at, [0], "the first attempt runs at once")
      yield* TestClock.adjust("499 millis")
      yield* settle
      assert.deepStrictEqual(at, [0], "no retry before 500 ms")
      yield* TestClock.adjust("1 millis")
      yield* settle
      assert.deepStrictEqual(at, [0, 500], "the retry at 500 ms")
      yield* TestClock.adjust("499 millis")
      yield* settle
      assert.deepStrictEqual(at, [0, 500])
      yield* TestClock.adjust("1 millis")
      yield* settle
      assert.deepStrictEqual(at, [0, 500, 1000])
      yield* TestClock.adjust("500 millis")
      assert.deepStrictEqual(yield* exitNow(fiber, "answered"), Exit.void, "answered on the fourth attempt")
      assert.deepStrictEqual(at, [0, 500, 1000, 1500])
    }))

  it.effect("with a visibility timeout of 60 s the last retry is at the 10 s cap, then it fails with that attempt's error", () =>
    Effect.gen(function*() {
      const { at, call, errors } = stubCall(unreachable)
      const fiber = yield* Effect.fork(untilAnswered(60)(call))
      yield* TestClock.adjust("9999 millis")
      yield* settle
      assert.isNull(fiber.unsafePoll(), "still retrying before 10 s")
      assert.deepStrictEqual(at, every500(9_500))
      yield* TestClock.adjust("1 millis")
      const exit = yield* exitNow(fiber, "given up at the cap")
      assert.deepStrictEqual(at, every500(10_000), "the last retry at 10 s")
      assert.deepStrictEqual(exit, Exit.fail(errors[errors.length - 1]!), "given up with the last attempt's error")
      assert.strictEqual(errors[errors.length - 1]!.message, "attempt 21: no endpoint")
      yield* TestClock.adjust("1 minute")
      assert.strictEqual(at.length, 21, "nothing more once given up")
    }))

  it.effect("with a visibility timeout of 12 s the last retry is at a third of it (4 s)", () =>
    Effect.gen(function*() {
      const { at, call, errors } = stubCall(unreachable)
      const fiber = yield* Effect.fork(untilAnswered(12)(call))
      yield* TestClock.adjust("3999 millis")
      yield* settle
      assert.isNull(fiber.unsafePoll(), "still retrying before 4 s")
      assert.deepStrictEqual(at, every500(3_500))
      yield* TestClock.adjust("1 millis")
      const exit = yield* exitNow(fiber, "given up at the cap")
      assert.deepStrictEqual(at, every500(4_000), "the last retry at 4 s")
      assert.deepStrictEqual(exit, Exit.fail(errors[errors.length - 1]!))
      assert.strictEqual(errors[errors.length - 1]!.message, "attempt 9: no endpoint")
    }))

  it.effect("what SQS itself refused is not tried again", () =>
    Effect.gen(function*() {
      const refused = new TransportError({
        transport: "sqs",
        operation: "sending results",
        message: "sending results failed: Access to the resource is denied",
        cause: serviceError()
      })
      const { at, call } = stubCall(() => refused)
      const fiber = yield* Effect.fork(untilAnswered(60)(call))
      yield* TestClock.adjust("1 minute")
      assert.deepStrictEqual(yield* exitNow(fiber, "done"), Exit.fail(refused))
      assert.deepStrictEqual(at, [0])
    }))

  it.effect("a failed entry of a batch (an error with no cause) is not tried again", () =>
    Effect.gen(function*() {
      const failedEntry = new TransportError({
        transport: "sqs",
        operation: "sending a result",
        message: "sending a result failed: InvalidMessageContents: "
      })
      const { at, call } = stubCall(() => failedEntry)
      const fiber = yield* Effect.fork(untilAnswered(60)(call))
      yield* TestClock.adjust("1 minute")
      assert.deepStrictEqual(yield* exitNow(fiber, "done"), Exit.fail(failedEntry))
      assert.deepStrictEqual(at, [0])
    }))

  it.effect("a refusal after a few unreachable attempts ends the retries at once", () =>
    Effect.gen(function*() {
      const refused = new TransportError({ transport: "sqs", operation: "deleting messages", message: "refused", cause: serviceError() })
      const { at, call } = stubCall((n) => (n < 3 ? unreachable(n) : refused))
      const fiber = yield* Effect.fork(untilAnswered(60)(call))
      yield* TestClock.adjust("1 minute")
      assert.deepStrictEqual(yield* exitNow(fiber, "done"), Exit.fail(refused))
      assert.deepStrictEqual(at, [0, 500, 1000])
    }))
})
