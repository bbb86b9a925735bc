import * as FileSystem from "@effect/platform/FileSystem"
import * as NodeContext from "@effect/platform-node/NodeContext"
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { layerWithPath as files } from "../../src/services/internal/nodeFiles.js"
import * as DurableWorkflow from "../../src/core/DurableWorkflow.js"
import * as ReplayReport from "../../src/core/ReplayReport.js"
import * as ReplayVerify from "../../src/core/ReplayVerify.js"
import * as Codec from "../../src/wire/DurableWorkflowCodec.js"

const goldenDir = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "fixtures", "durable-workflow", "golden_history")
const blob = (value: unknown) => Either.getOrThrow(Codec.encodeBlob(value))

// the upstream golden workflows, as this library writes them
const golden = [
  DurableWorkflow.make("golden.single-activity", (ctx, name: string) => ctx.activity<string>("golden.greet", [name])),
  DurableWorkflow.make("golden.saga-compensation", (ctx, orderId: string) =>
    Effect.gen(function*() {
      const reservation = yield* ctx.activity<string>("golden.reserve-inventory", [orderId])
      return yield* ctx.child("golden.charge-payment", [orderId]).pipe(
        Effect.catchTag("ChildWorkflowFailed", (error) => ctx.activity("golden.release-inventory", [orderId, reservation, error.message]))
      )
    })),
  DurableWorkflow.fromAsync("golden.signal-wait", async (ctx) => {
    let approvedBy: string | null = null
    ctx.onSignal("approve", (who: string) => {
      approvedBy = who
    })
    await ctx.waitCondition(() => approvedBy !== null, { key: "approval", timeoutSeconds: 30 })
    const activityResult = await ctx.activity<string>("golden.notify", [approvedBy])
    return { approved_by: approvedBy, activity_result: activityResult }
  }),
  DurableWorkflow.fromGenerator("golden.timeout-wait", function*(ctx) {
    const ok: boolean = yield ctx.waitCondition(() => false, { key: "approval", timeoutSeconds: 5 })
    return ok ? "approved" : "timed-out"
  }),
  DurableWorkflow.make("golden.version-marker", (ctx) =>
    Effect.flatMap(ctx.getVersion("golden-version", 1, 2), (version) =>
      ctx.activity(version === 2 ? "golden.version-new-path" : "golden.version-old-path")))
]

const goldenFiles = fs.readdirSync(goldenDir).filter((f) => f.endsWith(".json")).sort()
const avroFiles = goldenFiles.filter((f) => f.includes("avro")).map((name) => ({ name, content: fs.readFileSync(path.join(goldenDir, name), "utf8") }))

const greet = DurableWorkflow.make("orders.greet", (ctx, name: string) =>
  Effect.map(ctx.activity<string>("greeting.compose", [name]), (greeting) => `${greeting}!`))
const history = [
  { event_type: "WorkflowStarted", payload: { workflow_type: "orders.greet", arguments: blob(["Ada"]) } },
  { event_type: "ActivityScheduled", payload: { activity_type: "greeting.compose" } },
  { event_type: "ActivityCompleted", payload: { result: blob("hello Ada") } }
]

