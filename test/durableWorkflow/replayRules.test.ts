/**
 * The upstream replay rules 1–4 (internal wait timers, older servers' condition timers, recorded
 * condition outcomes, per-event payload codecs), each in the Effect, generator and async styles.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as DurableWorkflow from "../../src/core/DurableWorkflow.js"
import { conditionWaitsBySequence } from "../../src/core/internal/durableWorkflow/replay.js"
import { replay } from "../../src/core/internal/durableWorkflow/run.js"
import * as Codec from "../../src/wire/DurableWorkflowCodec.js"
import { blob, replayInput, value } from "./support.js"

type Styles = Readonly<Record<"Effect" | "generator" | "async", DurableWorkflow.DurableWorkflow>>

/** Runs `body` once per authoring style. */
const eachStyle = (styles: Styles, title: string, body: (wf: DurableWorkflow.DurableWorkflow) => Effect.Effect<void, unknown>) => {
  for (const [style, wf] of Object.entries(styles)) it.effect(`${title} (${style})`, () => body(wf))
}

const commandsOf = (wf: DurableWorkflow.DurableWorkflow, history: ReadonlyArray<unknown>) =>
  Effect.map(DurableWorkflow.replay(wf, history, { input: [] }), (o) => o.commands as ReadonlyArray<Record<string, any>>)

const completedWith = (commands: ReadonlyArray<Record<string, any>>) => {
  assert.lengthOf(commands, 1, JSON.stringify(commands))
  assert.strictEqual(commands[0]!["type"], "complete_workflow", JSON.stringify(commands))
  return value(commands[0]!["result"])
}

const opened = (waitId: string, extra: Record<string, unknown> = {}) => ({
  event_type: "ConditionWaitOpened",
  payload: { condition_wait_id: waitId, condition_key: "approval", ...extra }
})
const timer = (type: "TimerScheduled" | "TimerFired" | "TimerCancelled", payload: Record<string, unknown>) => ({ event_type: type, payload })
const userTimer = (sequence: number, delay = 10) => [
  timer("TimerScheduled", { sequence, delay_seconds: delay, timer_id: `user-${sequence}` }),
  timer("TimerFired", { sequence, timer_id: `user-${sequence}` })
]

/** Waits for approval (5 s timeout), then sleeps 10 s; returns what the wait gave. */
const waitThenSleep: Styles = {
  Effect: DurableWorkflow.make("rules.wait-then-sleep", (ctx) =>
    Effect.gen(function*() {
      let approved = false
      ctx.onSignal("approve", () => void (approved = true))
      const ok = yield* ctx.waitCondition(() => approved, { key: "approval", timeoutSeconds: 5 })
      yield* ctx.sleep(10)
      return ok
    })),
  generator: DurableWorkflow.fromGenerator("rules.wait-then-sleep", function*(ctx) {
    let approved = false
    ctx.onSignal("approve", () => void (approved = true))
    const ok: boolean = yield ctx.waitCondition(() => approved, { key: "approval", timeoutSeconds: 5 })
    yield ctx.sleep(10)
    return ok
  }),
  async: DurableWorkflow.fromAsync("rules.wait-then-sleep", async (ctx) => {
    let approved = false
    ctx.onSignal("approve", () => void (approved = true))
    const ok = await ctx.waitCondition(() => approved, { key: "approval", timeoutSeconds: 5 })
    await ctx.sleep(10)
    return ok
  })
}

