/**
 * A worker watched through OpenTelemetry: its spans (one per task, continuing the task's
 * `traceparent`) and its metrics (`WorkerMetrics`, the same on every transport) go to the
 * OpenTelemetry SDK through `@effect/opentelemetry`; the probe server answers `/livez`, `/readyz`
 * and `/metrics` (Prometheus text) on port 9464. The exporters here print to the console; in
 * production use the OTLP exporters (`@opentelemetry/exporter-trace-otlp-http`,
 * `@opentelemetry/exporter-metrics-otlp-http`) or scrape `/metrics`.
 *
 * Run it with `npx tsx --conditions=source examples/opentelemetry.ts`.
 */
import * as NodeSdk from "@effect/opentelemetry/NodeSdk"
import { NodeRuntime } from "@effect/platform-node"
import { ConsoleMetricExporter, PeriodicExportingMetricReader } from "@opentelemetry/sdk-metrics"
import { BatchSpanProcessor, ConsoleSpanExporter } from "@opentelemetry/sdk-trace-base"
import { Effect, Layer } from "effect"
import { FatalError, InMemoryTransport, Step, Worker } from "effect-durable-worker"

const chargeCard = Step.make("payments.charge-card", (input: { amount: number }, ctx) =>
  Effect.gen(function*() {
    if (input.amount > 10_000) return yield* Effect.fail(new FatalError("card declined", "card_declined"))
    return { chargeId: `ch_${ctx.stepId}` }
  }))

const Telemetry = NodeSdk.layer(() => ({
  resource: { serviceName: "payments-worker" },
  spanProcessor: new BatchSpanProcessor(new ConsoleSpanExporter()),
  metricReader: new PeriodicExportingMetricReader({ exporter: new ConsoleMetricExporter(), exportIntervalMillis: 15_000 })
}))

const WorkerLive = Worker.layer({
  steps: [chargeCard],
  concurrency: 8,
  shutdownTimeout: "30 seconds",
  // the saturation gauge an autoscaler reads, sampled every 5 seconds
  metricsInterval: "5 seconds",
  health: { port: 9464, host: "0.0.0.0", metrics: true }
})

NodeRuntime.runMain(
  Layer.launch(WorkerLive.pipe(Layer.provide(InMemoryTransport.layer()), Layer.provide(Telemetry)))
)
