/**
 * The promise facade's operator hooks: OpenTelemetry processors and readers as an
 * `@effect/opentelemetry` layer (loaded only when asked for), and the worker's metrics as plain values.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as MetricState from "effect/MetricState"
import * as Option from "effect/Option"
import { missingDriverError } from "../../transport/internal/drivers.js"

/**
 * OpenTelemetry for the worker's spans and metrics, through `@effect/opentelemetry` (optional peers:
 * `@effect/opentelemetry`, `@opentelemetry/api`, `@opentelemetry/resources`,
 * `@opentelemetry/sdk-trace-base`, `@opentelemetry/sdk-metrics`), loaded when a run starts.
 *
 * @since 0.3.0
 * @category models
 */
export interface TelemetryOptions {
  /** `service.name` of the resource. Default `effect-durable-worker`. */
  readonly serviceName?: string | undefined
  /** `SpanProcessor`s of `@opentelemetry/sdk-trace-base` (e.g. a `BatchSpanProcessor` with an OTLP exporter). */
  readonly spanProcessors?: ReadonlyArray<object> | undefined
  /** `MetricReader`s of `@opentelemetry/sdk-metrics` (e.g. a `PeriodicExportingMetricReader`, a Prometheus exporter). */
  readonly metricReaders?: ReadonlyArray<object> | undefined
}

/**
 * One series of the worker's metrics, as {@link Worker.metrics} lists them.
 *
 * @since 0.3.0
 * @category models
 */
export interface MetricValue {
  readonly name: string
  readonly tags: Readonly<Record<string, string>>
  /** `counter`, `gauge`, `histogram`, `frequency` or `summary`. */
  readonly type: string
  /** A counter's or gauge's value; a histogram's `{ count, sum, min, max, buckets }`; a frequency's counts. */
  readonly value: unknown
}

const OTEL_PACKAGES = [
  "@effect/opentelemetry",
  "@opentelemetry/api",
  "@opentelemetry/resources",
  "@opentelemetry/sdk-trace-base",
  "@opentelemetry/sdk-metrics"
] as const

/** `@effect/opentelemetry`'s SDK layer over the given processors and readers, loaded when built. */
export const telemetryLayer = (options: TelemetryOptions): Layer.Layer<never, unknown> =>
  Layer.unwrapEffect(
    Effect.map(
      Effect.tryPromise({
        try: () => import("@effect/opentelemetry/NodeSdk"),
        catch: missingDriverError(OTEL_PACKAGES, "OpenTelemetry", "the telemetry option (OpenTelemetry)")
      }),
      (NodeSdk) =>
        Layer.discard(NodeSdk.layer(() => ({
          resource: { serviceName: options.serviceName ?? "effect-durable-worker" },
          ...(options.spanProcessors === undefined ? {} : { spanProcessor: options.spanProcessors as any }),
          ...(options.metricReaders === undefined ? {} : { metricReader: options.metricReaders as any })
        })))
    )
  )

const valueOf = (state: unknown): { readonly type: string; readonly value: unknown } => {
  if (MetricState.isCounterState(state)) return { type: "counter", value: state.count }
  if (MetricState.isGaugeState(state)) return { type: "gauge", value: state.value }
  if (MetricState.isHistogramState(state)) {
    return {
      type: "histogram",
      value: { count: state.count, sum: state.sum, min: state.min, max: state.max, buckets: state.buckets }
    }
  }
  if (MetricState.isFrequencyState(state)) return { type: "frequency", value: Object.fromEntries(state.occurrences) }
  if (MetricState.isSummaryState(state)) {
    return { type: "summary", value: { count: state.count, sum: state.sum, min: state.min, max: state.max, quantiles: state.quantiles.map(([q, v]) => [q, Option.getOrUndefined(v)]) } }
  }
  return { type: "unknown", value: state }
}

/** The worker's series (names starting with `prefix`) of the process's Effect metrics. */
export const workerMetrics = (prefix: string): Effect.Effect<ReadonlyArray<MetricValue>> =>
  Effect.map(Metric.snapshot, (pairs) =>
    pairs.filter((pair) => pair.metricKey.name.startsWith(prefix)).map((pair) => ({
      name: pair.metricKey.name,
      tags: Object.fromEntries(pair.metricKey.tags.map((tag) => [tag.key, tag.value])),
      ...valueOf(pair.metricState)
    })))
