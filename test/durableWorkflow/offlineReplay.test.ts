/**
 * The public offline replayer: `DurableWorkflow.replay`, `replayQuery`, `replayUpdate` and their
 * promise twins, over recorded histories (the golden fixtures among them).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as DurableWorkflow from "../../src/core/DurableWorkflow.js"
import * as Facade from "../../src/facade/durableWorkflowReplay.js"
import * as Codec from "../../src/wire/DurableWorkflowCodec.js"
import { blob, value } from "./support.js"

const golden = [
  DurableWorkflow.make("golden.single-activity", (ctx, name: string) => ctx.activity<string>("golden.greet", [name])),
  DurableWorkflow.make("golden.saga-compensation", (ctx, orderId: string) =>
    Effect.gen(function*() {
      const reservation = yield* ctx.activity<string>("golden.reserve-inventory", [orderId])
      return yield* ctx.child("golden.charge-payment", [orderId]).pipe(
        Effect.catchTag("ChildWorkflowFailed", (error) => ctx.activity("golden.release-inventory", [orderId, reservation, error.message]))
      )
    })),
  DurableWorkflow.fromGenerator("golden.signal-wait", function*(ctx) {
    let approvedBy: string | null = null
    ctx.onSignal("approve", (who: string) => void (approvedBy = who))
    yield ctx.waitCondition(() => approvedBy !== null, { key: "approval", timeoutSeconds: 30 })
    const activityResult: string = yield ctx.activity("golden.notify", [approvedBy])
    return { approved_by: approvedBy, activity_result: activityResult }
  }),
  DurableWorkflow.fromAsync("golden.timeout-wait", async (ctx) =>
    (await ctx.waitCondition(() => false, { key: "approval", timeoutSeconds: 5 })) ? "approved" : "timed-out"),
  DurableWorkflow.make("golden.version-marker", (ctx) =>
    Effect.flatMap(ctx.getVersion("golden-version", 1, 2), (version) =>
      ctx.activity(version === 2 ? "golden.version-new-path" : "golden.version-old-path")))
]

const goldenDir = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "fixtures", "durable-workflow", "golden_history")
const fixtures = fs.readdirSync(goldenDir).filter((f) => f.endsWith(".json")).sort()
  .map((file) => ({ file, fixture: JSON.parse(fs.readFileSync(path.join(goldenDir, file), "utf8")) }))

const started = (workflowType: string, input: ReadonlyArray<unknown>, extra: Record<string, unknown> = {}) => ({
  event_type: "WorkflowStarted",
  payload: { workflow_type: workflowType, input: Either.getOrThrow(Codec.encodeEnvelope(input)), ...extra }
})

const checkExpected = (commands: ReadonlyArray<DurableWorkflow.Command>, expected: Record<string, unknown>) => {
  assert.lengthOf(commands, 1, JSON.stringify(commands))
  const command = commands[0]!
  if (expected["command_type"] === "CompleteWorkflow") {
    assert.strictEqual(command.type, "complete_workflow")
    assert.deepStrictEqual(value(command["result"]), expected["result"])
  } else {
    assert.strictEqual(command.type, "schedule_activity")
    assert.strictEqual(command["activity_type"], expected["activity_type"])
    assert.deepStrictEqual(value(command["arguments"]), expected["arguments"])
  }
}

describe("DurableWorkflow.replay over the golden histories", () => {
  for (const { file, fixture } of fixtures) {
    const legacy = fixture.source.worker_protocol_version === "1.0"
    for (const testCase of fixture.cases) {
      // 1.0 histories carry JSON text payloads, which 2.0 refuses (those without payloads replay)
      if (legacy && JSON.stringify(testCase.history).includes("\\\"")) {
        it.effect(`${file} ${testCase.name}: protocol 1.0 JSON payloads fail as a PayloadDecodeError`, () =>
          Effect.gen(function*() {
            const error = yield* Effect.flip(DurableWorkflow.replay(golden, testCase.history, { workflowType: testCase.workflow_type, input: testCase.start_input }))
            assert.strictEqual(error._tag, "PayloadDecodeError")
            assert.strictEqual((error as Codec.PayloadDecodeError).code, "invalid_payload_framing")
          }))
        continue
      }
      it.effect(`${file} ${testCase.name}: type and input given`, () =>
        Effect.gen(function*() {
          const outcome = yield* DurableWorkflow.replay(golden, testCase.history, { workflowType: testCase.workflow_type, input: testCase.start_input })
          assert.strictEqual(outcome.workflowType, testCase.workflow_type)
          checkExpected(outcome.commands, testCase.expected)
        }))
      it.effect(`${file} ${testCase.name}: type and input inferred from WorkflowStarted, in an export document`, () =>
        Effect.gen(function*() {
          const events = [started(testCase.workflow_type, testCase.start_input), ...testCase.history]
          const outcome = yield* DurableWorkflow.replay(golden, { events })
          assert.strictEqual(outcome.workflowType, testCase.workflow_type)
          assert.deepStrictEqual(outcome.input, testCase.start_input)
          checkExpected(outcome.commands, testCase.expected)
        }))
    }
  }
})

const greet = DurableWorkflow.make("greet", (ctx, name: string) =>
  Effect.map(ctx.activity<string>("compose", [name]), (greeting) => ({ greeting, at: ctx.now().toISOString(), id: ctx.workflowId, run: ctx.runId })))
const other = DurableWorkflow.make("other", () => Effect.succeed(1))
const completed = (result: unknown) => ({ event_type: "ActivityCompleted", payload: { activity_type: "compose", result: blob(result) } })

describe("DurableWorkflow.replay", () => {
  it.effect("reads the run's identity and start time from history; options win", () =>
    Effect.gen(function*() {
      const history = [
        started("greet", ["Ada"], { timestamp: "2026-01-02T03:04:05.000Z", workflow_id: "wf-7", run_id: "run-7" }),
        completed("hi Ada")
      ]
      const outcome = yield* DurableWorkflow.replay([greet, other], history)
      assert.deepStrictEqual(value(outcome.commands[0]!["result"]), { greeting: "hi Ada", at: "2026-01-02T03:04:05.000Z", id: "wf-7", run: "run-7" })
      const overridden = yield* DurableWorkflow.replay([greet, other], history, { workflowId: "x", runId: "y", input: ["Bob"] })
      assert.deepStrictEqual(value(overridden.commands[0]!["result"]), { greeting: "hi Ada", at: "2026-01-02T03:04:05.000Z", id: "x", run: "y" })
      assert.deepStrictEqual(overridden.input, ["Bob"])
    }))

  it.effect("a blocked history ends in the commands the code waits on, sent to the task queue", () =>
    Effect.gen(function*() {
      const outcome = yield* DurableWorkflow.replay(greet, [started("greet", ["Ada"], { task_queue: "orders" })])
      assert.deepStrictEqual(outcome.commands.map((c) => [c.type, c["activity_type"], c["queue"]]), [["schedule_activity", "compose", "orders"]])
      assert.deepStrictEqual(value(outcome.commands[0]!["arguments"]), ["Ada"])
      const queued = yield* DurableWorkflow.replay(greet, [], { input: ["Ada"], taskQueue: "q2" })
      assert.strictEqual(queued.commands[0]!["queue"], "q2")
    }))

  it.effect("an already-decoded start input in an export is taken as it is", () =>
    Effect.gen(function*() {
      const outcome = yield* DurableWorkflow.replay(greet, [{ event_type: "WorkflowStarted", payload: { input: ["Ada"] } }])
      assert.deepStrictEqual(outcome.input, ["Ada"])
    }))

  it.effect("non-determinism is a NonDeterministicReplayError naming the sequence, the code's ask and the record", () =>
    Effect.gen(function*() {
      const changed = DurableWorkflow.make("greet", (ctx) => Effect.zipRight(ctx.sleep(5), ctx.activity("compose")))
      const error = yield* Effect.flip(DurableWorkflow.replay(changed, [started("greet", ["Ada"]), completed("hi")]))
      assert.instanceOf(error, DurableWorkflow.NonDeterministicReplayError)
      const e = error as DurableWorkflow.NonDeterministicReplayError
      assert.strictEqual(e.workflowSequence, 1)
      assert.strictEqual(e.expected, "timer")
      assert.strictEqual(e.recorded, "ActivityCompleted")
      assert.match(e.message, /workflow sequence 1: the code asked for a timer, but history recorded ActivityCompleted \("compose"\)/)
    }))

  it.effect("a condition wait whose key differs from the one history opened there is non-determinism", () =>
    Effect.gen(function*() {
      const history = [{ event_type: "ConditionWaitOpened", payload: { condition_wait_id: "w1", condition_key: "approval" } }]
      const renamed = DurableWorkflow.fromGenerator("t", function*(ctx) {
        return yield ctx.waitCondition(() => true, { key: "sign-off" })
      })
      const error = yield* Effect.flip(DurableWorkflow.replay(renamed, history))
      assert.strictEqual(error._tag, "NonDeterministicReplayError")
      assert.match(error.message, /waits on the condition "sign-off", but history opened the condition wait "approval" \(w1\)/)
      const same = DurableWorkflow.fromGenerator("t", function*(ctx) {
        return yield ctx.waitCondition(() => true, { key: "approval" })
      })
      assert.strictEqual(value((yield* DurableWorkflow.replay(same, history)).commands[0]!["result"]), true)
    }))

  it.effect("the workflow type: given, from history, or the only definition; else a ReplayError listing the registered ones", () =>
    Effect.gen(function*() {
      assert.strictEqual((yield* DurableWorkflow.replay(other, [], {})).workflowType, "other")
      assert.strictEqual((yield* DurableWorkflow.replay(new Map([["greet", greet], ["other", other]]), [], { workflowType: "other" })).workflowType, "other")
      const ambiguous = yield* Effect.flip(DurableWorkflow.replay([greet, other], []))
      assert.strictEqual(ambiguous._tag, "ReplayError")
      assert.strictEqual((ambiguous as DurableWorkflow.ReplayError).reason, "unknown_workflow_type")
      const unknown = yield* Effect.flip(DurableWorkflow.replay([greet, other], [started("gone", [])]))
      assert.strictEqual((unknown as DurableWorkflow.ReplayError).reason, "unknown_workflow_type")
      assert.match(unknown.message, /'gone' is not among the given definitions; registered: greet, other/)
    }))

  it.effect("definitions: at least one, no type twice; a history: an event list or an export document", () =>
    Effect.gen(function*() {
      const reason = (effect: Effect.Effect<unknown, DurableWorkflow.ReplayFailure>) =>
        Effect.map(Effect.flip(effect), (e) => (e as DurableWorkflow.ReplayError).reason)
      assert.strictEqual(yield* reason(DurableWorkflow.replay([], [])), "no_workflows")
      assert.strictEqual(yield* reason(DurableWorkflow.replay([greet, greet], [])), "duplicate_workflow_type")
      assert.strictEqual(yield* reason(DurableWorkflow.replay(greet, { nope: [] } as never)), "invalid_history")
      assert.strictEqual(yield* reason(DurableWorkflow.replay(greet, "[]" as never)), "invalid_history")
      assert.strictEqual(yield* reason(DurableWorkflow.replay(greet, [started("greet", []), 42])), "invalid_history")
    }))

  it.effect("the fallback codec is Avro; another one is refused as unsupported_payload_codec", () =>
    Effect.gen(function*() {
      for (const payloadCodec of ["json", null]) {
        const error = yield* Effect.flip(DurableWorkflow.replay(greet, [], { input: ["Ada"], payloadCodec }))
        assert.strictEqual((error as Codec.PayloadDecodeError).code, "unsupported_payload_codec")
      }
      assert.lengthOf((yield* DurableWorkflow.replay(greet, [], { input: ["Ada"], payloadCodec: "avro" })).commands, 1)
    }))

  it.effect("workflow code that fails while replaying a recorded receiver is a ReplayError", () =>
    Effect.gen(function*() {
      const history = [started("greet", ["Ada"]), { event_type: "UpdateApplied", payload: { update_name: "nope", arguments: blob([]) } }]
      const error = yield* Effect.flip(DurableWorkflow.replay(greet, history))
      assert.strictEqual((error as DurableWorkflow.ReplayError).reason, "replay_failed")
      assert.match(error.message, /unknown update 'nope'/)
    }))
})

const cart = DurableWorkflow.make("cart", (ctx) =>
  Effect.gen(function*() {
    const items: Array<string> = []
    ctx.onSignal("add", (item: string) => void items.push(item))
    ctx.onUpdate("remove", (item: string) => {
      const at = items.indexOf(item)
      if (at < 0) throw new Error(`no ${item} in the cart`)
      items.splice(at, 1)
      return items.length
    })
    ctx.onQuery("items", (prefix: string = "") => items.filter((i) => i.startsWith(prefix)))
    yield* ctx.activity("open")
    yield* ctx.waitCondition(() => items.includes("checkout"))
    return items
  }), { updates: { remove: [DurableWorkflow.param("item")] } })

const signal = (item: string) => ({ event_type: "SignalReceived", payload: { signal_name: "add", arguments: blob([item]) } })
const cartHistory = [
  started("cart", []),
  { event_type: "ActivityScheduled", payload: { activity_type: "open" } },
  { event_type: "ActivityCompleted", payload: { activity_type: "open", result: blob(null) } },
  signal("apple"),
  signal("avocado"),
  signal("pear")
]

describe("DurableWorkflow.replayQuery and replayUpdate", () => {
  it.effect("a query is answered from the replayed state, with its arguments", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual(yield* DurableWorkflow.replayQuery(cart, cartHistory, "items"), ["apple", "avocado", "pear"])
      assert.deepStrictEqual(yield* DurableWorkflow.replayQuery(cart, { events: cartHistory }, "items", { args: ["a"] }), ["apple", "avocado"])
      const unknown = yield* Effect.flip(DurableWorkflow.replayQuery(cart, cartHistory, "total"))
      assert.strictEqual((unknown as DurableWorkflow.QueryFailed).reason, "rejected_unknown_query")
    }))

  it.effect("a query over a history the code diverges from fails with the replay's error", () =>
    Effect.gen(function*() {
      const changed = DurableWorkflow.make("cart", (ctx) => Effect.zipRight(ctx.activity("renamed"), Effect.never))
      const error = yield* Effect.flip(DurableWorkflow.replayQuery(changed, cartHistory, "items"))
      assert.strictEqual(error._tag, "NonDeterministicReplayError")
    }))

  it.effect("an update accepted in history, or a new one, is applied to the replayed state", () =>
    Effect.gen(function*() {
      const accepted = [...cartHistory, { event_type: "UpdateAccepted", payload: { update_id: "u-1", update_name: "remove", arguments: blob(["pear"]) } }]
      const byId = yield* DurableWorkflow.replayUpdate(cart, accepted, "u-1")
      assert.strictEqual(byId.updateId, "u-1")
      assert.strictEqual(byId.command.type, "complete_update")
      assert.strictEqual(value(byId.command["result"]), 2)
      const fresh = yield* DurableWorkflow.replayUpdate(cart, cartHistory, { name: "remove", args: ["apple"] })
      assert.deepStrictEqual([fresh.updateId, fresh.command.type, value(fresh.command["result"])], ["offline-update", "complete_update", 2])
      const failed = yield* DurableWorkflow.replayUpdate(cart, cartHistory, { name: "remove", args: ["kiwi"], updateId: "u-2" })
      assert.deepStrictEqual([failed.command.type, failed.command["update_id"], failed.command["message"]], ["fail_update", "u-2", "no kiwi in the cart"])
      const missing = yield* DurableWorkflow.replayUpdate(cart, cartHistory, "u-9")
      assert.strictEqual(missing.command["exception_type"], "UpdateNotFound")
      const unknown = yield* DurableWorkflow.replayUpdate(cart, cartHistory, { name: "empty" })
      assert.strictEqual(unknown.command["exception_type"], "UnknownUpdate")
    }))
})

describe("promise twins", () => {
  it("replay, replayQuery and replayUpdate resolve with what the Effect versions succeed with", async () => {
    const outcome = await Facade.replay([cart], cartHistory)
    assert.deepStrictEqual(outcome.commands, [{ type: "open_condition_wait" }])
    assert.deepStrictEqual(await Facade.replayQuery(cart, cartHistory, "items", { args: ["p"] }), ["pear"])
    const update = await Facade.replayUpdate(cart, cartHistory, { name: "remove", args: ["pear"] })
    assert.strictEqual(value(update.command["result"]), 2)
  })

  it("they reject with the typed error itself", async () => {
    const changed = DurableWorkflow.make("cart", (ctx) => Effect.zipRight(ctx.sleep(1), Effect.never))
    const error = await Facade.replay(changed, cartHistory).then(() => undefined, (e: unknown) => e)
    assert.instanceOf(error, DurableWorkflow.NonDeterministicReplayError)
    assert.strictEqual((error as DurableWorkflow.NonDeterministicReplayError).workflowSequence, 1)
    const query = await Facade.replayQuery(cart, cartHistory, "nope").then(() => undefined, (e: unknown) => e)
    assert.instanceOf(query, DurableWorkflow.QueryFailed)
    const update = await Facade.replayUpdate([], cartHistory, "u-1").then(() => undefined, (e: unknown) => e)
    assert.instanceOf(update, DurableWorkflow.ReplayError)
  })
})
