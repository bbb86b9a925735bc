/**
 * The timing rule of the SQL transport's release of claims whose outcome is unknown (a claim whose
 * statement failed with its connection, which may have been committed all the same): released in
 * the background, tried again every 250 ms while the database is away, and a claim is let go once
 * a lease has passed since it was lost (said in one debug line when a try gets through); a refusal
 * gives up with a warning. On the TestClock, with a stub in place of the release statement.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as TestClock from "effect/TestClock"
import * as UnknownClaims from "../../src/transport/sql/internal/unknownClaims.js"
import { captureLogs } from "../support/local.js"
import { settle } from "../support/clock.js"

const TASKS = "durable_transport_tasks"

type Failure = "away" | "refused"

/**
 * The releaser over a stub release statement: it fails with `database.failure` while one is set,
 * and otherwise releases `database.held` rows. Each call is recorded (when, and the claims it got).
 */
const releaser = (lease: Duration.DurationInput) =>
  Effect.gen(function*() {
    const logs = captureLogs()
    const database: { failure: Failure | undefined; held: number } = { failure: "away", held: 0 }
    const calls: Array<{ readonly at: number; readonly claims: ReadonlyArray<string> }> = []
    /** The single rows of a claim each call got, by call. */
    const rowCalls: Array<ReadonlyArray<UnknownClaims.HeldRow>> = []
    const lost = yield* UnknownClaims.make<Failure>({
      lease: Duration.decode(lease),
      tasks: TASKS,
      release: (claims, rows) =>
        Effect.gen(function*() {
          calls.push({ at: yield* Clock.currentTimeMillis, claims: [...claims] })
          rowCalls.push([...rows])
          return database.failure === undefined ? database.held : yield* Effect.fail(database.failure)
        }),
      isRefusal: (error) => error === "refused"
    }).pipe(Effect.provide(Layer.merge(logs.layer, Logger.minimumLogLevel(LogLevel.Debug))))
    const about = () => logs.lines.filter((line) => line.includes("unknown outcome") || line.includes("lost with the connection"))
    return { database, calls, rowCalls, lost, about, logs }
  })

