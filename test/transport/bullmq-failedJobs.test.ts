/**
 * The failed-job bridge's reading rule, on the clock, and its claim among workers: the real Redis
 * read and claims are covered by the integration tests ("a step job failed at the infrastructure
 * level …", "… reported once among the workers"); here, which failures each scan bridges, and what
 * a bridge claims, keeps and gives up.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as TestClock from "effect/TestClock"
import {
  bridgeOnce,
  type Bridged,
  CLAIM_WHILE_PUBLISHING,
  type Claims,
  type Failed,
  FAILED_MARGIN,
  keptFor,
  reachOf,
  watchFailed
} from "../../src/transport/bullmq/internal/failedJobs.js"

/** A failed set the test writes to, read as ZRANGEBYSCORE (from, +inf] reads it. */
const failedSet = (outcome: (id: string, attempt: number) => Bridged = () => "published") => {
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
    // as the transport's bridge answers: "failed" when its publish failed, "claimed-elsewhere" when
    // another worker holds the failure (both to be tried again)
    bridge: ({ id }: Failed) =>
      Effect.sync(() => {
        const attempt = (attempts.get(id) ?? 0) + 1
        attempts.set(id, attempt)
        const answer = outcome(id, attempt)
        if (answer === "published") bridged.push(id)
        return answer
      }),
    reads,
    bridged
  }
}

