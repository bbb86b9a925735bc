/**
 * A long turn lets the event loop run (lock renewals, heartbeats and other tasks' I/O live there),
 * for Effect bodies as for async ones, whether it replays history or runs local ops, and when workflow
 * code computes between ops. Counted with a `setImmediate` ticker: it advances once per macrotask.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Workflow from "../../src/core/Workflow.js"
import { makeTask } from "./workflowSupport.js"

const n = 10_000

/** Runs `effect` while counting the macrotasks the event loop gets through. */
const countingMacrotasks = <A, E>(effect: Effect.Effect<A, E>) =>
  Effect.acquireUseRelease(
    Effect.sync(() => {
      const state = { ticks: 0, running: true }
      const tick = () => {
        state.ticks++
        if (state.running) setImmediate(tick)
      }
      setImmediate(tick)
      return state
    }),
    (state) => Effect.map(effect, (value) => ({ value, ticks: state.ticks })),
    (state) => Effect.sync(() => (state.running = false))
  )

const replayed = Array.from({ length: n }, (_, seq) => ({ seq, kind: "call" as const, name: "s", output: seq }))

describe("a long turn yields to the event loop", () => {
  it.effect("Effect body replaying 10,000 entries: a macrotask every yieldEvery ops (not only other fibers)", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("wf", (_: unknown, ctx) =>
        Effect.gen(function*() {
          let sum = 0
          for (let i = 0; i < n; i++) sum += yield* ctx.step<number>("s", i)
          return sum
        }))
      const { ticks, value } = yield* countingMacrotasks(
        Workflow.processWorkflowTask([wf], makeTask("wf", replayed), { yieldEvery: 500, yieldAfterMs: 1e9 })
      )
      assert.strictEqual(value.output, (n * (n - 1)) / 2)
      assert.isAtLeast(ticks, n / 500 - 1)
    }))

  it.effect("local ops count too: a first turn running 10,000 sideEffects yields, in both body styles", () =>
    Effect.gen(function*() {
      const effectWf = Workflow.make("wf", (_: unknown, ctx) =>
        Effect.gen(function*() {
          for (let i = 0; i < n; i++) yield* ctx.sideEffect(Effect.succeed(i))
          return yield* ctx.step("after")
        }))
      const asyncWf = Workflow.fromPromise("wf", async (ctx) => {
        for (let i = 0; i < n; i++) await ctx.sideEffect(() => i)
        return ctx.step("after")
      })
      for (const wf of [effectWf, asyncWf]) {
        const { ticks, value } = yield* countingMacrotasks(
          Workflow.processWorkflowTask([wf], makeTask("wf"), { yieldEvery: 500, yieldAfterMs: 1e9 })
        )
        assert.strictEqual(value.status, "continue")
        assert.strictEqual(value.commands.length, n + 1)
        assert.isAtLeast(ticks, n / 500 - 1, wf.body._tag)
      }
    }))

  it.effect("workflow code computing between ops: yields once the slice exceeds yieldAfterMs", () =>
    Effect.gen(function*() {
      const ops = 200
      const spin = () => {
        const until = performance.now() + 0.5
        while (performance.now() < until) {
          // computing between two ops
        }
      }
      const wf = Workflow.fromPromise("wf", async (ctx) => {
        for (let i = 0; i < ops; i++) {
          await ctx.step("s", i)
          spin()
        }
        return "done"
      })
      // 200 ops of 0.5 ms each = 100 ms: with a 5 ms slice that is at least ~20 yields, none by count
      const { ticks, value } = yield* countingMacrotasks(
        Workflow.processWorkflowTask([wf], makeTask("wf", replayed.slice(0, ops)), { yieldEvery: 1e9, yieldAfterMs: 5 })
      )
      assert.strictEqual(value.output, "done")
      assert.isAtLeast(ticks, 10)
    }))

  it.effect("yieldEvery: 0 turns yielding off", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("wf", (_: unknown, ctx) =>
        Effect.gen(function*() {
          for (let i = 0; i < 2_000; i++) yield* ctx.step("s", i)
          return "done"
        }))
      const { ticks } = yield* countingMacrotasks(
        Workflow.processWorkflowTask([wf], makeTask("wf", replayed.slice(0, 2_000)), { yieldEvery: 0, yieldAfterMs: 0 })
      )
      assert.strictEqual(ticks, 0)
    }))
})
