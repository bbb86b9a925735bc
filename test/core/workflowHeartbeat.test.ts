import { assert, describe, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Queue from "effect/Queue"
import * as TestClock from "effect/TestClock"
import * as Workflow from "../../src/core/Workflow.js"
import type { WorkflowStepEvent } from "../../src/wire/WorkflowProtocol.js"
import { makeTask } from "./workflowSupport.js"

const task = makeTask("pipeline")

describe("run-scoped heartbeat while a turn replays (D.3)", () => {
  it("the channel matches the wire contract", () => {
    assert.strictEqual(Workflow.runHeartbeatChannel("durable"), "durable-heartbeat")
    assert.strictEqual(Workflow.runHeartbeatChannel("durable-acme"), "durable-acme-heartbeat")
  })

  it.effect("beats immediately with a run-scoped payload and no stepId", () =>
    Effect.gen(function*() {
      const beats = yield* Queue.unbounded<{ readonly beat: Workflow.RunHeartbeat; readonly at: number }>()
      const fiber = yield* Effect.never.pipe(
        Workflow.withRunHeartbeat({
          beat: Workflow.runHeartbeat(task),
          publish: (beat) => Effect.flatMap(TestClock.currentTimeMillis, (at) => Queue.offer(beats, { beat, at }))
        }),
        Effect.fork
      )
      const first = yield* Queue.take(beats)
      assert.strictEqual(first.at, 0)
      assert.deepStrictEqual(first.beat, { runId: "run-1", seq: 0, group: "pipeline" })
      assert.isFalse("stepId" in first.beat)
      yield* Fiber.interrupt(fiber)
    }))

  it.effect("cancelling the turn stops the beat", () =>
    Effect.gen(function*() {
      let beats = 0
      const fiber = yield* Effect.never.pipe(
        Workflow.withRunHeartbeat({ beat: Workflow.runHeartbeat(task), publish: () => Effect.sync(() => { beats++ }) }),
        Effect.fork
      )
      yield* TestClock.adjust("11 seconds")
      assert.strictEqual(beats, 3)
      yield* Fiber.interrupt(fiber)
      yield* TestClock.adjust("1 minute")
      assert.strictEqual(beats, 3)
    }))

  it.effect("a failed publish does not raise and the beat goes on", () =>
    Effect.gen(function*() {
      let attempts = 0
      const fiber = yield* Effect.never.pipe(
        Workflow.withRunHeartbeat({
          beat: Workflow.runHeartbeat(task),
          publish: () => Effect.suspend(() => (++attempts === 1 ? Effect.fail("redis down") : Effect.die("worse")))
        }),
        Effect.fork
      )
      yield* TestClock.adjust("10 seconds")
      assert.strictEqual(attempts, 3)
      assert.isNull(fiber.unsafePoll())
      yield* Fiber.interrupt(fiber)
    }))

  it.effect("the interval is five seconds", () =>
    Effect.gen(function*() {
      assert.isTrue(Duration.equals(Workflow.RUN_HEARTBEAT_INTERVAL, Duration.seconds(5)))
      const at: Array<number> = []
      const fiber = yield* Effect.never.pipe(
        Workflow.withRunHeartbeat({
          beat: Workflow.runHeartbeat(task),
          publish: () => Effect.flatMap(TestClock.currentTimeMillis, (now) => Effect.sync(() => { at.push(now) }))
        }),
        Effect.fork
      )
      yield* TestClock.adjust("4999 millis")
      assert.deepStrictEqual(at, [0])
      yield* TestClock.adjust("1 millis")
      assert.deepStrictEqual(at, [0, 5000])
      yield* TestClock.adjust("10 seconds")
      assert.deepStrictEqual(at, [0, 5000, 10_000, 15_000])
      yield* Fiber.interrupt(fiber)
    }))

  it.effect("a slow publish does not push the later beats back: one starts every interval from the first", () =>
    Effect.gen(function*() {
      const at: Array<number> = []
      const fiber = yield* Effect.never.pipe(
        Workflow.withRunHeartbeat({
          beat: Workflow.runHeartbeat(task),
          // each publish takes 3 s to be answered (a broker slow to answer)
          publish: () => Effect.flatMap(TestClock.currentTimeMillis, (now) => Effect.sync(() => { at.push(now) })).pipe(
            Effect.zipLeft(Effect.sleep("3 seconds"))
          )
        }),
        Effect.fork
      )
      yield* TestClock.adjust("16 seconds")
      assert.deepStrictEqual(at, [0, 5000, 10_000, 15_000])
      yield* Fiber.interrupt(fiber)
    }))

  it.effect("a publish that never answers is given up at the next beat, which goes on time", () =>
    Effect.gen(function*() {
      const at: Array<number> = []
      const fiber = yield* Effect.never.pipe(
        Workflow.withRunHeartbeat({
          beat: Workflow.runHeartbeat(task),
          // the first publish hangs (a connection that takes the command and never answers)
          publish: () =>
            Effect.flatMap(TestClock.currentTimeMillis, (now) =>
              Effect.suspend(() => {
                at.push(now)
                return at.length === 1 ? Effect.never : Effect.void
              }))
        }),
        Effect.fork
      )
      yield* TestClock.adjust("11 seconds")
      assert.deepStrictEqual(at, [0, 5000, 10_000])
      assert.isNull(fiber.unsafePoll())
      yield* Fiber.interrupt(fiber)
    }))

  it.effect("a slow turn beats while it replays and stops once it settles", () =>
    Effect.gen(function*() {
      const beatsAt: Array<number> = []
      const slow = Workflow.make("pipeline", (_: unknown, ctx) =>
        Effect.zipRight(ctx.sideEffect(Effect.sleep("12 seconds")), ctx.step("next")))
      const fiber = yield* Workflow.processWorkflowTask([slow], task).pipe(
        Workflow.withRunHeartbeat({
          beat: Workflow.runHeartbeat(task),
          publish: () => Effect.flatMap(TestClock.currentTimeMillis, (now) => Effect.sync(() => { beatsAt.push(now) }))
        }),
        Effect.fork
      )
      yield* TestClock.adjust("12 seconds")
      const decision = yield* Fiber.join(fiber)
      assert.strictEqual(decision.status, "continue")
      assert.deepStrictEqual(beatsAt, [0, 5000, 10_000])
      yield* TestClock.adjust("1 minute")
      assert.deepStrictEqual(beatsAt, [0, 5000, 10_000])
    }))

  it.effect("a failing publisher still returns the decision", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("pipeline", (_: unknown, ctx) => ctx.step("x"))
      const decision = yield* Workflow.processWorkflowTask([wf], task).pipe(
        Workflow.withRunHeartbeat({ beat: Workflow.runHeartbeat(task), publish: () => Effect.fail(new Error("publish failed")) })
      )
      assert.strictEqual(decision.status, "continue")
      assert.deepStrictEqual(decision.commands.map((c) => c.kind), ["call"])
    }))
})

