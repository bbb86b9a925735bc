import * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import { messageOf } from "../../../core/internal/errors.js"
import {
  type DurableWorkflowError,
  DurableWorkflowConfigError,
  DurableWorkflowRequestError,
  fromHttpAnswer
} from "./errors.js"
import * as Metrics from "./metrics.js"
import { show } from "../../internal/options.js"

/** Which plane a request belongs to: its headers and token. @internal */
export type Plane = "worker" | "control" | "discovery"

/** Connection settings of a client. @internal */
export interface ClientSettings {
  readonly baseUrl: string
  readonly token: string | undefined
  readonly workerToken: string | undefined
  readonly controlToken: string | undefined
  readonly namespace: string
  readonly protocolVersion: string
  readonly controlPlaneVersion: string
  /** Timeout of a non-poll request. */
  readonly timeout: Duration.Duration
}

/** One request. @internal */
export interface RequestOptions {
  readonly method: "GET" | "POST" | "DELETE"
  /** Below `/api`, e.g. `/worker/register`. */
  readonly path: string
  readonly body?: unknown
  readonly plane: Plane
  readonly timeout?: Duration.Duration
  /** What the call is about, for error mapping (a 404 about a workflow). */
  readonly context?: string
}

/** A Durable Workflow HTTP client. @internal */
export interface Client {
  readonly settings: ClientSettings
  readonly request: (options: RequestOptions) => Effect.Effect<unknown, DurableWorkflowError>
  /** One attempt, no transport retry (polls run their own timeout retry). */
  readonly requestOnce: (options: RequestOptions) => Effect.Effect<unknown, DurableWorkflowError>
}

/**
 * Checks and normalises a base URL: blanks around it and a trailing `/` removed, no query or fragment, no trailing `/api`.
 * @internal
 */
export const normalizeBaseUrl = (given: string): string | DurableWorkflowConfigError => {
  // a blank around it (an env file's) would go into every request's URL
  const raw = typeof given === "string" ? given.trim() : given
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    return new DurableWorkflowConfigError({
      option: "baseUrl",
      message: `baseUrl must be an absolute http(s) URL, got ${show(raw)}`
    })
  }
  // "durable-workflow:8080" parses, as the scheme "durable-workflow:": fetch would then fail every
  // request as a server that cannot be reached
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    return new DurableWorkflowConfigError({
      option: "baseUrl",
      message: `baseUrl must be an absolute http(s) URL, got ${JSON.stringify(raw)} (its scheme is ${url.protocol}${
        /^[^/]*:\d+/.test(raw) ? `; for a host and port, write "http://${raw}"` : ""
      })`
    })
  }
  if (url.search !== "" || url.hash !== "" || raw.includes("?") || raw.includes("#")) {
    return new DurableWorkflowConfigError({ option: "baseUrl", message: "baseUrl must not contain a query string or fragment" })
  }
  const trimmed = raw.replace(/\/+$/, "")
  if (trimmed.endsWith("/api")) {
    return new DurableWorkflowConfigError({
      option: "baseUrl",
      message: "baseUrl must be the server root (or a managed-runtime prefix), not end in /api; requests add /api themselves"
    })
  }
  return trimmed
}

