/**
 * The transports' shared write batcher (`internal/batcher`: SQL completions, SQS batch calls), on
 * its own, under a `TestClock` that is never moved: a lone item is written at
 * once, whatever queued up during a write goes in the next one (cut to the item and size bounds),
 * each caller gets its own outcome, a batch that fails as a whole is retried one item at a time, a
 * value written for a caller that stopped waiting is handed back, and several writers can be in
 * flight.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Scope from "effect/Scope"
import * as Batcher from "../../src/transport/internal/batcher.js"

/** Lets forked fibers run until they block. */
const settle = Effect.repeatN(Effect.yieldNow(), 50)

/**
 * A batch writer that records each batch, waits for `gate` when one is set, and answers `n * 10`
 * for each item `n`; negative items fail alone; a batch holding 13 fails as a whole.
 */
const recorder = Effect.gen(function*() {
  const batches: Array<ReadonlyArray<number>> = []
  let gate: Deferred.Deferred<void> | undefined
  const run: Batcher.RunBatch<number, number, string> = (items) =>
    Effect.gen(function*() {
      batches.push(items)
      if (gate !== undefined) yield* Deferred.await(gate)
      if (items.length > 1 && items.includes(13)) return yield* Effect.fail("the whole batch failed")
      return items.map((n) => (n < 0 ? Exit.fail(`item ${n} failed`) : n === 13 ? Exit.fail("13 alone") : Exit.succeed(n * 10)))
    })
  return {
    batches,
    run,
    hold: Effect.map(Deferred.make<void>(), (d) => {
      gate = d
      return d
    }),
    open: Effect.suspend(() => (gate === undefined ? Effect.void : Effect.asVoid(Deferred.succeed(gate, undefined))))
  }
})

/**
 * Holds the writer on item 1, queues `rest` behind that write, then lets the writes go: the batches
 * written, those written before the hold was lifted, the first caller's value and the others' exits.
 */
const behindAWrite = (maxItems: number, rest: ReadonlyArray<number>, call: Caller) =>
  Effect.gen(function*() {
    const r = yield* recorder
    const submit = yield* Batcher.make({ run: r.run, maxItems })
    yield* r.hold
    const first = yield* Effect.fork(call(submit(1)))
    yield* settle
    const others = yield* Effect.fork(Effect.all(rest.map((n) => Effect.exit(call(submit(n)))), { concurrency: "unbounded" }))
    yield* settle
    const queued = [...r.batches]
    yield* r.open
    return { batches: r.batches, queued, first: yield* Fiber.join(first), rest: yield* Fiber.join(others) }
  })

/** How a caller waits: interruptibly (the writer fiber writes), or not (a free writer's place is taken by the caller). */
type Caller = <A, E>(submitted: Effect.Effect<A, E>) => Effect.Effect<A, E>

describe.each([
  { callers: "interruptible callers", call: ((self) => self) as Caller },
  { callers: "uninterruptible callers, who write a lone item themselves", call: ((self) => Effect.uninterruptible(self)) as Caller }
])("write batcher (TestClock), $callers", ({ call }) => {
  it.scoped("a lone item is written at once, without any clock time passing", () =>
    Effect.gen(function*() {
      const r = yield* recorder
      const submit = yield* Batcher.make({ run: r.run, maxItems: 100 })
      assert.strictEqual(yield* call(submit(4)), 40)
      assert.strictEqual(yield* call(submit(5)), 50)
      assert.deepStrictEqual(r.batches, [[4], [5]])
    }))

  it.scoped("items that arrive while a write is in flight go together in the next write, at most maxItems", () =>
    Effect.gen(function*() {
      const { batches, first, queued, rest } = yield* behindAWrite(3, [2, 3, 4, 5], call)
      assert.deepStrictEqual(queued, [[1]])
      assert.strictEqual(first, 10)
      assert.deepStrictEqual(rest, [20, 30, 40, 50].map((n) => Exit.succeed(n)))
      assert.deepStrictEqual(batches, [[1], [2, 3, 4], [5]])
    }))

  it.scoped("a batch with one failing item: the others succeed, and that caller alone gets its error", () =>
    Effect.gen(function*() {
      const { batches, rest } = yield* behindAWrite(10, [2, -3, 4], call)
      assert.deepStrictEqual(rest, [Exit.succeed(20), Exit.fail("item -3 failed"), Exit.succeed(40)])
      assert.deepStrictEqual(batches, [[1], [2, -3, 4]])
    }))

  it.scoped("a batch that fails as a whole is written again one item at a time: each caller gets its own outcome", () =>
    Effect.gen(function*() {
      const { batches, rest } = yield* behindAWrite(10, [2, 13, 4], call)
      assert.deepStrictEqual(rest, [Exit.succeed(20), Exit.fail("13 alone"), Exit.succeed(40)])
      assert.deepStrictEqual(batches, [[1], [2, 13, 4], [2], [13], [4]])
    }))

  it.scoped("a lone failing item fails its caller alone, and the batcher writes on", () =>
    Effect.gen(function*() {
      const r = yield* recorder
      const submit = yield* Batcher.make({ run: r.run, maxItems: 10 })
      assert.deepStrictEqual(yield* Effect.exit(call(submit(-1))), Exit.fail("item -1 failed"))
      assert.strictEqual(yield* call(submit(2)), 20)
    }))
})

