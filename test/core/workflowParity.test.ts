import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as TestClock from "effect/TestClock"
import * as Workflow from "../../src/core/Workflow.js"
import type { HistoryEvent, WorkflowDecision } from "../../src/wire/WorkflowProtocol.js"
import { applyCommands, makeTask, type Resolve, withoutStacks } from "./workflowSupport.js"

/**
 * The same workflow written twice, as an Effect body and as an async body. Every op of the context is
 * exercised: now, sideEffect, step (with and without group), a caught step failure, sleep, a signal,
 * a child, a local gather, a call fan and a child fan.
 */
const order = {
  effect: Workflow.make("order", (input: { readonly id: string; readonly amount: number }, ctx) =>
    Effect.gen(function*() {
      const startedAt = yield* ctx.now()
      const token = yield* ctx.sideEffect((step) => Effect.sync(() => { step.log.info("minting"); return `tok-${input.id}` }))
      const charge = yield* ctx.step<{ readonly ok: boolean }>("charge", { token, amount: input.amount }, { group: "payments" }).pipe(
        Effect.catchTag("StepFailed", (failed) =>
          Effect.as(ctx.step("refund", { token, reason: failed.error.message }), { ok: false }))
      )
      yield* ctx.sleep("30s")
      const approval = yield* ctx.waitForSignal<{ readonly by: string }>("approve")
      const shipped = yield* ctx.child("ship", { id: input.id })
      const prices = yield* ctx.gather([["tax", Effect.succeed(input.amount * 0.2)], ["fee", Effect.succeed(1)]])
      const quotes = yield* ctx.gatherCalls([["quote-a", input.id], { name: "quote-b", input: input.id, group: "ext" }])
      const labels = yield* ctx.all("label", [1, 2])
      return { startedAt, token, charge, approval, shipped, prices, quotes, labels }
    })),
  async: Workflow.fromPromise("order", async (ctx, input: { readonly id: string; readonly amount: number }) => {
    const startedAt = await ctx.now()
    const token = await ctx.sideEffect((step) => { step.log.info("minting"); return `tok-${input.id}` })
    let charge: { readonly ok: boolean }
    try {
      charge = await ctx.step<{ readonly ok: boolean }>("charge", { token, amount: input.amount }, { group: "payments" })
    } catch (failed) {
      if (!(failed instanceof Workflow.StepFailed)) throw failed
      await ctx.step("refund", { token, reason: failed.error.message })
      charge = { ok: false }
    }
    await ctx.sleep("30s")
    const approval = await ctx.waitForSignal<{ readonly by: string }>("approve")
    const shipped = await ctx.child("ship", { id: input.id })
    const prices = await ctx.gather([["tax", () => input.amount * 0.2], ["fee", async () => 1]])
    const quotes = await ctx.gatherCalls([["quote-a", input.id], { name: "quote-b", input: input.id, group: "ext" }])
    const labels = await ctx.all("label", [1, 2])
    return { startedAt, token, charge, approval, shipped, prices, quotes, labels }
  })
}

const input = { id: "o-1", amount: 50 }

const turn = (wf: Workflow.Workflow, history: ReadonlyArray<HistoryEvent>, extra: Parameters<typeof makeTask>[2] = {}, options?: Workflow.ProcessWorkflowTaskOptions) =>
  Workflow.processWorkflowTask([wf], makeTask("order", history, { input, ...extra }), options)

/**
 * Drives both forms turn by turn against a simulated engine, asserting each turn's decisions are
 * identical (stacks aside), until the run settles. Returns the decisions of one form.
 */
const driveBoth = (
  resolve: Resolve,
  optionsFor: (history: ReadonlyArray<HistoryEvent>) => Workflow.ProcessWorkflowTaskOptions = () => ({})
) =>
  Effect.gen(function*() {
    let history: Array<HistoryEvent> = []
    const decisions: Array<WorkflowDecision> = []
    for (let i = 0; i < 20; i++) {
      const viaEffect = yield* turn(order.effect, history, {}, optionsFor(history))
      const viaAsync = yield* turn(order.async, history, {}, optionsFor(history))
      assert.deepStrictEqual(withoutStacks(viaAsync), withoutStacks(viaEffect), `turn ${i} differs`)
      decisions.push(viaEffect)
      if (viaEffect.status !== "continue") return decisions
      history = applyCommands(history, viaEffect.commands, resolve)
    }
    assert.fail("the run did not settle in 20 turns")
    return decisions
  })

