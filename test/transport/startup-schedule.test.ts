/**
 * The timing rule of a start that waits (a broker, a queue or a table not there yet): retried on a
 * backoff of 250 ms doubling, capped at 5 s, for as long as it takes; the wait logged once; any
 * other error fails at once. On the TestClock.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as TestClock from "effect/TestClock"
import { RegistrationWaits } from "../../src/seam/Transport.js"
import { waitFor } from "../../src/transport/internal/startup.js"
import { captureLogs } from "../support/local.js"


/** An attempt failing with `error(n)` on its n-th call until `succeedOn`, recording when each call ran. */
const attempts = (succeedOn: number, error: (n: number) => string) => {
  const at: Array<number> = []
  const attempt = Effect.gen(function*() {
    at.push(yield* Clock.currentTimeMillis)
    return at.length >= succeedOn ? "ready" : yield* Effect.fail(error(at.length))
  })
  return { at, attempt }
}

describe("waitFor: the backoff of a start that waits", () => {
  it.effect("retries after 250 ms, doubling, capped at 5 s, and logs the wait once", () =>
    Effect.gen(function*() {
      const log = captureLogs()
      const { at, attempt } = attempts(10, () => "missing")
      const fiber = yield* waitFor(attempt, (e) => (e === "missing" ? `queue "q" to be created` : undefined)).pipe(
        Effect.provide(log.layer),
        Effect.fork
      )
      for (let i = 0; i < 60; i++) yield* TestClock.adjust("1 second")
      assert.strictEqual(yield* Fiber.join(fiber), "ready")
      const gaps = at.slice(1).map((t, i) => t - at[i]!)
      assert.deepStrictEqual(gaps, [250, 500, 1000, 2000, 4000, 5000, 5000, 5000, 5000])
      const waits = log.lines.filter((l) => l.startsWith("WARN"))
      assert.strictEqual(waits.length, 1, log.lines.join("\n"))
      assert.match(waits[0]!, /waiting for queue "q" to be created; retrying with backoff up to every 5s/)
      assert.isTrue(log.lines.some((l) => /^INFO done waiting for queue "q" to be created/.test(l)))
    }))

  it.effect("never gives up while the error is one to wait out", () =>
    Effect.gen(function*() {
      const { at, attempt } = attempts(Number.POSITIVE_INFINITY, () => "missing")
      const fiber = yield* waitFor(attempt, () => "it").pipe(Effect.provide(captureLogs().layer), Effect.fork)
      yield* TestClock.adjust("10 minutes")
      assert.isNull(fiber.unsafePoll(), "still waiting after ten minutes")
      assert.isAbove(at.length, 110)
      yield* Fiber.interrupt(fiber)
    }))

  it.effect("fails at once with an error that is not waited out, even mid-wait", () =>
    Effect.gen(function*() {
      const { at, attempt } = attempts(10, (n) => (n < 3 ? "missing" : "refused"))
      const fiber = yield* waitFor(attempt, (e) => (e === "missing" ? "it" : undefined)).pipe(
        Effect.provide(captureLogs().layer),
        Effect.fork
      )
      yield* TestClock.adjust("10 seconds")
      const exit = yield* Fiber.await(fiber)
      assert.deepStrictEqual(exit, Exit.fail("refused"))
      assert.deepStrictEqual(at, [0, 250, 750])
    }))

  it.effect("tells the registration what each wait is for now and why, under a key of its own, and takes it back however it ends", () =>
    Effect.gen(function*() {
      const told: Array<string> = []
      // each wait's key, numbered as first seen
      const keys: Array<symbol> = []
      const key = (wait: symbol) => {
        if (!keys.includes(wait)) keys.push(wait)
        return keys.indexOf(wait)
      }
      const waits = {
        waiting: (wait: symbol, what: string, why: string | undefined) => Effect.sync(() => told.push(`${key(wait)} waiting ${what}: ${why}`)),
        done: (wait: symbol) => Effect.sync(() => told.push(`${key(wait)} done`))
      }
      const run = <A, E>(effect: Effect.Effect<A, E>) =>
        effect.pipe(Effect.provideService(RegistrationWaits, waits), Effect.provide(captureLogs().layer), Effect.fork)

      // ends in success: told at each failure what it waits for then and why, then done
      const reasons = ["refused", "missing", "refused"]
      const { attempt } = attempts(4, (n) => reasons[n - 1]!)
      const what = (e: string) => e === "missing" ? `queue "q" to be created` : "SQS to answer"
      const succeeded = yield* run(waitFor(attempt, what, { describe: (e) => e }))
      yield* TestClock.adjust("250 millis")
      assert.deepStrictEqual(told, ["0 waiting SQS to answer: refused", `0 waiting queue "q" to be created: missing`])
      yield* TestClock.adjust("2 seconds")
      assert.strictEqual(yield* Fiber.join(succeeded), "ready")
      assert.deepStrictEqual(told.slice(2), ["0 waiting SQS to answer: refused", "0 done"])

      // two waits at once for the same thing: each its own key, one done leaves the other
      told.length = 0
      const first = yield* run(waitFor(attempts(2, () => "refused").attempt, what))
      const second = yield* run(waitFor(attempts(3, () => "refused").attempt, what))
      yield* TestClock.adjust("250 millis")
      yield* Fiber.join(first)
      // the two retries at 250 ms run in either order
      assert.deepStrictEqual([...told].sort(), ["1 done", "1 waiting SQS to answer: undefined", "2 waiting SQS to answer: undefined", "2 waiting SQS to answer: undefined"])
      yield* TestClock.adjust("500 millis")
      yield* Fiber.join(second)
      assert.strictEqual(told.at(-1), "2 done")

      // ends in an error not waited out, or interrupted: done all the same
      told.length = 0
      const refused = attempts(10, (n) => (n < 2 ? "missing" : "refused"))
      const failed = yield* run(waitFor(refused.attempt, (e) => (e === "missing" ? "it" : undefined)))
      yield* TestClock.adjust("1 second")
      assert.deepStrictEqual(yield* Fiber.await(failed), Exit.fail("refused"))
      assert.deepStrictEqual(told, ["3 waiting it: undefined", "3 done"])
      told.length = 0
      const interrupted = yield* run(waitFor(attempts(Number.POSITIVE_INFINITY, () => "missing").attempt, () => "it"))
      yield* TestClock.adjust("1 second")
      yield* Fiber.interrupt(interrupted)
      assert.strictEqual(told.at(-1), "4 done")
      assert.isAbove(told.length, 1)

      // a first attempt that works tells nothing
      told.length = 0
      assert.strictEqual(yield* Fiber.join(yield* run(waitFor(attempts(1, () => "missing").attempt, () => "it"))), "ready")
      assert.deepStrictEqual(told, [])
    }))

  it.effect("logs nothing when the first attempt succeeds", () =>
    Effect.gen(function*() {
      const log = captureLogs()
      const { attempt } = attempts(1, () => "missing")
      assert.strictEqual(yield* waitFor(attempt, () => "it").pipe(Effect.provide(log.layer)), "ready")
      assert.deepStrictEqual(log.lines, [])
    }))
})
