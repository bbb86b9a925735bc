/**
 * The permits a pool's pollers take: "up to n" at once, waiting while none is free, resized while
 * taken, and a freed permit goes to a poller already waiting for it before the one that freed it
 * can take it back (what keeps an idle poller from starving a busy one of a shared pool).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberStatus from "effect/FiberStatus"
import { makeLimiter } from "../../src/runtime/internal/limiter.js"

/**
 * Lets `fiber` run as far as it can, and tells whether that was to its end (false: it is suspended,
 * waiting). Fails the test if it neither ends nor waits.
 */
const ranToEnd = (fiber: Fiber.RuntimeFiber<unknown>) =>
  Effect.gen(function*() {
    for (let i = 0; i < 100; i++) {
      const status = yield* fiber.status
      if (FiberStatus.isDone(status)) return true
      if (FiberStatus.isSuspended(status)) return false
      yield* Effect.yieldNow()
    }
    return assert.fail("the fiber neither ended nor waited")
  })

describe("limiter", () => {
  it.effect("takes up to the free permits, at least one, and waits while none is free", () =>
    Effect.gen(function*() {
      const limiter = yield* makeLimiter(4)
      assert.strictEqual(yield* limiter.takeUpTo(3), 3)
      assert.strictEqual(yield* limiter.takeUpTo(3), 1)
      assert.strictEqual(yield* limiter.inUse, 4)
      const waiting = yield* Effect.fork(limiter.takeUpTo(2))
      assert.isFalse(yield* ranToEnd(waiting))
      yield* limiter.release(3)
      assert.strictEqual(yield* Fiber.join(waiting), 2)
      assert.strictEqual(yield* limiter.inUse, 3)
    }))

  it.effect("a freed permit goes to the poller waiting for it, not back to the one that freed it", () =>
    Effect.gen(function*() {
      const limiter = yield* makeLimiter(1)
      assert.strictEqual(yield* limiter.takeUpTo(1), 1)
      const waiter = yield* Effect.fork(limiter.takeUpTo(1))
      assert.isFalse(yield* ranToEnd(waiter))
      // the holder found nothing: it gives its permit back, lets others run, then asks again
      const holder = yield* Effect.fork(
        Effect.zipRight(Effect.zipRight(limiter.release(1), Effect.yieldNow()), limiter.takeUpTo(1))
      )
      assert.isFalse(yield* ranToEnd(holder))
      assert.deepStrictEqual(waiter.unsafePoll(), Exit.succeed(1))
      yield* limiter.release(1)
      assert.strictEqual(yield* Fiber.join(holder), 1)
    }))

  it.effect("a resize frees permits for the waiting at once, and a shrink holds new takes until enough are back", () =>
    Effect.gen(function*() {
      const limiter = yield* makeLimiter(2)
      assert.strictEqual(yield* limiter.takeUpTo(10), 2)
      const waiting = yield* Effect.fork(limiter.takeUpTo(10))
      assert.isFalse(yield* ranToEnd(waiting))
      yield* limiter.resize(5)
      assert.strictEqual(yield* Fiber.join(waiting), 3)
      // 5 in use; shrunk to 2, nothing is free until 4 of them are back
      yield* limiter.resize(2)
      const held = yield* Effect.fork(limiter.takeUpTo(10))
      yield* limiter.release(3)
      assert.isFalse(yield* ranToEnd(held))
      yield* limiter.release(1)
      assert.strictEqual(yield* Fiber.join(held), 1)
      assert.strictEqual(yield* limiter.limit, 2)
    }))

  it.effect("a take interrupted while it waits takes nothing", () =>
    Effect.gen(function*() {
      const limiter = yield* makeLimiter(1)
      yield* limiter.takeUpTo(1)
      const waiting = yield* Effect.fork(limiter.takeUpTo(1))
      assert.isFalse(yield* ranToEnd(waiting))
      yield* Fiber.interrupt(waiting)
      yield* limiter.release(1)
      assert.strictEqual(yield* limiter.inUse, 0)
      assert.strictEqual(yield* limiter.takeUpTo(1), 1)
      assert.strictEqual(yield* limiter.inUse, 1)
    }))
})
