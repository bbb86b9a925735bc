import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as DurableWorkflow from "../../src/core/DurableWorkflow.js"
import { readHistory } from "../../src/core/internal/durableWorkflow/replay.js"
import { replay, ReplayFailure } from "../../src/core/internal/durableWorkflow/run.js"
import { blob, replayInput, value } from "./support.js"


const commandsOf = (definition: DurableWorkflow.DurableWorkflow, args: ReadonlyArray<unknown>, history: ReadonlyArray<unknown>) =>
  Effect.map(replay(definition, replayInput(history, args)), (r) => r.commands as ReadonlyArray<Record<string, any>>)

const replayFailure = (definition: DurableWorkflow.DurableWorkflow, args: ReadonlyArray<unknown>, history: ReadonlyArray<unknown>) =>
  Effect.map(Effect.flip(replay(definition, replayInput(history, args))), (f) => (f as ReplayFailure).error as { _tag?: string; message: string })

// ---- the golden workflows, in the three authoring styles ------------------------------------

const goldenEffect = [
  DurableWorkflow.make("golden.single-activity", (ctx, name: string) => ctx.activity<string>("golden.greet", [name])),
  DurableWorkflow.make("golden.saga-compensation", (ctx, orderId: string) =>
    Effect.gen(function*() {
      const reservation = yield* ctx.activity<string>("golden.reserve-inventory", [orderId])
      return yield* ctx.child("golden.charge-payment", [orderId]).pipe(
        Effect.catchTag("ChildWorkflowFailed", (error) =>
          ctx.activity("golden.release-inventory", [orderId, reservation, error.message]))
      )
    })),
  DurableWorkflow.make("golden.signal-wait", (ctx) =>
    Effect.gen(function*() {
      let approvedBy: string | null = null
      ctx.onSignal("approve", (who: string) => {
        approvedBy = who
      })
      yield* ctx.waitCondition(() => approvedBy !== null, { key: "approval", timeoutSeconds: 30 })
      const activityResult = yield* ctx.activity<string>("golden.notify", [approvedBy])
      return { approved_by: approvedBy, activity_result: activityResult }
    })),
  DurableWorkflow.make("golden.timeout-wait", (ctx) =>
    Effect.map(ctx.waitCondition(() => false, { key: "approval", timeoutSeconds: 5 }), (ok) => (ok ? "approved" : "timed-out"))),
  DurableWorkflow.make("golden.version-marker", (ctx) =>
    Effect.flatMap(ctx.getVersion("golden-version", 1, 2), (version) =>
      ctx.activity(version === 2 ? "golden.version-new-path" : "golden.version-old-path")))
]

const goldenGenerator = [
  DurableWorkflow.fromGenerator("golden.single-activity", function*(ctx, name: string) {
    return yield ctx.activity("golden.greet", [name])
  }),
  DurableWorkflow.fromGenerator("golden.saga-compensation", function*(ctx, orderId: string) {
    const reservation: string = yield ctx.activity("golden.reserve-inventory", [orderId])
    try {
      return yield ctx.child("golden.charge-payment", [orderId])
    } catch (error) {
      return yield ctx.activity("golden.release-inventory", [orderId, reservation, (error as Error).message])
    }
  }),
  DurableWorkflow.fromGenerator("golden.signal-wait", function*(ctx) {
    let approvedBy: string | null = null
    ctx.onSignal("approve", (who: string) => {
      approvedBy = who
    })
    yield ctx.waitCondition(() => approvedBy !== null, { key: "approval", timeoutSeconds: 30 })
    const activityResult: string = yield ctx.activity("golden.notify", [approvedBy])
    return { approved_by: approvedBy, activity_result: activityResult }
  }),
  DurableWorkflow.fromGenerator("golden.timeout-wait", function*(ctx) {
    const ok: boolean = yield ctx.waitCondition(() => false, { key: "approval", timeoutSeconds: 5 })
    return ok ? "approved" : "timed-out"
  }),
  DurableWorkflow.fromGenerator("golden.version-marker", function*(ctx) {
    const version: number = yield ctx.getVersion("golden-version", 1, 2)
    return yield ctx.activity(version === 2 ? "golden.version-new-path" : "golden.version-old-path")
  })
]