describe("rule 1: internal wait timers never take a user timer's place", () => {
  eachStyle(waitThenSleep, "recognised by timer_kind", (wf) =>
    Effect.gen(function*() {
      const commands = yield* commandsOf(wf, [
        opened("w1", { sequence: 1, timeout_seconds: 5 }),
        timer("TimerScheduled", { timer_kind: "condition_timeout", sequence: 2, delay_seconds: 5 }),
        timer("TimerFired", { timer_kind: "condition_timeout", sequence: 2 }),
        { event_type: "ConditionWaitTimedOut", payload: { condition_wait_id: "w1" } },
        ...userTimer(3)
      ])
      assert.strictEqual(completedWith(commands), false)
    }))

  eachStyle(waitThenSleep, "recognised by a condition_wait_id on the payload (and its firing is the wait's timeout)", (wf) =>
    Effect.gen(function*() {
      const commands = yield* commandsOf(wf, [
        opened("w1", { sequence: 1, timeout_seconds: 5 }),
        timer("TimerScheduled", { condition_wait_id: "w1", sequence: 2, delay_seconds: 5 }),
        timer("TimerFired", { condition_wait_id: "w1", sequence: 2 }),
        ...userTimer(3)
      ])
      assert.strictEqual(completedWith(commands), false)
    }))

  eachStyle(waitThenSleep, "recognised by the sequence of a recorded ConditionWaitOpened", (wf) =>
    Effect.gen(function*() {
      const commands = yield* commandsOf(wf, [
        opened("w1", { sequence: 1, timeout_seconds: 5 }),
        timer("TimerScheduled", { sequence: 1, delay_seconds: 5 }),
        timer("TimerFired", { workflow_sequence: "1" }),
        ...userTimer(2)
      ])
      assert.strictEqual(completedWith(commands), false)
    }))

  eachStyle(
    {
      Effect: DurableWorkflow.make("rules.sleep", (ctx) => Effect.as(ctx.sleep(10), "slept")),
      generator: DurableWorkflow.fromGenerator("rules.sleep", function*(ctx) {
        yield ctx.sleep(10)
        return "slept"
      }),
      async: DurableWorkflow.fromAsync("rules.sleep", async (ctx) => {
        await ctx.sleep(10)
        return "slept"
      })
    },
    "recognised by a signal_wait_id on the payload",
    (wf) =>
      Effect.gen(function*() {
        const history = [
          timer("TimerScheduled", { signal_wait_id: "s1", sequence: 1, delay_seconds: 30 }),
          timer("TimerFired", { signal_wait_id: "s1", sequence: 1 }),
          ...userTimer(2)
        ]
        assert.strictEqual(completedWith(yield* commandsOf(wf, history)), "slept")
      })
  )
})

describe("rule 2: older servers' metadata-poor condition timers", () => {
  eachStyle(waitThenSleep, "a timer_id-only timer of the open wait's timeout is that wait's timer", (wf) =>
    Effect.gen(function*() {
      const commands = yield* commandsOf(wf, [
        opened("w1", { sequence: 1, timeout_seconds: "5" }),
        timer("TimerScheduled", { sequence: 2, delay_seconds: 5, timer_id: "t-1" }),
        timer("TimerFired", { sequence: 2, timer_id: "t-1" }),
        ...userTimer(3)
      ])
      assert.strictEqual(completedWith(commands), false)
    }))

  eachStyle(waitThenSleep, "a timer of the same delay after the wait ended is the user's timer", (wf) =>
    Effect.gen(function*() {
      const commands = yield* commandsOf(wf, [
        opened("w1", { sequence: 1, timeout_seconds: 10 }),
        { event_type: "SignalReceived", payload: { signal_name: "approve", arguments: blob([]) } },
        { event_type: "ConditionWaitSatisfied", payload: { condition_wait_id: "w1" } },
        ...userTimer(2, 10)
      ])
      assert.strictEqual(completedWith(commands), true)
    }))

  it("which timers are aliases of a wait's timer", () => {
    const wait = opened("w1", { sequence: 1, timeout_seconds: 5 })
    const poor = (sequence: number, extra: Record<string, unknown> = {}) =>
      timer("TimerScheduled", { sequence, delay_seconds: 5, timer_id: `t-${sequence}`, ...extra })
    const aliased = (events: ReadonlyArray<unknown>) => [...conditionWaitsBySequence(events).keys()].filter((s) => s !== 1)
    assert.deepStrictEqual(aliased([wait, poor(2)]), [2])
    assert.deepStrictEqual(aliased([wait, poor(2, { delay_seconds: 6 })]), [], "another delay")
    assert.deepStrictEqual(aliased([wait, poor(2, { timer_id: undefined })]), [], "no timer_id")
    assert.deepStrictEqual(aliased([wait, poor(2, { timer_kind: "user" })]), [], "a timer_kind")
    assert.deepStrictEqual(aliased([wait, poor(2, { sequence: undefined })]), [], "no sequence of its own")
    assert.deepStrictEqual(aliased([opened("w1", { sequence: 1, timeout_seconds: true }), poor(2)]), [], "a boolean timeout")
    assert.deepStrictEqual(aliased([opened("w1", { sequence: 1, timeout_seconds: 0 }), poor(2)]), [], "no positive timeout")
    assert.deepStrictEqual(aliased([opened("w1", { sequence: 1, timeout_seconds: "5s" }), poor(2)]), [], "not digits")
    assert.deepStrictEqual(aliased([wait, poor(2, { delay_seconds: 9 }), poor(3)]), [], "another timer cleared the wait")
    assert.deepStrictEqual(aliased([wait, { event_type: "ActivityScheduled", payload: {} }, poor(3)]), [], "a step cleared it")
    assert.deepStrictEqual(aliased([wait, { event_type: "ConditionWaitSatisfied", payload: { condition_wait_id: "w1" } }, poor(3)]), [], "its outcome")
    assert.deepStrictEqual(aliased([wait, poor(2), timer("TimerFired", { sequence: 2 }), poor(3)]), [2], "its timer fired")
  })
})

