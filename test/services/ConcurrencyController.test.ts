import { assert, describe, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Config from "effect/Config"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as TestClock from "effect/TestClock"
import type { ConcurrencyOption } from "../../src/services/Concurrency.js"
import * as ConcurrencyController from "../../src/services/ConcurrencyController.js"
import * as CpuUsage from "../../src/services/CpuUsage.js"
import * as Memory from "../../src/services/Memory.js"

type Controller = ConcurrencyController.ConcurrencyController["Type"]
type Admission = ConcurrencyController.Admission

/** The memory limit of every fake: percentages are usage / 10. */
const LIMIT = 1000
/** The reference fixture: starts saturated at the top of its range, ticks every 10 ms. */
const fixture = { min: 1, max: 8, start: 8, tickMs: 10 } as const

const env = Effect.all({ ctl: ConcurrencyController.ConcurrencyController, mem: Memory.MemoryTest })

/** Provides a controller for `option` over fake memory (usage 100 of 1000 unless told otherwise). */
const withController = (option: ConcurrencyOption, memory: Memory.MemoryTestOptions = { usage: 100, limit: LIMIT }) =>
  Effect.provide(ConcurrencyController.layerTest(option, memory))

/** Asks the gate once without waiting: an admitted task stays in flight; a refused one is released. */
const tryAdmit = (ctl: Controller, name?: string): Effect.Effect<Option.Option<Admission>, never, Scope.Scope> =>
  ctl.admit(name, { abort: Effect.succeed(true) }).pipe(
    Effect.flatMap((a) => (a.outcome === "admitted" ? Effect.succeed(Option.some(a)) : Effect.as(a.release, Option.none())))
  )

const isAdmitted = (ctl: Controller, name?: string) => Effect.map(tryAdmit(ctl, name), Option.isSome)

/** Admits a task that the gate must let through at once, and keeps it in flight. */
const hold = (ctl: Controller, name?: string) =>
  tryAdmit(ctl, name).pipe(
    Effect.flatMap(Option.match({
      onNone: () => Effect.dieMessage(`expected ${name ?? "an unnamed task"} to be admitted`),
      onSome: Effect.succeed
    }))
  )

/**
 * A solo 100 ms step that teaches the gate a cost of `cost` bytes for `name`: usage rises by `cost`
 * and falls back before the step settles, so only the process peak sees it.
 */
const learn = (ctl: Controller, mem: Memory.MemoryTest["Type"], name: string, cost: number) =>
  Effect.scoped(Effect.gen(function*() {
    const usage = (yield* (yield* Memory.MemorySource).sample()).bytes ?? 0
    yield* mem.setPeak(usage)
    const admission = yield* hold(ctl, name)
    yield* mem.addUsage(cost)
    yield* mem.addUsage(-cost)
    yield* admission.complete(true, { durationMs: 100 })
  }))

/** A solo 100 ms step of cost 0: retires the first-task probe without teaching a meaningful cost. */
const warmUp = (ctl: Controller) =>
  Effect.scoped(Effect.flatMap(hold(ctl, "warm-up"), (a) => a.complete(true, { durationMs: 100 })))

/** Lets forked fibers run up to their next suspension. */
const settleFibers = Effect.repeatN(Effect.yieldNow(), 20)

const snapshotMemory = (ctl: Controller) => Effect.map(ctl.snapshot, (s) => s.memory)

/**
 * One healthy control period: the held task completes in 100 ms, a new one takes its place, the
 * clock moves one tick. Returns the new held task.
 */
const healthyTick = (ctl: Controller, held: Admission, tickMs: number) =>
  Effect.gen(function*() {
    yield* held.complete(true, { durationMs: 100 })
    const next = yield* hold(ctl, "step")
    yield* TestClock.adjust(tickMs)
    return next
  })

describe("ConcurrencyController", () => {
  describe("admission gate", () => {
    it.scoped("stops admitting before the ceiling", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        yield* warmUp(ctl)
        yield* hold(ctl, "a")
        yield* mem.setUsage(700)
        assert.isTrue(yield* isAdmitted(ctl, "a"))
        yield* mem.setUsage(800) // above the 75% admit mark, below the 85% ceiling
        assert.isFalse(yield* isAdmitted(ctl, "a"))
      }).pipe(withController(fixture)))

    it.scoped("nothing in flight always admits, even at ten times the limit", () =>
      Effect.gen(function*() {
        const { ctl } = yield* env
        const a = yield* ctl.admit("a")
        assert.strictEqual(a.outcome, "admitted")
        assert.isFalse(a.deferred)
      }).pipe(withController(fixture, { usage: 10 * LIMIT, limit: LIMIT })))

    it.scoped("nothing in flight admits even after the gate latched", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        yield* warmUp(ctl)
        const held = yield* hold(ctl, "a")
        yield* mem.setUsage(950)
        assert.isFalse(yield* isAdmitted(ctl, "a"))
        assert.strictEqual((yield* snapshotMemory(ctl)).gate, "deferring")
        yield* held.complete(true)
        assert.isTrue(yield* isAdmitted(ctl, "a"))
        assert.strictEqual((yield* snapshotMemory(ctl)).gate, "open")
      }).pipe(withController(fixture)))

    it.scoped("hysteresis: a latched gate needs the resume mark, not just the admit mark", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        yield* warmUp(ctl)
        yield* hold(ctl, "a")
        yield* mem.setUsage(800)
        assert.isFalse(yield* isAdmitted(ctl, "a"))
        yield* mem.setUsage(700) // below admit (75), above resume (65)
        assert.isFalse(yield* isAdmitted(ctl, "a"))
        yield* mem.setUsage(600)
        assert.isTrue(yield* isAdmitted(ctl, "a"))
      }).pipe(withController(fixture)))

    it.scoped("a collapsed limit gates tasks the runtime already fetched", () =>
      Effect.gen(function*() {
        const { ctl } = yield* env
        yield* warmUp(ctl)
        assert.strictEqual(yield* ctl.limit, 2)
        yield* hold(ctl, "a")
        yield* hold(ctl, "a")
        assert.isFalse(yield* isAdmitted(ctl, "a"))
      }).pipe(withController({ ...fixture, start: 2 })))

    it.scoped("reserves the learned cost of steps already admitted", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        yield* learn(ctl, mem, "base", 300)
        yield* hold(ctl, "base") // idle 100 + 300
        yield* hold(ctl, "base") // idle 100 + 600 = 70%
        assert.isFalse(yield* isAdmitted(ctl, "base")) // idle 100 + 900 = 100% > 75%
      }).pipe(withController(fixture)))

    it.scoped("a handler that nearly fills the container runs alone", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        yield* learn(ctl, mem, "tiny", 0)
        yield* learn(ctl, mem, "big", 650)
        yield* hold(ctl, "big")
        assert.isTrue(yield* isAdmitted(ctl, "tiny")) // 100 + 650 + 0 = 75%
        assert.isFalse(yield* isAdmitted(ctl, "big")) // 100 + 650 + 0 + 650
      }).pipe(withController(fixture)))

    it.scoped("the first task of a process runs alone until a step settles", () =>
      Effect.gen(function*() {
        const { ctl } = yield* env
        const first = yield* hold(ctl, "a")
        const turn = yield* ctl.admit(undefined, { kind: "workflow" })
        assert.isFalse(yield* isAdmitted(ctl, "b"))
        yield* first.complete(true) // not solo (the turn overlapped): retires the probe, learns nothing
        assert.isUndefined((yield* snapshotMemory(ctl)).stepCostBytes)
        assert.isTrue(yield* isAdmitted(ctl, "b"))
        yield* turn.complete(true)
      }).pipe(withController(fixture)))

    it.scoped("cheap steps run in parallel once one has been measured", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        yield* learn(ctl, mem, "cheap", 0)
        for (let i = 0; i < 5; i++) yield* hold(ctl, "cheap")
        assert.strictEqual(yield* ctl.inFlight, 5)
      }).pipe(withController(fixture)))

    it.scoped("an unknown name is charged the largest cost learned for any name", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        yield* learn(ctl, mem, "small", 100)
        yield* learn(ctl, mem, "large", 400)
        yield* hold(ctl, "large")
        assert.isFalse(yield* isAdmitted(ctl, "unseen")) // 100 + 400 + 400 = 90%
        assert.isTrue(yield* isAdmitted(ctl, "small")) // 100 + 400 + 100 = 60%
      }).pipe(withController(fixture)))

    it.scoped("an in-flight workflow turn reserves no memory, and turns are never gated", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        yield* learn(ctl, mem, "tiny", 0)
        yield* learn(ctl, mem, "heavy", 600)
        yield* ctl.admit(undefined, { kind: "workflow" })
        assert.isTrue(yield* isAdmitted(ctl, "heavy")) // 100 + 0 + 600 = 70%
        yield* mem.setUsage(990)
        const turn = yield* ctl.admit("heavy", { kind: "workflow" })
        assert.strictEqual(turn.outcome, "admitted")
        assert.isFalse(turn.deferred)
        assert.strictEqual(yield* ctl.inFlight, 3)
        // A turn carrying a step's name still reserves nothing: idle 100 + heavy 600 + tiny 0 = 70%.
        yield* mem.setUsage(100)
        assert.isTrue(yield* isAdmitted(ctl, "tiny"))
      }).pipe(withController(fixture)))

    it.scoped("a task of a pool of its own (limited: false) is counted in flight but holds no step back", () =>
      Effect.gen(function*() {
        const { ctl } = yield* env
        // a Durable Workflow workflow task: bounded by workflowConcurrency, not by this limit of 1
        yield* ctl.admit(undefined, { kind: "workflow", limited: false })
        assert.strictEqual(yield* ctl.inFlight, 1)
        // neither at the limit nor the first task's probe: the step takes the one slot it was given
        const step = yield* hold(ctl, "a")
        assert.strictEqual(yield* ctl.inFlight, 2)
        yield* step.release
        // a turn that shares the steps' slots (nestjs-durable) still counts against the limit
        yield* ctl.admit(undefined, { kind: "workflow" })
        assert.isFalse(yield* isAdmitted(ctl, "a"))
      }).pipe(withController({ ...fixture, start: 1 })))

    it.scoped("opting out of admission admits unconditionally", () =>
      Effect.gen(function*() {
        const { ctl } = yield* env
        for (let i = 0; i < 3; i++) yield* hold(ctl, "a")
        assert.isUndefined((yield* snapshotMemory(ctl)).gate)
      }).pipe(withController({ ...fixture, ramAdmission: false }, { usage: LIMIT, limit: LIMIT })))

    it.scoped("a fixed worker is never gated", () =>
      Effect.gen(function*() {
        const { ctl } = yield* env
        for (let i = 0; i < 6; i++) {
          const a = yield* ctl.admit("a")
          assert.isFalse(a.deferred)
        }
        assert.strictEqual(yield* ctl.inFlight, 6)
      }).pipe(withController(4, { usage: LIMIT, limit: LIMIT })))

    it.scoped("unreadable memory never gates (and skips the first-task probe)", () =>
      Effect.gen(function*() {
        const { ctl } = yield* env
        for (let i = 0; i < 4; i++) yield* hold(ctl, "a")
      }).pipe(withController(fixture, { usage: undefined, limit: LIMIT })))

    it.scoped("an unknown limit never gates", () =>
      Effect.gen(function*() {
        const { ctl } = yield* env
        for (let i = 0; i < 4; i++) yield* hold(ctl, "a")
      }).pipe(withController(fixture, { usage: 5000, limit: undefined })))

    it.scoped("a workflow turn settling does not retire the first-task probe; a step settling does", () =>
      Effect.gen(function*() {
        const { ctl } = yield* env
        const step = yield* hold(ctl, "a")
        const turn = yield* ctl.admit(undefined, { kind: "workflow" })
        yield* turn.complete(true)
        assert.isFalse(yield* isAdmitted(ctl, "b"))
        yield* ctl.admit(undefined, { kind: "workflow" })
        yield* step.complete(true)
        assert.isTrue(yield* isAdmitted(ctl, "b"))
      }).pipe(withController(fixture)))

    it.scoped("a memory reader that dies is treated as unreadable, and the control loop survives it", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        yield* mem.breakReads("both")
        for (let i = 0; i < 3; i++) yield* hold(ctl, "a")
        yield* TestClock.adjust(50)
        const snapshot = yield* ctl.snapshot
        assert.strictEqual(snapshot.memory.source, "unavailable")
        assert.isUndefined(snapshot.rssBytes)
        yield* mem.breakReads("none")
        yield* mem.setUsage(900)
        yield* TestClock.adjust(fixture.tickMs)
        assert.strictEqual(yield* ctl.limit, 1)
      }).pipe(withController(fixture)))
  })

  describe("asymmetric brake", () => {
    it.scoped("crossing the ceiling collapses the limit to min in one move", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        const changes = yield* Effect.fork(Stream.runCollect(Stream.take(ctl.limitChanges, 2)))
        yield* settleFibers
        yield* mem.setUsage(900)
        yield* TestClock.adjust(fixture.tickMs)
        assert.strictEqual(yield* ctl.limit, 1)
        const snapshot = yield* ctl.snapshot
        assert.deepStrictEqual(snapshot.lastAdjust, { at: fixture.tickMs, from: 8, to: 1, reason: "ram_ceiling" })
        assert.strictEqual(snapshot.memory.gate, "deferring")
        assert.deepStrictEqual(Chunk.toReadonlyArray(yield* Fiber.join(changes)), [8, 1])
      }).pipe(withController(fixture)))

    it.scoped("brakes at exactly the ceiling, not below it", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        yield* mem.setUsage(849)
        yield* TestClock.adjust(fixture.tickMs)
        assert.strictEqual(yield* ctl.limit, 8)
        yield* mem.setUsage(850)
        yield* TestClock.adjust(fixture.tickMs)
        assert.strictEqual(yield* ctl.limit, 1)
      }).pipe(withController(fixture)))

    it.scoped("growing back needs growHeadroomTicks consecutive ticks of headroom", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        yield* mem.setUsage(900)
        yield* TestClock.adjust(fixture.tickMs)
        assert.strictEqual(yield* ctl.limit, 1)
        yield* mem.setUsage(100)
        let held = yield* hold(ctl, "step")
        const limits: Array<number> = []
        for (let i = 0; i < 3; i++) {
          held = yield* healthyTick(ctl, held, fixture.tickMs)
          limits.push(yield* ctl.limit)
        }
        assert.deepStrictEqual(limits, [1, 1, 2])
        assert.strictEqual((yield* ctl.snapshot).lastAdjust?.reason, "grow")
      }).pipe(withController({ ...fixture, growHeadroomTicks: 3 })))

    it.scoped("a spike that frees does not latch the worker at min", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        yield* mem.setUsage(950)
        yield* TestClock.adjust(fixture.tickMs)
        assert.strictEqual(yield* ctl.limit, 1)
        assert.strictEqual((yield* snapshotMemory(ctl)).gate, "deferring")
        yield* mem.setUsage(120)
        let held = yield* hold(ctl, "step")
        held = yield* healthyTick(ctl, held, fixture.tickMs)
        assert.strictEqual((yield* snapshotMemory(ctl)).gate, "open")
        for (let i = 0; i < 3; i++) held = yield* healthyTick(ctl, held, fixture.tickMs)
        assert.isAbove(yield* ctl.limit, 1)
      }).pipe(withController(fixture)))

    it.scoped("usage between the resume mark and the ceiling neither brakes nor grows", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        yield* mem.setUsage(800)
        let held = yield* hold(ctl, "step")
        for (let i = 0; i < 10; i++) held = yield* healthyTick(ctl, held, fixture.tickMs)
        assert.strictEqual(yield* ctl.limit, 1)
        assert.isUndefined((yield* ctl.snapshot).lastAdjust)
        // The same activity with headroom does grow.
        yield* mem.setUsage(100)
        for (let i = 0; i < 3; i++) held = yield* healthyTick(ctl, held, fixture.tickMs)
        assert.strictEqual(yield* ctl.limit, 2)
      }).pipe(withController({ ...fixture, start: 1 })))
  })

  describe("latency-gradient controller", () => {
    it.scoped("grows by one when healthy and saturated", () =>
      Effect.gen(function*() {
        const { ctl } = yield* env
        yield* warmUp(ctl)
        let held = yield* hold(ctl, "step")
        yield* hold(ctl, "step")
        held = yield* healthyTick(ctl, held, fixture.tickMs)
        assert.strictEqual(yield* ctl.limit, 3)
        assert.deepStrictEqual((yield* ctl.snapshot).lastAdjust, {
          at: fixture.tickMs,
          from: 2,
          to: 3,
          reason: "grow"
        })
      }).pipe(withController({ ...fixture, start: 2, growHeadroomTicks: 1 })))

    it.scoped("does not grow when not saturated", () =>
      Effect.gen(function*() {
        const { ctl } = yield* env
        let held = yield* hold(ctl, "step")
        for (let i = 0; i < 5; i++) held = yield* healthyTick(ctl, held, fixture.tickMs)
        assert.strictEqual(yield* ctl.limit, 4)
      }).pipe(withController({ ...fixture, start: 4, growHeadroomTicks: 1 })))

    it.scoped("shrinks by the latency gradient", () =>
      Effect.gen(function*() {
        const { ctl } = yield* env
        const tasks: Array<Admission> = []
        for (let i = 0; i < 7; i++) tasks.push(yield* hold(ctl, "step"))
        for (const [i, task] of tasks.entries()) yield* task.complete(true, { durationMs: i < 3 ? 100 : 200 })
        yield* TestClock.adjust(fixture.tickMs)
        // min 100, median 200: gradient 0.5, so 8 → 4
        assert.strictEqual(yield* ctl.limit, 4)
        assert.strictEqual((yield* ctl.snapshot).lastAdjust?.reason, "shrink")
      }).pipe(withController(fixture, { usage: undefined, limit: LIMIT })))

    it.scoped("sheds one on an error rate above 20%", () =>
      Effect.gen(function*() {
        const { ctl } = yield* env
        for (let i = 0; i < 10; i++) {
          yield* Effect.exit(ctl.run("step", i < 3 ? Effect.fail("boom") : Effect.void))
        }
        yield* TestClock.adjust(fixture.tickMs)
        assert.strictEqual(yield* ctl.limit, 7)
        assert.strictEqual((yield* ctl.snapshot).lastAdjust?.reason, "backpressure")
      }).pipe(withController(fixture)))

    it.scoped("count counts a task in flight until its completion is called, and learns from its outcome like run", () =>
      Effect.gen(function*() {
        const { ctl } = yield* env
        assert.isFalse(ctl.gates)
        const completions = Array.from({ length: 10 }, () => ctl.count("step"))
        assert.strictEqual(yield* ctl.inFlight, 10)
        completions.forEach((done, i) => done(i >= 3))
        assert.strictEqual(yield* ctl.inFlight, 0)
        // a second completion of a counted task does not count another task out
        const last = ctl.count("step")
        const other = ctl.count("step")
        last(false)
        last(false)
        assert.strictEqual(yield* ctl.inFlight, 1)
        other(true)
        yield* TestClock.adjust(fixture.tickMs)
        assert.strictEqual(yield* ctl.limit, 7)
        assert.strictEqual((yield* ctl.snapshot).lastAdjust?.reason, "backpressure")
      }).pipe(withController({ ...fixture, ramAdmission: false })))

    it.scoped("an error rate of exactly 20% does not shed", () =>
      Effect.gen(function*() {
        const { ctl } = yield* env
        for (let i = 0; i < 10; i++) {
          yield* Effect.exit(ctl.run("step", i < 2 ? Effect.fail("boom") : Effect.void))
        }
        yield* TestClock.adjust(fixture.tickMs)
        assert.strictEqual(yield* ctl.limit, 8)
      }).pipe(withController(fixture)))

    it.scoped("sheds one after two stalled ticks (work in flight, nothing completing)", () =>
      Effect.gen(function*() {
        const { ctl } = yield* env
        yield* hold(ctl, "slow")
        yield* TestClock.adjust(fixture.tickMs)
        assert.strictEqual(yield* ctl.limit, 8)
        yield* TestClock.adjust(fixture.tickMs)
        assert.strictEqual(yield* ctl.limit, 7)
        assert.strictEqual((yield* ctl.snapshot).lastAdjust?.reason, "backpressure")
      }).pipe(withController(fixture)))

    it.scoped("a burst of workflow turns avoids the stall path", () =>
      Effect.gen(function*() {
        const { ctl } = yield* env
        yield* hold(ctl, "slow")
        for (let i = 0; i < 5; i++) {
          yield* ctl.run(undefined, Effect.void, { kind: "workflow" })
          yield* TestClock.adjust(fixture.tickMs)
        }
        assert.strictEqual(yield* ctl.limit, 8)
        assert.isUndefined((yield* ctl.snapshot).lastAdjust)
      }).pipe(withController(fixture)))

    it.scoped("a long task of a pool of its own neither stalls nor saturates the limit", () =>
      Effect.gen(function*() {
        const { ctl } = yield* env
        for (let i = 0; i < 4; i++) yield* ctl.admit(undefined, { kind: "workflow", limited: false })
        const done = ctl.count(undefined, "workflow", { limited: false })
        let held = yield* hold(ctl, "step")
        // one healthy step per tick beside four long workflow tasks: 1 of 2 slots is no saturation
        for (let i = 0; i < 3; i++) held = yield* healthyTick(ctl, held, fixture.tickMs)
        yield* held.complete(true, { durationMs: 100 })
        // nothing of the limit's in flight, nothing completing: no stall
        for (let i = 0; i < 3; i++) yield* TestClock.adjust(fixture.tickMs)
        done(true)
        assert.strictEqual(yield* ctl.limit, 2)
        assert.isUndefined((yield* ctl.snapshot).lastAdjust)
      }).pipe(withController({ ...fixture, start: 2, growHeadroomTicks: 1 })))

    it.scoped("tasks of a pool of its own completing do not hide a stall of the limit's tasks", () =>
      Effect.gen(function*() {
        const { ctl } = yield* env
        // an activity stuck in flight, while the worker's workflow tasks (their own pool) keep completing
        yield* hold(ctl, "slow")
        for (let i = 0; i < 2; i++) {
          yield* ctl.run(undefined, Effect.void, { kind: "workflow", limited: false })
          yield* TestClock.adjust(fixture.tickMs)
        }
        assert.strictEqual(yield* ctl.limit, 7)
        assert.strictEqual((yield* ctl.snapshot).lastAdjust?.reason, "backpressure")
      }).pipe(withController(fixture)))

    it.scoped("sheds one when CPU is at or above cpuCeilingPct; cpuPct appears from the second tick", () =>
      Effect.gen(function*() {
        const micros = yield* Ref.make(0)
        yield* Effect.gen(function*() {
          const { ctl } = yield* env
          yield* TestClock.adjust(fixture.tickMs)
          assert.isUndefined((yield* ctl.snapshot).cpuPct)
          assert.strictEqual(yield* ctl.limit, 8)
          yield* Ref.set(micros, 9_000) // 9 ms of CPU in a 10 ms tick on one core
          yield* TestClock.adjust(fixture.tickMs)
          const snapshot = yield* ctl.snapshot
          assert.strictEqual(snapshot.cpuPct, 90)
          assert.strictEqual(yield* ctl.limit, 7)
          assert.strictEqual(snapshot.lastAdjust?.reason, "cpu_ceiling")
          yield* Ref.set(micros, 10_000) // 10% in the next tick: no further shed
          yield* TestClock.adjust(fixture.tickMs)
          assert.strictEqual(yield* ctl.limit, 7)
        }).pipe(
          Effect.provide(
            ConcurrencyController.layerTest({ ...fixture, cpuCeilingPct: 80 }, { usage: 100, limit: LIMIT }).pipe(
              Layer.provide(CpuUsage.layer(Ref.get(micros), 1))
            )
          )
        )
      }))

    it.scoped("never adjusts in fixed mode", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        yield* hold(ctl, "slow")
        for (let i = 0; i < 5; i++) yield* Effect.exit(ctl.run("step", Effect.fail("boom")))
        yield* mem.setUsage(950)
        yield* TestClock.adjust(10 * 2000)
        assert.strictEqual(yield* ctl.limit, 4)
        assert.isUndefined((yield* ctl.snapshot).lastAdjust)
      }).pipe(withController(4)))
  })

  describe("learned step costs", () => {
    it.scoped("learns from a solo run only", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        yield* learn(ctl, mem, "solo", 400)
        const a = yield* hold(ctl, "overlap")
        const b = yield* hold(ctl, "overlap")
        yield* mem.addUsage(800)
        yield* a.complete(true)
        yield* b.complete(true)
        assert.deepStrictEqual((yield* snapshotMemory(ctl)).stepCostBytes, { solo: 400 })
      }).pipe(withController(fixture, { usage: 100, limit: 10 * LIMIT })))

    it.scoped("picks up a peak that was freed before the step settled", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        yield* mem.setPeak(1000)
        const a = yield* hold(ctl, "x")
        yield* mem.setPeak(1600)
        yield* a.complete(true)
        assert.deepStrictEqual((yield* snapshotMemory(ctl)).stepCostBytes, { x: 600 })
      }).pipe(withController(fixture)))

    it.scoped("a peak reader that dies never fails the step", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        yield* mem.breakReads("peak")
        assert.strictEqual(yield* ctl.run("x", Effect.succeed(42)), 42)
        assert.strictEqual(yield* ctl.inFlight, 0)
        assert.deepStrictEqual((yield* snapshotMemory(ctl)).stepCostBytes, { x: 0 })
      }).pipe(withController(fixture)))

    it.scoped("samples a solo step's growth on every tick", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        yield* mem.breakReads("peak")
        const x = yield* hold(ctl, "x")
        yield* mem.setUsage(700)
        yield* TestClock.adjust(fixture.tickMs) // the tick sees +600
        yield* mem.setUsage(250)
        yield* x.complete(true) // the settle sees +150
        yield* mem.setUsage(100)
        const y = yield* hold(ctl, "y")
        yield* mem.setUsage(700)
        yield* mem.setUsage(250)
        yield* y.complete(true) // no tick in between: only +150 is seen
        assert.deepStrictEqual((yield* snapshotMemory(ctl)).stepCostBytes, { x: 600, y: 150 })
      }).pipe(withController(fixture)))

    it.scoped("garbage collected during a solo run does not hide its cost (highest reading above the usage floor)", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        // a clean first run from the floor (100): +300 seen on a tick
        const first = yield* hold(ctl, "x")
        yield* mem.setUsage(400)
        yield* TestClock.adjust(fixture.tickMs)
        yield* first.complete(true) // its buffer is now garbage: usage stays at 400
        assert.strictEqual((yield* snapshotMemory(ctl)).stepCostBytes?.["x"], 300)
        // five more solo runs, each starting on the last one's garbage (400): its allocation makes the
        // collector reclaim that garbage, so usage stays flat at 400 and the peak never moves
        for (let i = 0; i < 5; i++) {
          const run = yield* hold(ctl, "x")
          yield* TestClock.adjust(fixture.tickMs)
          yield* run.complete(true)
        }
        // net growth 0 every time, but each held 300 above the floor: the cost is not forgotten
        assert.strictEqual((yield* snapshotMemory(ctl)).stepCostBytes?.["x"], 300)
        // so with one run in flight a second is deferred (idle 400 + 2 × 300 = 100 % of 1000), where a
        // forgotten cost (0) would have let it in (400 + 0 = 40 %) on top of the garbage
        const a = yield* hold(ctl, "x")
        assert.isAtLeast(yield* ctl.limit, 2)
        assert.isFalse(yield* isAdmitted(ctl, "x"))
        assert.strictEqual((yield* snapshotMemory(ctl)).gate, "deferring")
        yield* a.complete(true)
      }).pipe(withController(fixture, { usage: 100, limit: LIMIT })))

    it.scoped("a rolling window of five forgets a one-off overestimate", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        yield* learn(ctl, mem, "x", 900)
        for (let i = 0; i < 4; i++) yield* learn(ctl, mem, "x", 100)
        assert.strictEqual((yield* snapshotMemory(ctl)).stepCostBytes?.["x"], 900)
        yield* learn(ctl, mem, "x", 100)
        assert.strictEqual((yield* snapshotMemory(ctl)).stepCostBytes?.["x"], 100)
      }).pipe(withController(fixture, { usage: 0, limit: 100 * LIMIT })))

    it.scoped("cost tracking can be turned off (no costs, no first-task probe)", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        const x = yield* hold(ctl, "x")
        yield* mem.addUsage(400)
        assert.isTrue(yield* isAdmitted(ctl, "y"))
        yield* x.complete(true)
        assert.isFalse("stepCostBytes" in (yield* snapshotMemory(ctl)))
      }).pipe(withController({ ...fixture, stepCostTracking: false })))
  })

  describe("in-flight accounting", () => {
    it.scoped("a task is counted once: repeated or late reports never decrement twice", () =>
      Effect.gen(function*() {
        const { ctl } = yield* env
        const a = yield* ctl.admit("a")
        const b = yield* ctl.admit("b")
        yield* a.complete(true)
        yield* a.complete(false)
        assert.strictEqual(yield* ctl.inFlight, 1)
        yield* b.release
        yield* b.complete(true)
        yield* a.release
        assert.strictEqual(yield* ctl.inFlight, 0)
        assert.strictEqual((yield* ctl.snapshot).inFlight, 0)
      }).pipe(withController(fixture, { usage: undefined, limit: LIMIT })))

    it.scoped("closing the admission's scope completes it with the scope's outcome", () =>
      Effect.gen(function*() {
        const { ctl } = yield* env
        yield* Effect.scoped(ctl.admit("ok"))
        assert.strictEqual(yield* ctl.inFlight, 0)
        const failed = yield* Effect.exit(Effect.scoped(Effect.zipRight(ctl.admit("bad"), Effect.fail("boom"))))
        assert.isTrue(Exit.isFailure(failed))
        assert.strictEqual(yield* ctl.inFlight, 0)
        // One success and one failure: a 50% error rate sheds on the next tick.
        yield* TestClock.adjust(fixture.tickMs)
        assert.strictEqual((yield* ctl.snapshot).lastAdjust?.reason, "backpressure")
      }).pipe(withController(fixture, { usage: undefined, limit: LIMIT })))

    it.scoped("workflow turns do not enter the latency window", () =>
      Effect.gen(function*() {
        const { ctl } = yield* env
        for (let i = 0; i < 5; i++) {
          yield* ctl.run(undefined, TestClock.adjust(100), { kind: "workflow" })
        }
        let snapshot = yield* ctl.snapshot
        assert.isUndefined(snapshot.p95Ms)
        assert.isUndefined(snapshot.throughputPerMin)
        for (let i = 0; i < 2; i++) yield* ctl.run("step", TestClock.adjust(100))
        snapshot = yield* ctl.snapshot
        assert.strictEqual(snapshot.p95Ms, 100)
        assert.isDefined(snapshot.throughputPerMin)
      }).pipe(withController({ ...fixture, tickMs: 60_000 })))
  })

  describe("waiting for admission", () => {
    const waiting = { ...fixture, tickMs: 60_000 }

    it.scoped("defers, then admits when memory frees", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        yield* warmUp(ctl)
        yield* hold(ctl, "a")
        yield* mem.setUsage(900)
        const fiber = yield* Effect.fork(ctl.admit("b"))
        yield* settleFibers
        yield* TestClock.adjust(250)
        assert.isTrue(Option.isNone(yield* Fiber.poll(fiber)))
        assert.strictEqual((yield* snapshotMemory(ctl)).waiting, 1)
        yield* mem.setUsage(100)
        yield* TestClock.adjust(250)
        const admission = yield* Fiber.join(fiber)
        assert.strictEqual(admission.outcome, "admitted")
        assert.isTrue(admission.deferred)
        const memory = yield* snapshotMemory(ctl)
        assert.strictEqual(memory.waiting, 0)
        assert.strictEqual(memory.deferrals, 1)
        assert.strictEqual(memory.lastDeferredAt, 0)
        assert.strictEqual(yield* ctl.inFlight, 2)
      }).pipe(withController(waiting)))

    it.scoped("admits immediately when there is headroom", () =>
      Effect.gen(function*() {
        const { ctl } = yield* env
        yield* warmUp(ctl)
        yield* hold(ctl, "a")
        const admission = yield* ctl.admit("b")
        assert.strictEqual(admission.outcome, "admitted")
        assert.isFalse(admission.deferred)
        assert.strictEqual((yield* snapshotMemory(ctl)).deferrals, 0)
      }).pipe(withController(waiting)))

    it.scoped("gives up when the run is cancelled, and the task still runs", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        yield* warmUp(ctl)
        yield* hold(ctl, "a")
        yield* mem.setUsage(900)
        const cancelled = yield* Ref.make(false)
        const fiber = yield* Effect.fork(ctl.admit("b", { abort: Ref.get(cancelled) }))
        yield* settleFibers
        yield* TestClock.adjust(250)
        assert.isTrue(Option.isNone(yield* Fiber.poll(fiber)))
        yield* Ref.set(cancelled, true)
        yield* TestClock.adjust(250)
        const admission = yield* Fiber.join(fiber)
        assert.strictEqual(admission.outcome, "aborted")
        assert.strictEqual(yield* ctl.inFlight, 2)
        assert.strictEqual((yield* snapshotMemory(ctl)).waiting, 0)
      }).pipe(withController(waiting)))

    it.scoped("interrupting a waiting admission leaves nothing counted", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        yield* warmUp(ctl)
        yield* hold(ctl, "a")
        yield* mem.setUsage(900)
        const fiber = yield* Effect.fork(ctl.admit("b"))
        yield* settleFibers
        assert.strictEqual((yield* snapshotMemory(ctl)).waiting, 1)
        yield* Fiber.interrupt(fiber)
        assert.strictEqual((yield* snapshotMemory(ctl)).waiting, 0)
        assert.strictEqual(yield* ctl.inFlight, 1)
      }).pipe(withController(waiting)))

    it.scoped("a bounded wait does not strand the task", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        yield* warmUp(ctl)
        yield* hold(ctl, "a")
        yield* mem.setUsage(900)
        const fiber = yield* Effect.fork(ctl.admit("b"))
        yield* settleFibers
        yield* TestClock.adjust(9)
        assert.isTrue(Option.isNone(yield* Fiber.poll(fiber)))
        yield* TestClock.adjust(1)
        const admission = yield* Fiber.join(fiber)
        assert.strictEqual(admission.outcome, "timed_out")
        assert.strictEqual(yield* ctl.inFlight, 2)
      }).pipe(withController({ ...waiting, admissionMaxWaitMs: 10 })))

    it.scoped("draining releases the waiters at once so shutdown is not held up", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        yield* warmUp(ctl)
        yield* hold(ctl, "a")
        yield* mem.setUsage(900)
        const fiber = yield* Effect.fork(ctl.admit("b"))
        yield* settleFibers
        assert.strictEqual((yield* snapshotMemory(ctl)).waiting, 1)
        yield* ctl.beginDrain
        const admission = yield* Fiber.join(fiber)
        assert.strictEqual(admission.outcome, "draining")
        const later = yield* ctl.admit("c")
        assert.strictEqual(later.outcome, "draining")
        assert.strictEqual(yield* ctl.inFlight, 3)
      }).pipe(withController(waiting)))

    it.scoped("a waiting task is visible on the heartbeat", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        yield* warmUp(ctl)
        yield* hold(ctl, "a")
        yield* mem.setUsage(900)
        yield* Effect.fork(ctl.admit("b"))
        yield* settleFibers
        const memory = yield* snapshotMemory(ctl)
        assert.strictEqual(memory.gate, "deferring")
        assert.strictEqual(memory.waiting, 1)
      }).pipe(withController(waiting)))

    it.scoped("a deferred step is not a failed step: it waits, then completes with its result", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        const first = yield* Effect.fork(ctl.run("score", Effect.as(Effect.sleep(1000), { score: 1 })))
        yield* settleFibers
        yield* mem.setUsage(900)
        const second = yield* Effect.fork(ctl.run("score", Effect.succeed({ score: 1 })))
        yield* settleFibers
        assert.strictEqual((yield* snapshotMemory(ctl)).waiting, 1)
        yield* TestClock.adjust(1000)
        assert.deepStrictEqual(yield* Fiber.join(first), { score: 1 })
        yield* mem.setUsage(100)
        yield* TestClock.adjust(250)
        assert.deepStrictEqual(yield* Fiber.join(second), { score: 1 })
        const memory = yield* snapshotMemory(ctl)
        assert.strictEqual(memory.waiting, 0)
        assert.strictEqual(memory.deferrals, 1)
      }).pipe(withController(waiting)))
  })

  describe("snapshot", () => {
    it.scoped("reports current usage and where it came from, following usage down", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        const snapshot = yield* ctl.snapshot
        assert.deepStrictEqual(snapshot, {
          runtime: "node",
          concurrency: { mode: "adaptive", limit: 8, min: 1, max: 8 },
          inFlight: 0,
          rssBytes: 400,
          rssLimitBytes: 1000,
          rssPct: 40,
          memory: {
            source: "custom",
            gate: "open",
            admitPct: 75,
            resumePct: 65,
            waiting: 0,
            deferrals: 0,
            headroomTicks: 0
          }
        })
        yield* mem.setUsage(200)
        const lower = yield* ctl.snapshot
        assert.strictEqual(lower.rssBytes, 200)
        assert.strictEqual(lower.rssPct, 20)
      }).pipe(withController(fixture, { usage: 400, limit: LIMIT })))

    it.scoped("publishes what it learned per step name, and the idle usage", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        yield* learn(ctl, mem, "handle_FAILURE_RISK", 500)
        yield* TestClock.adjust(fixture.tickMs)
        const memory = yield* snapshotMemory(ctl)
        assert.deepStrictEqual(memory.stepCostBytes, { handle_FAILURE_RISK: 500 })
        assert.strictEqual(memory.idleUsageBytes, 100)
      }).pipe(withController(fixture)))

    it.scoped("throughput and p95 cover the last 100 step completions only", () =>
      Effect.gen(function*() {
        const { ctl } = yield* env
        // 150 steps, one after another, the i-th taking i ms: the window keeps steps 51-150
        for (let i = 1; i <= 150; i++) yield* ctl.run("step", TestClock.adjust(i))
        const snapshot = yield* ctl.snapshot
        // the 95th of the 100 durations 51..150
        assert.strictEqual(snapshot.p95Ms, 145)
        // 100 completions from step 51's end (51·52/2 ms) to step 150's (150·151/2 ms): 9,999 ms
        assert.closeTo(snapshot.throughputPerMin!, (100 / 9_999) * 60_000, 1e-9)
      }).pipe(withController(4)))

    it.scoped("a fixed worker still reports memory, throughput and p95, without gate fields", () =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        yield* ctl.run("step", TestClock.adjust(100))
        yield* learn(ctl, mem, "big", 300)
        yield* ctl.run("step", TestClock.adjust(300))
        const snapshot = yield* ctl.snapshot
        assert.deepStrictEqual(snapshot.concurrency, { mode: "fixed", limit: 4 })
        assert.strictEqual(snapshot.rssPct, 40)
        assert.strictEqual(snapshot.p95Ms, 300)
        assert.isDefined(snapshot.throughputPerMin)
        assert.strictEqual(snapshot.memory.source, "custom")
        // a fixed worker reads memory on its ticks only, never on the task path: no cost is learned
        // from readings taken between ticks
        assert.isUndefined(snapshot.memory.stepCostBytes)
        for (const key of ["gate", "admitPct", "resumePct", "waiting", "deferrals", "headroomTicks"]) {
          assert.isFalse(key in snapshot.memory, key)
        }
      }).pipe(withController(4, { usage: 400, limit: LIMIT })))

    it.scoped("the control loop runs for a fixed worker too (cpuPct from the second tick)", () =>
      Effect.gen(function*() {
        const { ctl } = yield* env
        yield* TestClock.adjust(2000)
        assert.isUndefined((yield* ctl.snapshot).cpuPct)
        yield* TestClock.adjust(2000)
        assert.isDefined((yield* ctl.snapshot).cpuPct)
      }).pipe(withController(2)))
  })

  describe("layers", () => {
    const limitAndMode = Effect.map(
      ConcurrencyController.ConcurrencyController,
      (ctl) => [ctl.config.mode, ctl.config.limit] as const
    )

    it.scoped("layerFixed and layerAdaptive build fixed and adaptive controllers", () =>
      Effect.gen(function*() {
        const memory = Memory.layerTest({ usage: 100, limit: LIMIT })
        const fixed = yield* limitAndMode.pipe(Effect.provide(Layer.provide(ConcurrencyController.layerFixed(3), memory)))
        assert.deepStrictEqual(fixed, ["fixed", 3])
        const adaptive = yield* limitAndMode.pipe(
          Effect.provide(Layer.provide(ConcurrencyController.layerAdaptive({ min: 2, max: 4 }), memory))
        )
        assert.deepStrictEqual(adaptive, ["adaptive", 2])
      }))

    it.scoped("layerConfig reads the option from configuration", () =>
      Effect.gen(function*() {
        const controller = ConcurrencyController.layerConfig(Config.integer("CONCURRENCY")).pipe(
          Layer.provide(Memory.layerTest({ usage: 100, limit: LIMIT }))
        )
        const result = yield* limitAndMode.pipe(
          Effect.provide(controller),
          Effect.withConfigProvider(ConfigProvider.fromMap(new Map([["CONCURRENCY", "5"]])))
        )
        assert.deepStrictEqual(result, ["fixed", 5])
      }))

    it.scoped("an invalid option fails the layer with a ConcurrencyOptionError", () =>
      Effect.gen(function*() {
        const error = yield* limitAndMode.pipe(
          Effect.provide(ConcurrencyController.layerTest("adaptve" as ConcurrencyOption)),
          Effect.flip
        )
        assert.strictEqual(error._tag, "ConcurrencyOptionError")
      }))
  })

  describe("nine bases simulation (9 jobs, base 100, cost 300 each, limit 1000)", () => {
    const simulate = (option: ConcurrencyOption) =>
      Effect.gen(function*() {
        const { ctl, mem } = yield* env
        const peak = yield* Ref.make(0)
        const done = yield* Ref.make(0)
        const job = Effect.gen(function*() {
          yield* mem.addUsage(300)
          const usage = (yield* (yield* Memory.MemorySource).sample()).bytes ?? 0
          yield* Ref.update(peak, (p) => Math.max(p, usage))
          yield* Effect.sleep(100)
          yield* mem.addUsage(-300)
          yield* Ref.update(done, (n) => n + 1)
        })
        const fibers = yield* Effect.forEach(
          Array.from({ length: 9 }),
          () => Effect.fork(ctl.run("base", job)),
          { concurrency: "unbounded" }
        )
        yield* settleFibers
        for (let i = 0; i < 1000 && (yield* Ref.get(done)) < 9; i++) yield* TestClock.adjust(10)
        yield* Fiber.joinAll(fibers)
        return { peak: yield* Ref.get(peak), done: yield* Ref.get(done) }
      }).pipe(withController(option))

    it.scoped("the gate keeps the peak under the container limit, and every job runs", () =>
      Effect.gen(function*() {
        const { done, peak } = yield* simulate(fixture)
        assert.strictEqual(done, 9)
        assert.isBelow(peak, LIMIT)
      }))

    it.scoped("without the gate the same batch would be OOM-killed", () =>
      Effect.gen(function*() {
        const { done, peak } = yield* simulate({ ...fixture, ramAdmission: false })
        assert.strictEqual(done, 9)
        assert.isAbove(peak, LIMIT)
      }))
  })
})
