import { assert, describe, it } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as TestClock from "effect/TestClock"
import { parseRetryAfter, reportRetry } from "../../src/transport/durableWorkflow/internal/client.js"
import { DW } from "./support.js"

const unavailable = (retryAfterMillis?: number) =>
  new DW.DurableWorkflowServerError({
    status: 503,
    body: {},
    message: "HTTP 503",
    ...(retryAfterMillis === undefined ? {} : { retryAfterMillis })
  })

/**
 * Runs a report that fails with `errors` (one per attempt, then succeeds) under `reportRetry(budget)`,
 * moving the test clock on a minute; the test-clock time of each attempt and how it ended.
 */
const attempts = (budget: Duration.DurationInput, errors: ReadonlyArray<DW.DurableWorkflowError>) =>
  Effect.gen(function*() {
    const times: Array<number> = []
    const send = Effect.flatMap(Clock.currentTimeMillis, (now) => {
      times.push(now)
      const error = errors[times.length - 1]
      return error === undefined ? Effect.succeed("sent") : Effect.fail(error)
    })
    const fiber = yield* Effect.fork(Effect.either(Effect.retry(send, reportRetry(Duration.decode(budget)))))
    yield* TestClock.adjust("1 minute")
    const result = yield* Fiber.join(fiber)
    return { times, result }
  })

describe("Durable Workflow report retry", () => {
  it.effect("rides out transient errors with a growing backoff (0.2 s doubling, jittered), then sends", () =>
    Effect.gen(function*() {
      const { result, times } = yield* attempts("30 seconds", [unavailable(), unavailable(), unavailable()])
      assert.isTrue(result._tag === "Right")
      assert.strictEqual(times.length, 4)
      const waits = times.slice(1).map((t, i) => t - times[i]!)
      for (const [i, wait] of waits.entries()) {
        const base = 200 * 2 ** i
        assert.isTrue(wait >= base * 0.75 && wait <= base * 1.25, `wait ${i}: ${wait} ms`)
      }
    }))

  it.effect("waits what Retry-After asks for, instead of the backoff", () =>
    Effect.gen(function*() {
      const { result, times } = yield* attempts("30 seconds", [unavailable(3_000), unavailable(7_000)])
      assert.isTrue(result._tag === "Right")
      assert.deepStrictEqual(times, [0, 3_000, 10_000])
    }))

  it.effect("a Retry-After longer than the budget is capped at what is left of it, then the retry stops", () =>
    Effect.gen(function*() {
      const { result, times } = yield* attempts("10 seconds", [unavailable(60_000), unavailable(60_000), unavailable(60_000)])
      assert.deepStrictEqual(times, [0, 10_000])
      assert.isTrue(result._tag === "Left")
    }))

  it.effect("gives up once the budget is spent: no wait goes past it", () =>
    Effect.gen(function*() {
      const always = Array.from({ length: 100 }, () => unavailable())
      // many runs, each jittered its own way: the last attempt must land on the budget's end exactly
      for (let run = 0; run < 50; run++) {
        const start = yield* Clock.currentTimeMillis
        const { result, times } = yield* attempts("30 seconds", always)
        assert.isTrue(result._tag === "Left")
        assert.isAbove(times.length, 6)
        assert.strictEqual(times[times.length - 1]! - start, 30_000, "the last attempt is at the budget's end")
      }
    }))

  it.effect("a refusal (lease lost, task gone, already completed) is not retried", () =>
    Effect.gen(function*() {
      for (const [status, reason] of [[409, "lease_owner_mismatch"], [404, "task_not_found"], [409, "run_cancelled"], [409, "lease_expired"]] as const) {
        const refused = new DW.DurableWorkflowServerError({ status, reason, body: {}, message: `HTTP ${status} ${reason}` })
        const { result, times } = yield* attempts("30 seconds", [refused])
        assert.strictEqual(times.length, 1, reason)
        assert.isTrue(result._tag === "Left")
      }
    }))

  it("reads Retry-After as delay-seconds or an HTTP date", () => {
    const now = Date.parse("Mon, 07 Dec 2026 12:00:00 GMT")
    assert.strictEqual(parseRetryAfter("5", now), 5_000)
    assert.strictEqual(parseRetryAfter(" 0 ", now), 0)
    assert.strictEqual(parseRetryAfter("Mon, 07 Dec 2026 12:00:12 GMT", now), 12_000)
    assert.strictEqual(parseRetryAfter("Mon, 07 Dec 2026 11:00:00 GMT", now), 0)
    assert.isUndefined(parseRetryAfter(undefined, now))
    assert.isUndefined(parseRetryAfter("soon", now))
    assert.isUndefined(parseRetryAfter("1.5", now))
  })
})