/** Waits for approval (a signal or an update), 5 s timeout; returns what the wait gave and the state. */
const approval: Styles = {
  Effect: DurableWorkflow.make("rules.approval", (ctx) =>
    Effect.gen(function*() {
      let approved = false
      ctx.onSignal("approve", () => void (approved = true))
      ctx.onUpdate("approve", () => (approved = true))
      const ok = yield* ctx.waitCondition(() => approved, { key: "approval", timeoutSeconds: 5 })
      return [ok, approved]
    })),
  generator: DurableWorkflow.fromGenerator("rules.approval", function*(ctx) {
    let approved = false
    ctx.onSignal("approve", () => void (approved = true))
    ctx.onUpdate("approve", () => (approved = true))
    const ok: boolean = yield ctx.waitCondition(() => approved, { key: "approval", timeoutSeconds: 5 })
    return [ok, approved]
  }),
  async: DurableWorkflow.fromAsync("rules.approval", async (ctx) => {
    let approved = false
    ctx.onSignal("approve", () => void (approved = true))
    ctx.onUpdate("approve", () => (approved = true))
    const ok = await ctx.waitCondition(() => approved, { key: "approval", timeoutSeconds: 5 })
    return [ok, approved]
  })
}

describe("rule 3: a recorded condition outcome wins over the predicate", () => {
  const signal = { event_type: "SignalReceived", payload: { signal_name: "approve", arguments: blob([]) } }
  const update = { event_type: "UpdateApplied", payload: { update_name: "approve", update_id: "u1", arguments: blob([]) } }

  eachStyle(approval, "a condition-timeout TimerFired gives false though a signal recorded before it makes the predicate true", (wf) =>
    Effect.gen(function*() {
      const commands = yield* commandsOf(wf, [
        opened("w1", { sequence: 1, timeout_seconds: 5 }),
        signal,
        timer("TimerFired", { timer_kind: "condition_timeout", condition_wait_id: "w1", sequence: 2 })
      ])
      assert.deepStrictEqual(completedWith(commands), [false, true])
    }))

  eachStyle(approval, "ConditionWaitTimedOut gives false though an update recorded before it makes the predicate true", (wf) =>
    Effect.gen(function*() {
      const commands = yield* commandsOf(wf, [
        opened("w1", { sequence: 1, timeout_seconds: 5 }),
        update,
        { event_type: "ConditionWaitTimedOut", payload: { condition_wait_id: "w1" } }
      ])
      assert.deepStrictEqual(completedWith(commands), [false, true])
    }))

  eachStyle(approval, "ConditionWaitSatisfied gives true; with no outcome recorded the predicate decides", (wf) =>
    Effect.gen(function*() {
      const satisfied = yield* commandsOf(wf, [opened("w1"), { event_type: "ConditionWaitSatisfied", payload: { condition_wait_id: "w1" } }])
      assert.deepStrictEqual(completedWith(satisfied), [true, false])
      assert.deepStrictEqual(completedWith(yield* commandsOf(wf, [opened("w1"), signal])), [true, true])
      assert.deepStrictEqual(yield* commandsOf(wf, [opened("w1")]), [{ type: "open_condition_wait", condition_key: "approval", timeout_seconds: 5 }])
    }))
})