const happy: Resolve = (command) => {
  switch (command.kind) {
    case "call":
      return { output: command.name === "charge" ? { ok: true } : `${command.name}:${String(command.input)}` }
    case "waitSignal":
      return { output: { by: "davi" } }
    case "startChild":
      return { output: { child: command.workflow, input: command.input } }
    default:
      return {}
  }
}

describe("an Effect body and an async body replay identically", () => {
  it.effect("over every turn of a run that succeeds", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(1_735_689_600_000)
      const decisions = yield* driveBoth(happy)
      assert.deepStrictEqual(decisions.map((d) => d.status), [
        "continue", "continue", "continue", "continue", "continue", "continue", "completed"
      ])
      assert.deepStrictEqual(decisions.at(-1)!.output, {
        startedAt: 1_735_689_600_000,
        token: "tok-o-1",
        charge: { ok: true },
        approval: { by: "davi" },
        shipped: { child: "ship", input: { id: "o-1" } },
        prices: [10, 1],
        quotes: ["quote-a:o-1", "quote-b:o-1"],
        labels: [{ child: "label", input: 1 }, { child: "label", input: 2 }]
      })
    }))

  it.effect("over every turn of a run that compensates a failed step, then fails on a child", () =>
    Effect.gen(function*() {
      const decisions = yield* driveBoth((command) => {
        if (command.kind === "call" && command.name === "charge") return { error: { message: "card declined", code: "declined" } }
        if (command.kind === "startChild" && command.workflow === "ship") return { error: { message: "no stock" } }
        return happy(command)
      })
      const calls = decisions.flatMap((d) => d.commands).filter((c) => c.kind === "call").map((c) => c.name)
      assert.deepStrictEqual(calls, ["charge", "refund"])
      const last = decisions.at(-1)!
      assert.strictEqual(last.status, "failed")
      assert.deepStrictEqual(last.error, { message: "no stock" })
    }))

  it.effect("over a run whose gathered calls fail", () =>
    Effect.gen(function*() {
      const decisions = yield* driveBoth((command) =>
        command.kind === "call" && command.name.startsWith("quote") ? { error: { message: `${command.name} down` } } : happy(command))
      const last = decisions.at(-1)!
      assert.strictEqual(last.status, "failed")
      assert.strictEqual(last.error?.message, "gather: 2 item(s) failed: quote-a, quote-b")
    }))

  it.effect("over a run that is cancelled mid-way", () =>
    Effect.gen(function*() {
      // The cancel lands once the charge is in history: the next turn stops at its first new op.
      const decisions = yield* driveBoth(happy, (history) => ({ isCancelled: () => history.length >= 4 }))
      assert.deepStrictEqual(decisions.map((d) => d.status), ["continue", "continue", "cancelled"])
      assert.deepStrictEqual(decisions.at(-1)!.commands, [])
    }))

  it.effect("over histories that no longer match the code", () =>
    Effect.gen(function*() {
      const histories: Array<ReadonlyArray<HistoryEvent>> = [
        [{ seq: 0, kind: "call", name: "charge", output: 1 }],
        [{ seq: 0, kind: "step", name: "now", output: 1 }, { seq: 1, kind: "step", name: "random", output: 1 }],
        [
          { seq: 0, kind: "step", name: "now", output: 1 },
          { seq: 1, kind: "step", name: "sideEffect", output: "t" },
          { seq: 2, kind: "call", name: "pay", output: 1 }
        ]
      ]
      for (const history of histories) {
        const viaEffect = yield* turn(order.effect, history)
        const viaAsync = yield* turn(order.async, history)
        assert.strictEqual(viaEffect.status, "failed")
        assert.include(viaEffect.error?.message, "history at seq")
        assert.deepStrictEqual(withoutStacks(viaAsync), withoutStacks(viaEffect))
      }
    }))

  it.effect("over histories with pending signals and Python-named now entries", () =>
    Effect.gen(function*() {
      const history: ReadonlyArray<HistoryEvent> = [
        { seq: 0, kind: "step", name: "now#0", output: 5 },
        { seq: 1, kind: "step", name: "sideEffect", output: "t" },
        { seq: 2, kind: "call", name: "charge", output: { ok: true } },
        { seq: 3, kind: "timer" }
      ]
      const pendingSignals = [{ seq: 4, signal: "approve", payload: { by: "pending" } }]
      const viaEffect = yield* turn(order.effect, history, { pendingSignals })
      const viaAsync = yield* turn(order.async, history, { pendingSignals })
      assert.deepStrictEqual(viaEffect.commands, [{ kind: "startChild", seq: 5, workflow: "ship", input: { id: "o-1" } }])
      assert.deepStrictEqual(withoutStacks(viaAsync), withoutStacks(viaEffect))
    }))
})
