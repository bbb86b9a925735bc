/**
 * The outage log of a BullMQ broker, on connections the test drives: which errors are a lost
 * connection, and when an outage starts and ends. (`runtime/brokerAway.test.ts` runs it against a
 * real Redis that goes away.)
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import { EventEmitter } from "node:events"
import * as Outage from "../../src/transport/bullmq/internal/outage.js"
import { captureLogs } from "../support/local.js"

/** A connection whose status the test sets; `up()` makes it ready and says so, as ioredis does. */
class FakeConnection extends EventEmitter {
  status = "ready"
  down() {
    this.status = "reconnecting"
  }
  up() {
    this.status = "ready"
    this.emit("ready")
  }
}

const socketError = (code: string, syscall: string) => Object.assign(new Error(`${syscall} ${code}`), { code, syscall })

/** An outage log writing into captured lines, at every level. */
const withOutage = Effect.gen(function*() {
  const logs = captureLogs()
  const runtime = yield* Effect.runtime<never>().pipe(
    Effect.provide(Layer.merge(logs.layer, Logger.minimumLogLevel(LogLevel.Debug)))
  )
  const outage = Outage.make("redis://127.0.0.1:6379", runtime)
  // the logs are written by forked fibers: let them run before reading
  const lines = Effect.as(Effect.sleep("10 millis"), logs.lines)
  /** Each line up to its reason (cut at " (" or ": "). */
  const heads = Effect.map(lines, (all) => all.map((line) => line.split(" (")[0]!.split(": ")[0]))
  return { outage, lines, heads }
})

describe("a BullMQ broker's outage log", () => {
  it("tells a lost connection from an error a command answered", () => {
    for (const lost of [
      socketError("ECONNREFUSED", "connect"),
      socketError("EPIPE", "write"),
      socketError("ECONNRESET", "read"),
      new Error("Connection is closed."),
      Object.assign(new Error("closed"), { name: "ConnectionClosedError" })
    ]) assert.isTrue(Outage.isConnectionFailure(lost), lost.message)
    for (const answered of [
      new Error("Missing lock for job 7. moveToFinished"),
      new Error("NOSCRIPT No matching script"),
      new Error("WRONGPASS invalid username-password pair"),
      "ECONNREFUSED",
      undefined
    ]) assert.isFalse(Outage.isConnectionFailure(answered), String(answered))
  })

  it.live("warns once per outage, debug lines within it, and says it is back once every connection is ready", () =>
    Effect.gen(function*() {
      const { heads, outage } = yield* withOutage
      const main = new FakeConnection()
      const blocking = new FakeConnection()
      outage.follow(main)
      outage.follow(blocking)

      main.down()
      blocking.down()
      for (let i = 0; i < 5; i++) outage.error("BullMQ error on q", socketError("ECONNREFUSED", "connect"))
      // the main connection is back first: the blocking one is not yet, so the outage goes on
      main.up()
      outage.error("BullMQ error on q", socketError("ECONNREFUSED", "connect"))
      blocking.up()
      // a second outage is warned of again
      main.down()
      outage.error("BullMQ error on q", new Error("Connection is closed."))
      main.up()

      assert.deepStrictEqual(yield* heads, [
        "WARN Redis at redis://127.0.0.1:6379 cannot be reached",
        ...Array.from({ length: 5 }, () => "DEBUG Redis at redis://127.0.0.1:6379 still cannot be reached"),
        "INFO Redis at redis://127.0.0.1:6379 is back",
        "WARN Redis at redis://127.0.0.1:6379 cannot be reached",
        "INFO Redis at redis://127.0.0.1:6379 is back"
      ])
    }))

  it.live("a lost connection while every connection still reads ready is a debug line, not an outage that would never end", () =>
    Effect.gen(function*() {
      const { heads, outage } = yield* withOutage
      const main = new FakeConnection()
      outage.follow(main)
      // the socket's error comes before the client changes its state, or after it is back
      outage.error("BullMQ error on q", socketError("EPIPE", "write"))
      main.down()
      outage.error("BullMQ error on q", socketError("ECONNREFUSED", "connect"))
      main.up()
      assert.deepStrictEqual(yield* heads, [
        "DEBUG Redis at redis://127.0.0.1:6379",
        "WARN Redis at redis://127.0.0.1:6379 cannot be reached",
        "INFO Redis at redis://127.0.0.1:6379 is back"
      ])
    }))

  it.live("an error that is not a lost connection is a warning under its label, outage or not", () =>
    Effect.gen(function*() {
      const { lines, outage } = yield* withOutage
      const main = new FakeConnection()
      outage.follow(main)
      outage.error("BullMQ error on q", new Error("Missing lock for job 7"))
      main.down()
      outage.error("BullMQ error on q", socketError("EPIPE", "write"))
      outage.error("BullMQ error on q", new Error("NOSCRIPT No matching script"))
      const written = yield* lines
      assert.deepStrictEqual(written.map((line) => line.split(" ")[0]), ["WARN", "WARN", "WARN"])
      assert.match(written[0]!, /^WARN BullMQ error on q/)
      assert.match(written[2]!, /^WARN BullMQ error on q/)
    }))
})
