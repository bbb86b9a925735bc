/**
 * Replaying an applied update (`UpdateApplied`) runs its handler as the live update ran: an Effect
 * in the worker's fiber (its services, logger, Clock), to its end, before the code goes on —
 * also when it waits for something asynchronous, and also when it fails (after changing state).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as HashMap from "effect/HashMap"
import * as Logger from "effect/Logger"
import * as Schema from "effect/Schema"
import * as DurableWorkflow from "../../src/core/DurableWorkflow.js"
import { applyUpdate, query, replay } from "../../src/core/internal/durableWorkflow/run.js"
import { accepted, applied, blob, completed, QUEUE, replayInput, setup, startWorker, until, value } from "./support.js"

/** A service of the worker an update handler reads. */
class Rate extends Context.Tag("test/updateReplay/Rate")<Rate, number>() {}

const signal = (name: string, args: ReadonlyArray<unknown> = []) => ({
  event_type: "SignalReceived",
  payload: { signal_name: name, arguments: blob(args) }
})

/** An asynchronous boundary (a real timer: nothing a synchronous run could resolve). */
const later = Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, 2)))
const laterPromise = () => new Promise<void>((resolve) => setTimeout(resolve, 2))

/** Adds `n` × {@link Rate} to the total and logs it: needs the worker's context. */
const addWith = (state: { total: number }) => (n: number) =>
  Effect.gen(function*() {
    const rate = yield* Rate
    state.total += n * rate
    yield* Effect.logInfo(`added ${n * rate}`)
    return state.total
  })

/** Logs `name:start`, waits (asynchronously), logs `name:end`; `explode` fails after that. */
const stepOf = (log: Array<string>) => (name: string) =>
  Effect.gen(function*() {
    log.push(`${name}:start`)
    yield* later
    log.push(`${name}:end`)
    if (name === "explode") return yield* Effect.fail(new Error("no can do"))
    return log.length
  })

const declarations = {
  updates: { add: [DurableWorkflow.param("n", Schema.Int)], step: [DurableWorkflow.param("name", Schema.String)] },
  signals: { mark: [] },
  queries: { total: [], log: [] }
} as const

/** Waits for a positive total, then bills it. */
const pricing = {
  effect: DurableWorkflow.make("orders.priced", (ctx) =>
    Effect.gen(function*() {
      const state = { total: 0 }
      ctx.onUpdate("add", addWith(state))
      ctx.onQuery("total", () => state.total)
      yield* ctx.waitCondition(() => state.total > 0)
      return yield* ctx.activity("orders.bill", [state.total])
    }), declarations),
  generator: DurableWorkflow.fromGenerator("orders.priced", function*(ctx) {
    const state = { total: 0 }
    ctx.onUpdate("add", addWith(state))
    ctx.onQuery("total", () => state.total)
    yield ctx.waitCondition(() => state.total > 0)
    return yield ctx.activity("orders.bill", [state.total])
  }, declarations),
  async: DurableWorkflow.fromAsync("orders.priced", async (ctx) => {
    const state = { total: 0 }
    ctx.onUpdate("add", addWith(state))
    ctx.onQuery("total", () => state.total)
    await ctx.waitCondition(() => state.total > 0)
    return ctx.activity("orders.bill", [state.total])
  }, declarations)
}

/** Waits until `b` has ended, then reports what happened, in order. */
const steps = {
  effect: DurableWorkflow.make("orders.steps", (ctx) =>
    Effect.gen(function*() {
      const log: Array<string> = []
      ctx.onUpdate("step", stepOf(log))
      ctx.onSignal("mark", () => void log.push("signal"))
      ctx.onQuery("log", () => log)
      yield* ctx.waitCondition(() => log.includes("b:end"))
      return yield* ctx.activity("orders.report", [log])
    }), declarations),
  generator: DurableWorkflow.fromGenerator("orders.steps", function*(ctx) {
    const log: Array<string> = []
    ctx.onUpdate("step", stepOf(log))
    ctx.onSignal("mark", () => void log.push("signal"))
    ctx.onQuery("log", () => log)
    yield ctx.waitCondition(() => log.includes("b:end"))
    return yield ctx.activity("orders.report", [log])
  }, declarations),
  async: DurableWorkflow.fromAsync("orders.steps", async (ctx) => {
    const log: Array<string> = []
    ctx.onUpdate("step", stepOf(log))
    ctx.onSignal("mark", () => void log.push("signal"))
    ctx.onQuery("log", () => log)
    await ctx.waitCondition(() => log.includes("b:end"))
    return ctx.activity("orders.report", [log])
  }, declarations)
}

