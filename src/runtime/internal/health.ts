import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as Ref from "effect/Ref"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as WorkerMetrics from "../../seam/WorkerMetrics.js"
import type { ResolvedHealth } from "../WorkerConfig.js"
import { HealthServerError } from "../WorkerError.js"
import { prometheusText } from "./prometheus.js"

/**
 * How often the event loop's delay is sampled: a quarter of the threshold, within 10 ms and 500 ms,
 * so a block beyond the threshold is seen by the sample that follows it.
 *
 * @internal
 */
export const loopSampleInterval = (threshold: Duration.Duration): Duration.Duration =>
  Duration.millis(Math.min(500, Math.max(10, Duration.toMillis(threshold) / 4)))

/**
 * How many samples `/livez` looks back over: a block is still reported a little after it ended
 * (2.5 thresholds), since while it lasts nothing can answer at all.
 *
 * @internal
 */
export const LOOP_WINDOW = 10

/**
 * Measures how late a sleep of one interval wakes up, every interval: the last {@link LOOP_WINDOW}
 * delays (millis) go to `delays`, and the longest of them to the event loop delay gauge, so the gauge
 * shows what `/livez` judges by and a block between two scrapes is not hidden by the on-time sample
 * after it. Runs until interrupted.
 *
 * @internal
 */
export const sampleLoopDelay = (interval: Duration.Duration, delays: Ref.Ref<ReadonlyArray<number>>): Effect.Effect<never> => {
  const millis = Duration.toMillis(interval)
  const once = Effect.gen(function*() {
    const before = yield* Clock.currentTimeMillis
    yield* Effect.sleep(interval)
    const late = Math.max(0, (yield* Clock.currentTimeMillis) - before - millis)
    const recent = yield* Ref.updateAndGet(delays, (recent) => [...recent.slice(-(LOOP_WINDOW - 1)), late])
    yield* Metric.set(WorkerMetrics.eventLoopDelay, Math.max(...recent) / 1000)
  })
  return Effect.repeat(once, Schedule.forever).pipe(Effect.zipRight(Effect.never))
}

/**
 * The probe server: `/livez` (200 while the event loop's delays over the last samples are within
 * the threshold, 503 otherwise), `/readyz` (200 while `ready`, 503 otherwise), `/metrics` (Prometheus
 * text, when asked for; 404 otherwise). Anything else is 404. `@effect/platform-node` is loaded here,
 * only when the server is turned on. It listens until the scope closes.
 *
 * @internal
 */
export const serveHealth = (
  options: ResolvedHealth,
  ready: Effect.Effect<{ readonly ready: boolean; readonly state: string }>
): Effect.Effect<void, HealthServerError, Scope.Scope> =>
  Effect.gen(function*() {
    const failed = (cause: unknown) => new HealthServerError({ host: options.host, port: options.port, cause })
    const [{ createServer }, NodeHttpServer] = yield* Effect.tryPromise({
      try: () => Promise.all([import("node:http"), import("@effect/platform-node/NodeHttpServer")]),
      catch: failed
    })
    const delays = yield* Ref.make<ReadonlyArray<number>>([])
    const threshold = Duration.toMillis(options.loopDelayThreshold)
    yield* Effect.forkScoped(sampleLoopDelay(loopSampleInterval(options.loopDelayThreshold), delays))
    // one request per connection: a probe client's kept-alive socket must not hold the close up
    const text = (body: string, status: number, contentType = "text/plain; charset=utf-8") =>
      HttpServerResponse.text(body, { status, contentType, headers: { connection: "close" } })
    const app = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const path = request.url.split("?")[0]
      if (path === "/livez") {
        const late = Math.max(0, ...(yield* Ref.get(delays)))
        return late > threshold ? text(`event loop delayed ${late} ms\n`, 503) : text("ok\n", 200)
      }
      if (path === "/readyz") {
        const { ready: isReady, state } = yield* ready
        return text(`${state}\n`, isReady ? 200 : 503)
      }
      if (path === "/metrics" && options.metrics) {
        return text(yield* prometheusText, 200, "text/plain; version=0.0.4; charset=utf-8")
      }
      return text("not found\n", 404)
    })
    const node = createServer()
    const server = yield* NodeHttpServer.make(() => node, { port: options.port, host: options.host }).pipe(
      Effect.mapError(failed)
    )
    yield* server.serve(app)
    // Runs first on close. The platform's close waits for every open connection, and one whose request
    // was not read yet (a probe caught mid-request, or that arrives once the handler is gone) would be
    // answered by nobody and hold the worker's end for Node's request timeouts (minutes). A probe has
    // nothing to lose: stop listening, then cut them all.
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        node.close()
        node.closeAllConnections()
      })
    )
  })
