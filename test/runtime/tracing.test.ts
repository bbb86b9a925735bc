/**
 * What an operator's OpenTelemetry SDK receives, read back from the SDK's own in-memory exporters
 * (through `@effect/opentelemetry`), not from the library's internals.
 */
import * as NodeSdk from "@effect/opentelemetry/NodeSdk"
import { assert, describe, it } from "@effect/vitest"
import { SpanStatusCode } from "@opentelemetry/api"
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  PeriodicExportingMetricReader,
  type ResourceMetrics
} from "@opentelemetry/sdk-metrics"
import { InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { FatalError } from "../../src/core/FatalError.js"
import * as Step from "../../src/core/Step.js"
import * as Worker from "../../src/runtime/Worker.js"
import * as Memory from "../../src/services/Memory.js"
import * as BullMQTransport from "../../src/transport/BullMQTransport.js"
import * as InMemory from "../../src/transport/InMemoryTransport.js"
import { startEngine } from "../support/engine.js"
import { stepTask } from "../support/local.js"

const memory = Memory.layerTest({ usage: 1, limit: 1024 })
const traceId = "0af7651916cd43dd8448eb211c80319c"
const traceparent = `00-${traceId}-b7ad6b7169203331-01`

/** Runs the steps' tasks to their replies on an in-memory broker, inside the given SDK. */
const runTasks = (steps: ReadonlyArray<Step.Step<never>>, tasks: ReadonlyArray<unknown>) =>
  Effect.gen(function*() {
    const broker = yield* InMemory.make()
    const worker = yield* Worker.make({ steps })
    yield* Effect.forkScoped(Effect.provide(worker.run, Layer.merge(broker.layer, memory)))
    yield* worker.registered
    for (const task of tasks) yield* broker.enqueue(task)
    for (let i = 0; i < tasks.length; i++) yield* broker.takeReply
    yield* worker.stop
  })

describe("OpenTelemetry", () => {
  it.live("one span per task, continuing its traceparent, with status error and the error recorded when it fails", () =>
    Effect.gen(function*() {
      const exporter = new InMemorySpanExporter()
      const sdk = NodeSdk.layer(() => ({
        resource: { serviceName: "worker-test" },
        spanProcessor: new SimpleSpanProcessor(exporter)
      }))
      const ok = Step.make("traced-ok", () => Effect.succeed(1))
      const fatal = Step.make("traced-fatal", () => Effect.fail(new FatalError("card declined", "declined")))
      const thrown = Step.make("traced-throws", () => Effect.die(new Error("kaboom")))
      // read before the SDK is shut down (which empties the in-memory exporter)
      const spans = yield* runTasks([ok, fatal, thrown], [
        { ...stepTask("run-ok", ok.name), traceparent },
        { ...stepTask("run-fatal", fatal.name), traceparent, attempt: 3 },
        { ...stepTask("run-throws", thrown.name), traceparent }
      ]).pipe(Effect.scoped, Effect.andThen(() => exporter.getFinishedSpans()), Effect.provide(sdk))
      const byName = (name: string) => {
        const found = spans.filter((span) => span.name === `durable.step ${name}`)
        assert.strictEqual(found.length, 1, `one span for ${name}: ${spans.map((s) => s.name).join(", ")}`)
        return found[0]!
      }
      const okSpan = byName(ok.name)
      assert.strictEqual(okSpan.spanContext().traceId, traceId)
      assert.strictEqual(okSpan.parentSpanContext?.spanId, "b7ad6b7169203331")
      assert.notStrictEqual(okSpan.status.code, SpanStatusCode.ERROR)
      assert.strictEqual(okSpan.attributes["durable.run_id"], "run-ok")
      assert.strictEqual(okSpan.attributes["durable.step_id"], "run-ok:0")
      assert.strictEqual(okSpan.attributes["durable.attempt"], 1)
      assert.strictEqual(okSpan.attributes["durable.queue"], "in-memory queue")

      const fatalSpan = byName(fatal.name)
      assert.strictEqual(fatalSpan.status.code, SpanStatusCode.ERROR)
      assert.include(fatalSpan.status.message, "card declined")
      assert.strictEqual(fatalSpan.attributes["durable.attempt"], 3)
      assert.isTrue(
        fatalSpan.events.some((event) => event.name === "exception" && String(event.attributes?.["exception.message"]).includes("card declined")),
        "the error is recorded on the span"
      )
      const thrownSpan = byName(thrown.name)
      assert.strictEqual(thrownSpan.status.code, SpanStatusCode.ERROR)
      assert.include(thrownSpan.status.message, "kaboom")
    }))

  it.live("the worker's metrics reach the SDK's metric exporter after real tasks ran", () =>
    Effect.gen(function*() {
      const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE)
      const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 60_000 })
      const sdk = NodeSdk.layer(() => ({ resource: { serviceName: "worker-test" }, metricReader: reader }))
      const ok = Step.make("exported-ok", () => Effect.succeed(1))
      const bad = Step.make("exported-bad", () => Effect.fail(new Error("no")))
      yield* Effect.gen(function*() {
        yield* runTasks([ok, bad], [
          stepTask("e1", ok.name),
          stepTask("e2", ok.name),
          stepTask("e3", bad.name)
        ]).pipe(Effect.scoped)
        yield* Effect.promise(() => reader.forceFlush())
      }).pipe(Effect.scoped, Effect.provide(sdk))
      const exported: ReadonlyArray<ResourceMetrics> = exporter.getMetrics()
      const metrics = exported.at(-1)!.scopeMetrics.flatMap((scope) => scope.metrics)
      const point = (name: string, attributes: Record<string, string>) => {
        const metric = metrics.find((m) => m.descriptor.name === name)
        assert.isDefined(metric, `${name} exported: ${metrics.map((m) => m.descriptor.name).join(", ")}`)
        const points = (metric!.dataPoints as ReadonlyArray<{ attributes: Record<string, unknown>; value: unknown }>).filter(
          (p) => Object.entries(attributes).every(([k, v]) => p.attributes[k] === v)
        )
        assert.strictEqual(points.length, 1, `one ${name} point for ${JSON.stringify(attributes)}`)
        return points[0]!.value
      }
      assert.strictEqual(point("durable_worker_tasks_started", { kind: "step", name: ok.name }), 2)
      assert.strictEqual(point("durable_worker_tasks_completed", { kind: "step", name: ok.name }), 2)
      assert.strictEqual(point("durable_worker_tasks_failed", { kind: "step", name: bad.name, outcome: "failed" }), 1)
      const duration = point("durable_worker_task_duration_seconds", { kind: "step", name: ok.name, outcome: "completed" }) as {
        count: number
      }
      assert.strictEqual(duration.count, 2)
      assert.strictEqual(point("durable_worker_slots", { pool: "step" }), 10)
    }))

  it.scopedLive("over real BullMQ and the nestjs-durable engine: tasks, slots and the backlog reach the exporter", () =>
    Effect.gen(function*() {
      const engine = yield* Effect.acquireRelease(Effect.promise(() => startEngine()), (e) => Effect.promise(() => e.close()))
      const name = `otel.charge-${Math.random().toString(16).slice(2, 8)}`
      engine.register("otel-checkout", async (ctx, input) => (await ctx.step(name, input)) as unknown)
      const charge = Step.make(name, (input: { amount: number }) => Effect.succeed({ charged: input.amount }))
      const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE)
      const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 60_000 })
      const sdk = NodeSdk.layer(() => ({ resource: { serviceName: "worker-test" }, metricReader: reader }))
      yield* Effect.gen(function*() {
        const worker = yield* Worker.make({ steps: [charge], metricsInterval: "100 millis" })
        yield* Effect.forkScoped(Effect.provide(worker.run, BullMQTransport.layer({ prefix: engine.prefix })))
        yield* worker.registered
        for (const amount of [1, 2, 3]) {
          const result = yield* Effect.promise(() => engine.run("otel-checkout", { amount }))
          assert.strictEqual(result.status, "completed")
        }
        yield* Effect.sleep("300 millis")
        yield* Effect.promise(() => reader.forceFlush())
        yield* worker.stop
      }).pipe(Effect.scoped, Effect.provide(sdk))
      const metrics = exporter.getMetrics().at(-1)!.scopeMetrics.flatMap((scope) => scope.metrics)
      const points = (metric: string) =>
        (metrics.find((m) => m.descriptor.name === metric)?.dataPoints ?? []) as ReadonlyArray<
          { attributes: Record<string, unknown>; value: unknown }
        >
      const value = (metric: string, attributes: Record<string, string>) =>
        points(metric).find((p) => Object.entries(attributes).every(([k, v]) => p.attributes[k] === v))?.value
      assert.strictEqual(value("durable_worker_tasks_started", { kind: "step", name }), 3)
      assert.strictEqual(value("durable_worker_tasks_completed", { kind: "step", name }), 3)
      assert.strictEqual(value("durable_worker_slots", { pool: "step" }), 10)
      const backlog = points("durable_worker_backlog").find((p) => String(p.attributes["poller"]).includes(engine.prefix))
      assert.isDefined(backlog, "the BullMQ queue's backlog is sampled")
      assert.strictEqual(backlog!.value, 0, "nothing waits once the runs completed")
    }), 60_000)
})
