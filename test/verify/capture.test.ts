import * as FileSystem from "@effect/platform/FileSystem"
import * as Path from "@effect/platform/Path"
import * as NodeContext from "@effect/platform-node/NodeContext"
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Random from "effect/Random"
import * as DurableWorkflow from "../../src/core/DurableWorkflow.js"
import * as ReplayCapture from "../../src/core/ReplayCapture.js"
import * as ReplayVerify from "../../src/core/ReplayVerify.js"
import * as Workflow from "../../src/core/Workflow.js"
import * as Worker from "../../src/runtime/Worker.js"
import * as InMemoryTransport from "../../src/transport/InMemoryTransport.js"
import * as Storage from "../../src/transport/DurableWorkflowExternalStorage.js"
import * as Codec from "../../src/wire/DurableWorkflowCodec.js"
import { QUEUE, setup, transportLayer, until } from "../durableWorkflow/support.js"

const order = Workflow.make("order", (id: string, ctx) =>
  Effect.gen(function*() {
    const item = yield* ctx.step<string>("fetch", { id })
    yield* ctx.sleep("1 minute")
    return yield* ctx.step<number>("store", { item })
  }))

const turn = (runId: string, taskId: string, history: ReadonlyArray<Record<string, unknown>>) => ({
  taskId,
  runId,
  workflow: "order",
  workflowVersion: "1",
  input: "o-1",
  history: history.map((event) => ({ name: null, error: null, ...event })),
  group: "order",
  attempt: 1
})
const fetched = [{ seq: 0, kind: "call", name: "fetch", output: "widget" }]

/** Runs a worker of `workflows` over an in-memory broker with `capture`, answering `turns` one by one. */
const serve = <E, R>(capture: Layer.Layer<ReplayCapture.ReplayCapture, E, R>, turns: ReadonlyArray<unknown>) =>
  Effect.gen(function*() {
    const broker = yield* InMemoryTransport.make()
    const worker = yield* Worker.make({ workflows: [order] })
    return yield* worker.runUntil(
      Effect.forEach(turns, (t) => Effect.zipRight(broker.enqueue(t), broker.takeReply)),
      { timeout: "20 seconds" }
    ).pipe(Effect.provide(broker.layer), Effect.provide(capture))
  })

const readJson = (dir: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const names = (yield* fs.readDirectory(dir)).sort()
    return yield* Effect.forEach(names, (name) =>
      Effect.map(fs.readFileString(path.join(dir, name)), (text) => [name, JSON.parse(text)] as const))
  })