/** Waits on the condition `approval` until `a` has ended, then reports. */
const approval = {
  effect: DurableWorkflow.make("orders.approval-steps", (ctx) =>
    Effect.gen(function*() {
      const log: Array<string> = []
      ctx.onUpdate("step", stepOf(log))
      const ok = yield* ctx.waitCondition(() => log.includes("a:end"), { key: "approval" })
      return yield* ctx.activity("orders.report", [ok, log])
    }), declarations),
  generator: DurableWorkflow.fromGenerator("orders.approval-steps", function*(ctx) {
    const log: Array<string> = []
    ctx.onUpdate("step", stepOf(log))
    const ok: boolean = yield ctx.waitCondition(() => log.includes("a:end"), { key: "approval" })
    return yield ctx.activity("orders.report", [ok, log])
  }, declarations),
  async: DurableWorkflow.fromAsync("orders.approval-steps", async (ctx) => {
    const log: Array<string> = []
    ctx.onUpdate("step", stepOf(log))
    const ok = await ctx.waitCondition(() => log.includes("a:end"), { key: "approval" })
    return ctx.activity("orders.report", [ok, log])
  }, declarations)
}

/** The one command of a replay that got past the wait: `activityType` scheduled with `args`. */
const scheduled = (commands: ReadonlyArray<Record<string, unknown>>, activityType: string) => {
  assert.lengthOf(commands, 1, JSON.stringify(commands))
  assert.strictEqual(commands[0]!["type"], "schedule_activity", JSON.stringify(commands))
  assert.strictEqual(commands[0]!["activity_type"], activityType)
  return value(commands[0]!["arguments"])
}

/** Log lines with their annotations, captured instead of the default logger's output. */
const capturingLogs = () => {
  const lines: Array<{ readonly message: unknown; readonly annotations: Record<string, unknown> }> = []
  const layer = Logger.replace(
    Logger.defaultLogger,
    Logger.make(({ annotations, message }) => void lines.push({ message, annotations: Object.fromEntries(HashMap.toEntries(annotations)) }))
  )
  return { lines, layer }
}

