/**
 * A replayed update that settles (its handler waits for something asynchronous) holds the turn for
 * the op that met it. When the workflow's own code stops waiting for that op (the loser of a race,
 * an async body that returned without awaiting it), the update still runs to its end and the op is
 * still answered, as an op that settles nothing is answered at once: the turn, the commands and the
 * state a query reads do not depend on when the workflow's code stopped waiting.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as DurableWorkflow from "../../src/core/DurableWorkflow.js"
import { query, replay } from "../../src/core/internal/durableWorkflow/run.js"
import { applied, completed, replayInput, value } from "./support.js"

const opened = (waitId: string, key: string) => ({
  event_type: "ConditionWaitOpened",
  payload: { condition_wait_id: waitId, condition_key: key, sequence: 2 }
})

const later = Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, 2)))

/** Logs `name:start`, waits (asynchronously), logs `name:end`. */
const stepOf = (log: Array<string>) => (name: string) =>
  Effect.gen(function*() {
    log.push(`${name}:start`)
    yield* later
    log.push(`${name}:end`)
  })

const declarations = { updates: { step: [DurableWorkflow.param("name", Schema.String)] }, queries: { log: [] } } as const

const commandsOf = (commands: ReadonlyArray<Record<string, unknown>>) =>
  commands.map((c) => c["type"] === "schedule_activity" ? [c["type"], c["activity_type"], value(c["arguments"])] : [c["type"]])

describe("a settling update whose op the workflow stopped waiting for still runs to its end", () => {
  it.effect("Effect: the condition wait that lost a race settles its pinned update; the op after it goes on", () =>
    Effect.gen(function*() {
      const wf = DurableWorkflow.make("orders.race-wait", (ctx) =>
        Effect.gen(function*() {
          const log: Array<string> = []
          ctx.onUpdate("step", stepOf(log))
          ctx.onQuery("log", () => log)
          yield* Effect.race(ctx.activity("a"), ctx.waitCondition(() => log.includes("x:end"), { key: "approval" }))
          return yield* ctx.activity("after", [log])
        }), declarations)
      const history = [completed("a", 1), opened("w1", "approval"), applied("u-1", "step", ["x"])]
      const { commands } = yield* replay(wf, replayInput(history))
      assert.deepStrictEqual(commandsOf(commands), [["schedule_activity", "after", [["x:start", "x:end"]]]])
      assert.deepStrictEqual(yield* query(wf, replayInput(history), "log", []), ["x:start", "x:end"])
    }))

  it.effect("async: the same race (Promise.race) answers the same", () =>
    Effect.gen(function*() {
      const wf = DurableWorkflow.fromAsync("orders.race-wait", async (ctx) => {
        const log: Array<string> = []
        ctx.onUpdate("step", stepOf(log))
        ctx.onQuery("log", () => log)
        await Promise.race([ctx.activity("a"), ctx.waitCondition(() => log.includes("x:end"), { key: "approval" })])
        return ctx.activity("after", [log])
      }, declarations)
      const history = [completed("a", 1), opened("w1", "approval"), applied("u-1", "step", ["x"])]
      const { commands } = yield* replay(wf, replayInput(history))
      assert.deepStrictEqual(commandsOf(commands), [["schedule_activity", "after", [["x:start", "x:end"]]]])
    }))

  it.effect("Effect: the activity that lost a race still takes its recorded result; the next one does not", () =>
    Effect.gen(function*() {
      const wf = DurableWorkflow.make("orders.race-step", (ctx) =>
        Effect.gen(function*() {
          const log: Array<string> = []
          ctx.onUpdate("step", stepOf(log))
          ctx.onQuery("log", () => log)
          yield* Effect.race(ctx.activity("step"), Effect.void)
          const next = yield* ctx.activity("step")
          return [next, log]
        }), declarations)
      // the first `step` took the recorded result: the second is new (before: it took the first's result)
      const history = [applied("u-1", "step", ["x"]), completed("step", 1)]
      const { commands } = yield* replay(wf, replayInput(history))
      assert.deepStrictEqual(commandsOf(commands), [["schedule_activity", "step", []]])
      assert.deepStrictEqual(yield* query(wf, replayInput(history), "log", []), ["x:start", "x:end"])
    }))

  it.effect("Effect: an op asked for while an update settled is still answered when its asker stopped waiting", () =>
    Effect.gen(function*() {
      const wf = DurableWorkflow.make("orders.race-queued", (ctx) =>
        Effect.gen(function*() {
          const log: Array<string> = []
          ctx.onUpdate("step", stepOf(log))
          // `a` settles the update; `b` waits for the turn, and loses its race meanwhile
          yield* Effect.all([ctx.activity("a"), Effect.race(ctx.activity("b"), Effect.void)], { concurrency: "unbounded" })
          return yield* ctx.activity("c", [log])
        }), declarations)
      const history = [applied("u-1", "step", ["x"]), completed("a", 1), completed("b", 2)]
      const { commands } = yield* replay(wf, replayInput(history))
      assert.deepStrictEqual(commandsOf(commands), [["schedule_activity", "c", [["x:start", "x:end"]]]])
    }))

  it.effect("Effect: the workflow returned while an update settled for an op it dropped: that op blocks the turn", () =>
    Effect.gen(function*() {
      const wf = DurableWorkflow.make("orders.race-return", (ctx) =>
        Effect.gen(function*() {
          const log: Array<string> = []
          ctx.onUpdate("step", stepOf(log))
          ctx.onQuery("log", () => log)
          return yield* Effect.race(ctx.activity("a"), Effect.succeed("fast"))
        }), declarations)
      const history = [applied("u-1", "step", ["x"])]
      const { commands } = yield* replay(wf, replayInput(history))
      assert.deepStrictEqual(commandsOf(commands), [["schedule_activity", "a", []]])
      assert.deepStrictEqual(yield* query(wf, replayInput(history), "log", []), ["x:start", "x:end"])
    }))

  it.effect("async: the body returned while an update settled for an op it did not await: that op blocks the turn", () =>
    Effect.gen(function*() {
      const wf = DurableWorkflow.fromAsync("orders.race-return", async (ctx) => {
        const log: Array<string> = []
        ctx.onUpdate("step", stepOf(log))
        ctx.onQuery("log", () => log)
        return Promise.race([ctx.activity("a"), Promise.resolve("fast")])
      }, declarations)
      const history = [applied("u-1", "step", ["x"])]
      const { commands } = yield* replay(wf, replayInput(history))
      assert.deepStrictEqual(commandsOf(commands), [["schedule_activity", "a", []]])
      // the query reads the state the update left, not half of it
      assert.deepStrictEqual(yield* query(wf, replayInput(history), "log", []), ["x:start", "x:end"])
    }))

  it.effect("async: …and when history has that op's result, the body's own ending stands", () =>
    Effect.gen(function*() {
      const wf = DurableWorkflow.fromAsync("orders.race-return", async (ctx) => {
        const log: Array<string> = []
        ctx.onUpdate("step", stepOf(log))
        ctx.onQuery("log", () => log)
        return Promise.race([ctx.activity("a"), Promise.resolve("fast")])
      }, declarations)
      const history = [applied("u-1", "step", ["x"]), completed("a", 1)]
      const { commands } = yield* replay(wf, replayInput(history))
      assert.lengthOf(commands, 1)
      assert.strictEqual(commands[0]!["type"], "complete_workflow")
      assert.strictEqual(value(commands[0]!["result"]), "fast")
    }))
})