describe("ReplayCapture from a nestjs-durable worker", () => {
  it.live("writes each run's latest turn, with the decision answered, and verify replays the directory", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      const capturedDir = `${dir}/histories`
      const replies = yield* serve(ReplayCapture.layerDirectory(capturedDir), [
        turn("run-1", "run-1:wf:1", []),
        turn("run-1", "run-1:wf:2", fetched),
        turn("run-2", "run-2:wf:1", [])
      ])
      const files = yield* readJson(capturedDir)
      assert.deepStrictEqual(files.map(([name]) => name), ["nestjs-durable.run-1.json", "nestjs-durable.run-2.json"])
      const run1 = files[0]![1]
      assert.strictEqual(run1.schema, "effect-durable-worker.nestjs-durable-history.v1")
      assert.strictEqual(run1.workflow, "order")
      assert.strictEqual(run1.run_id, "run-1")
      // the latest turn, as delivered, with the decision the worker sent for it
      assert.deepStrictEqual(run1.task, turn("run-1", "run-1:wf:2", fetched))
      const answered = replies[1]!
      assert.strictEqual(answered._tag, "WorkflowDecision")
      assert.deepStrictEqual(run1.decision, JSON.parse(JSON.stringify((answered as { decision: unknown }).decision)))
      assert.strictEqual(run1.decision.commands[0].kind, "sleep")

      const same = yield* ReplayVerify.verifyDirectory(capturedDir, { workflows: [order] })
      assert.deepStrictEqual(same.cases.map((c) => [c.id, c.status]), [["nestjs-durable.run-1", "replayed"], ["nestjs-durable.run-2", "replayed"]])
      assert.strictEqual(same.status, "replayed")

      const changed = Workflow.make("order", (id: string, ctx) =>
        Effect.gen(function*() {
          const item = yield* ctx.step<string>("fetch", { id })
          yield* ctx.sleep("5 minutes")
          return yield* ctx.step<number>("store", { item })
        }))
      const drifted = yield* ReplayVerify.verifyDirectory(capturedDir, { workflows: [changed] })
      assert.deepStrictEqual(drifted.cases.map((c) => [c.status, c.reason]), [["drifted", "expectation_mismatch"], ["replayed", "none"]])
      assert.strictEqual(drifted.status, "drifted")
      assert.strictEqual(drifted.promotion_decision, "block_until_compatible")

      const reordered = Workflow.make("order", (id: string, ctx) => Effect.zipRight(ctx.sleep("1 minute"), ctx.step("fetch", { id })))
      const shape = yield* ReplayVerify.verifyDirectory(capturedDir, { workflows: [reordered] })
      assert.deepStrictEqual(shape.cases[0]!.reason, "shape_mismatch")
    }).pipe(Effect.scoped, Effect.provide(NodeContext.layer)))

  it.live("sampleRate 0 captures nothing", () =>
    Effect.gen(function*() {
      const records: Array<ReplayCapture.CapturedHistory> = []
      yield* serve(ReplayCapture.layer((r) => records.push(r), { sampleRate: 0 }), [turn("run-1", "t1", []), turn("run-2", "t2", [])])
      assert.lengthOf(records, 0)
      yield* serve(ReplayCapture.layer((r) => records.push(r)), [turn("run-1", "t1", []), turn("run-2", "t2", [])])
      assert.deepStrictEqual(records.map((r) => r.run_id), ["run-1", "run-2"])
    }))

  it.live("without a capture layer nothing is recorded (the default captures nothing)", () =>
    Effect.gen(function*() {
      const capture = yield* ReplayCapture.ReplayCapture
      assert.isFalse(capture.enabled)
    }))
})

describe("ReplayCapture sampling and options", () => {
  const record = (run: string): ReplayCapture.CapturedHistory => ({
    schema: "effect-durable-worker.nestjs-durable-history.v1",
    workflow: "order",
    run_id: run,
    task: {},
    decision: {}
  })

  it.effect("a turn is recorded when Random's draw is below sampleRate", () =>
    Effect.gen(function*() {
      const records: Array<string> = []
      yield* Effect.scoped(Effect.gen(function*() {
        const ctx = yield* Layer.build(ReplayCapture.layer((r) => records.push(r.run_id ?? ""), { sampleRate: 0.25 }))
        yield* Effect.forEach(["a", "b", "c", "d", "e"], (run) => ReplayCapture.capture(Effect.succeed(record(run))).pipe(Effect.provide(ctx)))
      })).pipe(Effect.withRandom(Random.fixed([0.9, 0.1, 0.25, 0.7, 0.2499])))
      // written by the layer's writer; the rest when the layer closed
      assert.deepStrictEqual(records, ["b", "e"])
    }))

  it.effect("a record is built only for a sampled turn, and a failing build or callback is logged, never raised", () =>
    Effect.gen(function*() {
      let built = 0
      const records: Array<string> = []
      yield* Effect.scoped(Effect.gen(function*() {
        const ctx = yield* Layer.build(ReplayCapture.layer((r) => {
          if (r.run_id === "boom") throw new Error("callback failed")
          records.push(r.run_id ?? "")
        }, { sampleRate: 0.5 }))
        const capture = (run: string) =>
          ReplayCapture.capture(Effect.sync(() => {
            built++
            return record(run)
          })).pipe(Effect.provide(ctx))
        yield* capture("skipped")
        yield* capture("boom")
        yield* ReplayCapture.capture(Effect.fail("no record")).pipe(Effect.provide(ctx))
      })).pipe(Effect.withRandom(Random.fixed([0.8, 0.1, 0.1])))
      assert.strictEqual(built, 1)
      assert.deepStrictEqual(records, [])
    }))

  it.effect("a sampleRate outside 0..1 or a bad queueCapacity fails the layer, naming the option", () =>
    Effect.gen(function*() {
      for (const [options, option] of [
        [{ sampleRate: 1.5 }, "sampleRate"],
        [{ sampleRate: -0.1 }, "sampleRate"],
        [{ sampleRate: Number.NaN }, "sampleRate"],
        [{ queueCapacity: 0 }, "queueCapacity"]
      ] as const) {
        const exit = yield* Effect.exit(Effect.scoped(Layer.build(ReplayCapture.layer(() => undefined, options))))
        assert.isTrue(Exit.isFailure(exit))
        const error = Exit.isFailure(exit) ? exit.cause : undefined
        assert.include(JSON.stringify(error), option)
      }
      // a mistyped key recorded every turn (the default rate), and a directory given where the
      // function goes was taken until the first record
      const refused = (layer: Layer.Layer<ReplayCapture.ReplayCapture, ReplayCapture.ReplayCaptureConfigError>) =>
        Effect.flip(Effect.scoped(Layer.build(layer)))
      const mistyped = yield* refused(ReplayCapture.layer(() => undefined, { samplerate: 0.01 } as never))
      assert.strictEqual(mistyped.option, "samplerate")
      assert.match(mistyped.message, /^unknown replay capture option "samplerate"; did you mean "sampleRate"\?/)
      const notAFunction = yield* refused(ReplayCapture.layer("captures" as never))
      assert.strictEqual(notAFunction.option, "onCapture")
      assert.match(notAFunction.message, /got "captures"; for a directory, ReplayCapture\.layerDirectory$/)
    }))

  it("file names keep each run apart and safe", () => {
    assert.strictEqual(ReplayCapture.fileName(record("run/1:a b")), "nestjs-durable.run_1_a_b.json")
    assert.strictEqual(
      ReplayCapture.fileName({ schema: "effect-durable-worker.durable-workflow-history.v1", workflow_type: "x", run_id: "r-9", history_events: [] }),
      "durable-workflow.r-9.json"
    )
  })
})