describe("DurableWorkflow.verify: case statuses", () => {
  it.effect("replayed / none when the first command is the expected one", () =>
    Effect.gen(function*() {
      const report = yield* DurableWorkflow.verify([greet], [
        { id: "greet", history, expected: { command_type: "CompleteWorkflow", result: "hello Ada!" }, family: "activity" }
      ])
      const c = report.cases[0]!
      assert.strictEqual(c.status, "replayed")
      assert.strictEqual(c.reason, "none")
      assert.strictEqual(c.workflow_type, "orders.greet")
      assert.deepStrictEqual(c.observed, { command_type: "CompleteWorkflow", result: "hello Ada!" })
      assert.strictEqual(report.status, "replayed")
      assert.strictEqual(report.promotion_decision, "safe_to_promote")
    }))

  it.effect("drifted / expectation_mismatch when the code now answers another result", () =>
    Effect.gen(function*() {
      const changed = DurableWorkflow.make("orders.greet", (ctx, name: string) =>
        Effect.map(ctx.activity<string>("greeting.compose", [name]), (greeting) => `${greeting}?`))
      const report = yield* DurableWorkflow.verify([changed], [
        { id: "greet", history, expected: { command_type: "CompleteWorkflow", result: "hello Ada!" } }
      ])
      const c = report.cases[0]!
      assert.strictEqual(c.status, "drifted")
      assert.strictEqual(c.reason, "expectation_mismatch")
      assert.strictEqual(c.verdict, "drifted")
      assert.strictEqual(c.promotion_decision, "block_until_compatible")
      assert.deepStrictEqual(c.observed, { command_type: "CompleteWorkflow", result: "hello Ada?" })
      assert.strictEqual(c.error?.class, "ExpectationMismatch")
      assert.strictEqual(report.status, "drifted")
    }))

  it.effect("drifted / expectation_mismatch on another command type, activity or arguments", () =>
    Effect.gen(function*() {
      const partial = history.slice(0, 2)
      const report = yield* DurableWorkflow.verify([greet], [
        { id: "type", history: partial, expected: { command_type: "CompleteWorkflow", result: "x" } },
        { id: "activity", history: partial, expected: { command_type: "ScheduleActivity", activity_type: "other", arguments: ["Ada"] } },
        { id: "args", history: partial, expected: { command_type: "ScheduleActivity", activity_type: "greeting.compose", arguments: ["Bob"] } },
        { id: "same", history: partial, expected: { command_type: "ScheduleActivity", activity_type: "greeting.compose", arguments: ["Ada"] } }
      ])
      assert.deepStrictEqual(report.cases.map((c) => [c.id, c.status]), [
        ["type", "drifted"],
        ["activity", "drifted"],
        ["args", "drifted"],
        ["same", "replayed"]
      ])
    }))

  it.effect("drifted / shape_mismatch with the divergence when the code asks for another operation", () =>
    Effect.gen(function*() {
      const sleeper = DurableWorkflow.make("orders.greet", (ctx) => Effect.as(ctx.sleep(5), "slept"))
      const report = yield* DurableWorkflow.verify([sleeper], [{ id: "greet", history, expected: { command_type: "CompleteWorkflow", result: "hello Ada!" } }])
      const c = report.cases[0]!
      assert.strictEqual(c.status, "drifted")
      assert.strictEqual(c.reason, "shape_mismatch")
      assert.strictEqual(c.error?.class, "NonDeterministicReplayError")
      assert.isNotNull(c.divergence)
      assert.isNumber(c.divergence!.workflow_sequence)
      assert.strictEqual(c.divergence!.expected_shape, "timer")
      assert.deepStrictEqual(c.divergence!.recorded_event_types, ["ActivityCompleted"])
      assert.match(c.divergence!.message, /non-deterministic/)
    }))

  it.effect("failed / replay_error when the workflow type is not among the definitions", () =>
    Effect.gen(function*() {
      const other = DurableWorkflow.make("orders.other", () => Effect.succeed(1))
      const report = yield* DurableWorkflow.verify([other], [{ id: "greet", history, workflowType: "orders.greet" }])
      const c = report.cases[0]!
      assert.strictEqual(c.status, "failed")
      assert.strictEqual(c.reason, "replay_error")
      assert.strictEqual(c.error?.class, "ReplayError")
      assert.strictEqual(report.status, "failed")
      assert.strictEqual(report.promotion_decision, "block_and_investigate")
    }))

  it.effect("failed / replay_error for a payload that does not decode, and the other cases still run", () =>
    Effect.gen(function*() {
      const garbled = [history[0], history[1], { event_type: "ActivityCompleted", payload: { result: "not-avro" } }]
      const report = yield* DurableWorkflow.verify([greet], [{ id: "garbled", history: garbled }, { id: "greet", history }])
      assert.deepStrictEqual(report.cases.map((c) => [c.status, c.reason]), [["failed", "replay_error"], ["replayed", "none"]])
      assert.strictEqual(report.cases[0]!.error?.class, "PayloadDecodeError")
    }))

  it.effect("a workflow that now throws answers fail_workflow: drifted against a completion", () =>
    Effect.gen(function*() {
      const broken = DurableWorkflow.make("orders.greet", () => Effect.fail(new Error("boom")))
      const report = yield* DurableWorkflow.verify([broken], [{ id: "greet", history: history.slice(0, 1), expected: { command_type: "CompleteWorkflow", result: "hello Ada!" } }])
      assert.strictEqual(report.cases[0]!.status, "drifted")
      assert.strictEqual((report.cases[0]!.observed as { command_type: string }).command_type, "FailWorkflow")
    }))

  it.effect("without an expectation, a history that replays is replayed", () =>
    Effect.gen(function*() {
      const report = yield* DurableWorkflow.verify([greet], [{ id: "greet", history }])
      assert.strictEqual(report.cases[0]!.status, "replayed")
      assert.isNull(report.cases[0]!.expected)
      assert.deepStrictEqual(report.cases[0]!.observed, { command_type: "CompleteWorkflow", result: "hello Ada!" })
    }))

  it.effect("expected commands are compared in full; a new side effect's value is not", () =>
    Effect.gen(function*() {
      const withSideEffect = DurableWorkflow.make("orders.token", (ctx) =>
        Effect.flatMap(ctx.sideEffect(() => Math.random()), () => ctx.activity("token.use", ["x"])))
      const answered = (yield* DurableWorkflow.replay([withSideEffect], [])).commands
      assert.strictEqual(answered[0]!.type, "record_side_effect")
      const report = yield* DurableWorkflow.verify([withSideEffect], [{ id: "same", history: [], workflowType: "orders.token", expectedCommands: answered }])
      assert.strictEqual(report.cases[0]!.status, "replayed")
      const changed = DurableWorkflow.make("orders.token", (ctx) =>
        Effect.flatMap(ctx.sideEffect(() => Math.random()), () => ctx.activity("token.use", ["y"])))
      const drifted = yield* DurableWorkflow.verify([changed], [{ id: "changed", history: [], workflowType: "orders.token", expectedCommands: answered }])
      assert.strictEqual(drifted.cases[0]!.status, "drifted")
      assert.strictEqual(drifted.cases[0]!.reason, "expectation_mismatch")
      assert.match(drifted.cases[0]!.error!.message, /command 1 differs/)
    }))
})

