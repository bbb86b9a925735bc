/**
 * A broker away for long, as the log tells it: the worker's heartbeat and each task's lease renewal
 * warn at the first failure of a run, write debug lines while it lasts, and one info line once they
 * work again, rather than a warning every interval. On a transport the test drives, under the
 * TestClock.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberId from "effect/FiberId"
import * as HashMap from "effect/HashMap"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as TestClock from "effect/TestClock"
import { Step, Transport, Worker } from "../../src/index.js"
import * as Memory from "../../src/services/Memory.js"
import { stepTask } from "../support/local.js"
import { scriptedTransport } from "../support/scriptedTransport.js"

const memory = Memory.layerTest({ usage: 1, limit: 1024 })

/** Stops `worker`, its running task given up at its 1 s shutdown timeout, under the TestClock. */
const stopOnClock = (worker: Worker.Worker<never>) =>
  Effect.gen(function*() {
    const stopping = yield* Effect.fork(Effect.ignore(worker.stop))
    yield* TestClock.adjust("10 seconds")
    yield* Fiber.join(stopping)
  })

/**
 * A transport whose heartbeat (every 10 s) and lease renewals (every second) fail while `away` is
 * set, with every log line at every level.
 */
const flaky = Effect.gen(function*() {
  const queue = yield* Queue.unbounded<{ readonly id: string; readonly payload: unknown }>()
  let away = false
  let silent = false
  let beats = 0
  let speaks = Deferred.unsafeMake<void>(FiberId.none)
  // the renewals: how many were sent, whether the lock is gone for good, whether they are held
  let renewals = 0
  let lost = false
  let renewalsHeld = false
  let renewalsAnswer = Deferred.unsafeMake<void>(FiberId.none)
  // the answers: held while the broker is slow to take them
  let answersHeld = false
  let answersTaken = Deferred.unsafeMake<void>(FiberId.none)
  const lines: Array<string> = []
  const logger = Logger.make(({ annotations, logLevel, message }) => {
    const task = Option.match(HashMap.get(annotations, "delivery"), { onNone: () => "", onSome: (id) => `[${String(id)}] ` })
    lines.push(`${logLevel.label} ${task}${Array.isArray(message) ? message.join(" ") : String(message)}`)
  })
  const unreachable = (operation: string) =>
    Effect.suspend(() =>
      away ? Effect.fail(new Transport.TransportError({ transport: "flaky", operation, message: "connection refused" })) : Effect.void
    )
  const layer = scriptedTransport("flaky", {
    heartbeat: Option.some({
      interval: Duration.seconds(10),
      // silent: a broker that accepts the call and answers it only once it speaks again
      beat: () =>
        Effect.zipRight(
          Effect.suspend(() => (beats++, silent ? Deferred.await(speaks) : Effect.void)),
          Effect.as(unreachable("heartbeat"), Option.none())
        )
    }),
    poll: (protocol) => () =>
      Effect.map(Effect.interruptible(Queue.take(queue)), ({ id, payload }) => [
        Transport.Delivery.make({
          id,
          payload,
          protocol,
          keepAlive: Option.some({
            interval: Duration.seconds(1),
            renew: Effect.suspend(() => {
              renewals++
              const lock = lost
                ? Effect.fail(
                  new Transport.TransportError({ transport: "flaky", operation: "renew lease", message: "the lock was lost", fatal: true })
                )
                : unreachable("renew lease")
              return renewalsHeld ? Effect.zipRight(Deferred.await(renewalsAnswer), lock) : lock
            })
          }),
          complete: () => Effect.suspend(() => answersHeld ? Deferred.await(answersTaken) : Effect.void),
          abandon: Effect.void
        })
      ])
  })
  const setAway = (value: boolean) =>
    Effect.sync(() => {
      away = value
    })
  const setSilent = (value: boolean) =>
    Effect.sync(() => {
      silent = value
      if (value) speaks = Deferred.unsafeMake<void>(FiberId.none)
      else Deferred.unsafeDone(speaks, Exit.void)
    })
  const setLost = (value: boolean) =>
    Effect.sync(() => {
      lost = value
    })
  /** Holds the renewals sent from now on (a client waiting for its broker), or answers those held. */
  const holdRenewals = (value: boolean) =>
    Effect.sync(() => {
      renewalsHeld = value
      if (value) renewalsAnswer = Deferred.unsafeMake<void>(FiberId.none)
      else Deferred.unsafeDone(renewalsAnswer, Exit.void)
    })
  /** Holds the answers sent from now on, or takes those held. */
  const holdAnswers = (value: boolean) =>
    Effect.sync(() => {
      answersHeld = value
      if (value) answersTaken = Deferred.unsafeMake<void>(FiberId.none)
      else Deferred.unsafeDone(answersTaken, Exit.void)
    })
  const all = Layer.mergeAll(layer, memory, Logger.replace(Logger.defaultLogger, logger), Logger.minimumLogLevel(LogLevel.Debug))
  /** Runs `worker` on this transport (a daemon fiber), once it is registered. */
  const serve = (worker: Worker.Worker<never>) =>
    Effect.zipRight(Effect.forkDaemon(Effect.provide(worker.run, all)), worker.registered)
  /** A worker serving one task, `t1`, of a step whose handler is `handler`; its lease renewed every second. */
  const serveTask = (handler: () => Effect.Effect<unknown>) =>
    Effect.gen(function*() {
      const worker = yield* Worker.make({ steps: [Step.make("task", handler)], shutdownTimeout: "1 second" })
      yield* serve(worker)
      yield* Queue.offer(queue, { id: "t1", payload: stepTask("r1", "task", {}) })
      return worker
    })
  return { queue, lines, setAway, setSilent, setLost, holdRenewals, holdAnswers, serve, serveTask, beatsSent: () => beats, renewalsSent: () => renewals }
})

