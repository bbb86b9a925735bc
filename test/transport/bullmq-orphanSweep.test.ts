/**
 * When the orphan sweep runs, on the clock: a second after each reconnect of the client, one sweep
 * at a time (the sweep itself, against Redis, is covered by the outage tests).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as TestClock from "effect/TestClock"
import { EventEmitter } from "node:events"
import { afterEachReconnect } from "../../src/transport/bullmq/internal/orphans.js"

describe("BullMQ orphan sweep", () => {
  it.scoped("runs a second after each reconnect; reconnects meanwhile make one more sweep, not one each", () =>
    Effect.gen(function*() {
      const client = new EventEmitter()
      let sweeps = 0
      yield* afterEachReconnect(client as never, Effect.sync(() => void sweeps++))
      yield* TestClock.adjust("10 seconds")
      assert.strictEqual(sweeps, 0, "no reconnect, no sweep")
      client.emit("ready")
      yield* TestClock.adjust("999 millis")
      assert.strictEqual(sweeps, 0, "not before a second")
      yield* TestClock.adjust("1 millis")
      assert.strictEqual(sweeps, 1)
      // three reconnects in a row (a flapping link): one sweep after them
      client.emit("ready")
      client.emit("ready")
      yield* TestClock.adjust("500 millis")
      client.emit("ready")
      yield* TestClock.adjust("500 millis")
      assert.strictEqual(sweeps, 2, "the first of them, a second after it")
      yield* TestClock.adjust("1 second")
      assert.strictEqual(sweeps, 3, "and one for those that came while it waited")
      yield* TestClock.adjust("1 minute")
      assert.strictEqual(sweeps, 3)
    }))

  it.scoped("stops listening when its scope closes", () =>
    Effect.gen(function*() {
      const client = new EventEmitter()
      yield* Effect.scoped(afterEachReconnect(client as never, Effect.void))
      assert.strictEqual(client.listenerCount("ready"), 0)
    }))
})