const goldenAsync = [
  DurableWorkflow.fromAsync("golden.single-activity", async (ctx, name: string) => ctx.activity("golden.greet", [name])),
  DurableWorkflow.fromAsync("golden.saga-compensation", async (ctx, orderId: string) => {
    const reservation = await ctx.activity<string>("golden.reserve-inventory", [orderId])
    try {
      return await ctx.child("golden.charge-payment", [orderId])
    } catch (error) {
      return await ctx.activity("golden.release-inventory", [orderId, reservation, (error as Error).message])
    }
  }),
  DurableWorkflow.fromAsync("golden.signal-wait", async (ctx) => {
    let approvedBy: string | null = null
    ctx.onSignal("approve", (who: string) => {
      approvedBy = who
    })
    await ctx.waitCondition(() => approvedBy !== null, { key: "approval", timeoutSeconds: 30 })
    const activityResult = await ctx.activity<string>("golden.notify", [approvedBy])
    return { approved_by: approvedBy, activity_result: activityResult }
  }),
  DurableWorkflow.fromAsync("golden.timeout-wait", async (ctx) =>
    (await ctx.waitCondition(() => false, { key: "approval", timeoutSeconds: 5 })) ? "approved" : "timed-out"),
  DurableWorkflow.fromAsync("golden.version-marker", async (ctx) => {
    const version = await ctx.getVersion("golden-version", 1, 2)
    return ctx.activity(version === 2 ? "golden.version-new-path" : "golden.version-old-path")
  })
]

const goldenDir = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "fixtures", "durable-workflow", "golden_history")
const goldenFiles = fs.readdirSync(goldenDir).filter((f) => f.endsWith(".json")).sort()

const commandType = (wire: string) =>
  ({ complete_workflow: "CompleteWorkflow", schedule_activity: "ScheduleActivity", fail_workflow: "FailWorkflow" })[wire] ?? wire

describe("golden histories", () => {
  it("every fixture file is covered", () => {
    assert.deepStrictEqual(goldenFiles, [
      "python-sdk-0.3.1.json",
      "python-sdk-2.0.0-rc.30-avro-saga.json",
      "python-sdk-2.0.0-rc.30-avro-signal.json",
      "python-sdk-2.0.0-rc.30-avro-timeout.json",
      "python-sdk-2.0.0-rc.30-avro-version.json",
      "python-sdk-2.0.0-rc.30-avro.json"
    ])
  })

  for (const file of goldenFiles) {
    const fixture = JSON.parse(fs.readFileSync(path.join(goldenDir, file), "utf8"))
    const legacy = fixture.source.worker_protocol_version === "1.0"
    for (const testCase of fixture.cases) {
      for (const [style, definitions] of [["Effect", goldenEffect], ["generator", goldenGenerator], ["async", goldenAsync]] as const) {
        const definition = definitions.find((d) => d.name === testCase.workflow_type)!
        const hasJsonPayloads = JSON.stringify(testCase.history).includes("\\\"") || JSON.stringify(testCase.history).includes("[\\\"")
        if (legacy && hasJsonPayloads) {
          it.effect(`${file} ${testCase.name} (${style}): protocol 1.0 JSON payloads are refused as a task failure`, () =>
            Effect.gen(function*() {
              const error = yield* replayFailure(definition, testCase.start_input, testCase.history)
              assert.match(error.message, /invalid_payload_framing: .*JSON/)
            }))
          continue
        }
        it.effect(`${file} ${testCase.name} (${style})`, () =>
          Effect.gen(function*() {
            const commands = yield* commandsOf(definition, testCase.start_input, testCase.history)
            assert.lengthOf(commands, 1, JSON.stringify(commands))
            const command = commands[0]!
            assert.strictEqual(commandType(command["type"]), testCase.expected.command_type)
            if (command["type"] === "complete_workflow") {
              assert.deepStrictEqual(value(command["result"]), testCase.expected.result)
            } else {
              assert.strictEqual(command["activity_type"], testCase.expected.activity_type)
              assert.deepStrictEqual(value(command["arguments"]), testCase.expected.arguments)
              assert.strictEqual(command["queue"], "orders")
            }
          }))
      }
    }
  }
})

const completed = (result: unknown, extra: Record<string, unknown> = {}) => ({
  event_type: "ActivityCompleted",
  payload: { result: blob(result), ...extra }
})

