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
const failedSet = () => {
  const jobs: Array<Failed> = []
  const reads: Array<number> = []
  const bridged: Array<string> = []
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
    bridge: (id: string) => Effect.sync(() => void bridged.push(id)),
    reads,
    bridged
  }
}

describe("BullMQ failed-job bridge", () => {
  const interval = Duration.seconds(30)
  const reach = 30_000 + Duration.toMillis(FAILED_MARGIN)

  it.effect("scans every interval, the first one interval in, reaching back one interval and the margin", () =>
    Effect.gen(function*() {
      const set = failedSet()
      yield* Effect.fork(watchFailed(interval, set.read, set.bridge))
      yield* TestClock.adjust("29999 millis")
      assert.deepStrictEqual(set.reads, [])
      yield* TestClock.adjust("1 millis")
      assert.deepStrictEqual(set.reads, [30_000 - reach])
      yield* TestClock.adjust("30 seconds")
      assert.deepStrictEqual(set.reads, [30_000 - reach, 60_000 - reach])
    }))

  it.effect("a failure stamped before the previous scan, or by a clock behind or ahead, is bridged once", () =>
    Effect.gen(function*() {
      const set = failedSet()
      // failed a minute before the worker started (a restart's gap): still within the margin
      set.fail("before-start", -50_000)
      yield* Effect.fork(watchFailed(interval, set.read, set.bridge))
      yield* TestClock.adjust("30 seconds")
      assert.deepStrictEqual(set.bridged, ["before-start"])
      // stamped just before that scan, written to Redis just after it
      set.fail("late-write", 29_999)
      // a host whose clock is 40 s behind, and one 10 s ahead
      set.fail("behind", 60_000 - 40_000)
      set.fail("ahead", 60_000 + 10_000)
      yield* TestClock.adjust("30 seconds")
      assert.deepStrictEqual(set.bridged, ["before-start", "late-write", "behind", "ahead"])
      // read again while in the window, bridged no more
      yield* TestClock.adjust("30 seconds")
      assert.deepStrictEqual(set.bridged, ["before-start", "late-write", "behind", "ahead"])
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
