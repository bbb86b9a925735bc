/**
 * The transports' shared write batcher: the bounds a batch is cut to (items and size, as SQS batch
 * calls need) and several batches in flight at once.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Batcher from "../../src/transport/internal/batcher.js"

/** Lets forked fibers run until they block. */
const settle = Effect.repeatN(Effect.yieldNow(), 50)

describe("write batcher bounds and parallelism", () => {
  it.scoped("writes ready together share a batch of at most maxItems, cut by size; each caller gets its own outcome", () =>
    Effect.gen(function*() {
      const batches: Array<ReadonlyArray<string>> = []
      const gate = yield* Deferred.make<void>()
      const submit = yield* Batcher.make<string, void, string>({
        maxItems: 3,
        size: (item) => item.length,
        maxSize: 4,
        run: (items) =>
          Effect.zipRight(
            Deferred.await(gate),
            Effect.sync(() => {
              batches.push(items)
              return items.map((item) => item.startsWith("x") ? Exit.fail(`bad ${item}`) : Exit.void)
            })
          )
      })
      const first = yield* Effect.fork(submit("a"))
      yield* settle
      // while the first write waits, five more queue up: cut at 4 characters, at most 3 items
      const rest = yield* Effect.forEach(["bb", "xc", "d", "e", "f"], (item) => Effect.fork(Effect.either(submit(item))))
      yield* settle
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(first)
      const outcomes = yield* Effect.forEach(rest, Fiber.join)
      assert.deepStrictEqual(batches, [["a"], ["bb", "xc"], ["d", "e", "f"]])
      assert.deepStrictEqual(outcomes.map((o) => o._tag === "Left" ? o.left : "ok"), ["ok", "bad xc", "ok", "ok", "ok"])
    }))

  it.scoped("an item larger than maxSize goes alone", () =>
    Effect.gen(function*() {
      const batches: Array<ReadonlyArray<string>> = []
      const gate = yield* Deferred.make<void>()
      const submit = yield* Batcher.make<string, void, never>({
        maxItems: 10,
        size: (item) => item.length,
        maxSize: 4,
        run: (items) => Effect.zipRight(Deferred.await(gate), Effect.sync(() => (batches.push(items), items.map(() => Exit.void))))
      })
      const first = yield* Effect.fork(submit("a"))
      yield* settle
      const rest = yield* Effect.forEach(["huge-item", "b", "c"], (item) => Effect.fork(submit(item)))
      yield* settle
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(first)
      yield* Effect.forEach(rest, Fiber.join)
      assert.deepStrictEqual(batches, [["a"], ["huge-item"], ["b", "c"]])
    }))

  it.scoped("with parallelism 2, a second batch is written while the first is in flight", () =>
    Effect.gen(function*() {
      const started: Array<ReadonlyArray<number>> = []
      const gate = yield* Deferred.make<void>()
      const submit = yield* Batcher.make<number, number, never>({
        maxItems: 2,
        parallelism: 2,
        run: (items) =>
          Effect.zipRight(
            Effect.sync(() => started.push(items)),
            Effect.as(Deferred.await(gate), items.map((n) => Exit.succeed(n * 10)))
          )
      })
      const all = yield* Effect.fork(Effect.all([1, 2, 3, 4, 5].map(submit), { concurrency: "unbounded" }))
      yield* settle
      // two writers, each holding a batch of at most 2, both waiting on the gate
      assert.strictEqual(started.length, 2)
      yield* Deferred.succeed(gate, undefined)
      assert.deepStrictEqual(yield* Fiber.join(all), [10, 20, 30, 40, 50])
      assert.deepStrictEqual(started.flat().sort(), [1, 2, 3, 4, 5])
    }))

  it.scoped("a failed write fails every item in it, each on its own retry", () =>
    Effect.gen(function*() {
      const submit = yield* Batcher.make<string, void, string>({ maxItems: 10, run: () => Effect.fail("down") })
      assert.strictEqual(yield* Effect.flip(submit("a")), "down")
    }))
})