describe("receivers pinned to condition waits", () => {
  const opened = (id: string, key: string) => ({ event_type: "ConditionWaitOpened", payload: { condition_wait_id: id, condition_key: key } })
  const satisfied = (id: string) => ({ event_type: "ConditionWaitSatisfied", payload: { condition_wait_id: id } })
  const signal = (n: number) => ({ event_type: "SignalReceived", payload: { signal_name: "add", arguments: blob([n]) } })
  const update = (n: number, id: string) => ({
    event_type: "UpdateApplied",
    payload: { update_name: "add", update_id: id, arguments: blob([n]) }
  })

  /** Two sequential waits on a counter fed by the signal (or update) `add`; returns what each point saw. */
  const counter = (receiver: "signal" | "update", thenActivity = false) =>
    DurableWorkflow.make("t", (ctx) =>
      Effect.gen(function*() {
        let count = 0
        const add = (n: number) => {
          count += n
          return count
        }
        if (receiver === "signal") ctx.onSignal("add", add)
        else ctx.onUpdate("add", add)
        yield* ctx.waitCondition(() => count >= 1, { key: "first" })
        const afterFirst = count
        yield* ctx.waitCondition(() => count >= 2, { key: "second" })
        const afterSecond = count
        if (!thenActivity) return [afterFirst, afterSecond]
        yield* ctx.activity("x")
        return [afterFirst, afterSecond, count]
      }))

  it.effect("a signal recorded between a ConditionWaitOpened and its ConditionWaitSatisfied applies at that wait and satisfies it", () =>
    Effect.gen(function*() {
      // the first wait's satisfaction is not recorded: result positions alone would apply both signals at the first wait
      const commands = yield* commandsOf(counter("signal"), [], [
        { event_type: "WorkflowStarted", payload: {} },
        opened("w1", "first"),
        signal(1),
        opened("w2", "second"),
        signal(1),
        satisfied("w2")
      ])
      assert.deepStrictEqual(value(commands[0]!["result"]), [1, 2])
    }))

  it.effect("generator and async workflows apply pinned signals at their waits too", () =>
    Effect.gen(function*() {
      const history = [opened("w1", "first"), signal(1), opened("w2", "second"), signal(1), satisfied("w2")]
      const generator = DurableWorkflow.fromGenerator("t", function*(ctx) {
        let count = 0
        ctx.onSignal("add", (n: number) => void (count += n))
        yield ctx.waitCondition(() => count >= 1, { key: "first" })
        const afterFirst = count
        yield ctx.waitCondition(() => count >= 2, { key: "second" })
        return [afterFirst, count]
      })
      const async = DurableWorkflow.fromAsync("t", async (ctx) => {
        let count = 0
        ctx.onSignal("add", (n: number) => void (count += n))
        await ctx.waitCondition(() => count >= 1, { key: "first" })
        const afterFirst = count
        await ctx.waitCondition(() => count >= 2, { key: "second" })
        return [afterFirst, count]
      })
      assert.deepStrictEqual(value((yield* commandsOf(generator, [], history))[0]!["result"]), [1, 2])
      assert.deepStrictEqual(value((yield* commandsOf(async, [], history))[0]!["result"]), [1, 2])
    }))

  it.effect("signals that arrive while the woken task is leased apply at the wait that task opens next", () =>
    Effect.gen(function*() {
      const commands = yield* commandsOf(counter("signal"), [], [
        opened("w1", "first"),
        signal(1),
        signal(1),
        opened("w2", "second")
      ])
      assert.deepStrictEqual(value(commands[0]!["result"]), [1, 2])
    }))

  it.effect("a signal recorded before a wait binds to it when nothing but a wait ending comes between", () =>
    Effect.gen(function*() {
      const commands = yield* commandsOf(counter("signal"), [], [
        opened("w1", "first"),
        signal(1),
        // the first wait ended (its timeout timer was cancelled); the next signal belongs to the next wait
        { event_type: "TimerCancelled", payload: { timer_kind: "condition_timeout", condition_wait_id: "w1" } },
        signal(1),
        opened("w2", "second")
      ])
      assert.deepStrictEqual(value(commands[0]!["result"]), [1, 2])
    }))

  it.effect("a signal recorded before the first wait, at the start of history, binds to that wait", () =>
    Effect.gen(function*() {
      const commands = yield* commandsOf(counter("signal"), [], [
        { event_type: "WorkflowStarted", payload: {} },
        signal(1),
        opened("w1", "first"),
        opened("w2", "second"),
        signal(1)
      ])
      assert.deepStrictEqual(value(commands[0]!["result"]), [1, 2])
    }))

  it.effect("a signal with no wait to bind to stays placed by result position", () =>
    Effect.gen(function*() {
      const commands = yield* commandsOf(counter("signal", true), [], [
        opened("w1", "first"),
        signal(1),
        opened("w2", "second"),
        signal(1),
        { event_type: "ActivityScheduled", payload: { activity_type: "x" } },
        // after a step and with no later wait: applied before the activity's result is handed over
        signal(5),
        completed(null, { activity_type: "x" })
      ])
      assert.deepStrictEqual(value(commands[0]!["result"]), [1, 2, 7])
    }))

  it.effect("applied updates bind to condition waits the same way; an update with no wait stays placed by result position", () =>
    Effect.gen(function*() {
      const commands = yield* commandsOf(counter("update", true), [], [
        update(1, "u0"),
        opened("w1", "first"),
        opened("w2", "second"),
        update(1, "u1"),
        { event_type: "ActivityScheduled", payload: { activity_type: "x" } },
        update(5, "u2"),
        completed(null, { activity_type: "x" })
      ])
      assert.deepStrictEqual(value(commands[0]!["result"]), [1, 2, 7])
    }))

  it("which wait each recorded receiver is pinned to", () => {
    const sig = (name: string, extra: Record<string, unknown> = {}) => ({
      event_type: "SignalReceived",
      payload: { signal_name: name, arguments: blob([]), ...extra }
    })
    const { receivers, waits } = readHistory([
      { event_type: "WorkflowStarted", payload: {} },
      sig("start"), // before the first wait, nothing between: that wait
      opened("w1", "a"),
      sig("in-w1"), // first in the window: w1
      sig("leased"), // the window is cut by the next open: the next wait
      opened("w2", "b"),
      sig("in-w2"),
      satisfied("w2"),
      sig("after-wait-ended"), // no step since w2 ended: the next wait
      opened("w3", "c"),
      { event_type: "ActivityScheduled", payload: { activity_type: "x" } },
      sig("after-step"), // a step came first: by result position
      { event_type: "ConditionWaitOpened", payload: { sequence: 9 } }, // no condition_wait_id: not a wait
      completed(null),
      sig("by-sequence", { sequence: 7 }), // left to its sequence
      { event_type: "ConditionWaitOpened", payload: { condition_wait_id: "w4", sequence: 7 } },
      { event_type: "TimerFired", payload: { timer_kind: "condition_timeout", condition_wait_id: "w4" } },
      sig("last") // no later wait: by result position
    ], "avro")
    assert.deepStrictEqual(receivers.map((r) => [r.name, r.waitId]), [
      ["start", "w1"],
      ["in-w1", "w1"],
      ["leased", "w2"],
      ["in-w2", "w2"],
      ["after-wait-ended", "w3"],
      ["after-step", undefined],
      ["by-sequence", "w4"],
      ["last", undefined]
    ])
    assert.deepStrictEqual(waits.map((w) => w.waitId), ["w1", "w2", "w3", "w4"])
  })

  it.effect("a wait that history shows reopened (same key) takes the receivers of each reopening while unsatisfied", () =>
    Effect.gen(function*() {
      const wf = DurableWorkflow.make("t", (ctx) =>
        Effect.gen(function*() {
          let count = 0
          ctx.onSignal("add", (n: number) => void (count += n))
          yield* ctx.waitCondition(() => count >= 2, { key: "first" })
          const after = count
          yield* ctx.waitCondition(() => count >= 3, { key: "second" })
          return [after, count]
        }))
      const commands = yield* commandsOf(wf, [], [
        opened("w1", "first"),
        signal(1),
        opened("w1b", "first"),
        signal(1),
        opened("w2", "second"),
        signal(1)
      ])
      assert.deepStrictEqual(value(commands[0]!["result"]), [2, 3])
    }))
})

