import { assert, describe, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import { headersFor, normalizeBaseUrl } from "../../src/transport/durableWorkflow/internal/client.js"
import { pollTiming, protocolCompatible } from "../../src/transport/durableWorkflow/internal/compat.js"
import { fromHttpAnswer } from "../../src/transport/durableWorkflow/internal/errors.js"
import { routeForMetrics } from "../../src/transport/durableWorkflow/internal/metrics.js"
import { makeSampler } from "../../src/transport/durableWorkflow/internal/processMetrics.js"

const settings = (tokens: { token?: string; workerToken?: string; controlToken?: string } = {}) => ({
  baseUrl: "http://dw",
  token: tokens.token,
  workerToken: tokens.workerToken,
  controlToken: tokens.controlToken,
  namespace: "billing",
  protocolVersion: "1.1",
  controlPlaneVersion: "2",
  timeout: Duration.seconds(60)
})

describe("Durable Workflow client", () => {
  it("worker and control planes send exactly one version header each", () => {
    const worker = headersFor(settings({ token: "t" }), "worker") as Record<string, string>
    assert.deepStrictEqual(worker, {
      "Content-Type": "application/json",
      Accept: "application/json",
      Authorization: "Bearer t",
      "X-Namespace": "billing",
      "X-Durable-Workflow-Protocol-Version": "1.1"
    })
    const control = headersFor(settings({ token: "t" }), "control") as Record<string, string>
    assert.strictEqual(control["X-Durable-Workflow-Control-Plane-Version"], "2")
    assert.notProperty(control, "X-Durable-Workflow-Protocol-Version")
  })

  it("no token: no Authorization header", () => {
    assert.notProperty(headersFor(settings(), "worker") as object, "Authorization")
  })

  it("scoped tokens win on their plane; the shared token covers the other", () => {
    const s = settings({ token: "shared", workerToken: "w", controlToken: "c" })
    assert.strictEqual((headersFor(s, "worker") as any)["Authorization"], "Bearer w")
    assert.strictEqual((headersFor(s, "control") as any)["Authorization"], "Bearer c")
    assert.strictEqual((headersFor(settings({ token: "shared", workerToken: "w" }), "control") as any)["Authorization"], "Bearer shared")
  })

  it("a plane without a usable token is refused before any I/O", () => {
    const worker = headersFor(settings({ controlToken: "c" }), "worker") as { message: string }
    assert.strictEqual(
      worker.message,
      "worker-plane requests require workerToken or the shared token; controlToken cannot authorize worker operations"
    )
    const control = headersFor(settings({ workerToken: "w" }), "control") as { message: string }
    assert.match(control.message, /^control-plane requests require controlToken or the shared token/)
  })

  it("discovery uses the worker token when there is one, else control credentials", () => {
    assert.strictEqual((headersFor(settings({ workerToken: "w", controlToken: "c" }), "discovery") as any)["X-Durable-Workflow-Protocol-Version"], "1.1")
    const control = headersFor(settings({ controlToken: "c" }), "discovery") as any
    assert.strictEqual(control["Authorization"], "Bearer c")
    assert.strictEqual(control["X-Durable-Workflow-Control-Plane-Version"], "2")
  })

  it("base URLs: trailing slash stripped; /api, queries and fragments refused", () => {
    assert.strictEqual(normalizeBaseUrl("http://dw/prefix/"), "http://dw/prefix")
    assert.notStrictEqual(typeof normalizeBaseUrl("http://dw/api"), "string")
    assert.notStrictEqual(typeof normalizeBaseUrl("http://dw/?a=1"), "string")
    assert.notStrictEqual(typeof normalizeBaseUrl("http://dw/#x"), "string")
  })

  it("maps HTTP errors to typed errors", () => {
    assert.strictEqual(fromHttpAnswer(401, {}, "", "")._tag, "DurableWorkflowUnauthorized")
    assert.strictEqual(fromHttpAnswer(401, {}, "", "").message, "unauthorized")
    assert.strictEqual(fromHttpAnswer(404, { reason: "namespace_not_found", message: "m" }, "", "")._tag, "DurableWorkflowNamespaceNotFound")
    assert.strictEqual(fromHttpAnswer(404, { reason: "workflow_not_found" }, "", "")._tag, "DurableWorkflowNotFound")
    assert.strictEqual(fromHttpAnswer(404, { reason: "worker_not_found" }, "", "workflow-worker")._tag, "DurableWorkflowNotFound")
    assert.strictEqual(fromHttpAnswer(422, { reason: "validation_failed", message: "m", errors: { a: ["b"] } }, "", "")._tag, "DurableWorkflowInvalidArgument")
    for (const status of [400, 403, 409, 412, 413, 415, 429, 500, 503]) {
      const error = fromHttpAnswer(status, { reason: "r", error: "e" }, "", "")
      assert.strictEqual(error._tag, "DurableWorkflowServerError")
      assert.strictEqual((error as any).status, status)
      assert.strictEqual((error as any).reason, "r")
    }
  })

  it("protocol compatibility: same major, minor at least ours; unparsable means equal", () => {
    assert.isTrue(protocolCompatible("1.1"))
    assert.isTrue(protocolCompatible("1.15"))
    assert.isFalse(protocolCompatible("1.0"))
    assert.isFalse(protocolCompatible("2.0"))
    assert.isFalse(protocolCompatible("1.x"))
  })

  it("poll timing: body timeout capped at 60, HTTP timeout padded by 5 s", () => {
    assert.deepStrictEqual(pollTiming(35, 30), { t: 35, timeoutSeconds: 35, httpTimeout: 40 })
    assert.deepStrictEqual(pollTiming(0.01, 12), { t: 17, timeoutSeconds: 17, httpTimeout: 22 })
    assert.deepStrictEqual(pollTiming(90, undefined), { t: 90, timeoutSeconds: 60, httpTimeout: 90 })
    assert.deepStrictEqual(pollTiming(0.5, undefined), { t: 0.5, timeoutSeconds: 0, httpTimeout: 1 })
  })

  it("metric routes replace ids (the third segment of worker task routes always)", () => {
    assert.strictEqual(routeForMetrics("/worker/workflow-tasks/abc/complete"), "/worker/workflow-tasks/{task_id}/complete")
    assert.strictEqual(routeForMetrics("/worker/workflow-tasks/poll"), "/worker/workflow-tasks/{task_id}")
    assert.strictEqual(routeForMetrics("/worker/registrations/w%201"), "/worker/registrations/{worker_id}")
    assert.strictEqual(routeForMetrics("/workflows/wf-1"), "/workflows/{workflow_id}")
  })

  it("process metrics: CPU percent is instantaneous, memory is the current resident set", () => {
    let wall = Date.now()
    const sample = makeSampler(() => wall)
    sample()
    const burnUntil = performance.now() + 60
    while (performance.now() < burnUntil) Math.sqrt(Math.random())
    wall += 100
    const busy = sample()
    assert.isAbove(busy["cpu_percent"] as number, 20)
    wall += 1_000_000
    const idle = sample()
    assert.isBelow(idle["cpu_percent"] as number, 1, "not a lifetime average")
    const rss = process.memoryUsage.rss()
    assert.approximately(idle["memory_bytes"] as number, rss, rss * 0.2)
    assert.strictEqual(idle["process_id"], process.pid)
    assert.isAtLeast(idle["process_uptime_seconds"] as number, 1_000)
  })
})