/** The headers of a request on a plane (reference §1.1). @internal */
export const headersFor = (
  settings: ClientSettings,
  plane: Plane
): Record<string, string> | DurableWorkflowConfigError => {
  let token: string | undefined
  let version: [string, string]
  if (plane === "worker") {
    if (settings.workerToken === undefined && settings.token === undefined && settings.controlToken !== undefined) {
      return new DurableWorkflowConfigError({
        message:
          "worker-plane requests require workerToken or the shared token; controlToken cannot authorize worker operations"
      })
    }
    token = settings.workerToken ?? settings.token
    version = ["X-Durable-Workflow-Protocol-Version", settings.protocolVersion]
  } else if (plane === "control") {
    if (settings.controlToken === undefined && settings.token === undefined && settings.workerToken !== undefined) {
      return new DurableWorkflowConfigError({
        message:
          "control-plane requests require controlToken or the shared token; workerToken cannot authorize control-plane operations"
      })
    }
    token = settings.controlToken ?? settings.token
    version = ["X-Durable-Workflow-Control-Plane-Version", settings.controlPlaneVersion]
  } else if (settings.workerToken !== undefined) {
    token = settings.workerToken
    version = ["X-Durable-Workflow-Protocol-Version", settings.protocolVersion]
  } else {
    token = settings.controlToken ?? settings.token
    version = ["X-Durable-Workflow-Control-Plane-Version", settings.controlPlaneVersion]
  }
  return {
    "Content-Type": "application/json",
    Accept: "application/json",
    ...(token === undefined ? {} : { Authorization: `Bearer ${token}` }),
    "X-Namespace": settings.namespace,
    [version[0]]: version[1]
  }
}

/** Transport retry: 3 attempts, 0.1 s × 2^n capped at 5 s, ±25 % jitter; network errors, timeouts, 5xx and 429. @internal */
export const isTransient = (error: DurableWorkflowError): boolean =>
  error._tag === "DurableWorkflowRequestError" ||
  (error._tag === "DurableWorkflowServerError" && (error.status >= 500 || error.status === 429))

/** @internal */
export const transportRetry = Schedule.exponential("100 millis", 2).pipe(
  Schedule.map((d) => Duration.min(d, Duration.seconds(5))),
  Schedule.jitteredWith({ min: 0.75, max: 1.25 }),
  Schedule.intersect(Schedule.recurs(2))
)

/**
 * The wait a `Retry-After` header asks for, in milliseconds: delay-seconds or an HTTP date (read
 * against `now`); undefined when absent or unreadable. @internal
 */
export const parseRetryAfter = (value: string | undefined, now: number): number | undefined => {
  if (value === undefined) return undefined
  const text = value.trim()
  if (/^\d+$/.test(text)) return Number(text) * 1000
  const date = Date.parse(text)
  // a date already past asks for no wait
  return Number.isNaN(date) || !/[a-z]/i.test(text) ? undefined : Math.max(0, date - now)
}

/**
 * The longest a completion or failure report is retried for, whatever the task's lease: a
 * worker that waits longer holds a slot (and its stop) for a server that is not coming back soon.
 * @internal
 */
export const REPORT_RETRY_CAP = Duration.seconds(30)

/**
 * The retry of a completion or failure report (the answer of a task that ran: lost, the task runs
 * again after its lease), within `budget` from the first failure: transient errors only (network,
 * timeouts, 5xx, 429), after 0.2 s doubling up to 5 s (±25 % jitter), or after the server's
 * `Retry-After`; no wait goes past the budget, and none starts once it is spent. A refusal (the task
 * already completed, not found, its lease lost) is never retried.
 * @internal
 */
export const reportRetry = (budget: Duration.Duration): Schedule.Schedule<unknown, DurableWorkflowError> => {
  const budgetMillis = Duration.toMillis(budget)
  return Schedule.exponential("200 millis", 2).pipe(
    Schedule.jitteredWith({ min: 0.75, max: 1.25 }),
    Schedule.intersect(Schedule.elapsed),
    Schedule.intersect(Schedule.identity<DurableWorkflowError>()),
    Schedule.whileInput(isTransient),
    Schedule.whileOutput(([[, elapsed]]) => Duration.toMillis(elapsed) < budgetMillis),
    Schedule.modifyDelay(([[, elapsed], error], delay) => {
      const asked = error._tag === "DurableWorkflowServerError" ? error.retryAfterMillis : undefined
      // whole milliseconds: jittered waits in fractions add up to a last one that ends a hair short of the budget
      const wanted = Math.round(asked ?? Math.min(Duration.toMillis(delay), 5_000))
      return Duration.millis(Math.max(0, Math.min(wanted, budgetMillis - Duration.toMillis(elapsed))))
    })
  )
}

