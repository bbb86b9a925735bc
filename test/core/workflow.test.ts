import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import * as Workflow from "../../src/core/Workflow.js"
import type { HistoryEvent, WorkflowCommand } from "../../src/wire/WorkflowProtocol.js"
import { makeTask } from "./workflowSupport.js"

const T0 = 1_735_689_600_000

const pipeline = Workflow.make("pipeline", (baseId: string, ctx) =>
  Effect.gen(function*() {
    const startedAt = yield* ctx.now()
    const rows = yield* ctx.step("ingestion", { key: `/${baseId}/data.csv` }, { group: "pipeline" })
    yield* ctx.sleep(60_000)
    return { rows, startedAt }
  }))

const process = (workflows: Workflow.WorkflowRegistry, history: ReadonlyArray<HistoryEvent>, extra: Parameters<typeof makeTask>[2] = {}, options?: Workflow.ProcessWorkflowTaskOptions) =>
  Workflow.processWorkflowTask(workflows, makeTask((workflows as ReadonlyArray<Workflow.Workflow>)[0]!.name, history, extra), options)

describe("Workflow replay (D.1 WorkflowReplayTest)", () => {
  it.effect("now, then a dispatched step, then a sleep completes across turns", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(T0)
      const turn1 = yield* process([pipeline], [], { input: "b1" })
      assert.strictEqual(turn1.status, "continue")
      assert.deepStrictEqual(turn1.commands, [
        { kind: "recordStep", seq: 0, name: "now", output: T0, startedAt: T0, finishedAt: T0 },
        { kind: "call", seq: 1, name: "ingestion", group: "pipeline", input: { key: "/b1/data.csv" } }
      ])
      const history2: Array<HistoryEvent> = [
        { seq: 0, kind: "step", name: "now", output: T0 },
        { seq: 1, kind: "call", name: "ingestion", output: 42 }
      ]
      const turn2 = yield* process([pipeline], history2, { input: "b1" })
      assert.strictEqual(turn2.status, "continue")
      assert.deepStrictEqual(turn2.commands, [{ kind: "sleep", seq: 2, ms: 60_000 }])
      const turn3 = yield* process([pipeline], [...history2, { seq: 2, kind: "timer", name: "sleep:2" }], { input: "b1" })
      assert.strictEqual(turn3.status, "completed")
      assert.deepStrictEqual(turn3.commands, [])
      assert.deepStrictEqual(turn3.output, { rows: 42, startedAt: T0 })
      const unnamedTimer = yield* process([pipeline], [...history2, { seq: 2, kind: "timer" }], { input: "b1" })
      assert.strictEqual(unnamedTimer.status, "completed")
    }))

  it.effect("a failed dispatched step is catchable in workflow code", () =>
    Effect.gen(function*() {
      const charge = Workflow.make("charge", (_: unknown, ctx) =>
        ctx.step("charge", { amount: 5 }).pipe(
          Effect.as({ ok: true, compensated: false }),
          Effect.catchTag("StepFailed", (failed) =>
            Effect.succeed({ ok: false, compensated: true, reason: failed.error.message, code: failed.error.code }))
        ))
      const decision = yield* process([charge], [
        { seq: 0, kind: "call", name: "charge", error: { message: "card declined", code: "declined", retryable: false } }
      ])
      assert.strictEqual(decision.status, "completed")
      assert.deepStrictEqual(decision.output, { ok: false, compensated: true, reason: "card declined", code: "declined" })
    }))

  it.effect("an uncaught failure fails the run with the recorded error", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("wf", (_: unknown, ctx) => ctx.step("x"))
      const error = { message: "boom", code: "exploded", retryable: false }
      const decision = yield* process([wf], [{ seq: 0, kind: "call", name: "x", error }])
      assert.strictEqual(decision.status, "failed")
      assert.strictEqual(decision.error?.message, "boom")
      assert.deepStrictEqual(decision.error, error)
    }))

  it.effect("waitForSignal resolves from pendingSignals, else blocks with a waitSignal command", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("approval", (_: unknown, ctx) => ctx.waitForSignal("approve"))
      const blocked = yield* process([wf], [])
      assert.strictEqual(blocked.status, "continue")
      assert.deepStrictEqual(blocked.commands, [{ kind: "waitSignal", seq: 0, signal: "approve" }])
      const pending = yield* process([wf], [], { pendingSignals: [{ seq: 0, signal: "approve", payload: { by: "davi" } }] })
      assert.strictEqual(pending.status, "completed")
      assert.deepStrictEqual(pending.commands, [])
      assert.deepStrictEqual(pending.output, { by: "davi" })
      const delivered = yield* process([wf], [{ seq: 0, kind: "signal", output: { by: "ana" } }])
      assert.deepStrictEqual(delivered.output, { by: "ana" })
    }))

  it.effect("non-determinism is detected: history has a timer where the code calls a step", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("wf", (_: unknown, ctx) => ctx.step("x"))
      const decision = yield* process([wf], [{ seq: 0, kind: "timer", name: "sleep:0" }])
      assert.strictEqual(decision.status, "failed")
      assert.include(decision.error?.message, "history at seq 0")
      assert.include(decision.error?.message, "timer/\"sleep:0\"")
      assert.include(decision.error?.message, "call/\"x\"")
      assert.isUndefined(decision.error?.code)
    }))

  it.effect("an unknown workflow fails cleanly with code no_workflow", () =>
    Effect.gen(function*() {
      const decision = yield* Workflow.processWorkflowTask([pipeline], makeTask("nope"))
      assert.strictEqual(decision.status, "failed")
      assert.strictEqual(decision.error?.code, "no_workflow")
      assert.include(decision.error?.message, "\"nope\"")
      assert.include(decision.error?.message, "pipeline")
      assert.deepStrictEqual(decision.commands, [])
      assert.strictEqual(decision.taskId, "run-1:wf:00000001")
      const empty = yield* Workflow.processWorkflowTask(new Map(), makeTask("nope"))
      assert.strictEqual(empty.error?.code, "no_workflow")
    }))

  it.effect("step emits exactly the call command {kind, seq, name, group, input} and nothing else", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("wf", (_: unknown, ctx) => ctx.step("ingestion", { a: 1 }, { group: "pipeline" }))
      const decision = yield* process([wf], [])
      const call = decision.commands[0]!
      assert.deepStrictEqual(call, { kind: "call", seq: 0, name: "ingestion", group: "pipeline", input: { a: 1 } })
      assert.deepStrictEqual(Object.keys(call).sort(), ["group", "input", "kind", "name", "seq"])
    }))

  it.effect("the context has no call op (step is the only dispatch)", () =>
    Effect.gen(function*() {
      let effectHasCall: boolean | undefined
      let asyncHasCall: boolean | undefined
      const viaEffect = Workflow.make("e", (_: unknown, ctx) => Effect.sync(() => { effectHasCall = "call" in ctx }))
      const viaAsync = Workflow.fromPromise("a", (ctx) => { asyncHasCall = "call" in ctx })
      yield* Workflow.processWorkflowTask([viaEffect], makeTask("e"))
      yield* Workflow.processWorkflowTask([viaAsync], makeTask("a"))
      assert.strictEqual(effectHasCall, false)
      assert.strictEqual(asyncHasCall, false)
    }))

  it.effect("now returns epoch milliseconds", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(T0 + 123)
      const wf = Workflow.make("wf", (_: unknown, ctx) => ctx.now())
      const decision = yield* process([wf], [])
      const record = decision.commands[0] as Extract<WorkflowCommand, { kind: "recordStep" }>
      assert.strictEqual(record.name, "now")
      assert.isTrue(Number.isInteger(record.output))
      assert.isAbove(record.output as number, 1e12)
      assert.strictEqual(decision.output, T0 + 123)
    }))

  it.effect("now records once, then replays the captured value", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(T0)
      const wf = Workflow.make("wf", (_: unknown, ctx) =>
        Effect.gen(function*() {
          const at = yield* ctx.now()
          yield* ctx.step("work")
          return at
        }))
      const turn1 = yield* process([wf], [])
      assert.deepStrictEqual(turn1.commands.map((c) => c.kind), ["recordStep", "call"])
      yield* TestClock.setTime(T0 + 99_000)
      const turn2 = yield* process([wf], [{ seq: 0, kind: "step", name: "now", output: T0 }, { seq: 1, kind: "call", name: "work", output: null }])
      assert.strictEqual(turn2.status, "completed")
      assert.strictEqual(turn2.output, T0)
      assert.deepStrictEqual(turn2.commands, [])
    }))

  it.effect("a now recorded by the Python worker (now#<seq>) replays too", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("wf", (_: unknown, ctx) => Effect.zipRight(ctx.sideEffect(Effect.succeed(1)), ctx.now()))
      const decision = yield* process([wf], [
        { seq: 0, kind: "step", name: "sideEffect", output: 1 },
        { seq: 1, kind: "step", name: "now#1", output: T0 }
      ])
      assert.strictEqual(decision.output, T0)
      const wrongSeq = yield* process([wf], [
        { seq: 0, kind: "step", name: "sideEffect", output: 1 },
        { seq: 1, kind: "step", name: "now#0", output: T0 }
      ])
      assert.strictEqual(wrongSeq.status, "failed")
      assert.include(wrongSeq.error?.message, "history at seq 1")
    }))

  it.effect("sideEffect records once under the name sideEffect, then replays without running", () =>
    Effect.gen(function*() {
      let runs = 0
      const wf = Workflow.make("wf", (_: unknown, ctx) =>
        Effect.gen(function*() {
          const token = yield* ctx.sideEffect(Effect.sync(() => { runs++; return "tok-1" }))
          yield* ctx.step("use", token)
          return token
        }))
      const turn1 = yield* process([wf], [])
      assert.strictEqual(runs, 1)
      assert.deepStrictEqual(turn1.commands[0], { kind: "recordStep", seq: 0, name: "sideEffect", output: "tok-1", startedAt: 0, finishedAt: 0 })
      const turn2 = yield* process([wf], [{ seq: 0, kind: "step", name: "sideEffect", output: "tok-1" }, { seq: 1, kind: "call", name: "use", output: 1 }])
      assert.strictEqual(runs, 1)
      assert.strictEqual(turn2.output, "tok-1")
    }))

  it.effect("sideEffect supports an async callable", () =>
    Effect.gen(function*() {
      const wf = Workflow.fromPromise("wf", async (ctx) => {
        const value = await ctx.sideEffect(async () => {
          await Promise.resolve()
          return { id: 7 }
        })
        return value
      })
      const decision = yield* process([wf], [])
      assert.strictEqual(decision.status, "completed")
      assert.deepStrictEqual(decision.commands[0], { kind: "recordStep", seq: 0, name: "sideEffect", output: { id: 7 }, startedAt: 0, finishedAt: 0 })
      const effectWf = Workflow.make("wf", (_: unknown, ctx) => ctx.sideEffect(Effect.promise(async () => ({ id: 8 }))))
      const viaEffect = yield* process([effectWf], [])
      assert.deepStrictEqual(viaEffect.output, { id: 8 })
    }))

  it.effect("an async sideEffect that waits on the event loop is awaited before the turn is decided", () =>
    Effect.gen(function*() {
      const wf = Workflow.fromPromise("wf", async (ctx) => {
        const value = await ctx.sideEffect(() =>
          new Promise<string>((resolve) => setImmediate(() => setImmediate(() => resolve("late"))))
        )
        return ctx.step("next", value)
      })
      const decision = yield* process([wf], [])
      assert.strictEqual(decision.status, "continue")
      assert.deepStrictEqual(decision.commands.map((c) => [c.seq, c.kind]), [[0, "recordStep"], [1, "call"]])
      assert.strictEqual((decision.commands[0] as { output?: unknown }).output, "late")
    }))

  it.effect("multiple sideEffects are distinct history entries", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("wf", (_: unknown, ctx) =>
        Effect.all([ctx.sideEffect(Effect.succeed("a")), ctx.sideEffect(Effect.succeed("b"))]))
      const decision = yield* process([wf], [])
      assert.deepStrictEqual(
        decision.commands.map((c) => [c.seq, (c as { name?: string }).name, (c as { output?: unknown }).output]),
        [[0, "sideEffect", "a"], [1, "sideEffect", "b"]]
      )
      assert.deepStrictEqual(decision.output, ["a", "b"])
    }))

  it.effect("now and sideEffect do not recompute on replay", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(T0)
      const wf = Workflow.make("wf", (_: unknown, ctx) =>
        Effect.all([ctx.now(), ctx.sideEffect(Effect.sync(() => "fresh"))]))
      const decision = yield* process([wf], [
        { seq: 0, kind: "step", name: "now", output: -1 },
        { seq: 1, kind: "step", name: "sideEffect", output: "from-history" }
      ])
      assert.deepStrictEqual(decision.output, [-1, "from-history"])
      assert.deepStrictEqual(decision.commands, [])
    }))
})