describe("a settle still running when the replay ends is cut with it", () => {
  it.live("an interrupted replay interrupts the update it was settling", () =>
    Effect.gen(function*() {
      let cut = false
      const wf = DurableWorkflow.make("orders.stuck", (ctx) =>
        Effect.gen(function*() {
          ctx.onUpdate("step", () => Effect.never.pipe(Effect.onInterrupt(() => Effect.sync(() => void (cut = true)))))
          return yield* ctx.activity("a")
        }), declarations)
      const outcome = yield* Effect.timeout(replay(wf, replayInput([applied("u-1", "step", ["x"])])), "50 millis").pipe(Effect.option)
      assert.isTrue(outcome._tag === "None")
      assert.isTrue(cut)
    }))
})

describe("updates that settle at once are applied in a loop", () => {
  it.effect("20,000 recorded updates back to back, each returning an Effect, before one op: no stack grows with them", () =>
    Effect.gen(function*() {
      const count = { effect: 0, async: 0, generator: 0 }
      const bump = (style: keyof typeof count) => () => Effect.sync(() => void (count[style] += 1))
      const decl = { updates: { bump: [] } } as const
      const wfs = {
        effect: DurableWorkflow.make("orders.many", (ctx) =>
          Effect.gen(function*() {
            ctx.onUpdate("bump", bump("effect"))
            return yield* ctx.activity("a")
          }), decl),
        async: DurableWorkflow.fromAsync("orders.many", async (ctx) => {
          ctx.onUpdate("bump", bump("async"))
          return ctx.activity("a")
        }, decl),
        generator: DurableWorkflow.fromGenerator("orders.many", function*(ctx) {
          ctx.onUpdate("bump", bump("generator"))
          return yield ctx.activity("a")
        }, decl)
      }
      const history = Array.from({ length: 20_000 }, (_, i) => applied(`u-${i}`, "bump", []))
      for (const [style, wf] of Object.entries(wfs)) {
        const { commands } = yield* replay(wf, replayInput(history))
        assert.deepStrictEqual(commandsOf(commands), [["schedule_activity", "a", []]], style)
        assert.strictEqual(count[style as keyof typeof count], 20_000, style)
      }
    }))
})