describe("write batcher (TestClock), a caller that stops waiting", () => {

  it.scoped("a value written for a caller that stopped waiting is handed to `unclaimed`", () =>
    Effect.gen(function*() {
      const r = yield* recorder
      const unclaimed: Array<number> = []
      const submit = yield* Batcher.make({
        run: r.run,
        maxItems: 10,
        unclaimed: (value: number) => Effect.sync(() => unclaimed.push(value))
      })
      yield* r.hold
      const first = yield* Effect.fork(submit(1))
      yield* settle
      const gone = yield* Effect.fork(submit(2))
      const kept = yield* Effect.fork(submit(3))
      yield* settle
      yield* Fiber.interrupt(gone)
      yield* r.open
      assert.strictEqual(yield* Fiber.join(first), 10)
      assert.strictEqual(yield* Fiber.join(kept), 30)
      assert.deepStrictEqual(unclaimed, [20])
      assert.isTrue(Exit.isInterrupted(yield* Fiber.await(gone)))
    }))
})

/**
 * Submits `first`, then `rest` while the first write waits on a gate, then opens it: the batches
 * written (items starting with "x" fail) and each later caller's outcome.
 */
const batchesOf = (
  bounds: { readonly maxItems: number; readonly maxSize?: number },
  first: string,
  rest: ReadonlyArray<string>
) =>
  Effect.gen(function*() {
    const batches: Array<ReadonlyArray<string>> = []
    const gate = yield* Deferred.make<void>()
    const submit = yield* Batcher.make<string, void, string>({
      ...bounds,
      size: (item) => item.length,
      run: (items) =>
        Effect.zipRight(
          Deferred.await(gate),
          Effect.sync(() => {
            batches.push(items)
            return items.map((item) => item.startsWith("x") ? Exit.fail(`bad ${item}`) : Exit.void)
          })
        )
    })
    const waiting = yield* Effect.fork(submit(first))
    yield* settle
    const later = yield* Effect.forEach(rest, (item) => Effect.fork(Effect.either(submit(item))))
    yield* settle
    yield* Deferred.succeed(gate, undefined)
    yield* Fiber.join(waiting)
    const outcomes = yield* Effect.forEach(later, Fiber.join)
    return { batches, outcomes: outcomes.map((o) => o._tag === "Left" ? o.left : "ok") }
  })

describe("write batcher bounds and parallelism", () => {
  it.scoped("writes ready together share a batch of at most maxItems, cut by size; each caller gets its own outcome", () =>
    Effect.gen(function*() {
      // while the first write waits, five more queue up: cut at 4 characters, at most 3 items
      const { batches, outcomes } = yield* batchesOf({ maxItems: 3, maxSize: 4 }, "a", ["bb", "xc", "d", "e", "f"])
      assert.deepStrictEqual(batches, [["a"], ["bb", "xc"], ["d", "e", "f"]])
      assert.deepStrictEqual(outcomes, ["ok", "bad xc", "ok", "ok", "ok"])
    }))

  it.scoped("an item larger than maxSize goes alone", () =>
    Effect.gen(function*() {
      const { batches } = yield* batchesOf({ maxItems: 10, maxSize: 4 }, "a", ["huge-item", "b", "c"])
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

describe("write batcher shutdown", () => {
  it.effect("callers of a batch still being written when the scope closes hear an interruption", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const submit = yield* Batcher.make<number, number, never>({ maxItems: 10, run: () => Effect.never }).pipe(
        Scope.extend(scope)
      )
      const waiting = yield* Effect.fork(submit(1))
      yield* settle
      yield* Scope.close(scope, Exit.void)
      assert.isTrue(Exit.isInterrupted(yield* Fiber.await(waiting)))
    }))
})