describe("BullMQ failed-job bridge", () => {
  const interval = Duration.seconds(30)
  const reach = 2 * 30_000 + Duration.toMillis(FAILED_MARGIN)

  it.effect("scans every interval, the first one interval in, reaching back two intervals and the margin, not before the watch began", () =>
    Effect.gen(function*() {
      const set = failedSet()
      yield* Effect.fork(watchFailed(interval, set.read, set.bridge))
      yield* TestClock.adjust("29999 millis")
      assert.deepStrictEqual(set.reads, [])
      yield* TestClock.adjust("1 millis")
      assert.deepStrictEqual(set.reads, [0])
      yield* TestClock.adjust("120 seconds")
      assert.deepStrictEqual(set.reads, [0, 0, 0, 0, 150_000 - reach])
      yield* TestClock.adjust("30 seconds")
      assert.deepStrictEqual(set.reads.at(-1), 180_000 - reach)
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
      const set = failedSet((_, attempt) => attempt < 3 ? "failed" : "published")
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

describe("BullMQ failed-job bridge among workers", () => {
  const interval = Duration.seconds(30)
  const job: Failed = { id: "7", failedAt: 1_000 }

  /** Claims as Redis holds them (`SET NX PX`), on the test's clock; each call recorded. */
  const redisClaims = (publishFails = false) => {
    const held = new Map<string, { readonly by: string; readonly until: number }>()
    const calls: Array<string> = []
    const published: Array<string> = []
    const key = (failed: Failed) => `${failed.id}:${failed.failedAt}`
    const live = (failed: Failed, now: number) => {
      const claim = held.get(key(failed))
      return claim !== undefined && claim.until > now ? claim : undefined
    }
    const as = (worker: string): Claims<never> => ({
      claim: (failed, ttl) =>
        Effect.map(Effect.clockWith((clock) => clock.currentTimeMillis), (now) => {
          calls.push(`${worker} claim ${Duration.format(ttl)}`)
          if (live(failed, now) !== undefined) return false
          held.set(key(failed), { by: worker, until: now + Duration.toMillis(ttl) })
          return true
        }),
      keep: (failed, ttl) =>
        Effect.map(Effect.clockWith((clock) => clock.currentTimeMillis), (now) => {
          calls.push(`${worker} keep ${Duration.format(ttl)}`)
          if (live(failed, now)?.by === worker) held.set(key(failed), { by: worker, until: now + Duration.toMillis(ttl) })
        }),
      release: (failed) =>
        Effect.map(Effect.clockWith((clock) => clock.currentTimeMillis), (now) => {
          calls.push(`${worker} release`)
          if (live(failed, now)?.by === worker) held.delete(key(failed))
        })
    })
    const publish = (worker: string) => (failed: Failed) =>
      publishFails ? Effect.fail(new Error("Redis away")) : Effect.sync(() => void published.push(`${worker} ${failed.id}`))
    return { as, publish, calls, published }
  }

  it.effect("the first worker to claim a failure publishes it and keeps the claim past every window; the others do not publish it", () =>
    Effect.gen(function*() {
      const claims = redisClaims()
      const a = bridgeOnce(interval, claims.as("A"), claims.publish("A"))
      const b = bridgeOnce(interval, claims.as("B"), claims.publish("B"))
      assert.strictEqual(yield* a(job), "published")
      assert.strictEqual(yield* b(job), "claimed-elsewhere")
      // still held when the failure leaves the last window that reads it: two intervals and the margin on
      yield* TestClock.adjust(Duration.sum(Duration.times(interval, 2), FAILED_MARGIN))
      assert.strictEqual(yield* b(job), "claimed-elsewhere")
      assert.deepStrictEqual(claims.published, ["A 7"])
      assert.deepStrictEqual(claims.calls, [
        `A claim ${Duration.format(CLAIM_WHILE_PUBLISHING)}`,
        `A keep ${Duration.format(keptFor(interval))}`,
        `B claim ${Duration.format(CLAIM_WHILE_PUBLISHING)}`,
        `B claim ${Duration.format(CLAIM_WHILE_PUBLISHING)}`
      ])
      // the same job failed again (a new stamp) is a failure of its own
      assert.strictEqual(yield* b({ ...job, failedAt: 90_000 }), "published")
    }))

  it.effect("a publish that failed gives the claim up, for the next scan of any worker", () =>
    Effect.gen(function*() {
      const failing = redisClaims(true)
      const error = yield* Effect.flip(bridgeOnce(interval, failing.as("A"), failing.publish("A"))(job))
      assert.strictEqual((error as Error).message, "Redis away")
      assert.deepStrictEqual(failing.calls, [`A claim ${Duration.format(CLAIM_WHILE_PUBLISHING)}`, "A release"])
      assert.isTrue(yield* failing.as("B").claim(job, CLAIM_WHILE_PUBLISHING), "free again at once")
    }))

  it.effect("a worker that dies holding a claim leaves the failure to another worker, whose scans still read it", () =>
    Effect.gen(function*() {
      // a long interval (a stalled check every 5 minutes), and the worst timing: the failure stamped
      // just after a scan, claimed by A a whole interval later (A dies), B's scans each just before
      // the claim lapses
      const long = Duration.minutes(5)
      const claims = redisClaims()
      const failed = { ...job, failedAt: 0 }
      yield* TestClock.adjust(long)
      assert.isTrue(yield* claims.as("A").claim(failed, CLAIM_WHILE_PUBLISHING))
      yield* TestClock.adjust(Duration.subtract(CLAIM_WHILE_PUBLISHING, Duration.millis(1)))
      const b = bridgeOnce(long, claims.as("B"), claims.publish("B"))
      const outcomes: Array<Bridged | "out of the window"> = []
      for (let scan = 0; scan < 3 && !outcomes.includes("published"); scan++) {
        const now = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
        outcomes.push(failed.failedAt > now - reachOf(long) ? yield* b(failed) : "out of the window")
        yield* TestClock.adjust(long)
      }
      assert.deepStrictEqual(outcomes, ["claimed-elsewhere", "published"])
      assert.deepStrictEqual(claims.published, ["B 7"])
    }))

  it.effect("a failure claimed elsewhere is asked for again at the next scan (its claim may be given up)", () =>
    Effect.gen(function*() {
      const set = failedSet((_, attempt) => attempt === 1 ? "claimed-elsewhere" : "published")
      yield* Effect.fork(watchFailed(interval, set.read, set.bridge))
      set.fail("contended", 1_000)
      yield* TestClock.adjust("30 seconds")
      assert.deepStrictEqual(set.bridged, [])
      yield* TestClock.adjust("30 seconds")
      assert.deepStrictEqual(set.bridged, ["contended"])
      yield* TestClock.adjust("30 seconds")
      assert.deepStrictEqual(set.bridged, ["contended"])
    }))
})