describe("local step observability (D.4)", () => {
  it.effect("a local step streams running, then completed", () =>
    Effect.gen(function*() {
      const events: Array<WorkflowStepEvent> = []
      const wf = Workflow.make("pipeline", (_: unknown, ctx) => ctx.sideEffect(Effect.succeed({ handled: "x" })))
      yield* TestClock.setTime(1_000)
      yield* Workflow.processWorkflowTask([wf], task, { onStepEvent: (event) => events.push(event) })
      assert.deepStrictEqual(events.map((e) => e.phase), ["running", "completed"])
      assert.deepStrictEqual(events.map((e) => [e.runId, e.seq, e.name]), [["run-1", 0, "sideEffect"], ["run-1", 0, "sideEffect"]])
      assert.strictEqual(events[0]!.startedAt, 1_000)
      assert.isFalse("events" in events[0]!)
      assert.deepStrictEqual(events[1]!.output, { handled: "x" })
      assert.deepStrictEqual(events[1]!.events, [])
    }))

  it.effect("a local step records a real duration", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("pipeline", (_: unknown, ctx) => ctx.sideEffect(Effect.as(TestClock.adjust("1500 millis"), "done")))
      yield* TestClock.setTime(10_000)
      const decision = yield* Workflow.processWorkflowTask([wf], task)
      const record = decision.commands[0] as { startedAt?: number; finishedAt?: number }
      assert.strictEqual(record.startedAt, 10_000)
      assert.strictEqual(record.finishedAt, 11_500)
    }))

  it.effect("log lines and sub-process outcomes are captured under the step, in its event and its recordStep", () =>
    Effect.gen(function*() {
      const streamed: Array<WorkflowStepEvent> = []
      const viaEffect = Workflow.make("pipeline", (_: unknown, ctx) =>
        ctx.sideEffect((step) =>
          Effect.sync(() => {
            step.log.info("fetched", { rows: 3 })
            step.log.sub("resize-1", "ok", "resized", { name: "resize" })
            return 3
          })))
      const viaAsync = Workflow.fromPromise("pipeline", (ctx) =>
        ctx.sideEffect((step) => {
          step.log.info("fetched", { rows: 3 })
          step.log.sub("resize-1", "ok", "resized", { name: "resize" })
          return 3
        }))
      for (const wf of [viaEffect, viaAsync]) {
        streamed.length = 0
        const decision = yield* Workflow.processWorkflowTask([wf], task, { onStepEvent: (event) => streamed.push(event) })
        const expected = [
          { at: 0, level: "info", message: "fetched", data: { rows: 3 } },
          { at: 0, level: "info", message: "resized", subId: "resize-1", status: "ok", name: "resize" }
        ]
        assert.deepStrictEqual((decision.commands[0] as { events?: unknown }).events, expected)
        assert.deepStrictEqual<unknown>(streamed[1]!.events, expected)
      }
    }))

  it.effect("Effect.log inside an Effect local step is captured as a step event", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("pipeline", (_: unknown, ctx) => ctx.sideEffect(Effect.as(Effect.logWarning("low disk"), 1)))
      const decision = yield* Workflow.processWorkflowTask([wf], task)
      assert.deepStrictEqual((decision.commands[0] as { events?: unknown }).events, [{ at: 0, level: "warn", message: "low disk" }])
    }))

  it.effect("a throwing step-event sink never fails the turn", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("pipeline", (_: unknown, ctx) => ctx.sideEffect(Effect.succeed(1)))
      const decision = yield* Workflow.processWorkflowTask([wf], task, {
        onStepEvent: () => {
          throw new Error("sink down")
        }
      })
      assert.strictEqual(decision.status, "completed")
    }))

  it.effect("a long replay does not starve other work while it runs", () =>
    Effect.gen(function*() {
      const n = 10_000
      const history = Array.from({ length: n }, (_, seq) => ({ seq, kind: "call" as const, name: "s", output: seq }))
      // Another task on the event loop: it ticks once per macrotask for as long as it runs.
      let ticks = 0
      let running = true
      const tick = () => {
        ticks++
        if (running) setImmediate(tick)
      }
      setImmediate(tick)
      let ticksDuringReplay = -1
      const wf = Workflow.fromPromise("pipeline", async (ctx) => {
        const before = ticks
        for (let i = 0; i < n; i++) await ctx.step("s", i)
        ticksDuringReplay = ticks - before
        return "replayed"
      })
      const decision = yield* Workflow.processWorkflowTask([wf], makeTask("pipeline", history), { yieldEvery: 500 })
      running = false
      assert.strictEqual(decision.output, "replayed")
      assert.isAtLeast(ticksDuringReplay, n / 500 - 1)
      const effectWf = Workflow.make("pipeline", (_: unknown, ctx) =>
        Effect.gen(function*() {
          for (let i = 0; i < n; i++) yield* ctx.step("s", i)
          return "replayed"
        }))
      let fiberTicks = 0
      const counter = yield* Effect.fork(Effect.forever(Effect.zipRight(Effect.sync(() => { fiberTicks++ }), Effect.yieldNow())))
      const started = fiberTicks
      const effectDecision = yield* Workflow.processWorkflowTask([effectWf], makeTask("pipeline", history), { yieldEvery: 500 })
      const during = fiberTicks - started
      yield* Fiber.interrupt(counter)
      assert.strictEqual(effectDecision.output, "replayed")
      assert.isAbove(during, 0)
    }))
})