describe("replay", () => {
  it.effect("a new activity is scheduled with its arguments as one Avro list and the worker queue", () =>
    Effect.gen(function*() {
      const wf = DurableWorkflow.make("t", (ctx, a: number) =>
        ctx.activity("calc.double", [a], { startToCloseTimeout: 30, heartbeatTimeout: 10, retryPolicy: { maxAttempts: 5, backoffSeconds: [1, 2.5] } }))
      const [command] = yield* commandsOf(wf, [21], [])
      assert.strictEqual(command!["type"], "schedule_activity")
      assert.deepStrictEqual(value(command!["arguments"]), [21])
      assert.strictEqual(command!["queue"], "orders")
      assert.strictEqual(command!["start_to_close_timeout"], 30)
      assert.strictEqual(command!["heartbeat_timeout"], 10)
      assert.deepStrictEqual(command!["retry_policy"], { max_attempts: 5, backoff_seconds: [1, 3] })
    }))

  it.effect("a blocked workflow re-emits the command it waits on, even when history shows it scheduled", () =>
    Effect.gen(function*() {
      const wf = DurableWorkflow.make("t", (ctx) => ctx.activity("a"))
      const commands = yield* commandsOf(wf, [], [{ event_type: "ActivityScheduled", payload: { activity_type: "a" } }])
      assert.deepStrictEqual(commands.map((c) => c["type"]), ["schedule_activity"])
    }))

  it.effect("timers round up to whole seconds; child workflows carry type, arguments and queue", () =>
    Effect.gen(function*() {
      const wf = DurableWorkflow.make("t", (ctx) =>
        Effect.zipRight(ctx.sleep(1.2), ctx.child("orders.child", [1], { queue: "other", parentClosePolicy: "abandon", executionTimeoutSeconds: 60 })))
      assert.deepStrictEqual(yield* commandsOf(wf, [], []), [{ type: "start_timer", delay_seconds: 2 }])
      const [child] = yield* commandsOf(wf, [], [{ event_type: "TimerFired", payload: {} }])
      assert.strictEqual(child!["type"], "start_child_workflow")
      assert.strictEqual(child!["workflow_type"], "orders.child")
      assert.deepStrictEqual(value(child!["arguments"]), [1])
      assert.strictEqual(child!["queue"], "other")
      assert.strictEqual(child!["parent_close_policy"], "abandon")
      assert.strictEqual(child!["execution_timeout_seconds"], 60)
    }))

  it.effect("parallel groups carry their metadata and resolve in yielded order", () =>
    Effect.gen(function*() {
      const wf = DurableWorkflow.make("t", (ctx) =>
        ctx.all([DurableWorkflow.Ops.activity("a", [1]), DurableWorkflow.Ops.activity("b", [2])]))
      const commands = yield* commandsOf(wf, [], [])
      assert.lengthOf(commands, 2)
      commands.forEach((command, index) => {
        assert.strictEqual(command["parallel_group_id"], "parallel-activities:1:2")
        assert.strictEqual(command["parallel_group_kind"], "activity")
        assert.strictEqual(command["parallel_group_base_sequence"], 1)
        assert.strictEqual(command["parallel_group_size"], 2)
        assert.strictEqual(command["parallel_group_index"], index)
        assert.deepStrictEqual(command["parallel_group_path"], [{
          parallel_group_id: "parallel-activities:1:2",
          parallel_group_kind: "activity",
          parallel_group_base_sequence: 1,
          parallel_group_size: 2,
          parallel_group_index: index
        }])
      })
      // completed out of order: b first
      const done = yield* commandsOf(wf, [], [
        completed("B", { parallel_group_index: 1 }),
        completed("A", { parallel_group_index: 0 })
      ])
      assert.deepStrictEqual(value(done[0]!["result"]), ["A", "B"])
      // a generator yields the group as an array; mixed kinds are a "mixed" group
      const gen = DurableWorkflow.fromGenerator("t", function*(ctx) {
        return yield [ctx.activity("a"), ctx.sleep(5)]
      })
      const mixed = yield* commandsOf(gen, [], [])
      assert.strictEqual(mixed[0]!["parallel_group_id"], "parallel-calls:1:2")
      assert.strictEqual(mixed[1]!["type"], "start_timer")
    }))

  it.effect("a side effect runs once and records a bare blob; on replay its recorded value is used", () =>
    Effect.gen(function*() {
      let calls = 0
      const wf = DurableWorkflow.make("t", (ctx) =>
        Effect.gen(function*() {
          const n = yield* ctx.sideEffect(() => ++calls * 10)
          return yield* ctx.activity("use", [n])
        }))
      const fresh = yield* commandsOf(wf, [], [])
      assert.deepStrictEqual(fresh.map((c) => c["type"]), ["record_side_effect", "schedule_activity"])
      assert.strictEqual(fresh[0]!["result"], blob(10))
      assert.deepStrictEqual(value(fresh[1]!["arguments"]), [10])
      const replayed = yield* commandsOf(wf, [], [{ event_type: "SideEffectRecorded", payload: { result: blob(42) } }])
      assert.deepStrictEqual(replayed.map((c) => c["type"]), ["schedule_activity"])
      assert.deepStrictEqual(value(replayed[0]!["arguments"]), [42])
      assert.strictEqual(calls, 1)
    }))

  it.effect("version markers: new runs record the max version; old histories take the -1 path without a marker", () =>
    Effect.gen(function*() {
      const wf = DurableWorkflow.make("t", (ctx) =>
        Effect.gen(function*() {
          yield* ctx.activity("first")
          const version = yield* ctx.getVersion("change-1", 1, 3)
          return yield* ctx.activity(`path-${version}`)
        }))
      const fresh = yield* commandsOf(wf, [], [completed(null)])
      assert.deepStrictEqual(fresh[0], { type: "record_version_marker", change_id: "change-1", version: 3, min_supported: 1, max_supported: 3 })
      assert.strictEqual(fresh[1]!["activity_type"], "path-3")
      const old = yield* commandsOf(wf, [], [completed(null), completed("x", { activity_type: "path--1" })])
      assert.strictEqual(old[0]!["type"], "complete_workflow")
      const patched = DurableWorkflow.make("t", (ctx) => Effect.flatMap(ctx.patched("p"), (p) => ctx.activity(p ? "new" : "old")))
      assert.strictEqual((yield* commandsOf(patched, [], []))[1]!["activity_type"], "new")
    }))

  it.effect("a failed activity is thrown into the workflow; uncaught, it fails the workflow with the exception", () =>
    Effect.gen(function*() {
      const wf = DurableWorkflow.make("t", (ctx) => ctx.activity("charge"))
      const [command] = yield* commandsOf(wf, [], [{
        event_type: "ActivityFailed",
        payload: { message: "card declined", exception_type: "PaymentDeclined", activity_attempt_id: "att-1" }
      }])
      assert.strictEqual(command!["type"], "fail_workflow")
      assert.strictEqual(command!["message"], "card declined")
      assert.strictEqual(command!["exception_type"], "ActivityFailed")
      assert.deepStrictEqual(command!["exception"], {
        type: "PaymentDeclined",
        class: "effect-durable-worker.ActivityFailed",
        message: "card declined",
        activity_type: "charge",
        activity_attempt_id: "att-1"
      })
      assert.notProperty(command!, "non_retryable")
      const fatal = DurableWorkflow.fromAsync("t", async () => {
        const { FatalError } = await import("../../src/core/FatalError.js")
        throw new FatalError("bad input")
      })
      const [failed] = yield* commandsOf(fatal, [], [])
      assert.strictEqual(failed!["non_retryable"], true)
      assert.strictEqual(failed!["exception_type"], "FatalError")
    }))

  it.effect("a FatalError from another copy of the package fails the workflow non-retryable too", () =>
    Effect.gen(function*() {
      // an application that loads both builds (CommonJS and ES modules) has two FatalError classes:
      // the query makes the module loader evaluate the module a second time, a class of its own
      const second = "../../src/core/FatalError.js?copy"
      const copy = yield* Effect.promise(() => import(second) as Promise<typeof import("../../src/core/FatalError.js")>)
      const { FatalError } = yield* Effect.promise(() => import("../../src/core/FatalError.js"))
      assert.notStrictEqual(copy.FatalError, FatalError)
      const fatal = DurableWorkflow.fromAsync("t", async () => {
        throw new copy.FatalError("bad input", "bad_input")
      })
      const [failed] = yield* commandsOf(fatal, [], [])
      assert.strictEqual(failed!["type"], "fail_workflow")
      assert.strictEqual(failed!["non_retryable"], true)
      // errors written for the Durable Workflow SDKs say it with nonRetryable, as activities' do
      const sdkStyle = DurableWorkflow.fromAsync("t", async () => {
        throw Object.assign(new Error("no such customer"), { nonRetryable: true })
      })
      const [sdkFailed] = yield* commandsOf(sdkStyle, [], [])
      assert.strictEqual(sdkFailed!["non_retryable"], true)
    }))

  it.effect("continue-as-new ends the run with the new arguments", () =>
    Effect.gen(function*() {
      const wf = DurableWorkflow.make("t", (ctx, n: number) => Effect.succeed(ctx.continueAsNew([n + 1], { workflowType: "t2" })))
      const [command] = yield* commandsOf(wf, [1], [])
      assert.strictEqual(command!["type"], "continue_as_new")
      assert.strictEqual(command!["queue"], "orders")
      assert.strictEqual(command!["workflow_type"], "t2")
      assert.deepStrictEqual(value(command!["arguments"]), [2])
    }))

  it.effect("search attributes and condition waits are commands", () =>
    Effect.gen(function*() {
      const wf = DurableWorkflow.fromGenerator("t", function*(ctx) {
        yield ctx.upsertSearchAttributes({ tier: "gold" })
        return yield ctx.waitCondition(() => false, { key: "k", timeoutSeconds: 2.5 })
      })
      assert.deepStrictEqual(yield* commandsOf(wf, [], []), [
        { type: "upsert_search_attributes", attributes: { tier: "gold" } },
        { type: "open_condition_wait", condition_key: "k", timeout_seconds: 3 }
      ])
    }))

  it.effect("non-determinism is a task failure, even when the workflow catches errors", () =>
    Effect.gen(function*() {
      const wf = DurableWorkflow.make("t", (ctx) => Effect.catchAll(Effect.zipRight(ctx.sleep(5), ctx.activity("a")), () => Effect.succeed("swallowed")))
      const error = yield* replayFailure(wf, [], [completed("x")])
      assert.strictEqual(error._tag, "NonDeterministicReplayError")
      assert.match(error.message, /asked for a timer, but history recorded ActivityCompleted/)
      const typed = DurableWorkflow.make("t", (ctx) => ctx.activity("b"))
      const mismatch = yield* replayFailure(typed, [], [completed("x", { activity_type: "a" })])
      assert.match(mismatch.message, /activity "b".*ActivityCompleted \("a"\)/)
      const ended = DurableWorkflow.make("t", () => Effect.succeed(1))
      const extra = yield* replayFailure(ended, [], [completed("x")])
      assert.match(extra.message, /ended at sequence 0, but history recorded 1 more result/)
    }))

  it.effect("a step the code waits on must be the step history shows scheduled", () =>
    Effect.gen(function*() {
      const history = [
        completed("r1", { activity_type: "first" }),
        { event_type: "ActivityScheduled", payload: { activity_type: "first" } },
        { event_type: "ActivityScheduled", payload: { activity_type: "second" } }
      ]
      // ActivityScheduled precedes its completion in real histories
      const ordered = [history[1], history[0], history[2]]
      const same = DurableWorkflow.make("t", (ctx) => Effect.zipRight(ctx.activity("first"), ctx.activity("second")))
      assert.deepStrictEqual((yield* commandsOf(same, [], ordered)).map((c) => c["activity_type"]), ["second"])
      const changed = DurableWorkflow.make("t", (ctx) => Effect.zipRight(ctx.activity("first"), ctx.activity("renamed")))
      const error = yield* replayFailure(changed, [], ordered)
      assert.strictEqual(error._tag, "NonDeterministicReplayError")
      assert.match(error.message, /activity "renamed".*ActivityScheduled \("second"\)/)
      const timer = DurableWorkflow.make("t", (ctx) => Effect.zipRight(ctx.activity("first"), ctx.sleep(5)))
      assert.match((yield* replayFailure(timer, [], ordered)).message, /asked for a timer, but history recorded ActivityScheduled/)
    }))

  it.effect("the code may not end, nor ask for something new, where history shows the run still waiting", () =>
    Effect.gen(function*() {
      const scheduled = { event_type: "ActivityScheduled", payload: { activity_type: "charge", sequence: 1 } }
      const timer = { event_type: "TimerScheduled", payload: { delay_seconds: 60, sequence: 1, timer_id: "t-1" } }
      const wait = { event_type: "ConditionWaitOpened", payload: { condition_wait_id: "w1", condition_key: "approval", sequence: 1 } }
      // the live run was blocked on these; the changed code returns at once
      const ended = DurableWorkflow.make("t", () => Effect.succeed("done"))
      for (const [history, recorded] of [[[scheduled], /ActivityScheduled \("charge"\) at workflow sequence 1 still waiting/], [[timer], /TimerScheduled at workflow sequence 1 still waiting/], [[wait], /condition wait "approval" \(w1\) that the code never reached/]] as const) {
        const error = yield* replayFailure(ended, [], history)
        assert.strictEqual(error._tag, "NonDeterministicReplayError")
        assert.match(error.message, recorded)
      }
      // continue-as-new is an end too
      const renewed = DurableWorkflow.make("t", (ctx) => Effect.succeed(ctx.continueAsNew([])))
      assert.match((yield* replayFailure(renewed, [], [scheduled])).message, /still waiting for its result/)
      // a new side effect or upsert where the live run waited on the activity
      const sideEffect = DurableWorkflow.make("t", (ctx) => Effect.zipRight(ctx.sideEffect(() => 1), ctx.activity("charge")))
      assert.match((yield* replayFailure(sideEffect, [], [scheduled])).message, /asked for a side effect, but history recorded ActivityScheduled \("charge"\)/)
      const upsert = DurableWorkflow.make("t", (ctx) => Effect.zipRight(ctx.upsertSearchAttributes({ tier: "gold" }), ctx.activity("charge")))
      assert.match((yield* replayFailure(upsert, [], [wait])).message, /asked for a search attributes upsert, but history opened the condition wait "approval"/)
      // (a new condition wait is checked where it blocks: one satisfied at once records nothing, see below)
      const newWait = DurableWorkflow.make("t", (ctx) => Effect.zipRight(ctx.waitCondition(() => false), ctx.activity("charge")))
      assert.match((yield* replayFailure(newWait, [], [scheduled])).message, /asked for a condition wait, but history recorded ActivityScheduled/)
      // the same code replays: it blocks on the activity (sent again), and ends once it has its result
      const same = DurableWorkflow.make("t", (ctx) => Effect.as(ctx.activity("charge"), "done"))
      assert.deepStrictEqual((yield* commandsOf(same, [], [scheduled])).map((c) => c["type"]), ["schedule_activity"])
      const done = yield* commandsOf(same, [], [scheduled, completed("ok", { activity_type: "charge", sequence: 1 })])
      assert.deepStrictEqual(done.map((c) => c["type"]), ["complete_workflow"])
      // a server that writes no sequence on results: nothing ties them to what was scheduled, so
      // nothing is taken for still waiting (the golden histories' ActivityCompleted carry none)
      const unsequenced = [scheduled, completed("ok", { activity_type: "charge" })]
      assert.deepStrictEqual((yield* commandsOf(same, [], unsequenced)).map((c) => c["type"]), ["complete_workflow"])
      // a version marker added before the step the run waits on: history was written before it, the old path
      const versioned = DurableWorkflow.make("t", (ctx) =>
        Effect.flatMap(ctx.getVersion("pay-v2", -1, 1), (v) => ctx.activity(v === 1 ? "charge-v2" : "charge")))
      assert.deepStrictEqual((yield* commandsOf(versioned, [], [scheduled])).map((c) => [c["type"], c["activity_type"]]), [["schedule_activity", "charge"]])
      assert.deepStrictEqual((yield* commandsOf(versioned, [], [])).map((c) => [c["type"], c["activity_type"]]), [
        ["record_version_marker", undefined],
        ["schedule_activity", "charge-v2"]
      ])
    }))

  it.effect("a condition wait satisfied at once (nothing recorded) replays past a step the run still waits on", () =>
    Effect.gen(function*() {
      const scheduled = { event_type: "ActivityScheduled", payload: { activity_type: "charge", sequence: 1 } }
      const signal = { event_type: "SignalReceived", payload: { signal_name: "note", arguments: blob([1]) } }
      // the live run found the condition true, recorded nothing for it, and scheduled the activity;
      // a signal arriving while it runs makes a workflow task that replays this very code
      const wf = DurableWorkflow.make("t", (ctx) =>
        Effect.gen(function*() {
          ctx.onSignal("note", () => undefined)
          yield* ctx.waitCondition(() => true)
          return yield* ctx.activity("charge")
        }))
      assert.deepStrictEqual((yield* commandsOf(wf, [], [])).map((c) => c["type"]), ["schedule_activity"])
      for (const history of [[scheduled], [scheduled, signal]]) {
        assert.deepStrictEqual((yield* commandsOf(wf, [], history)).map((c) => c["type"]), ["schedule_activity"])
      }
      // a wait that blocks where the live run waited on the activity is still non-determinism
      const blocks = DurableWorkflow.make("t", (ctx) => Effect.zipRight(ctx.waitCondition(() => false), ctx.activity("charge")))
      assert.match((yield* replayFailure(blocks, [], [scheduled])).message, /asked for a condition wait, but history recorded ActivityScheduled/)
    }))

  it.effect("a wait the server opened again after its satisfying signal does not hold the workflow's end", () =>
    Effect.gen(function*() {
      const opened = (id: string) => ({ event_type: "ConditionWaitOpened", payload: { condition_wait_id: id, condition_key: "approval" } })
      const signal = (n: number) => ({ event_type: "SignalReceived", payload: { signal_name: "add", arguments: blob([n]) } })
      const wf = DurableWorkflow.make("t", (ctx) =>
        Effect.gen(function*() {
          let total = 0
          ctx.onSignal("add", (n: number) => void (total += n))
          yield* ctx.waitCondition(() => total >= 2, { key: "approval" })
          return total
        }))
      // w1 saw 1 (not enough) and was opened again as w2, which saw 1 more; w3 opened before the task ran
      const commands = yield* commandsOf(wf, [], [opened("w1"), signal(1), opened("w2"), signal(1), opened("w3")])
      assert.deepStrictEqual(commands.map((c) => c["type"]), ["complete_workflow"])
      assert.strictEqual(value(commands[0]!["result"]), 2)
    }))

  it.effect("signals recorded before the first result apply after the code reaches its first operation", () =>
    Effect.gen(function*() {
      const seen: Array<string> = []
      const wf = DurableWorkflow.make("t", (ctx) =>
        Effect.gen(function*() {
          ctx.onSignal("add", (item: string) => void seen.push(item))
          yield* ctx.activity("first")
          return [...seen]
        }))
      const commands = yield* commandsOf(wf, [], [
        { event_type: "SignalReceived", payload: { signal_name: "add", arguments: blob(["x"]) } },
        { event_type: "SignalReceived", payload: { signal_name: "unknown", arguments: blob([]) } },
        completed(null)
      ])
      assert.deepStrictEqual(value(commands[0]!["result"]), ["x"])
    }))

  it.effect("determinism helpers: now() is the start time, random() and uuid4() are seeded by the run id", () =>
    Effect.gen(function*() {
      const wf = DurableWorkflow.make("t", (ctx) => Effect.succeed([ctx.now().toISOString(), ctx.random(), ctx.uuid4()]))
      const history = [{ event_type: "WorkflowStarted", payload: { timestamp: "2026-01-02T03:04:05.000Z" } }]
      const a = value((yield* commandsOf(wf, [], history))[0]!["result"]) as Array<unknown>
      const b = value((yield* commandsOf(wf, [], history))[0]!["result"]) as Array<unknown>
      assert.strictEqual(a[0], "2026-01-02T03:04:05.000Z")
      assert.deepStrictEqual(a, b)
      assert.match(String(a[2]), /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
    }))

  it.effect("an undecodable history payload is a task failure", () =>
    Effect.gen(function*() {
      const wf = DurableWorkflow.make("t", (ctx) => ctx.activity("a"))
      const error = yield* replayFailure(wf, [], [{ event_type: "ActivityCompleted", payload: { result: "not base64!" } }])
      assert.match(error.message, /^invalid_payload_framing/)
    }))

  it("fingerprints are sha256 over the definition", () => {
    const a = DurableWorkflow.make("fp", () => Effect.succeed(1))
    const b = DurableWorkflow.make("fp", () => Effect.succeed(2))
    assert.match(a.fingerprint, /^sha256:[0-9a-f]{64}$/)
    assert.notStrictEqual(a.fingerprint, b.fingerprint)
  })
})
