import { assert, describe, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as TestClock from "effect/TestClock"
import { advertisedInterval } from "../../src/transport/durableWorkflow/internal/heartbeat.js"
import { greet, setup, startWorker, until, waitScheduled } from "./support.js"
import type { DurableWorkflowServer } from "../support/durableWorkflowServer.js"

const beats = (server: DurableWorkflowServer) => server.requestsTo("heartbeat").length

/**
 * Asserts the next heartbeat comes exactly `interval` after the previous one: none a second
 * before, one at the interval.
 */
const nextBeatAfter = (server: DurableWorkflowServer, interval: Duration.DurationInput) =>
  Effect.gen(function*() {
    const before = beats(server)
    yield* waitScheduled(interval)
    yield* TestClock.adjust(Duration.subtract(Duration.decode(interval), Duration.seconds(1)))
    assert.strictEqual(beats(server), before, `no heartbeat a second before ${Duration.format(interval)}`)
    yield* TestClock.adjust("1 second")
    yield* until(server, () => beats(server) === before + 1)
  })

describe("Durable Workflow heartbeat cadence from heartbeat replies", () => {
  it("adopts a positive integer heartbeat_interval_seconds, capped at one hour; ignores anything else", () => {
    const seconds = (answer: unknown) => Option.map(advertisedInterval(answer), Duration.toSeconds)
    assert.deepStrictEqual(seconds({ heartbeat_interval_seconds: 7 }), Option.some(7))
    assert.deepStrictEqual(seconds({ heartbeat_interval_seconds: 1 }), Option.some(1))
    assert.deepStrictEqual(seconds({ heartbeat_interval_seconds: 86_400 }), Option.some(3600))
    for (const value of [0, -5, 2.5, "5", null, true, Number.NaN, Number.POSITIVE_INFINITY]) {
      assert.isTrue(Option.isNone(advertisedInterval({ heartbeat_interval_seconds: value })), String(value))
    }
    assert.isTrue(Option.isNone(advertisedInterval({ acknowledged: true })))
    assert.isTrue(Option.isNone(advertisedInterval([7])))
    assert.isTrue(Option.isNone(advertisedInterval(undefined)))
  })

  it.scoped("an interval announced in a heartbeat reply sets the wait before the next heartbeat, and can change again", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ maxPollHoldMs: 60_000 })
      yield* startWorker(server, { steps: [greet] })
      yield* until(server, () => server.heldPolls("activityTaskPoll") === 1)
      server.announceHeartbeatInterval(13)
      // the first heartbeat still follows the configured default (60 s): nothing was announced yet
      yield* nextBeatAfter(server, "60 seconds")
      assert.strictEqual((server.requestsTo("heartbeat")[0]!.responseBody as any)["heartbeat_interval_seconds"], 13)
      yield* nextBeatAfter(server, "13 seconds")
      server.announceHeartbeatInterval(29)
      yield* nextBeatAfter(server, "13 seconds") // this reply announces 29
      yield* nextBeatAfter(server, "29 seconds")
      // replies that stop announcing keep the last interval
      server.announceHeartbeatInterval(undefined)
      yield* nextBeatAfter(server, "29 seconds")
      yield* nextBeatAfter(server, "29 seconds")
      // the heartbeats carry a fresh status each time
      for (const request of server.requestsTo("heartbeat")) {
        assert.strictEqual((request.body as any)["task_slots"]["activity_available"], 10)
        assert.isNumber((request.body as any)["process_metrics"]["process_id"])
      }
      assert.strictEqual(beats(server), 6)
    }))

  it.scoped("the register ack's interval paces the first heartbeat, a reply's interval the following ones", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ heartbeatIntervalSeconds: 7, heartbeatReplyIntervalSeconds: 17 })
      yield* startWorker(server, { steps: [greet] })
      yield* until(server, () => server.requestsTo("activityTaskPoll").length > 0)
      yield* nextBeatAfter(server, "7 seconds")
      yield* nextBeatAfter(server, "17 seconds")
      yield* nextBeatAfter(server, "17 seconds")
    }))

  it.scoped("a server-announced interval wins over the worker's own heartbeatInterval after the first heartbeat", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ heartbeatReplyIntervalSeconds: 11 })
      yield* startWorker(server, { steps: [greet], heartbeatInterval: "45 seconds" })
      yield* until(server, () => server.requestsTo("activityTaskPoll").length > 0)
      yield* nextBeatAfter(server, "45 seconds")
      yield* nextBeatAfter(server, "11 seconds")
    }))

  it.scoped("replies whose interval is not a positive integer are ignored: the cadence stays", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      yield* startWorker(server, { steps: [greet] })
      yield* until(server, () => server.requestsTo("activityTaskPoll").length > 0)
      server.announceHeartbeatInterval(0)
      yield* nextBeatAfter(server, "60 seconds")
      server.announceHeartbeatInterval(2.5)
      yield* nextBeatAfter(server, "60 seconds")
      server.announceHeartbeatInterval("5")
      yield* nextBeatAfter(server, "60 seconds")
      server.announceHeartbeatInterval(-3)
      yield* nextBeatAfter(server, "60 seconds")
      yield* nextBeatAfter(server, "60 seconds")
    }))

  it.scoped("after the server set the cadence, a failed heartbeat does not stop the next ones", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ heartbeatReplyIntervalSeconds: 9 })
      yield* startWorker(server, { steps: [greet] })
      yield* until(server, () => server.requestsTo("activityTaskPoll").length > 0)
      yield* nextBeatAfter(server, "60 seconds")
      // (a 404 worker_not_registered is no failure any more: the worker registers again)
      server.failNext("heartbeat", 403, { reason: "forbidden", message: "The worker role is not allowed to call this route." })
      yield* nextBeatAfter(server, "9 seconds")
      assert.strictEqual(server.requestsTo("heartbeat")[1]!.status, 403)
      yield* nextBeatAfter(server, "9 seconds")
      assert.strictEqual(server.requestsTo("heartbeat")[2]!.status, 200)
    }))
})
