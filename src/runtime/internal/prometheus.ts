import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as MetricKeyType from "effect/MetricKeyType"
import type * as MetricPair from "effect/MetricPair"
import * as MetricState from "effect/MetricState"
import * as Option from "effect/Option"

const name = (raw: string) => {
  const cleaned = raw.replace(/[^a-zA-Z0-9_:]/g, "_")
  return /^[a-zA-Z_:]/.test(cleaned) ? cleaned : `_${cleaned}`
}
/**
 * A counter's name as Prometheus names one, ending in `_total`: `promtool` lints one that does not,
 * and OpenTelemetry's Prometheus exporter adds it, so a series scraped here and one exported by
 * `@effect/opentelemetry` and scraped from a collector have one name.
 */
const counterName = (metric: string) => metric.endsWith("_total") ? metric : `${metric}_total`

/** Effect's runtime metrics (with runtime metrics on) carry no description: what each counts. */
const EFFECT_HELP: Readonly<Record<string, string>> = {
  effect_fiber_started: "Fibers started by the Effect runtime",
  effect_fiber_active: "Fibers of the Effect runtime running now",
  effect_fiber_successes: "Fibers of the Effect runtime that ended with a success",
  effect_fiber_failures: "Fibers of the Effect runtime that ended with a failure",
  effect_fiber_lifetimes: "How long the Effect runtime's fibers lived (time_unit says in what)"
}

/**
 * A label's name as Prometheus reads one: a metric name may hold `:`, a label name may not, and one
 * line that does not parse fails the whole scrape.
 */
const labelName = (raw: string) => {
  const cleaned = raw.replace(/[^a-zA-Z0-9_]/g, "_")
  return /^[a-zA-Z_]/.test(cleaned) ? cleaned : `_${cleaned}`
}
const escapeValue = (value: string) => value.replace(/\\/g, "\\\\").replace(/"/g, "\\\"").replace(/\n/g, "\\n")
const escapeHelp = (value: string) => value.replace(/\\/g, "\\\\").replace(/\n/g, "\\n")
const labels = (tags: ReadonlyArray<readonly [string, string]>) =>
  tags.length === 0 ? "" : `{${tags.map(([k, v]) => `${labelName(k)}="${escapeValue(v)}"`).join(",")}}`
const num = (value: number | bigint) =>
  typeof value === "bigint"
    ? value.toString()
    : Number.isNaN(value)
    ? "NaN"
    : value === Infinity
    ? "+Inf"
    : value === -Infinity
    ? "-Inf"
    : String(value)

/**
 * Renders metric pairs in the Prometheus text exposition format (0.0.4): counters (incremental
 * ones, named with `_total`; a counter that may go down is a gauge), gauges,
 * histograms (cumulative buckets, `_sum`, `_count`), summaries (quantiles, `_sum`, `_count`) and
 * frequencies (a counter per occurrence, labelled `key`).
 *
 * @internal
 */
export const render = (pairs: ReadonlyArray<MetricPair.MetricPair.Untyped>): string => {
  const families = new Map<string, { type: string; help: string | undefined; lines: Array<string> }>()
  const family = (metric: string, type: string, help: string | undefined) => {
    let found = families.get(metric)
    if (found === undefined) {
      found = { type, help, lines: [] }
      families.set(metric, found)
    }
    return found.lines
  }
  for (const pair of pairs) {
    const metric = name(pair.metricKey.name)
    const help = Option.getOrElse(pair.metricKey.description, () => EFFECT_HELP[metric])
    const tags = pair.metricKey.tags.map((tag) => [tag.key, tag.value] as const)
    const state: unknown = pair.metricState
    if (MetricState.isCounterState(state)) {
      // a counter that is not incremental may go down (Effect's own effect_fiber_active): to
      // Prometheus that is a gauge, as @effect/opentelemetry makes it an up-down counter
      const keyType: unknown = pair.metricKey.keyType
      const counter = MetricKeyType.isCounterKey(keyType) && keyType.incremental
      const series = counter ? counterName(metric) : metric
      family(series, counter ? "counter" : "gauge", help).push(`${series}${labels(tags)} ${num(state.count)}`)
    } else if (MetricState.isGaugeState(state)) {
      family(metric, "gauge", help).push(`${metric}${labels(tags)} ${num(state.value)}`)
    } else if (MetricState.isHistogramState(state)) {
      const lines = family(metric, "histogram", help)
      for (const [boundary, count] of state.buckets) {
        lines.push(`${metric}_bucket${labels([...tags, ["le", num(boundary)]])} ${num(count)}`)
      }
      if (!state.buckets.some(([boundary]) => boundary === Infinity)) {
        lines.push(`${metric}_bucket${labels([...tags, ["le", "+Inf"]])} ${num(state.count)}`)
      }
      lines.push(`${metric}_sum${labels(tags)} ${num(state.sum)}`, `${metric}_count${labels(tags)} ${num(state.count)}`)
    } else if (MetricState.isSummaryState(state)) {
      const lines = family(metric, "summary", help)
      for (const [quantile, value] of state.quantiles) {
        if (Option.isSome(value)) lines.push(`${metric}${labels([...tags, ["quantile", num(quantile)]])} ${num(value.value)}`)
      }
      lines.push(`${metric}_sum${labels(tags)} ${num(state.sum)}`, `${metric}_count${labels(tags)} ${num(state.count)}`)
    } else if (MetricState.isFrequencyState(state)) {
      const series = counterName(metric)
      const lines = family(series, "counter", help)
      for (const [key, count] of state.occurrences) lines.push(`${series}${labels([...tags, ["key", key]])} ${num(count)}`)
    }
  }
  const out: Array<string> = []
  for (const [metric, { help, lines, type }] of families) {
    if (help !== undefined) out.push(`# HELP ${metric} ${escapeHelp(help)}`)
    out.push(`# TYPE ${metric} ${type}`, ...lines)
  }
  return out.length === 0 ? "" : `${out.join("\n")}\n`
}

/**
 * Every Effect metric of the process, in Prometheus text.
 *
 * @internal
 */
export const prometheusText: Effect.Effect<string> = Effect.map(Metric.snapshot, render)