describe("golden-history fixtures", () => {
  it.effect("every avro fixture replays: replayed / ok over the five required families", () =>
    Effect.gen(function*() {
      const report = yield* ReplayVerify.verifyFiles({ durableWorkflows: golden }, avroFiles, {
        requiredFamilies: ReplayReport.goldenHistoryFamilies
      })
      assert.deepStrictEqual(report.cases.map((c) => [c.id, c.status, c.family]), [
        ["sdk-python@2.0.0-rc.30::saga_compensates_after_child_failure", "replayed", "saga-compensation"],
        ["sdk-python@2.0.0-rc.30::signal_satisfies_wait_condition", "replayed", "signal-update"],
        ["sdk-python@2.0.0-rc.30::wait_condition_timeout", "replayed", "wait-condition"],
        ["sdk-python@2.0.0-rc.30::version_marker_new_path", "replayed", "version-marker"],
        ["sdk-python@2.0.0-rc.30::single_activity_completion", "replayed", "activity"]
      ])
      assert.strictEqual(report.status, "replayed")
      assert.strictEqual(report.verdict, "ok")
      assert.strictEqual(report.promotion_decision, "safe_to_promote")
      assert.deepStrictEqual(report.missing_families, [])
      assert.deepStrictEqual(report.summary, { fixtures: 5, cases: 5, replayed: 5, drifted: 0, failed: 0 })
      assert.deepStrictEqual(report.cases[0]!.observed, {
        command_type: "ScheduleActivity",
        activity_type: "golden.release-inventory",
        arguments: ["order-123", "reservation-456", "payment declined"]
      })
      assert.strictEqual(report.cases[0]!.source?.["payload_codec"], "avro")
    }))

  it.effect("the fixture directory as it is: protocol 1.0 JSON payloads are failed cases, so the report is failed", () =>
    Effect.gen(function*() {
      const report = yield* ReplayVerify.verifyDirectory(goldenDir, { durableWorkflows: golden })
      assert.strictEqual(report.summary.fixtures, goldenFiles.length)
      assert.strictEqual(report.summary.cases, 10)
      const legacy = report.cases.filter((c) => c.id.startsWith("sdk-python@0.3.1::"))
      assert.deepStrictEqual(legacy.map((c) => [c.id.split("::")[1], c.status]), [
        ["single_activity_completion", "failed"],
        ["signal_satisfies_wait_condition", "failed"],
        ["wait_condition_timeout", "replayed"],
        ["version_marker_new_path", "replayed"],
        ["saga_compensates_after_child_failure", "failed"]
      ])
      assert.match(legacy[0]!.error!.message, /invalid_payload_framing/)
      assert.strictEqual(report.status, "failed")
      assert.strictEqual(report.summary.replayed, 7)
    }).pipe(Effect.provide(files)))

  it.effect("a changed golden workflow drifts its fixture case", () =>
    Effect.gen(function*() {
      const changed = golden.map((d) =>
        d.name === "golden.timeout-wait"
          ? DurableWorkflow.fromGenerator("golden.timeout-wait", function*(ctx) {
            const ok: boolean = yield ctx.waitCondition(() => false, { key: "approval", timeoutSeconds: 5 })
            return ok ? "approved" : "expired"
          })
          : d
      )
      const report = yield* ReplayVerify.verifyFiles({ durableWorkflows: changed }, avroFiles)
      const timeout = report.cases.find((c) => c.family === "wait-condition")!
      assert.strictEqual(timeout.status, "drifted")
      assert.strictEqual(timeout.reason, "expectation_mismatch")
      assert.deepStrictEqual(timeout.expected, { command_type: "CompleteWorkflow", result: "timed-out" })
      assert.deepStrictEqual(timeout.observed, { command_type: "CompleteWorkflow", result: "expired" })
      assert.strictEqual(report.status, "drifted")
      assert.strictEqual(report.summary.drifted, 1)
    }))
})