/** The lines that match, each cut at its first colon (the reason and the counts follow it). */
const about = (lines: ReadonlyArray<string>, what: string) => lines.filter((line) => line.includes(what)).map((line) => line.split(":")[0])

describe("a broker away for long", () => {
  it.effect("the heartbeat: one warning when it starts failing, debug lines, one info line when it works again", () =>
    Effect.gen(function*() {
      const { lines, serve, setAway } = yield* flaky
      const worker = yield* Worker.make({ steps: [Step.make("s", () => Effect.void)] })
      yield* serve(worker)
      yield* TestClock.adjust("10 seconds")
      yield* setAway(true)
      // away for 30 beats
      for (let i = 0; i < 30; i++) yield* TestClock.adjust("10 seconds")
      yield* setAway(false)
      yield* TestClock.adjust("10 seconds")
      yield* TestClock.adjust("10 seconds")
      // away again: warned of again
      yield* setAway(true)
      yield* TestClock.adjust("10 seconds")
      assert.deepStrictEqual(about(lines, "worker heartbeat"), [
        "WARN worker heartbeat failed",
        ...Array.from({ length: 29 }, (_, i) => `DEBUG worker heartbeat failed (${i + 2} beats in a row)`),
        "INFO worker heartbeat works again, after 30 failed beat(s)",
        "WARN worker heartbeat failed"
      ])
      yield* worker.stop
    }))

  it.effect("a heartbeat that gets no answer within its interval has failed (a broker that accepts and does not answer)", () =>
    Effect.gen(function*() {
      const { beatsSent, lines, serve, setSilent } = yield* flaky
      const worker = yield* Worker.make({ steps: [Step.make("s", () => Effect.void)] })
      yield* serve(worker)
      yield* TestClock.adjust("10 seconds")
      yield* setSilent(true)
      yield* TestClock.adjust("10 seconds")
      yield* TestClock.adjust("9 seconds")
      assert.deepStrictEqual(about(lines, "worker heartbeat"), [], "an answer may still come within the interval")
      yield* TestClock.adjust("1 second")
      assert.deepStrictEqual(lines.filter((line) => line.includes("worker heartbeat")), [
        "WARN worker heartbeat failed: no answer within 10s (until a beat works again, further failures are debug lines)"
      ])
      // still silent at the next beat: one beat at a time, the unanswered one not sent again
      yield* TestClock.adjust("10 seconds")
      assert.deepStrictEqual(lines.filter((line) => line.includes("worker heartbeat")).slice(-1), [
        "DEBUG worker heartbeat failed (2 beats in a row): no answer within 10s"
      ])
      assert.strictEqual(beatsSent(), 2, "the beat that got no answer is not sent again while it waits")
      // the broker answers the beat it held: the heartbeat works at once, not a beat later
      yield* setSilent(false)
      yield* Effect.yieldNow()
      assert.deepStrictEqual(about(lines, "worker heartbeat").slice(-1), ["INFO worker heartbeat works again, after 2 failed beat(s)"])
      yield* worker.stop
    }))

  it.effect("a task's lease: one warning per task, debug lines, one info line per task when renewing works again", () =>
    Effect.gen(function*() {
      const { lines, queue, serve, setAway } = yield* flaky
      const worker = yield* Worker.make({
        steps: [Step.make("long", () => Effect.sleep("1 hour"))],
        shutdownTimeout: "1 second"
      })
      yield* serve(worker)
      yield* Queue.offerAll(queue, [{ id: "t1", payload: stepTask("r1", "long", {}) }, { id: "t2", payload: stepTask("r2", "long", {}) }])
      yield* TestClock.adjust("1 second")
      yield* setAway(true)
      for (let i = 0; i < 60; i++) yield* TestClock.adjust("1 second")
      yield* setAway(false)
      yield* TestClock.adjust("1 second")
      yield* TestClock.adjust("1 second")
      const renewals = about(lines, "the task's lease")
      for (const task of ["t1", "t2"]) {
        const own = renewals.filter((line) => line.includes(`[${task}]`))
        assert.deepStrictEqual(own.filter((line) => !line.startsWith("DEBUG")), [
          `WARN [${task}] could not extend the task's lease`,
          `INFO [${task}] extended the task's lease again, after 60 failed renewal(s)`
        ])
        assert.strictEqual(own.filter((line) => line.startsWith("DEBUG")).length, 59)
      }
      yield* stopOnClock(worker)
    }))
  it.effect("a lease the broker says is lost for good: one warning, and no renewal after it", () =>
    Effect.gen(function*() {
      const { lines, renewalsSent, serveTask, setLost } = yield* flaky
      const worker = yield* serveTask(() => Effect.sleep("1 hour"))
      yield* TestClock.adjust("1 second")
      yield* TestClock.adjust("1 second")
      assert.strictEqual(renewalsSent(), 2)
      yield* setLost(true)
      for (let i = 0; i < 10; i++) yield* TestClock.adjust("1 second")
      assert.strictEqual(renewalsSent(), 3, "a lost lock cannot be extended: it is tried no more")
      assert.deepStrictEqual(lines.filter((line) => line.includes("lease")), [
        "WARN [t1] the task's lease is lost: the lock was lost; it is no longer renewed, and the broker may refuse the task's answer"
      ])
      yield* stopOnClock(worker)
    }))

  it.effect("one renewal of a lease at a time; one answered after its task has ended says nothing of it", () =>
    Effect.gen(function*() {
      const { holdRenewals, lines, renewalsSent, serveTask, setAway } = yield* flaky
      const done = yield* Deferred.make<void>()
      const worker = yield* serveTask(() => Deferred.await(done))
      yield* TestClock.adjust("1 second")
      assert.strictEqual(renewalsSent(), 1)
      // the broker goes silent: the client holds the renewal, and the next one is not piled on it
      yield* holdRenewals(true)
      yield* TestClock.adjust("1 second")
      for (let i = 0; i < 5; i++) yield* TestClock.adjust("1 second")
      assert.strictEqual(renewalsSent(), 2, "no renewal is sent while the one before waits for its answer")
      assert.deepStrictEqual(lines.filter((line) => line.includes("lease")).filter((line) => !line.startsWith("DEBUG")), [
        "WARN [t1] could not extend the task's lease: no answer within 1s; renewing it every 1s, one renewal out at a time (until it works, its further failures are debug lines)"
      ])
      // the task ends meanwhile; the held renewal is answered, with a failure, only after that
      yield* Deferred.succeed(done, undefined)
      yield* Effect.yieldNow()
      const before = lines.length
      yield* setAway(true)
      yield* holdRenewals(false)
      yield* Effect.yieldNow()
      yield* TestClock.adjust("1 second")
      assert.deepStrictEqual(lines.slice(before).filter((line) => line.includes("lease")), [
        "DEBUG [t1] a renewal of the task's lease failed after the task had ended: connection refused"
      ])
      yield* setAway(false)
      yield* worker.stop
    }))

  it.effect("a renewal answered late: the next one goes at once, not an interval later", () =>
    Effect.gen(function*() {
      const { holdRenewals, lines, renewalsSent, serveTask } = yield* flaky
      const worker = yield* serveTask(() => Effect.sleep("1 hour"))
      // the renewal at 1 s is held past the next due time (2 s), then answered at 2.5 s
      yield* holdRenewals(true)
      yield* TestClock.adjust("1 second")
      assert.strictEqual(renewalsSent(), 1)
      yield* TestClock.adjust("1 second")
      assert.strictEqual(renewalsSent(), 1, "not sent while the one before waits for its answer")
      yield* TestClock.adjust("500 millis")
      yield* holdRenewals(false)
      yield* Effect.yieldNow()
      yield* TestClock.adjust("0 millis")
      assert.strictEqual(renewalsSent(), 2, "the renewal missed at 2 s goes as soon as the late one is answered")
      assert.deepStrictEqual(lines.filter((line) => line.includes("lease") && !line.startsWith("DEBUG")), [
        "WARN [t1] could not extend the task's lease: no answer within 1s; renewing it every 1s, one renewal out at a time (until it works, its further failures are debug lines)",
        "INFO [t1] extended the task's lease again, after 1 failed renewal(s)"
      ])
      // and from then on one interval after it: 3.5 s, not 3 s
      yield* TestClock.adjust("999 millis")
      assert.strictEqual(renewalsSent(), 2)
      yield* TestClock.adjust("1 millis")
      assert.strictEqual(renewalsSent(), 3)
      yield* stopOnClock(worker)
    }))

  it.effect("a lease lost while the task's answer is on its way: a debug line, the answer tells the rest", () =>
    Effect.gen(function*() {
      const { holdAnswers, lines, renewalsSent, serveTask, setLost } = yield* flaky
      const done = yield* Deferred.make<void>()
      const worker = yield* serveTask(() => Deferred.await(done))
      yield* TestClock.adjust("1 second")
      assert.strictEqual(renewalsSent(), 1)
      // the handler ends; the broker is slow to take its answer, and the lock goes meanwhile
      yield* holdAnswers(true)
      yield* Deferred.succeed(done, undefined)
      yield* Effect.yieldNow()
      yield* setLost(true)
      yield* TestClock.adjust("1 second")
      assert.strictEqual(renewalsSent(), 2, "the lease is renewed while the answer waits")
      assert.deepStrictEqual(lines.filter((line) => line.includes("lease")), [
        "DEBUG [t1] the task's lease was lost while the task was being answered or given back: the lock was lost"
      ])
      yield* TestClock.adjust("3 seconds")
      assert.strictEqual(renewalsSent(), 2, "a lost lease is renewed no more")
      yield* holdAnswers(false)
      yield* worker.stop
    }))
})