/** Builds a client on an `HttpClient`. @internal */
export const make = (settings: ClientSettings): Effect.Effect<Client, never, HttpClient.HttpClient> =>
  Effect.gen(function*() {
    const http = (yield* HttpClient.HttpClient).pipe(HttpClient.withTracerPropagation(false))

    const attempt = (options: RequestOptions): Effect.Effect<{ status: number; body: unknown }, DurableWorkflowError> =>
      Effect.gen(function*() {
        const headers = headersFor(settings, options.plane)
        if (headers instanceof DurableWorkflowConfigError) return yield* headers
        const url = `${settings.baseUrl}/api${options.path}`
        let request = HttpClientRequest.make(options.method)(url).pipe(HttpClientRequest.setHeaders(headers))
        if (options.body !== undefined) request = HttpClientRequest.bodyUnsafeJson(request, options.body)
        const timeout = options.timeout ?? settings.timeout
        const requestError = (cause: unknown) =>
          new DurableWorkflowRequestError({
            method: options.method,
            path: options.path,
            timeout: false,
            message: `${options.method} ${options.path} failed: ${messageOf(cause)}`,
            cause
          })
        const answered = yield* http.execute(request).pipe(
          Effect.flatMap((response) =>
            Effect.map(response.text, (text) => ({ status: response.status, text, retryAfter: response.headers["retry-after"] }))
          ),
          Effect.mapError(requestError),
          Effect.timeoutFail({
            duration: timeout,
            onTimeout: () =>
              new DurableWorkflowRequestError({
                method: options.method,
                path: options.path,
                timeout: true,
                message: `${options.method} ${options.path} timed out after ${Duration.format(timeout)}`
              })
          })
        )
        let body: unknown = null
        if (answered.text !== "" && answered.status !== 204) {
          try {
            body = JSON.parse(answered.text)
          } catch {
            body = answered.text
          }
        }
        if (answered.status >= 400) {
          const retryAfter = parseRetryAfter(answered.retryAfter, yield* Clock.currentTimeMillis)
          return yield* Effect.fail(fromHttpAnswer(answered.status, body, answered.text, options.context ?? "", retryAfter))
        }
        return { status: answered.status, body }
      })

    const measured = (options: RequestOptions, retry: boolean) =>
      Effect.gen(function*() {
        const started = yield* Clock.currentTimeMillis
        const exit = yield* Effect.exit(retry ? Effect.retry(attempt(options), { schedule: transportRetry, while: isTransient }) : attempt(options))
        const seconds = ((yield* Clock.currentTimeMillis) - started) / 1000
        const tags = {
          method: options.method,
          route: Metrics.routeForMetrics(options.path),
          plane: options.plane === "control" ? "control" : "worker",
          status_code: exit._tag === "Success"
            ? String(exit.value.status)
            : exit.cause._tag === "Fail" && "status" in exit.cause.error
            ? String(exit.cause.error.status)
            : exit.cause._tag === "Fail" && exit.cause.error._tag === "DurableWorkflowUnauthorized"
            ? "401"
            : "none",
          outcome: exit._tag === "Success"
            ? "ok"
            : exit.cause._tag === "Fail"
            ? exit.cause.error._tag === "DurableWorkflowRequestError" || exit.cause.error._tag === "DurableWorkflowConfigError"
              ? exit.cause.error._tag
              : "http_error"
            : "error"
        }
        yield* Metrics.record(Metrics.clientRequests, Metrics.clientRequestDuration, tags, seconds)
        return yield* Effect.map(exit, (answer) => answer.body)
      })

    return {
      settings,
      request: (options) => measured(options, true),
      requestOnce: (options) => measured(options, false)
    }
  })