describe("history files that cannot be used", () => {
  const source = { runtime: "sdk-python", version: "9" }
  it.effect("unparseable, another schema, a missing source, a case of the wrong shape: failed / bundle_invalid", () =>
    Effect.gen(function*() {
      const report = yield* ReplayVerify.verifyFiles({ durableWorkflows: golden }, [
        { name: "a.json", content: "{ not json" },
        { name: "b.json", content: JSON.stringify({ fixture_schema: "durable-workflow.golden-history.v2", cases: [] }) },
        { name: "c.json", content: JSON.stringify({ fixture_schema: "durable-workflow.golden-history.v1", source: { runtime: "x" }, cases: [] }) },
        { name: "d.json", content: JSON.stringify({ fixture_schema: "durable-workflow.golden-history.v1", source, cases: [{ name: "n", expected: 3 }] }) },
        { name: "e.json", content: JSON.stringify({ schema: "effect-durable-worker.nestjs-durable-history.v1", workflow: 1 }) }
      ])
      assert.deepStrictEqual(report.cases.map((c) => [c.id, c.status, c.reason]), [
        ["<unparseable:a.json>", "failed", "bundle_invalid"],
        ["<schema-drift:b.json>", "failed", "bundle_invalid"],
        ["<source-missing:c.json>", "failed", "bundle_invalid"],
        ["<schema-drift:d.json#0>", "failed", "bundle_invalid"],
        ["<schema-drift:e.json>", "failed", "bundle_invalid"]
      ])
      assert.strictEqual(report.status, "failed")
    }))

  it.effect("no history file at all, or a directory that does not exist: <no-fixtures>, failed", () =>
    Effect.gen(function*() {
      const none = yield* ReplayVerify.verifyFiles({ durableWorkflows: golden }, [])
      assert.deepStrictEqual(none.cases.map((c) => [c.id, c.reason]), [["<no-fixtures>", "bundle_invalid"]])
      assert.strictEqual(none.status, "failed")
      const fsys = yield* FileSystem.FileSystem
      const empty = yield* fsys.makeTempDirectoryScoped()
      const emptyReport = yield* ReplayVerify.verifyDirectory(empty, { durableWorkflows: golden })
      assert.strictEqual(emptyReport.cases[0]!.id, "<no-fixtures>")
      const missing = yield* ReplayVerify.verifyDirectory(path.join(goldenDir, "does-not-exist"), { durableWorkflows: golden })
      assert.strictEqual(missing.cases[0]!.id, "<no-fixtures>")
      assert.match(missing.cases[0]!.error!.message, /cannot be read/)
      assert.strictEqual(missing.status, "failed")
    }).pipe(Effect.scoped, Effect.provide(NodeContext.layer)))
})