const blob = (value: unknown) => Either.getOrThrow(Codec.encodeBlob(value))

describe("ReplayCapture from a Durable Workflow worker", () => {
  const greeting = DurableWorkflow.make("orders.greet", (ctx, name: string) =>
    Effect.map(ctx.activity<string>("greeting.compose", [name]), (greeting) => `${greeting}!`))

  it.scoped("records the task's history and the commands answered; verify replays it, and drifts on changed code", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      const { server } = yield* setup({ historyPageSize: 2 })
      const worker = yield* Worker.make({ durableWorkflows: [greeting], interruptTimeout: "2 seconds" })
      const running = yield* Effect.fork(
        worker.run.pipe(Effect.provide(transportLayer(server)), Effect.provide(ReplayCapture.layerDirectory(dir)))
      )
      const { runId } = server.enqueueWorkflowTask({
        workflowType: "orders.greet",
        taskQueue: QUEUE,
        workflowId: "wf-1",
        input: ["Ada"],
        historyEvents: [
          { event_type: "WorkflowStarted", payload: {} },
          { event_type: "ActivityScheduled", payload: { activity_type: "greeting.compose" } },
          { event_type: "ActivityCompleted", payload: { activity_type: "greeting.compose", result: blob("hello Ada") } }
        ]
      })
      yield* until(server, () => server.completedWorkflowTasks.length === 1)
      yield* worker.stop
      yield* Fiber.join(running)
      const files = yield* readJson(dir)
      assert.lengthOf(files, 1)
      const [name, captured] = files[0]!
      assert.strictEqual(name, ReplayCapture.fileName(captured))
      assert.strictEqual(captured.schema, "effect-durable-worker.durable-workflow-history.v1")
      assert.strictEqual(captured.workflow_type, "orders.greet")
      assert.strictEqual(captured.workflow_id, "wf-1")
      assert.strictEqual(captured.run_id, runId)
      assert.strictEqual(captured.payload_codec, "avro")
      // every page of the history, payloads still encoded
      assert.lengthOf(captured.history_events, 3)
      assert.strictEqual(captured.history_events[2].payload.result, blob("hello Ada"))
      assert.deepStrictEqual(captured.commands, server.completedWorkflowTasks[0]!.commands)

      const same = yield* ReplayVerify.verifyDirectory(dir, { durableWorkflows: [greeting] })
      assert.strictEqual(same.cases[0]!.status, "replayed", JSON.stringify(same.cases[0]))
      assert.strictEqual(same.status, "replayed")

      const changed = DurableWorkflow.make("orders.greet", (ctx, name: string) =>
        Effect.map(ctx.activity<string>("greeting.compose", [name]), (greeting) => `${greeting}?`))
      const drifted = yield* ReplayVerify.verifyDirectory(dir, { durableWorkflows: [changed] })
      assert.strictEqual(drifted.cases[0]!.status, "drifted")
      assert.strictEqual(drifted.cases[0]!.reason, "expectation_mismatch")
      assert.strictEqual(drifted.status, "drifted")
    }).pipe(Effect.provide(NodeContext.layer)))

  it.scoped("a command payload the worker stored externally is recorded inline, and replays", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      const objects = yield* fs.makeTempDirectoryScoped()
      const { server } = yield* setup()
      const shout = DurableWorkflow.make("text.pipeline", (ctx, text: string) => ctx.activity("text.shout", [text]))
      const worker = yield* Worker.make({ durableWorkflows: [shout], interruptTimeout: "2 seconds" })
      const running = yield* Effect.fork(worker.run.pipe(
        Effect.provide(transportLayer(server, { externalStorage: Storage.localFilesystem(objects), externalStorageThresholdBytes: 300 })),
        Effect.provide(ReplayCapture.layerDirectory(dir))
      ))
      server.enqueueWorkflowTask({ workflowType: "text.pipeline", taskQueue: QUEUE, input: ["abc".repeat(400)] })
      yield* until(server, () => server.completedWorkflowTasks.length === 1)
      yield* worker.stop
      yield* Fiber.join(running)
      const sent = server.completedWorkflowTasks[0]!.commands[0]!
      assert.property(sent["arguments"], "external_storage")
      const [[, captured]] = yield* readJson(dir)
      assert.strictEqual(captured.commands[0].arguments.codec, "avro")
      assert.isString(captured.commands[0].arguments.blob)
      const report = yield* ReplayVerify.verifyDirectory(dir, { durableWorkflows: [shout] })
      assert.strictEqual(report.status, "replayed", JSON.stringify(report.cases[0]))
    }).pipe(Effect.provide(NodeContext.layer)))

  it.scoped("an accepted-update task is recorded with its update id and replays as an update", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      const { server } = yield* setup()
      const discounted = (extra: Record<string, unknown>) =>
        DurableWorkflow.make("orders.discount", (ctx) =>
          Effect.gen(function*() {
            let discount = 0
            ctx.onUpdate("setDiscount", (percent: number) => {
              discount = percent
              return { discount, ...extra }
            })
            yield* ctx.waitCondition(() => discount > 0)
            return discount
          }), { updates: { setDiscount: [DurableWorkflow.param("percent")] } })
      const live = discounted({})
      const worker = yield* Worker.make({ durableWorkflows: [live], interruptTimeout: "2 seconds" })
      const running = yield* Effect.fork(worker.run.pipe(Effect.provide(transportLayer(server)), Effect.provide(ReplayCapture.layerDirectory(dir))))
      server.enqueueWorkflowTask({
        workflowType: "orders.discount",
        taskQueue: QUEUE,
        updateId: "upd-1",
        historyEvents: [
          { event_type: "WorkflowStarted", payload: {} },
          { event_type: "ConditionWaitOpened", payload: { sequence: 1 } },
          { event_type: "UpdateAccepted", payload: { update_id: "upd-1", update_name: "setDiscount", arguments: blob([15]) } }
        ]
      })
      yield* until(server, () => server.completedWorkflowTasks.length === 1)
      yield* worker.stop
      yield* Fiber.join(running)
      const [[, captured]] = yield* readJson(dir)
      assert.strictEqual(captured.workflow_update_id, "upd-1")
      assert.deepStrictEqual(captured.commands, server.completedWorkflowTasks[0]!.commands)
      assert.strictEqual(captured.commands[0].type, "complete_update")
      const same = yield* ReplayVerify.verifyDirectory(dir, { durableWorkflows: [live] })
      assert.strictEqual(same.status, "replayed", JSON.stringify(same.cases[0]))
      const changed = yield* ReplayVerify.verifyDirectory(dir, { durableWorkflows: [discounted({ note: "new" })] })
      assert.strictEqual(changed.cases[0]!.status, "drifted")
      assert.strictEqual(changed.cases[0]!.reason, "expectation_mismatch")
    }).pipe(Effect.provide(NodeContext.layer)))
})