describe("Workflow turn outcomes", () => {
  it.effect("a local op whose body fails records a failed recordStep and raises StepFailed", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("wf", (_: unknown, ctx) => ctx.sideEffect(Effect.fail({ code: "nope", message: "no quota" })))
      const decision = yield* process([wf], [])
      assert.strictEqual(decision.status, "failed")
      assert.deepStrictEqual(decision.error, { message: "no quota", code: "nope" })
      assert.deepStrictEqual(decision.commands, [
        { kind: "recordStep", seq: 0, name: "sideEffect", error: { message: "no quota", code: "nope" }, startedAt: 0, finishedAt: 0 }
      ])
      const replayed = yield* process([wf], [{ seq: 0, kind: "step", name: "sideEffect", error: { message: "no quota" } }])
      assert.strictEqual(replayed.status, "failed")
      assert.deepStrictEqual(replayed.commands, [])
    }))

  it.effect("a body that throws or fails with a non-Error still yields a useful failure message", () =>
    Effect.gen(function*() {
      const throwsString = Workflow.fromPromise("s", () => {
        throw "bad input"
      })
      const rejectsObject = Workflow.fromPromise("o", async () => {
        throw { reason: "quota", limit: 3 }
      })
      const throwsUndefined = Workflow.fromPromise("u", async () => {
        throw undefined
      })
      const failsObject = Workflow.make("e", () => Effect.fail({ reason: "quota" }))
      const dies = Workflow.make("d", () => Effect.die(42))
      const messageOf = (name: string) =>
        Effect.map(
          Workflow.processWorkflowTask([throwsString, rejectsObject, throwsUndefined, failsObject, dies], makeTask(name)),
          (d) => [d.status, d.error?.message]
        )
      assert.deepStrictEqual(yield* messageOf("s"), ["failed", "bad input"])
      assert.deepStrictEqual(yield* messageOf("o"), ["failed", "workflow \"o\" failed with {\"reason\":\"quota\",\"limit\":3}"])
      assert.deepStrictEqual(yield* messageOf("u"), ["failed", "workflow \"u\" failed with undefined"])
      assert.deepStrictEqual(yield* messageOf("e"), ["failed", "workflow \"e\" failed with {\"reason\":\"quota\"}"])
      assert.deepStrictEqual(yield* messageOf("d"), ["failed", "workflow \"d\" failed with number 42"])
    }))

  it.effect("a thrown Error becomes message, code, retryable and stack", () =>
    Effect.gen(function*() {
      const wf = Workflow.fromPromise("wf", async () => {
        throw Object.assign(new Error("kaput"), { code: "E_KAPUT", retryable: false })
      })
      const decision = yield* Workflow.processWorkflowTask([wf], makeTask("wf"))
      assert.strictEqual(decision.error?.message, "kaput")
      assert.strictEqual(decision.error?.code, "E_KAPUT")
      assert.strictEqual(decision.error?.retryable, false)
      assert.include(decision.error?.stack, "kaput")
    }))

  it.effect("a cancelled run stops at the next op boundary with a cancelled decision", () =>
    Effect.gen(function*() {
      let cancelled = false
      const wf = Workflow.make("wf", (_: unknown, ctx) =>
        Effect.gen(function*() {
          yield* ctx.sideEffect(Effect.sync(() => { cancelled = true }))
          yield* ctx.step("never-dispatched").pipe(Effect.catchAll(() => Effect.void))
          return "done"
        }))
      const decision = yield* process([wf], [], {}, { isCancelled: (runId) => runId === "run-1" && cancelled })
      assert.strictEqual(decision.status, "cancelled")
      assert.deepStrictEqual(decision.commands.map((c) => c.kind), ["recordStep"])
      cancelled = false
      const asyncWf = Workflow.fromPromise("wf", async (ctx) => {
        await ctx.sideEffect(() => { cancelled = true })
        try {
          await ctx.step("never-dispatched")
        } catch {
          return "swallowed"
        }
      })
      const asyncDecision = yield* process([asyncWf], [], {}, { isCancelled: () => cancelled })
      assert.strictEqual(asyncDecision.status, "cancelled")
      assert.deepStrictEqual(asyncDecision.commands.map((c) => c.kind), ["recordStep"])
    }))

  it.effect("a suspension cannot be swallowed by catchAll or try/catch", () =>
    Effect.gen(function*() {
      const viaEffect = Workflow.make("wf", (_: unknown, ctx) =>
        ctx.step("a").pipe(Effect.catchAll(() => Effect.succeed("fallback"))))
      const viaAsync = Workflow.fromPromise("wf", async (ctx) => {
        try {
          return await ctx.step("a")
        } catch {
          return "fallback"
        }
      })
      for (const wf of [viaEffect, viaAsync]) {
        const decision = yield* process([wf], [])
        assert.strictEqual(decision.status, "continue")
        assert.deepStrictEqual(decision.commands, [{ kind: "call", seq: 0, name: "a", group: "default", input: undefined }])
      }
    }))

  it.effect("an Effect body that interrupts itself without a blocked op fails with a clear message", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("wf", (_: unknown, ctx) => Effect.zipRight(ctx.sideEffect(Effect.succeed(1)), Effect.interrupt))
      const decision = yield* process([wf], [])
      assert.strictEqual(decision.status, "failed")
      assert.include(decision.error?.message, "was interrupted without waiting on a durable op")
      assert.deepStrictEqual(decision.commands.map((c) => c.kind), ["recordStep"])
    }))

  it.effect("an unsupported op fails the turn with a clear error, even when caught", () =>
    Effect.gen(function*() {
      const viaEffect = Workflow.make("wf", (_: unknown, ctx) =>
        Effect.gen(function*() {
          yield* ctx.sideEffect(Effect.succeed(1))
          yield* ctx.continueAsNew({}).pipe(Effect.catchAllDefect(() => Effect.void))
          return "kept going"
        }))
      const viaAsync = Workflow.fromPromise("wf", async (ctx) => {
        await ctx.sideEffect(() => 1)
        try {
          await ctx.patched("v2")
        } catch {
          // ignored on purpose
        }
        return "kept going"
      })
      for (const [wf, op] of [[viaEffect, "continueAsNew"], [viaAsync, "patched"]] as const) {
        const decision = yield* process([wf], [])
        assert.strictEqual(decision.status, "failed")
        assert.include(decision.error?.message, `ctx.${op} is unsupported in a remote workflow`)
        assert.deepStrictEqual(decision.commands.map((c) => c.kind), ["recordStep"])
      }
    }))

  it.effect("an Effect body that catches a suspension's interruption (catchAllCause, Effect.exit) cannot run past it", () =>
    Effect.gen(function*() {
      const charge: WorkflowCommand = { kind: "call", seq: 0, name: "charge", group: "default", input: undefined }
      // the step's failure is inspected with Effect.exit, so the first turn's suspension is an Exit too
      const inspected = Workflow.make("wf", (_: unknown, ctx) =>
        Effect.gen(function*() {
          const exit = yield* Effect.exit(ctx.step("charge"))
          if (exit._tag === "Success") return exit.value
          yield* Effect.all([ctx.step("refund"), ctx.sideEffect(Effect.succeed("noted"))], { concurrency: "unbounded" })
          return "refunded"
        }))
      const first = yield* process([inspected], [])
      assert.strictEqual(first.status, "continue")
      assert.deepStrictEqual(first.commands, [charge])
      const paid = yield* process([inspected], [{ seq: 0, kind: "call", name: "charge", output: "ok" }])
      assert.strictEqual(paid.status, "completed")
      assert.strictEqual(paid.output, "ok")
      const declined = yield* process([inspected], [{ seq: 0, kind: "call", name: "charge", error: { message: "declined" } }])
      assert.strictEqual(declined.status, "continue")
      assert.deepStrictEqual(declined.commands.map((c) => c.kind), ["call", "recordStep"])
      // the same fiber going on to its next op sequentially is stopped there, before it runs anything
      let ran = 0
      const sequential = Workflow.make("wf", (_: unknown, ctx) =>
        Effect.gen(function*() {
          const exit = yield* Effect.exit(ctx.step("charge"))
          if (exit._tag === "Success") return exit.value
          yield* ctx.sideEffect(Effect.sync(() => ++ran))
          return yield* ctx.step("refund")
        }))
      const parked = yield* process([sequential], [])
      assert.strictEqual(parked.status, "continue")
      assert.deepStrictEqual(parked.commands, [charge])
      assert.strictEqual(ran, 0)
      // caught and turned into a value, or into a failure: still a suspension, not the run's end
      const fallback = Workflow.make("wf", (_: unknown, ctx) =>
        ctx.step("charge").pipe(Effect.catchAllCause(() => Effect.succeed("fallback"))))
      const failing = Workflow.make("wf", (_: unknown, ctx) =>
        ctx.step("charge").pipe(Effect.catchAllCause((cause) => Effect.fail(new Error(`charge: ${cause._tag}`)))))
      for (const wf of [fallback, failing]) {
        const decision = yield* process([wf], [])
        assert.strictEqual(decision.status, "continue")
        assert.deepStrictEqual(decision.commands, [charge])
      }
      // a cancelled run stays cancelled when the body catches the interruption
      const cancelled = yield* process([fallback], [], {}, { isCancelled: () => true })
      assert.strictEqual(cancelled.status, "cancelled")
      assert.deepStrictEqual(cancelled.commands, [])
    }))

  it.effect("an Effect body that catches the suspension of a concurrent Effect.all still suspends with every branch's step scheduled", () =>
    Effect.gen(function*() {
      let ran = 0
      const wf = Workflow.make("wf", (_: unknown, ctx) =>
        Effect.gen(function*() {
          const exit = yield* Effect.exit(Effect.all([ctx.step("a"), ctx.step("b")], { concurrency: "unbounded" }))
          if (exit._tag === "Success") return exit.value
          yield* ctx.sideEffect(Effect.sync(() => ran++))
          return "fallback"
        }))
      const first = yield* process([wf], [])
      assert.strictEqual(first.status, "continue")
      assert.deepStrictEqual(first.commands, [
        { kind: "call", seq: 0, name: "a", group: "default", input: undefined },
        { kind: "call", seq: 1, name: "b", group: "default", input: undefined }
      ])
      assert.strictEqual(ran, 0)
      // one branch in history: the other still holds the body
      const half = yield* process([wf], [{ seq: 0, kind: "call", name: "a", output: 1 }])
      assert.strictEqual(half.status, "continue")
      assert.deepStrictEqual(half.commands.map((c) => [c.kind, c.seq]), [["call", 1]])
      const done = yield* process([wf], [{ seq: 0, kind: "call", name: "a", output: 1 }, { seq: 1, kind: "call", name: "b", output: 2 }])
      assert.strictEqual(done.status, "completed")
      assert.deepStrictEqual(done.output, [1, 2])
      assert.strictEqual(ran, 0)
      // a cancelled run stays cancelled when the body catches its branches' stop and returns
      const returning = Workflow.make("wf", (_: unknown, ctx) =>
        Effect.as(Effect.exit(Effect.all([ctx.step("a"), ctx.step("b")], { concurrency: "unbounded" })), "fallback"))
      const cancelled = yield* process([returning], [], {}, { isCancelled: () => true })
      assert.strictEqual(cancelled.status, "cancelled")
      assert.deepStrictEqual(cancelled.commands, [])
    }))

  it.effect("an Effect body that catches the suspension of a race whose branches all block still suspends", () =>
    Effect.gen(function*() {
      const viaExit = Workflow.make("wf", (_: unknown, ctx) =>
        Effect.gen(function*() {
          const exit = yield* Effect.exit(Effect.race(ctx.step("a"), ctx.waitForSignal("approve")))
          return exit._tag === "Success" ? "raced" : yield* Effect.as(ctx.step("fallback"), "fallback")
        }))
      const viaCause = Workflow.make("wf", (_: unknown, ctx) =>
        Effect.raceAll([ctx.step("a"), ctx.waitForSignal("approve")]).pipe(
          Effect.catchAllCause(() => Effect.succeed("fallback"))
        ))
      for (const wf of [viaExit, viaCause]) {
        const decision = yield* process([wf], [])
        assert.strictEqual(decision.status, "continue")
        assert.deepStrictEqual(decision.commands, [
          { kind: "call", seq: 0, name: "a", group: "default", input: undefined },
          { kind: "waitSignal", seq: 1, signal: "approve" }
        ])
      }
    }))

  it.effect("a caught race whose winner is in history completes with the winner, its loser's command kept", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("wf", (_: unknown, ctx) =>
        Effect.gen(function*() {
          const exit = yield* Effect.exit(Effect.race(
            Effect.as(ctx.waitForSignal("approve"), "approved"),
            Effect.as(ctx.sleep("1h"), "timed out")
          ))
          return exit._tag === "Success" ? exit.value : "caught"
        }))
      const decision = yield* process([wf], [{ seq: 1, kind: "timer" }])
      assert.strictEqual(decision.status, "completed")
      assert.strictEqual(decision.output, "timed out")
      assert.deepStrictEqual(decision.commands, [{ kind: "waitSignal", seq: 0, signal: "approve" }])
    }))

  it.effect("an Effect body that catches the suspension of a concurrent forEach still suspends", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("wf", (_: unknown, ctx) =>
        Effect.forEach(["a", "b", "c"], (name) => ctx.step(name), { concurrency: 2 }).pipe(
          Effect.catchAllCause(() => Effect.as(ctx.sideEffect(Effect.succeed("noted")), "fallback"))
        ))
      const first = yield* process([wf], [])
      assert.strictEqual(first.status, "continue")
      assert.deepStrictEqual(first.commands.map((c) => [c.kind, c.seq]), [["call", 0], ["call", 1]])
      // a finished branch frees its slot for the next item
      const next = yield* process([wf], [{ seq: 0, kind: "call", name: "a", output: 1 }])
      assert.strictEqual(next.status, "continue")
      assert.deepStrictEqual(next.commands.map((c) => [c.kind, c.seq]), [["call", 1], ["call", 2]])
    }))

  it.effect("an op blocked in an uninterruptible region suspends the turn, and the body still unwinds afterwards", () =>
    Effect.gen(function*() {
      let released = false
      const wf = Workflow.make("wf", (_: unknown, ctx) =>
        Effect.scoped(Effect.acquireRelease(ctx.step("reserve"), () => Effect.sync(() => { released = true }))).pipe(
          Effect.exit,
          Effect.zipRight(ctx.sideEffect(Effect.succeed("past"))),
          Effect.ensuring(Effect.sync(() => { released = true }))
        ))
      const decision = yield* process([wf], [])
      assert.strictEqual(decision.status, "continue")
      assert.deepStrictEqual(decision.commands, [{ kind: "call", seq: 0, name: "reserve", group: "default", input: undefined }])
      // the body is interrupted once the turn is decided: its finalizer runs within a macrotask
      yield* Effect.promise(() => new Promise((resolve) => setImmediate(resolve)))
      assert.isTrue(released)
    }))

  it.effect("concurrent ops blocked in an uninterruptible region suspend the turn, and the body still unwinds afterwards", () =>
    Effect.gen(function*() {
      let unwound = 0
      const wf = Workflow.make("wf", (_: unknown, ctx) =>
        Effect.scoped(Effect.acquireRelease(Effect.all([ctx.step("a"), ctx.step("b")], { concurrency: 2 }), () => Effect.void)).pipe(
          Effect.ensuring(Effect.sync(() => {
            unwound++
          }))
        ))
      for (let i = 0; i < 3; i++) {
        const decision = yield* process([wf], [])
        assert.strictEqual(decision.status, "continue")
        assert.deepStrictEqual(decision.commands.map((c) => [c.kind, c.seq]), [["call", 0], ["call", 1]])
      }
      // the branches waiting in the acquire are interrupted with the body: it ends, rather than
      // staying in memory (its turn and history with it) for good, turn after turn
      yield* Effect.promise(() => new Promise((resolve) => setImmediate(resolve)))
      assert.strictEqual(unwound, 3)
    }))

  it.effect("a turn interrupted while a caught local op runs beside an op blocked in an uninterruptible region ends once the local op does", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("wf", (_: unknown, ctx) =>
        Effect.scoped(Effect.acquireRelease(
          Effect.all([
            ctx.step("a"),
            ctx.sideEffect(Effect.as(Effect.sleep("1 second"), "slow")).pipe(Effect.catchAllCause(() => Effect.succeed("fallback")))
          ], { concurrency: 2 }),
          () => Effect.void
        )))
      // daemons: without the body's end, the interruption would hang the test's own end too
      const turn = yield* Effect.forkDaemon(process([wf], []))
      yield* Effect.repeatN(Effect.yieldNow(), 20)
      assert.isNull(turn.unsafePoll(), "the local op is in flight")
      // the worker's stop, say: the local op in the acquire cannot be cut, and is waited for
      const stopping = yield* Effect.forkDaemon(Fiber.interrupt(turn))
      yield* Effect.repeatN(Effect.yieldNow(), 20)
      yield* TestClock.adjust("1 second")
      yield* Effect.promise(() => new Promise((resolve) => setImmediate(resolve)))
      assert.isNotNull(stopping.unsafePoll(), "the interruption ends once the local op has")
    }))

  it.effect("an Effect race between a signal and a timer completes once the timer is in history", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("wf", (_: unknown, ctx) =>
        Effect.race(
          Effect.as(ctx.waitForSignal("approve"), "approved"),
          Effect.as(ctx.sleep("1h"), "timed out")
        ).pipe(Effect.flatMap((outcome) => Effect.as(ctx.step("notify", outcome), outcome))))
      const first = yield* process([wf], [])
      assert.strictEqual(first.status, "continue")
      assert.deepStrictEqual(first.commands.map((c) => c.kind), ["waitSignal", "sleep"])
      const timedOut = yield* process([wf], [{ seq: 1, kind: "timer" }])
      assert.strictEqual(timedOut.status, "continue")
      assert.deepStrictEqual(timedOut.commands.map((c) => [c.kind, c.seq]), [["waitSignal", 0], ["call", 2]])
      const done = yield* process([wf], [{ seq: 1, kind: "timer" }, { seq: 2, kind: "call", name: "notify", output: null }])
      assert.strictEqual(done.status, "completed")
      assert.strictEqual(done.output, "timed out")
    }))

  it.effect("options the wire cannot carry fail clearly instead of being ignored", () =>
    Effect.gen(function*() {
      const retries = Workflow.make("r", (_: unknown, ctx) => ctx.step("pay", {}, { retries: 3 }))
      const bounded = Workflow.make("b", (_: unknown, ctx) => ctx.waitForSignal("go", { timeoutMs: 1000 }))
      const r = yield* Workflow.processWorkflowTask([retries], makeTask("r"))
      assert.strictEqual(r.status, "failed")
      assert.include(r.error?.message, "ctx.step(..., { retries }) is unsupported in a remote workflow")
      const b = yield* Workflow.processWorkflowTask([bounded], makeTask("b"))
      assert.include(b.error?.message, "ctx.waitForSignal(..., { timeoutMs }) is unsupported in a remote workflow")
      assert.deepStrictEqual(b.commands, [])
    }))

  it.effect("a non-determinism error caught by workflow code still fails the turn", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("wf", (_: unknown, ctx) =>
        Effect.gen(function*() {
          yield* ctx.step("x").pipe(Effect.catchAllCause(() => Effect.void))
          yield* ctx.step("y")
        }))
      const decision = yield* process([wf], [{ seq: 0, kind: "call", name: "other", output: 1 }])
      assert.strictEqual(decision.status, "failed")
      assert.include(decision.error?.message, "history at seq 0 is call/\"other\", but replay reached call/\"x\"")
      assert.deepStrictEqual(decision.commands, [])
    }))

  it.effect("sleep takes milliseconds, a Duration or a duration string; a bad duration fails the turn", () =>
    Effect.gen(function*() {
      const sleeps = (d: Workflow.SleepDuration) => Workflow.make("wf", (_: unknown, ctx) => ctx.sleep(d))
      const msOf = (d: Workflow.SleepDuration) =>
        Effect.map(process([sleeps(d)], []), (decision) => (decision.commands[0] as { ms?: number } | undefined)?.ms)
      assert.strictEqual(yield* msOf(1500), 1500)
      assert.strictEqual(yield* msOf("30s"), 30_000)
      assert.strictEqual(yield* msOf("7 days"), 7 * 86_400_000)
      assert.strictEqual(yield* msOf("5 minutes"), 300_000)
      const bad = yield* process([sleeps("soon")], [])
      assert.strictEqual(bad.status, "failed")
      assert.include(bad.error?.message, "ctx.sleep: cannot read the duration \"soon\"")
      const negative = yield* process([sleeps(-5)], [])
      assert.include(negative.error?.message, "non-negative")
    }))

  it.effect("child starts a child run, then returns its output or raises its failure", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("parent", (_: unknown, ctx) => ctx.child("shipping", { order: 1 }))
      const start = yield* process([wf], [])
      assert.deepStrictEqual(start.commands, [{ kind: "startChild", seq: 0, workflow: "shipping", input: { order: 1 } }])
      const done = yield* process([wf], [{ seq: 0, kind: "child", output: { shipped: true } }])
      assert.deepStrictEqual(done.output, { shipped: true })
      const failed = yield* process([wf], [{ seq: 0, kind: "child", error: { message: "no stock" } }])
      assert.deepStrictEqual(failed.error, { message: "no stock" })
    }))

  it.effect("a call's group is the explicit group, else the worker's partition, else default", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("wf", (_: unknown, ctx) =>
        Effect.all([ctx.step("a", 1, { group: "tenant-a" }), ctx.step("b", 2)], { concurrency: "unbounded" }))
      const withPartition = yield* process([wf], [], {}, { partition: "eu" })
      assert.deepStrictEqual(withPartition.commands.map((c) => (c as { group?: string }).group), ["tenant-a", "eu"])
      const without = yield* process([wf], [])
      assert.deepStrictEqual(without.commands.map((c) => (c as { group?: string }).group), ["tenant-a", "default"])
    }))

  it.effect("concurrent blocking ops in one turn all record their commands, in seq order", () =>
    Effect.gen(function*() {
      const viaAsync = Workflow.fromPromise("wf", (ctx) => Promise.all([ctx.step("a"), ctx.sleep(10), ctx.waitForSignal("s")]))
      const decision = yield* process([viaAsync], [{ seq: 1, kind: "timer" }])
      assert.strictEqual(decision.status, "continue")
      assert.deepStrictEqual(decision.commands, [
        { kind: "call", seq: 0, name: "a", group: "default", input: undefined },
        { kind: "waitSignal", seq: 2, signal: "s" }
      ])
    }))

  it.effect("a race between a signal and a timer completes once the timer is in history", () =>
    Effect.gen(function*() {
      const wf = Workflow.fromPromise("wf", (ctx) =>
        Promise.race([ctx.waitForSignal("approve").then(() => "approved"), ctx.sleep("1h").then(() => "timed out")]))
      const first = yield* process([wf], [])
      assert.strictEqual(first.status, "continue")
      assert.deepStrictEqual(first.commands.map((c) => c.kind), ["waitSignal", "sleep"])
      const timedOut = yield* process([wf], [{ seq: 1, kind: "timer" }])
      assert.strictEqual(timedOut.status, "completed")
      assert.strictEqual(timedOut.output, "timed out")
    }))

  it.effect("an input that does not match the workflow's schema fails the run with the schema's explanation", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("wf", (input: { readonly id: number }, _ctx) => Effect.succeed(input.id * 2), {
        input: Schema.Struct({ id: Schema.Number })
      })
      const ok = yield* process([wf], [], { input: { id: 21 } })
      assert.strictEqual(ok.output, 42)
      const bad = yield* process([wf], [], { input: { id: "21" } })
      assert.strictEqual(bad.status, "failed")
      assert.include(bad.error?.message, "the run input does not match the workflow's input schema")
      assert.include(bad.error?.message, "id")
    }))

  it.effect("an async body awaiting other async work (no op blocked) is waited for", () =>
    Effect.gen(function*() {
      const wf = Workflow.fromPromise("wf", async (ctx) => {
        await new Promise((resolve) => setImmediate(resolve))
        await new Promise((resolve) => setImmediate(resolve))
        return ctx.step("after")
      })
      const decision = yield* process([wf], [])
      assert.strictEqual(decision.status, "continue")
      assert.deepStrictEqual(decision.commands.map((c) => c.seq), [0])
    }))

  it.effect("a local op an async body did not await is still recorded before the turn is decided", () =>
    Effect.gen(function*() {
      const wf = Workflow.fromPromise("wf", (ctx) => {
        void ctx.sideEffect(() => new Promise<string>((resolve) => setImmediate(() => resolve("audited"))))
        return "done"
      })
      const decision = yield* process([wf], [])
      assert.strictEqual(decision.status, "completed")
      assert.deepStrictEqual(decision.commands.map((c) => [c.kind, (c as { output?: unknown }).output]), [["recordStep", "audited"]])
    }))

  it.effect("interrupting a turn whose async body never settles ends it, and its later ops do nothing", () =>
    Effect.gen(function*() {
      let release: () => void = () => {}
      let effectsRun = 0
      const wf = Workflow.fromPromise("wf", async (ctx) => {
        await new Promise<void>((resolve) => { release = resolve })
        await ctx.sideEffect(() => { effectsRun++ })
      })
      const fiber = yield* Effect.fork(process([wf], []))
      yield* Effect.promise(() => new Promise((resolve) => setImmediate(resolve)))
      yield* Fiber.interrupt(fiber)
      release()
      yield* Effect.promise(() => new Promise((resolve) => setImmediate(resolve)))
      assert.strictEqual(effectsRun, 0)
    }))

  it.effect("replay is linear: a 10,000-entry history replays in one turn, with or without yielding, to the same decision", () =>
    Effect.gen(function*() {
      const n = 10_000
      const history: Array<HistoryEvent> = Array.from({ length: n }, (_, seq) => ({ seq, kind: "call", name: "s", output: seq }))
      const viaEffect = Workflow.make("wf", (_: unknown, ctx) =>
        Effect.gen(function*() {
          let sum = 0
          for (let i = 0; i <= n; i++) sum += (yield* ctx.step<number>("s", i))
          return sum
        }))
      const viaAsync = Workflow.fromPromise("wf", async (ctx) => {
        let sum = 0
        for (let i = 0; i <= n; i++) sum += await ctx.step<number>("s", i)
        return sum
      })
      const decisions = []
      for (const wf of [viaEffect, viaAsync]) {
        for (const yieldEvery of [0, 1, 500]) decisions.push(yield* process([wf], history, {}, { yieldEvery }))
      }
      for (const decision of decisions) {
        assert.deepStrictEqual(decision, decisions[0])
      }
      assert.strictEqual(decisions[0]!.status, "continue")
      assert.deepStrictEqual(decisions[0]!.commands, [{ kind: "call", seq: n, name: "s", group: "default", input: n }])
    }))
})
