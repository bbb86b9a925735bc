/**
 * What the nestjs-durable protocol hands a delivery's `progress` during a workflow turn: each local
 * step's end (never its start: see `stepEnds`), in order, before the turn is decided, in a form JSON
 * carries; nothing for an output JSON cannot carry; and a `progress` that throws never costs the turn
 * its decision. How the BullMQ
 * transport sends them: test/transport/bullmq-stepEvents.test.ts.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Workflow from "../../src/core/Workflow.js"
import * as NestDurableProtocol from "../../src/protocol/NestDurableProtocol.js"
import type { Handlers } from "../../src/seam/Protocol.js"
import { Delivery } from "../../src/seam/Transport.js"

const turn = (workflow: string) => ({ taskId: "t1", runId: "r1", workflow, history: [], input: null })

const handlers = (...workflows: ReadonlyArray<Workflow.Workflow<any, any>>): Handlers => ({
  steps: new Map(),
  workflows: new Map(workflows.map((workflow) => [workflow.name, workflow])),
  durableWorkflows: new Map()
})

const protocol = NestDurableProtocol.make()

/** Runs one turn of `workflow` on a delivery whose `progress` is `progress`; the decision's status. */
const process = (served: Handlers, workflow: string, progress: ((event: unknown) => void) | undefined) =>
  Effect.map(
    protocol.process(served, Delivery.make({ id: "1", payload: turn(workflow), protocol, complete: () => Effect.void, progress })),
    (outcome) => outcome._tag === "Reply" && outcome.reply._tag === "WorkflowDecision" ? outcome.reply.decision : undefined
  )

describe("nestjs-durable turns: live step events through the delivery", () => {
  it.effect("a step that ends at once is handed its completed event only, before the decision, JSON-safe", () =>
    Effect.gen(function*() {
      const handed: Array<Record<string, any>> = []
      const flow = Workflow.make("flow", (_: unknown, ctx) =>
        Effect.gen(function*() {
          const a = yield* ctx.sideEffect((step) =>
            Effect.sync(() => {
              // data JSON cannot carry: the event says what was left out instead of throwing in the transport
              step.log.info("counted", { n: 10n })
              return 1
            }))
          return yield* ctx.step("ingest", { a })
        }))
      const decision = yield* process(handlers(flow), "flow", (event) => handed.push(event as Record<string, any>))
      assert.strictEqual(decision?.status, "continue")
      assert.deepStrictEqual(handed.map(({ phase, seq }) => [seq, phase]), [[0, "completed"]])
      for (const event of handed) JSON.stringify(event)
      assert.match(handed[0]!.events[0].data, /^\(left out: a BigInt/)
      assert.deepStrictEqual(handed[0]!.events, (decision!.commands[0] as { events?: unknown }).events)
    }))

  it.live("a step that waits is handed its end only, never its start (a late running checkpoint would hide the step's end)", () =>
    Effect.gen(function*() {
      const handed: Array<Record<string, any>> = []
      const flow = Workflow.make("flow", (_: unknown, ctx) =>
        Effect.gen(function*() {
          const a = yield* ctx.sideEffect(Effect.promise(() => new Promise<number>((resolve) => setTimeout(() => resolve(1), 20))))
          const b = yield* ctx.sideEffect(Effect.as(Effect.yieldNow(), a + 1))
          return a + b
        }))
      const decision = yield* process(handlers(flow), "flow", (event) => handed.push(event as Record<string, any>))
      assert.strictEqual(decision?.status, "completed")
      assert.deepStrictEqual(handed.map(({ phase, seq }) => [seq, phase]), [[0, "completed"], [1, "completed"]])
      assert.deepStrictEqual(handed[0]!.events, [])
    }))

  it.effect("a completed event whose output JSON cannot carry is not handed; the turn fails on that output", () =>
    Effect.gen(function*() {
      const handed: Array<Record<string, any>> = []
      const flow = Workflow.make("flow", (_: unknown, ctx) => ctx.sideEffect(Effect.succeed({ total: 10n })))
      const decision = yield* process(handlers(flow), "flow", (event) => handed.push(event as Record<string, any>))
      assert.strictEqual(decision?.status, "failed")
      assert.deepStrictEqual(handed, [])
    }))

  it.live("a progress that throws never costs the turn its decision", () =>
    Effect.gen(function*() {
      const flow = Workflow.make("flow", (_: unknown, ctx) =>
        Effect.zipRight(
          ctx.sideEffect(Effect.succeed(1)),
          ctx.sideEffect(Effect.promise(() => new Promise<number>((resolve) => setTimeout(() => resolve(2), 20))))
        ))
      const decision = yield* process(handlers(flow), "flow", () => {
        throw new Error("broker down")
      })
      assert.strictEqual(decision?.status, "completed")
    }))
})
