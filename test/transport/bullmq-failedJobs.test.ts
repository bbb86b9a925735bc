/**
 * The failed-job bridge's reading rule, on the clock: the real Redis read is covered by the
 * integration test ("a step job failed at the infrastructure level …"); here, which failures each
 * scan bridges.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as TestClock from "effect/TestClock"
import { type Failed, FAILED_MARGIN, watchFailed } from "../../src/transport/bullmq/internal/failedJobs.js"

/** A failed set the test writes to, read as ZRANGEBYSCORE (from, +inf] reads it. */
const failedSet = (bridgeFails: (id: string, attempt: number) => boolean = () => false) => {
  const jobs: Array<Failed> = []
  const reads: Array<number> = []
  const bridged: Array<string> = []
  const attempts = new Map<string, number>()
  return {
    fail: (id: string, failedAt: number) => {
      const at = jobs.findIndex((job) => job.id === id)
      if (at >= 0) jobs.splice(at, 1)
      jobs.push({ id, failedAt })
    },
    read: (from: number) =>
      Effect.sync(() => {
        reads.push(from)
        return jobs.filter((job) => job.failedAt > from)
      }),
    // as the transport's bridge answers: false when its publish failed (to be tried again)
    bridge: (id: string) =>
      Effect.sync(() => {
        const attempt = (attempts.get(id) ?? 0) + 1
        attempts.set(id, attempt)
        if (bridgeFails(id, attempt)) return false
        bridged.push(id)
        return true
      }),
    reads,
    bridged
  }
}

describe("BullMQ failed-job bridge", () => {
  const interval = Duration.seconds(30)
  const reach = 30_000 + Duration.toMillis(FAILED_MARGIN)

  it.effect("scans every interval, the first one interval in, reaching back one interval and the margin, not before the watch began", () =>
    Effect.gen(function*() {
      const set = failedSet()
      yield* Effect.fork(watchFailed(interval, set.read, set.bridge))
      yield* TestClock.adjust("29999 millis")
      assert.deepStrictEqual(set.reads, [])
      yield* TestClock.adjust("1 millis")
      assert.deepStrictEqual(set.reads, [0])
      yield* TestClock.adjust("90 seconds")
      assert.deepStrictEqual(set.reads, [0, 0, 0, 120_000 - reach])
      yield* TestClock.adjust("30 seconds")
      assert.deepStrictEqual(set.reads.at(-1), 150_000 - reach)
    }))

  it.effect("a failure stamped before the previous scan, or by a clock behind or ahead, is bridged once", () =>
    Effect.gen(function*() {
      yield* TestClock.adjust("10 minutes")
      const began = 600_000
      const set = failedSet()
      // failed before the worker began: the workers running then report it (again, it could fail
      // the step's next attempt)
      set.fail("before-start", began - 5_000)
      yield* Effect.fork(watchFailed(interval, set.read, set.bridge))
      yield* TestClock.adjust("30 seconds")
      assert.deepStrictEqual(set.reads, [began], "not before the watch began")
      assert.deepStrictEqual(set.bridged, [])
      set.fail("in-window", began + 10_000)
      // stamped just before the next scan, written to Redis just after it
      yield* TestClock.adjust("30 seconds")
      set.fail("late-write", began + 59_999)
      // a host whose clock is 40 s behind, and one 10 s ahead
      set.fail("behind", began + 90_000 - 40_000)
      set.fail("ahead", began + 90_000 + 10_000)
      yield* TestClock.adjust("30 seconds")
      assert.deepStrictEqual(set.bridged, ["in-window", "late-write", "behind", "ahead"])
      // read again while in the window, bridged no more
      yield* TestClock.adjust("30 seconds")
      assert.deepStrictEqual(set.bridged, ["in-window", "late-write", "behind", "ahead"])
    }))

  it.effect("a failure whose bridge failed (its publish, Redis away) is tried again at the next scan", () =>
    Effect.gen(function*() {
      const set = failedSet((_, attempt) => attempt < 3)
      yield* Effect.fork(watchFailed(interval, set.read, set.bridge))
      set.fail("blip", 1_000)
      yield* TestClock.adjust("30 seconds")
      assert.deepStrictEqual(set.bridged, [], "its first publish failed")
      yield* TestClock.adjust("30 seconds")
      assert.deepStrictEqual(set.bridged, [], "and its second")
      yield* TestClock.adjust("30 seconds")
      assert.deepStrictEqual(set.bridged, ["blip"], "the third went through")
      yield* TestClock.adjust("30 seconds")
      assert.deepStrictEqual(set.bridged, ["blip"], "once")
    }))

  it.effect("a job failed again (its stamp moved) is bridged again; one out of the window is not read", () =>
    Effect.gen(function*() {
      const set = failedSet()
      set.fail("retried", 10_000)
      yield* Effect.fork(watchFailed(interval, set.read, set.bridge))
      yield* TestClock.adjust("30 seconds")
      set.fail("retried", 45_000)
      yield* TestClock.adjust("30 seconds")
      assert.deepStrictEqual(set.bridged, ["retried", "retried"])
      // stamped further behind than the margin reaches: out of every window from now on
      set.fail("too-old", 90_000 - reach - 1)
      yield* TestClock.adjust("30 seconds")
      assert.deepStrictEqual(set.bridged, ["retried", "retried"])
    }))
})
