/**
 * The transports' shared record of cancelled runs (`internal/cancellations`): every running task of a
 * cancelled run hears the cancel once, a task that stopped watching does not, a task arriving after
 * its run's cancel hears it at once, and the memory of cancels is bounded.
 */
import { assert, describe, it } from "@effect/vitest"
import { makeCancellations } from "../../src/transport/internal/cancellations.js"

/** A watcher callback that counts its calls. */
const counter = () => {
  const callback = () => {
    callback.calls++
  }
  callback.calls = 0
  return callback
}

describe("cancellations", () => {
  it("a lone task of a run hears its run's cancel once, and no other run's", () => {
    const cancellations = makeCancellations()
    const mine = counter()
    const other = counter()
    cancellations.watch("run-1")(mine)
    cancellations.watch("run-2")(other)
    cancellations.cancel("run-1")
    cancellations.cancel("run-1")
    assert.strictEqual(mine.calls, 1)
    assert.strictEqual(other.calls, 0)
  })

  it("every running task of a run hears the cancel; one that stopped watching does not", () => {
    const cancellations = makeCancellations()
    const [a, b, c] = [counter(), counter(), counter()]
    cancellations.watch("run")(a)
    const unwatchB = cancellations.watch("run")(b)
    cancellations.watch("run")(c)
    unwatchB()
    cancellations.cancel("run")
    assert.deepStrictEqual([a.calls, b.calls, c.calls], [1, 0, 1])
  })

  it("watching again after every task of a run stopped watching starts afresh", () => {
    const cancellations = makeCancellations()
    const [first, second, third] = [counter(), counter(), counter()]
    const unwatchFirst = cancellations.watch("run")(first)
    const unwatchSecond = cancellations.watch("run")(second)
    unwatchFirst()
    unwatchSecond()
    // a stale unwatch of a task that already left must not drop the next task's watch
    cancellations.watch("run")(third)
    unwatchFirst()
    cancellations.cancel("run")
    assert.deepStrictEqual([first.calls, second.calls, third.calls], [0, 0, 1])
  })

  it("a task of an already cancelled run hears it at once; a task naming no run never does", () => {
    const cancellations = makeCancellations()
    cancellations.cancel("run")
    const late = counter()
    const anonymous = counter()
    cancellations.watch("run")(late)
    cancellations.watch(undefined)(anonymous)
    assert.strictEqual(late.calls, 1)
    assert.strictEqual(anonymous.calls, 0)
  })

  it("remembers only the most recent cancels", () => {
    const cancellations = makeCancellations(2)
    for (const runId of ["a", "b", "c"]) cancellations.cancel(runId)
    const [a, c] = [counter(), counter()]
    cancellations.watch("a")(a)
    cancellations.watch("c")(c)
    assert.strictEqual(a.calls, 0)
    assert.strictEqual(c.calls, 1)
  })
})