describe("replaying an applied update runs its handler as the live update did", () => {
  for (const [style, wf] of Object.entries(pricing)) {
    it.effect(`${style}: its Effect has the worker's services and logger: the replayed state is the live one`, () =>
      Effect.gen(function*() {
        const { layer, lines } = capturingLogs()
        const inWorker = <A, E>(effect: Effect.Effect<A, E, Rate>) =>
          effect.pipe(Effect.annotateLogs("task", "wf-task-1"), Effect.provideService(Rate, 10), Effect.provide(layer))
        // the live update (an accepted-update task) answers 30
        const live = yield* inWorker(applyUpdate(wf, replayInput([accepted("u-1", "add", [3])]), "u-1"))
        assert.strictEqual(live["type"], "complete_update")
        assert.strictEqual(value(live["result"]), 30)
        // replaying its UpdateApplied leaves the same state: the wait is over, the bill is 30
        const history = [applied("u-1", "add", [3])]
        const { commands } = yield* inWorker(replay(wf, replayInput(history)))
        assert.deepStrictEqual(scheduled(commands, "orders.bill"), [30])
        assert.strictEqual(yield* inWorker(query(wf, replayInput(history), "total", [])), 30)
        // its log line went to the worker's logger, with the task's annotations
        assert.deepStrictEqual(lines.map((line) => [line.message, line.annotations["task"]]), [
          [["added 30"], "wf-task-1"],
          [["added 30"], "wf-task-1"],
          [["added 30"], "wf-task-1"]
        ])
      }))

    it.effect(`${style}: the accepted-update task replays the earlier updates with the worker's services`, () =>
      Effect.gen(function*() {
        const history = [applied("u-1", "add", [3]), accepted("u-2", "add", [4])]
        const command = yield* Effect.provideService(applyUpdate(wf, replayInput(history), "u-2"), Rate, 10)
        assert.strictEqual(value(command["result"]), 70)
      }))
  }

  for (const [style, wf] of Object.entries(steps)) {
    it.effect(`${style}: an asynchronous handler is waited for, and what history recorded after it is applied after it; a failure after changing state is dropped`, () =>
      Effect.gen(function*() {
        const history = [applied("u-1", "step", ["a"]), signal("mark"), applied("u-2", "step", ["explode"]), applied("u-3", "step", ["b"])]
        const expected = ["a:start", "a:end", "signal", "explode:start", "explode:end", "b:start", "b:end"]
        const { commands } = yield* replay(wf, replayInput(history))
        assert.deepStrictEqual(scheduled(commands, "orders.report"), [expected])
        assert.deepStrictEqual(yield* query(wf, replayInput(history), "log", []), expected)
      }))
  }

  for (const [style, wf] of Object.entries(approval)) {
    it.effect(`${style}: an asynchronous handler pinned to a condition wait has ended when the wait is decided`, () =>
      Effect.gen(function*() {
        const history = [
          { event_type: "ConditionWaitOpened", payload: { condition_wait_id: "w1", condition_key: "approval", sequence: 1 } },
          applied("u-1", "step", ["a"]),
          { event_type: "ConditionWaitSatisfied", payload: { condition_wait_id: "w1" } }
        ]
        const { commands } = yield* replay(wf, replayInput(history))
        assert.deepStrictEqual(scheduled(commands, "orders.report"), [true, ["a:start", "a:end"]])
      }))
  }

  const parallel = {
    effect: DurableWorkflow.make("orders.parallel-steps", (ctx) =>
      Effect.gen(function*() {
        const log: Array<string> = []
        ctx.onUpdate("step", stepOf(log))
        const results = yield* Effect.all([ctx.activity("a"), ctx.activity("b")], { concurrency: "unbounded" })
        return [results, log]
      }), declarations),
    async: DurableWorkflow.fromAsync("orders.parallel-steps", async (ctx) => {
      const log: Array<string> = []
      ctx.onUpdate("step", stepOf(log))
      const results = await Promise.all([ctx.activity("a"), ctx.activity("b")])
      return [results, log]
    }, declarations)
  }
  for (const [style, wf] of Object.entries(parallel)) {
    it.effect(`${style}: ops asked for while an update settles wait for it, in the order asked`, () =>
      Effect.gen(function*() {
        const history = [applied("u-1", "step", ["a"]), applied("u-2", "step", ["b"]), completed("a", 1), completed("b", 2)]
        const { commands } = yield* replay(wf, replayInput(history))
        assert.lengthOf(commands, 1, JSON.stringify(commands))
        assert.strictEqual(commands[0]!["type"], "complete_workflow")
        assert.deepStrictEqual(value(commands[0]!["result"]), [[1, 2], ["a:start", "a:end", "b:start", "b:end"]])
      }))
  }

  it.effect("a promise an update handler returned is waited for too (async and generator workflows)", () =>
    Effect.gen(function*() {
      const handler = (log: Array<string>) => async (name: string) => {
        log.push(`${name}:start`)
        await laterPromise()
        log.push(`${name}:end`)
      }
      const asyncWf = DurableWorkflow.fromAsync("orders.promise-steps", async (ctx) => {
        const log: Array<string> = []
        ctx.onUpdate("step", handler(log))
        await ctx.waitCondition(() => log.includes("a:end"))
        return log
      }, declarations)
      const generatorWf = DurableWorkflow.fromGenerator("orders.promise-steps", function*(ctx) {
        const log: Array<string> = []
        ctx.onUpdate("step", handler(log))
        yield ctx.waitCondition(() => log.includes("a:end"))
        return log
      }, declarations)
      for (const wf of [asyncWf, generatorWf]) {
        const { commands } = yield* replay(wf, replayInput([applied("u-1", "step", ["a"])]))
        assert.strictEqual(commands[0]!["type"], "complete_workflow", JSON.stringify(commands))
        assert.deepStrictEqual(value(commands[0]!["result"]), ["a:start", "a:end"])
      }
    }))
})

describe("a worker replays applied updates with its own context", () => {
  it.scoped("a workflow task whose history has an UpdateApplied: the handler reads a service provided to the worker", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      yield* startWorker(server, { durableWorkflows: [pricing.effect] }).pipe(Effect.provideService(Rate, 10))
      server.enqueueWorkflowTask({ workflowType: "orders.priced", taskQueue: QUEUE, historyEvents: [applied("u-1", "add", [3])] })
      yield* until(server, () => server.completedWorkflowTasks.length === 1 || server.failedWorkflowTasks.length > 0)
      assert.strictEqual(server.failedWorkflowTasks.length, 0)
      const commands = server.completedWorkflowTasks[0]!.commands as ReadonlyArray<Record<string, unknown>>
      assert.deepStrictEqual(scheduled(commands, "orders.bill"), [30])
    }))
})