/** Returns the result of the activity `a`, or the first signal's argument if one came first. */
const activityResult: Styles = {
  Effect: DurableWorkflow.make("rules.activity", (ctx) =>
    Effect.gen(function*() {
      const seen: Array<unknown> = []
      ctx.onSignal("note", (x: unknown) => void seen.push(x))
      const result = yield* ctx.activity("a")
      return [result, ...seen]
    })),
  generator: DurableWorkflow.fromGenerator("rules.activity", function*(ctx) {
    const seen: Array<unknown> = []
    ctx.onSignal("note", (x: unknown) => void seen.push(x))
    const result: unknown = yield ctx.activity("a")
    return [result, ...seen]
  }),
  async: DurableWorkflow.fromAsync("rules.activity", async (ctx) => {
    const seen: Array<unknown> = []
    ctx.onSignal("note", (x: unknown) => void seen.push(x))
    const result = await ctx.activity("a")
    return [result, ...seen]
  })
}

describe("rule 4: each event's payload_codec decides how its payloads decode", () => {
  const completed = (payload: Record<string, unknown>) => ({ event_type: "ActivityCompleted", payload: { activity_type: "a", ...payload } })
  const refused = (wf: DurableWorkflow.DurableWorkflow, history: ReadonlyArray<unknown>, options: DurableWorkflow.ReplayOptions = { input: [] }) =>
    Effect.map(Effect.flip(DurableWorkflow.replay(wf, history, options)), (error) => {
      assert.strictEqual(error._tag, "PayloadDecodeError", error.message)
      assert.strictEqual((error as Codec.PayloadDecodeError).code, "unsupported_payload_codec")
      return error.message
    })

  eachStyle(activityResult, "an event's own codec decodes its bare blob when the task has none", (wf) =>
    Effect.gen(function*() {
      const input = { ...replayInput([completed({ result: blob("r"), payload_codec: "avro" })]), codec: undefined }
      const ok = yield* replay(wf, input)
      assert.deepStrictEqual(value(ok.commands[0]!["result"]), ["r"])
      const untagged = yield* Effect.flip(replay(wf, { ...input, history: [completed({ result: blob("r") })] }))
      assert.match(String((untagged.error as Error).message), /unsupported_payload_codec: bare blob codec missing/)
    }))

  eachStyle(activityResult, "an explicit non-Avro codec on a result is refused, even for an Avro envelope", (wf) =>
    Effect.gen(function*() {
      assert.match(yield* refused(wf, [completed({ result: blob("r"), payload_codec: "json" })]), /codec "json"/)
      const envelope = Either.getOrThrow(Codec.encodeEnvelope("r"))
      assert.match(yield* refused(wf, [completed({ result: envelope, payload_codec: "json" })]), /codec "json"/)
      assert.match(yield* refused(wf, [completed({ result: blob("r"), payload_codec: null })]), /codec null/)
    }))

  eachStyle(activityResult, "an explicit non-Avro codec on a signal is refused", (wf) =>
    Effect.gen(function*() {
      const signal = { event_type: "SignalReceived", payload: { signal_name: "note", arguments: blob(["n"]), payload_codec: "json" } }
      yield* refused(wf, [signal, completed({ result: blob("r") })])
    }))

  eachStyle(activityResult, "WorkflowStarted with payload_codec json is refused, not decoded, whether its input is inferred or given", (wf) =>
    Effect.gen(function*() {
      const started = { event_type: "WorkflowStarted", payload: { workflow_type: wf.name, input: blob([]), payload_codec: "json" } }
      yield* refused(wf, [started], {})
      yield* refused(wf, [started], { input: [] })
      // the live path refuses it too, though its start input comes from the task
      const live = yield* Effect.flip(replay(wf, replayInput([started])))
      assert.match(String((live.error as Error).message), /^unsupported_payload_codec/)
    }))
})
