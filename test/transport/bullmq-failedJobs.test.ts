/**
 * The failed-job bridge's reading rule, on the clock, and its claim among workers: the real Redis
 * read and claims are covered by the integration tests ("a step job failed at the infrastructure
 * level …", "… reported once among the workers"); here, which failures each scan bridges, and what
 * a bridge claims, keeps and gives up.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as TestClock from "effect/TestClock"
import {
  bridgeOnce,
  type Bridged,
  CLAIM_WHILE_PUBLISHING,
  SETTLE_CLAIM,
  type Claims,
  type Failed,
  FAILED_MARGIN,
  keptFor,
  LAST_SCAN,
  type Published,
  reachOf,
  stopBudget,
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
  // a scan's, the previous scan's and a lapsed claim's waits, and the margin
  const reach = 2 * 30_000 + Duration.toMillis(CLAIM_WHILE_PUBLISHING) + Duration.toMillis(FAILED_MARGIN)

  it.effect("scans every interval, the first one interval in, reaching back two intervals, a claim and the margin", () =>
    Effect.gen(function*() {
      const set = failedSet()
      yield* Effect.fork(watchFailed(interval, set.read, set.bridge))
      yield* TestClock.adjust("29999 millis")
      assert.deepStrictEqual(set.reads, [])
      yield* TestClock.adjust("1 millis")
      assert.deepStrictEqual(set.reads, [30_000 - reach])
      yield* TestClock.adjust("150 seconds")
      assert.deepStrictEqual(set.reads, [30_000, 60_000, 90_000, 120_000, 150_000, 180_000].map((now) => now - reach))
      yield* TestClock.adjust("30 seconds")
      assert.deepStrictEqual(set.reads.at(-1), 210_000 - reach)
    }))

  it.effect("a failure stamped before the worker began, before the previous scan, or by a clock behind or ahead, is bridged once", () =>
    Effect.gen(function*() {
      yield* TestClock.adjust("10 minutes")
      const began = 600_000
      const set = failedSet()
      // stamped by a worker that stopped before its next scan, two minutes before this one began:
      // nobody else reports it (one reported already holds a kept claim, and is not bridged again)
      set.fail("before-start", began - 120_000 + 30_000)
      // out of the first scan's window
      set.fail("long-before", began + 30_000 - reach)
      yield* Effect.fork(watchFailed(interval, set.read, set.bridge))
      yield* TestClock.adjust("30 seconds")
      assert.deepStrictEqual(set.reads, [began + 30_000 - reach])
      assert.deepStrictEqual(set.bridged, ["before-start"])
      set.fail("in-window", began + 10_000)
      // stamped just before the next scan, written to Redis just after it
      yield* TestClock.adjust("30 seconds")
      set.fail("late-write", began + 59_999)
      // a host whose clock is 40 s behind, and one 10 s ahead
      set.fail("behind", began + 90_000 - 40_000)
      set.fail("ahead", began + 90_000 + 10_000)
      yield* TestClock.adjust("30 seconds")
      assert.deepStrictEqual(set.bridged, ["before-start", "in-window", "late-write", "behind", "ahead"])
      // read again while in the window, bridged no more
      yield* TestClock.adjust("30 seconds")
      assert.deepStrictEqual(set.bridged, ["before-start", "in-window", "late-write", "behind", "ahead"])
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

  it.effect("a stop scans once more: a failure stamped since the previous scan is bridged by the stopping worker", () =>
    Effect.gen(function*() {
      const set = failedSet()
      const watching = yield* Effect.fork(watchFailed(interval, set.read, set.bridge))
      yield* TestClock.adjust("30 seconds")
      set.fail("reported", 20_000)
      yield* TestClock.adjust("30 seconds")
      // stamped by the worker's own stalled check just before it stops, 20 s before its next scan:
      // with every worker of the queue stopped for longer than the window, nobody else would report it
      set.fail("since", 70_000)
      yield* TestClock.adjust("10 seconds")
      yield* Fiber.interrupt(watching)
      assert.deepStrictEqual(set.reads, [30_000 - reach, 60_000 - reach, 70_000 - reach])
      assert.deepStrictEqual(set.bridged, ["reported", "since"])
    }))

  it.effect("the scan at a stop holds it for LAST_SCAN at most, and is not made when the failed set cannot be read", () =>
    Effect.gen(function*() {
      const set = failedSet()
      const hanging = yield* Effect.fork(watchFailed(interval, set.read, () => Effect.never))
      set.fail("hangs", 1_000)
      const stopping = yield* Effect.fork(Fiber.interrupt(hanging))
      yield* TestClock.adjust(Duration.toMillis(LAST_SCAN) - 1)
      assert.isTrue(Option.isNone(yield* Fiber.poll(stopping)))
      yield* TestClock.adjust(1)
      yield* Fiber.join(stopping)
      assert.deepStrictEqual(set.reads, [-reach])

      const away = failedSet()
      const watching = yield* Effect.fork(watchFailed(interval, away.read, away.bridge, Effect.succeed(Duration.zero)))
      away.fail("unread", 1_000)
      yield* TestClock.adjust("10 seconds")
      yield* Fiber.interrupt(watching)
      assert.deepStrictEqual(away.reads, [])
      assert.deepStrictEqual(away.bridged, [])
    }))

  it.effect("the scans at a stop of every queue share one LAST_SCAN: a Redis that answers none holds the stop once", () =>
    Effect.gen(function*() {
      const budget = yield* stopBudget
      const queues = [failedSet(), failedSet(), failedSet()]
      const watchers = yield* Effect.forEach(queues, (set) => Effect.fork(watchFailed(interval, set.read, () => Effect.never, budget)))
      for (const set of queues) set.fail("hangs", 1_000)
      // one after another, as the queues' scopes close
      const stopping = yield* Effect.fork(Effect.forEach(watchers, Fiber.interrupt, { discard: true }))
      yield* TestClock.adjust(Duration.toMillis(LAST_SCAN) - 1)
      assert.isTrue(Option.isNone(yield* Fiber.poll(stopping)))
      yield* TestClock.adjust(1)
      assert.isTrue(Option.isSome(yield* Fiber.poll(stopping)))
      // the first queue's scan took the whole bound; the others' had nothing left and were not made
      assert.deepStrictEqual(queues.map((set) => set.reads.length), [1, 0, 0])
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
    /**
     * Publishes after `delay` while `worker` holds the claim, or no one does (then it takes it again
     * for the publishing claim's time), as the transport does on the claim's own Redis, but leaving
     * the keep to the bridge, as a publish to another broker does.
     */
    const publish = (worker: string, delay: Duration.DurationInput = 0) => (failed: Failed) =>
      publishFails ? Effect.fail(new Error("Redis away")) : Effect.delay(
        Effect.map(Effect.clockWith((clock) => clock.currentTimeMillis), (now): Published => {
          const holder = live(failed, now)
          if (holder !== undefined && holder.by !== worker) return "held-back"
          if (holder === undefined) held.set(key(failed), { by: worker, until: now + Duration.toMillis(CLAIM_WHILE_PUBLISHING) })
          published.push(`${worker} ${failed.id}`)
          return "sent"
        }),
        delay
      )
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
        `A keep ${Duration.format(keptFor(interval, job, 0))}`,
        `B claim ${Duration.format(CLAIM_WHILE_PUBLISHING)}`,
        `B claim ${Duration.format(CLAIM_WHILE_PUBLISHING)}`
      ])
      // the same job failed again (a new stamp) is a failure of its own
      assert.strictEqual(yield* b({ ...job, failedAt: 90_000 }), "published")
    }))

  it.effect("a failure stamped by a clock ahead stays claimed until no window reads it, however far ahead", () =>
    Effect.gen(function*() {
      for (const ahead of [0, 150_000, 300_000, 3_600_000]) {
        const claims = redisClaims()
        const now = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
        const failed = { ...job, failedAt: now + ahead }
        assert.strictEqual(yield* bridgeOnce(interval, claims.as("A"), claims.publish("A"))(failed), "published")
        // B's scans, every interval, while the failure is in its window, with a clock behind by the margin
        const b = bridgeOnce(interval, claims.as("B"), claims.publish("B"))
        for (let at = 0;; at += Duration.toMillis(interval)) {
          const scanAt = now + at
          if (failed.failedAt <= scanAt - Duration.toMillis(FAILED_MARGIN) - reachOf(interval)) break
          yield* TestClock.setTime(scanAt)
          assert.strictEqual(yield* b(failed), "claimed-elsewhere", `${ahead / 1000} s ahead, at ${at / 1000} s`)
        }
        assert.deepStrictEqual(claims.published, ["A 7"])
      }
    }))

  it.effect("a worker scanning at a longer interval does not read the failure unclaimed (each worker has its own stalledInterval)", () =>
    Effect.gen(function*() {
      const claims = redisClaims()
      assert.strictEqual(yield* bridgeOnce(interval, claims.as("A"), claims.publish("A"))(job), "published")
      for (const longer of [Duration.minutes(5), Duration.hours(1)]) {
        const b = bridgeOnce(longer, claims.as("B"), claims.publish("B"))
        // B's scans, every interval of its own, while the failure is in B's window
        for (let at = 0; job.failedAt > at - reachOf(longer); at += Duration.toMillis(longer)) {
          yield* TestClock.setTime(at)
          assert.strictEqual(yield* b(job), "claimed-elsewhere", `${Duration.format(longer)}, at ${at / 1000} s`)
        }
      }
      assert.deepStrictEqual(claims.published, ["A 7"])
    }))

  it.effect("a worker stopping once it published still keeps the claim (bounded): the failure is not bridged again", () =>
    Effect.gen(function*() {
      const claims = redisClaims()
      const slow: Claims<never> = { ...claims.as("A"), keep: (failed, ttl) => Effect.zipRight(Effect.sleep("500 millis"), claims.as("A").keep(failed, ttl)) }
      const bridging = yield* Effect.fork(bridgeOnce(interval, slow, claims.publish("A"))(job))
      yield* TestClock.adjust("1 millis")
      const stopping = yield* Effect.fork(Fiber.interrupt(bridging))
      yield* TestClock.adjust("500 millis")
      yield* Fiber.join(stopping)
      assert.deepStrictEqual(claims.calls.slice(-1), [`A keep ${Duration.format(keptFor(interval, job, 0))}`])
      yield* TestClock.adjust(CLAIM_WHILE_PUBLISHING)
      assert.strictEqual(yield* claims.as("B").claim(job, CLAIM_WHILE_PUBLISHING), false, "still held after the publishing claim would have lapsed")
      // a keep that never answers (Redis away) holds the stop for SETTLE_CLAIM at most
      const stuck: Claims<never> = { ...claims.as("C"), keep: () => Effect.never }
      const other = { ...job, id: "8" }
      const held = yield* Effect.fork(bridgeOnce(interval, stuck, claims.publish("C"))(other))
      yield* Effect.yieldNow()
      const stop = yield* Effect.fork(Fiber.interrupt(held))
      yield* TestClock.adjust(Duration.subtract(SETTLE_CLAIM, Duration.millis(1)))
      assert.isNull(yield* Fiber.poll(stop).pipe(Effect.map((exit) => exit._tag === "Some" ? "stopped" : null)))
      yield* TestClock.adjust("1 millis")
      yield* Fiber.join(stop)
    }))

  it.effect("a publish held up past its claim is not sent when another worker took the claim, and keeps and gives up nothing", () =>
    Effect.gen(function*() {
      const claims = redisClaims()
      // A's report is on its way for longer than its claim (a lost connection, the command sent again once it is back)
      const late = yield* Effect.fork(bridgeOnce(interval, claims.as("A"), claims.publish("A", Duration.sum(CLAIM_WHILE_PUBLISHING, "1 second")))(job))
      yield* TestClock.adjust(CLAIM_WHILE_PUBLISHING)
      // the claim has lapsed: B's scan claims the failure and publishes it
      assert.strictEqual(yield* bridgeOnce(interval, claims.as("B"), claims.publish("B"))(job), "published")
      yield* TestClock.adjust("1 second")
      assert.strictEqual(yield* Fiber.join(late), "claimed-elsewhere")
      assert.deepStrictEqual(claims.published, ["B 7"], "reported once")
      assert.deepStrictEqual(claims.calls.filter((call) => call.startsWith("A")), [`A claim ${Duration.format(CLAIM_WHILE_PUBLISHING)}`])
      assert.strictEqual(yield* claims.as("C").claim(job, CLAIM_WHILE_PUBLISHING), false, "B's claim still kept")

      // lapsed with no one else claiming it (every worker cut off, longer than a scan's window): the
      // transport's publish writes it then (its script, against Redis, in bullmq-jobs.test.ts), and
      // the claim is kept as after any publish that went out, so no later scan sends it again
      const alone = redisClaims()
      const late2 = Duration.sum(reachOf(interval), "1 second")
      const held = yield* Effect.fork(bridgeOnce(interval, alone.as("A"), alone.publish("A", late2))(job))
      yield* TestClock.adjust(late2)
      assert.strictEqual(yield* Fiber.join(held), "published")
      assert.deepStrictEqual(alone.published, ["A 7"])
      const now = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
      assert.deepStrictEqual(alone.calls.slice(-1), [`A keep ${Duration.format(keptFor(interval, job, now))}`])
      assert.strictEqual(yield* bridgeOnce(interval, alone.as("B"), alone.publish("B"))(job), "claimed-elsewhere")
    }))

  it.effect("a publish that kept the claim itself (the same script call) is not followed by a keep", () =>
    Effect.gen(function*() {
      const claims = redisClaims()
      const keptByPublish = (failed: Failed) => Effect.map(claims.publish("A")(failed), (out): Published => out === "sent" ? "sent-and-kept" : out)
      assert.strictEqual(yield* bridgeOnce(interval, claims.as("A"), keptByPublish)(job), "published")
      assert.deepStrictEqual(claims.published, ["A 7"])
      assert.deepStrictEqual(claims.calls, [`A claim ${Duration.format(CLAIM_WHILE_PUBLISHING)}`])
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
      // the worst timing: the failure met by A's scan a whole interval after it failed (a long
      // interval: a stalled check every 5 minutes), or stamped by a clock behind by nearly the margin
      // (a short interval); A claims it and dies; B's scans come each just before the claim lapses
      for (const [interval, behind] of [[Duration.minutes(5), Duration.minutes(5)], [Duration.seconds(5), Duration.seconds(55)]] as const) {
        const claims = redisClaims()
        const start = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
        const failed = { ...job, failedAt: start }
        yield* TestClock.adjust(behind)
        assert.isTrue(yield* claims.as("A").claim(failed, CLAIM_WHILE_PUBLISHING))
        yield* TestClock.adjust(Duration.subtract(CLAIM_WHILE_PUBLISHING, Duration.millis(1)))
        const b = bridgeOnce(interval, claims.as("B"), claims.publish("B"))
        const outcomes: Array<Bridged | "out of the window"> = []
        for (let scan = 0; scan < 3 && !outcomes.includes("published"); scan++) {
          const now = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
          outcomes.push(failed.failedAt > now - reachOf(interval) ? yield* b(failed) : "out of the window")
          yield* TestClock.adjust(interval)
        }
        assert.deepStrictEqual(outcomes, ["claimed-elsewhere", "published"], Duration.format(interval))
        assert.deepStrictEqual(claims.published, ["B 7"])
      }
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
