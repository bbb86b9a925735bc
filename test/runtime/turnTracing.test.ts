/**
 * The span each nestjs-durable workflow turn runs in, as the operator's OpenTelemetry SDK receives it.
 */
import * as NodeSdk from "@effect/opentelemetry/NodeSdk"
import { assert, describe, it } from "@effect/vitest"
import { SpanStatusCode } from "@opentelemetry/api"
import { type ReadableSpan, SimpleSpanProcessor, type SpanExporter } from "@opentelemetry/sdk-trace-base"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Workflow from "../../src/core/Workflow.js"
import * as Worker from "../../src/runtime/Worker.js"
import * as Memory from "../../src/services/Memory.js"
import * as InMemory from "../../src/transport/InMemoryTransport.js"

const memory = Memory.layerTest({ usage: 1, limit: 1024 })
const traceId = "0af7651916cd43dd8448eb211c80319c"
const traceparent = `00-${traceId}-b7ad6b7169203331-01`

const order = Workflow.make("order", (id: string, ctx) =>
  Effect.gen(function*() {
    const item = yield* ctx.step<string>("fetch", { id })
    return item.length
  }))
const broken = Workflow.make("broken", (_: string) => Effect.fail(new Error("the order is gone")))

const turn = (workflow: string, runId: string, extra: Record<string, unknown> = {}) => ({
  taskId: `${runId}-t1`,
  runId,
  workflow,
  workflowVersion: "1",
  input: "o-1",
  history: [],
  group: workflow,
  ...extra
})

/** The spans the SDK exported (kept here: its InMemorySpanExporter forgets them when it shuts down). */
const recording = () => {
  const finished: Array<ReadableSpan> = []
  const exporter: SpanExporter = {
    export: (batch, done) => {
      finished.push(...batch)
      done({ code: 0 })
    },
    shutdown: async () => {}
  }
  return { finished, exporter }
}

/** Answers `turns` one by one on an in-memory broker, inside an SDK exporting to `exporter`. */
const serve = (exporter: SpanExporter, turns: ReadonlyArray<unknown>) =>
  Effect.gen(function*() {
    const broker = yield* InMemory.make()
    const worker = yield* Worker.make({ workflows: [order, broken] })
    yield* Effect.forkScoped(Effect.provide(worker.run, Layer.merge(broker.layer, memory)))
    yield* worker.registered
    const replies: Array<unknown> = []
    for (const t of turns) {
      yield* broker.enqueue(t)
      replies.push(yield* broker.takeReply)
    }
    yield* worker.stop
    return replies
  }).pipe(
    Effect.scoped,
    Effect.provide(NodeSdk.layer(() => ({
      resource: { serviceName: "turn-test" },
      spanProcessor: new SimpleSpanProcessor(exporter)
    })))
  )

const only = (spans: ReadonlyArray<ReadableSpan>, name: string, runId: string) => {
  const found = spans.filter((span) => span.name === name && span.attributes["durable.run_id"] === runId)
  assert.strictEqual(found.length, 1, `one span ${name} for ${runId}: ${spans.map((s) => s.name).join(", ")}`)
  return found[0]!
}

describe("workflow turn spans", () => {
  it.live("one span per turn, continuing its traceparent, with the run, task and attempt", () =>
    Effect.gen(function*() {
      const { exporter, finished } = recording()
      yield* serve(exporter, [turn("order", "run-ok", { traceparent, attempt: 2 }), turn("order", "run-plain")])
      const ok = only(finished, "durable.workflow order", "run-ok")
      assert.strictEqual(ok.spanContext().traceId, traceId)
      assert.strictEqual(ok.parentSpanContext?.spanId, "b7ad6b7169203331")
      assert.notStrictEqual(ok.status.code, SpanStatusCode.ERROR)
      assert.strictEqual(ok.attributes["durable.task_id"], "run-ok-t1")
      assert.strictEqual(ok.attributes["durable.attempt"], 2)
      assert.strictEqual(ok.attributes["durable.queue"], "in-memory queue")
      // without a traceparent the span is still made (a real tracer is installed), without an attempt
      const plain = only(finished, "durable.workflow order", "run-plain")
      assert.notStrictEqual(plain.spanContext().traceId, traceId)
      assert.isUndefined(plain.attributes["durable.attempt"])
      assert.notStrictEqual(plain.status.code, SpanStatusCode.ERROR)
    }))

  it.live("a turn whose decision is failed ends its span with status error and the error recorded", () =>
    Effect.gen(function*() {
      const { exporter, finished } = recording()
      const replies = yield* serve(exporter, [turn("broken", "run-bad", { traceparent }), turn("missing", "run-none")])
      assert.include(JSON.stringify(replies[0]), "the order is gone")
      const bad = only(finished, "durable.workflow broken", "run-bad")
      assert.strictEqual(bad.status.code, SpanStatusCode.ERROR)
      assert.include(bad.status.message, "the order is gone")
      assert.isTrue(
        bad.events.some((event) => event.name === "exception" && String(event.attributes?.["exception.message"]).includes("the order is gone")),
        "the error is recorded on the span"
      )
      // an unknown workflow is a failed decision too
      const none = only(finished, "durable.workflow missing", "run-none")
      assert.strictEqual(none.status.code, SpanStatusCode.ERROR)
      assert.include(none.status.message, "no workflow registered")
    }))
})