describe("SQL release of claims of unknown outcome (TestClock)", () => {
  it.scoped("tried at once, then again 250 ms after each failure (not sooner) while the database is away", () =>
    Effect.gen(function*() {
      const { calls, database, lost, about } = yield* releaser("30 seconds")
      yield* lost("w#1")
      yield* settle
      assert.deepStrictEqual(calls, [{ at: 0, claims: ["w#1"] }], "the first try runs at once")
      yield* TestClock.adjust("249 millis")
      yield* settle
      assert.strictEqual(calls.length, 1, "no retry before 250 ms")
      yield* TestClock.adjust("1 millis")
      yield* settle
      assert.deepStrictEqual(calls.map((c) => c.at), [0, 250], "the retry at 250 ms")
      yield* TestClock.adjust("249 millis")
      yield* settle
      assert.strictEqual(calls.length, 2)
      // the database answers again: the next try releases the claim, and says what it released
      database.failure = undefined
      database.held = 1
      yield* TestClock.adjust("1 millis")
      yield* settle
      assert.deepStrictEqual(calls, [0, 250, 500].map((at) => ({ at, claims: ["w#1"] })))
      assert.deepStrictEqual(about(), [
        `WARN a claim whose outcome was lost with the connection had been committed; its 1 task(s) in ${TASKS} ` +
        "were released for the next poll instead of waiting out the lease"
      ])
      yield* TestClock.adjust("1 minute")
      assert.strictEqual(calls.length, 3, "released: no more tries")
    }))

  it.scoped("a claim is let go at the first try a lease after it was lost, said once a try gets through", () =>
    Effect.gen(function*() {
      const { calls, lost, about } = yield* releaser("1 second")
      yield* lost("w#1")
      yield* settle
      yield* TestClock.adjust("600 millis")
      yield* lost("w#2") // lost at 600 ms, while the tries for w#1 go on
      yield* settle
      assert.deepStrictEqual(calls, [
        { at: 0, claims: ["w#1"] },
        { at: 250, claims: ["w#1"] },
        { at: 500, claims: ["w#1"] }
      ])
      yield* TestClock.adjust("399 millis") // 999 ms
      yield* settle
      assert.deepStrictEqual(calls.slice(3), [{ at: 750, claims: ["w#1", "w#2"] }], "w#1 still tried before its lease")
      yield* TestClock.adjust("1 millis") // 1000 ms: a lease since w#1 was lost
      yield* settle
      assert.deepStrictEqual(calls.slice(4), [{ at: 1000, claims: ["w#2"] }], "w#1 let go at 1 s; w#2 still tried")
      assert.deepStrictEqual(about(), [], "the database still away: nothing said yet")
      yield* TestClock.adjust("599 millis") // 1599 ms
      yield* settle
      assert.deepStrictEqual(calls.slice(5), [{ at: 1250, claims: ["w#2"] }, { at: 1500, claims: ["w#2"] }])
      // w#2 was lost at 600 ms: at the try at 1750 ms its lease (1 s) has passed; both let go, nothing to run
      yield* TestClock.adjust("150 millis") // 1749 ms
      yield* settle
      assert.deepStrictEqual(about(), [])
      yield* TestClock.adjust("1 millis") // 1750 ms
      yield* settle
      assert.strictEqual(calls.length, 7, "no statement once every claim was let go")
      assert.deepStrictEqual(about(), [
        `DEBUG let go 2 claim(s) of unknown outcome on ${TASKS} unreleased: the database did not answer ` +
        "within a lease, after which their tasks, if any, are claimable anyway"
      ])
      yield* TestClock.adjust("1 minute")
      assert.strictEqual(calls.length, 7, "nothing more to try")
    }))

  it.scoped("a row whose give-back failed is released by itself (its claim and step id), tried again every 250 ms", () =>
    Effect.gen(function*() {
      const { calls, database, lost, rowCalls } = yield* releaser("1 second")
      yield* lost("w#3", "r:1")
      yield* settle
      assert.deepStrictEqual(calls, [{ at: 0, claims: [] }])
      assert.deepStrictEqual(rowCalls, [[{ claim: "w#3", stepId: "r:1" }]], "the row alone, not its whole claim")
      yield* TestClock.adjust("249 millis")
      yield* settle
      assert.strictEqual(calls.length, 1, "no retry before 250 ms")
      yield* TestClock.adjust("1 millis")
      yield* settle
      assert.deepStrictEqual(rowCalls.length, 2, "the retry at 250 ms")
      // a claim lost meanwhile goes in the same statement
      yield* lost("w#4")
      database.failure = undefined
      yield* TestClock.adjust("250 millis")
      yield* settle
      assert.deepStrictEqual(calls.slice(2), [{ at: 500, claims: ["w#4"] }])
      assert.deepStrictEqual(rowCalls.slice(2), [[{ claim: "w#3", stepId: "r:1" }]])
      yield* TestClock.adjust("1 minute")
      assert.strictEqual(calls.length, 3, "released: no more tries")
    }))

  it.scoped("a refusal is not tried again: the claims waiting are given up with a warning, and later claims still released", () =>
    Effect.gen(function*() {
      const { calls, database, lost, about } = yield* releaser("30 seconds")
      yield* lost("w#1")
      yield* settle
      database.failure = "refused"
      yield* TestClock.adjust("250 millis")
      yield* settle
      assert.deepStrictEqual(calls.map((c) => c.at), [0, 250])
      assert.strictEqual(about().length, 1)
      assert.match(
        about()[0]!,
        new RegExp(`^WARN could not release the claims of unknown outcome on ${TASKS}; their tasks, if any, are claimable once the lease passes`)
      )
      yield* TestClock.adjust("1 minute")
      assert.strictEqual(calls.length, 2, "a refusal is not tried again")
      // the releaser goes on for the claims to come
      database.failure = undefined
      yield* lost("w#2")
      yield* settle
      assert.deepStrictEqual(calls.slice(2).map((c) => c.claims), [["w#2"]], "w#1 was given up, w#2 released")
    }))
})
