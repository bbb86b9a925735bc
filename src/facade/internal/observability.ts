/**
 * The promise facade's operator hooks: a plain logger object as the Effect `Logger`, OpenTelemetry
 * processors and readers as an `@effect/opentelemetry` layer (loaded only when asked for), and the
 * worker's metrics as plain values.
 */
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as HashMap from "effect/HashMap"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as Metric from "effect/Metric"
import * as MetricState from "effect/MetricState"
import * as Option from "effect/Option"
import { missingDriverError } from "../../transport/internal/drivers.js"

/**
 * A logger the worker writes to: any object with `info` (or NestJS's `log`), `warn`, `error` and
 * `debug`, such as `console`, pino, or NestJS's `Logger`.
 *
 * @since 0.3.0
 * @category models
 */
export interface FacadeLogger {
  readonly info?: (...args: Array<any>) => unknown
  readonly log?: (...args: Array<any>) => unknown
  readonly warn: (...args: Array<any>) => unknown
  readonly error: (...args: Array<any>) => unknown
  readonly debug?: (...args: Array<any>) => unknown
}

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
  readonly serviceName?: string
  /** `SpanProcessor`s of `@opentelemetry/sdk-trace-base` (e.g. a `BatchSpanProcessor` with an OTLP exporter). */
  readonly spanProcessors?: ReadonlyArray<object>
  /** `MetricReader`s of `@opentelemetry/sdk-metrics` (e.g. a `PeriodicExportingMetricReader`, a Prometheus exporter). */
  readonly metricReaders?: ReadonlyArray<object>
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

/** pino-style loggers take their fields first (`logger.info(fields, message)`), the others after the message. */
const fieldsFirst = (logger: FacadeLogger): boolean =>
  typeof (logger as { bindings?: unknown }).bindings === "function" && typeof (logger as { child?: unknown }).child === "function"

const text = (message: unknown): string =>
  Array.isArray(message) ? message.map(text).join(" ") : typeof message === "string" ? message : JSON.stringify(message)

/**
 * The Effect `Logger` that writes to `logger`: the message, and as fields the log's annotations,
 * its spans' names and a failure's cause.
 */
export const loggerOf = (logger: FacadeLogger): Logger.Logger<unknown, void> => {
  const first = fieldsFirst(logger)
  const info = logger.info ?? logger.log ?? logger.debug ?? logger.warn
  return Logger.make(({ annotations, cause, logLevel, message }) => {
    const write = logLevel._tag === "Fatal" || logLevel._tag === "Error"
      ? logger.error
      : logLevel._tag === "Warning"
      ? logger.warn
      : logLevel._tag === "Info"
      ? info
      : logger.debug ?? info
    const fields: Record<string, unknown> = {}
    for (const [key, value] of HashMap.toEntries(annotations)) fields[key] = value
    if (!Cause.isEmpty(cause)) fields["cause"] = Cause.pretty(cause, { renderErrorCause: true })
    const line = text(message)
    const call = Object.keys(fields).length === 0 ? [line] : first ? [fields, line] : [line, fields]
    write.apply(logger, call)
  })
}

/** The layer that replaces the default logger with {@link loggerOf}. */
export const loggerLayer = (logger: FacadeLogger): Layer.Layer<never> =>
  Logger.replace(Logger.defaultLogger, loggerOf(logger))

/** `@effect/opentelemetry`'s SDK layer over the given processors and readers, loaded when built. */
export const telemetryLayer = (options: TelemetryOptions): Layer.Layer<never, unknown> =>
  Layer.unwrapEffect(
    Effect.map(
      Effect.tryPromise({
        try: () => import("@effect/opentelemetry/NodeSdk"),
        catch: missingDriverError(OTEL_PACKAGES, "OpenTelemetry")
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
