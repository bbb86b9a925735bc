import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as Codec from "../../src/wire/DurableWorkflowCodec.js"
import {
  controlHeaders,
  type DurableWorkflowServer,
  type DurableWorkflowServerOptions,
  scoped,
  start,
  workerHeaders
} from "./durableWorkflowServer.js"

const fixtures = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "fixtures", "durable-workflow", "worker-plane")
const parity = (name: string): any => JSON.parse(fs.readFileSync(path.join(fixtures, `${name}-parity.json`), "utf8"))

interface Answer {
  readonly status: number
  readonly body: any
  readonly headers: Headers
}

const call = async (
  server: DurableWorkflowServer,
  method: string,
  route: string,
  body?: unknown,
  headers: Record<string, string> = workerHeaders(server),
  signal?: AbortSignal
): Promise<Answer> => {
  const response = await fetch(`${server.url}${route}`, {
    method,
    headers,
    ...(body === undefined ? {} : { body: typeof body === "string" ? body : JSON.stringify(body) }),
    ...(signal === undefined ? {} : { signal })
  })
  const text = await response.text()
  return { status: response.status, body: text === "" ? undefined : JSON.parse(text), headers: response.headers }
}
const post = (server: DurableWorkflowServer, route: string, body: unknown, headers?: Record<string, string>) =>
  call(server, "POST", route, body, headers)

const withServer = (options: DurableWorkflowServerOptions, body: (server: DurableWorkflowServer) => Promise<void>) => async () => {
  const server = await start(options)
  try {
    await body(server)
  } finally {
    await server.stop()
  }
}

/** The body carries every field of `expected` with the same value. */
const assertSubset = (actual: any, expected: Record<string, unknown>, label = "") => {
  for (const [key, value] of Object.entries(expected)) assert.deepStrictEqual(actual?.[key], value, `${label}${key}`)
}

/** A worker-plane answer: envelope fields and the version header. */
const assertWorkerEnvelope = (answer: Answer) => {
  assert.strictEqual(answer.body.protocol_version, "1.1")
  assert.strictEqual(answer.body.server_capabilities.workflow_task_poll_request_idempotency, true)
  assert.strictEqual(answer.headers.get("x-durable-workflow-protocol-version"), "1.1")
}

const register = (server: DurableWorkflowServer, body: Record<string, unknown> = {}, headers?: Record<string, string>) =>
  post(server, "/api/worker/register", { worker_id: "w1", task_queue: "orders", runtime: "typescript", ...body }, headers)

const pollWorkflow = (server: DurableWorkflowServer, body: Record<string, unknown> = {}) =>
  post(server, "/api/worker/workflow-tasks/poll", { worker_id: "w1", task_queue: "orders", timeout_seconds: 0, ...body })

describe("durable workflow test server", () => {
  describe("discovery", () => {
    it("serves /api/cluster/info as plain JSON to worker, operator and admin tokens", withServer({}, async (server) => {
      for (const token of [server.tokens.worker, server.tokens.operator, server.tokens.admin]) {
        const info = await call(server, "GET", "/api/cluster/info", undefined, { authorization: `Bearer ${token}`, "x-namespace": "default" })
        assert.strictEqual(info.status, 200)
        assert.strictEqual(info.body.worker_protocol.version, "1.1")
        assert.strictEqual(info.body.worker_protocol.server_capabilities.query_tasks, true)
        assert.strictEqual(info.body.control_plane.version, "2")
        assert.deepStrictEqual(info.body.control_plane.request_contract, {
          schema: "durable-workflow.v2.control-plane-request.contract",
          version: 1
        })
        assert.strictEqual(info.body.auth_composition_contract.schema, "durable-workflow.v2.auth-composition.contract")
        assert.isUndefined(info.body.protocol_version, "no worker envelope on discovery")
      }
      const noToken = await call(server, "GET", "/api/cluster/info", undefined, { "x-namespace": "default" })
      assert.strictEqual(noToken.status, 401)
      assert.strictEqual(noToken.body.reason, "unauthorized")
      const unknownNamespace = await call(server, "GET", "/api/cluster/info", undefined, workerHeaders(server, { namespace: "nope" }))
      assert.strictEqual(unknownNamespace.status, 404)
      assert.strictEqual(unknownNamespace.body.reason, "namespace_not_found")
    }))

    it("serves a replaced or edited manifest so tests can make the server incompatible", withServer({
      clusterInfo: (defaults) => ({ ...defaults, worker_protocol: { ...defaults["worker_protocol"], version: "1.0" } })
    }, async (server) => {
      const edited = await call(server, "GET", "/api/cluster/info")
      assert.strictEqual(edited.body.worker_protocol.version, "1.0")
      assert.strictEqual(edited.body.control_plane.version, "2")
      server.setClusterInfo({ version: "2.0.0" })
      assert.deepStrictEqual((await call(server, "GET", "/api/cluster/info")).body, { version: "2.0.0" })
      server.setClusterInfo(undefined)
      assert.strictEqual((await call(server, "GET", "/api/cluster/info")).body.worker_protocol.version, "1.1")
    }))
  })

  describe("pipeline", () => {
    it("checks authentication, role, protocol version, namespace, then validation, in that order", withServer({}, async (server) => {
      const everythingWrong = await register(server, { task_queue: "" }, workerHeaders(server, { token: null, version: null, namespace: "nope" }))
      assert.strictEqual(everythingWrong.status, 401)
      assertSubset(everythingWrong.body, { reason: "unauthorized", message: "Invalid or missing authentication token." })
      assertWorkerEnvelope(everythingWrong)

      const badToken = await register(server, {}, workerHeaders(server, { token: "forged", version: null, namespace: "nope" }))
      assert.strictEqual(badToken.status, 401)

      const admin = await register(server, { task_queue: "" }, workerHeaders(server, { token: server.tokens.admin!, version: null, namespace: "nope" }))
      assert.strictEqual(admin.status, 403)
      assertSubset(admin.body, { reason: "forbidden", role: "admin", allowed_roles: ["worker"] })
      assert.isString(admin.body.message)
      assertWorkerEnvelope(admin)

      const noVersion = await register(server, { task_queue: "" }, workerHeaders(server, { version: null, namespace: "nope" }))
      assert.strictEqual(noVersion.status, 400)
      assertSubset(noVersion.body, { reason: "missing_protocol_version", supported_version: "1.1", requested_version: null })
      assert.isString(noVersion.body.error)
      assert.isString(noVersion.body.remediation)
      assert.isUndefined(noVersion.body.message)
      assertWorkerEnvelope(noVersion)

      const wrongMajor = await register(server, { task_queue: "" }, workerHeaders(server, { version: "2.0", namespace: "nope" }))
      assert.strictEqual(wrongMajor.status, 400)
      assertSubset(wrongMajor.body, { reason: "unsupported_protocol_version", supported_version: "1.1", requested_version: "2.0" })

      const badNamespace = await register(server, { task_queue: "" }, workerHeaders(server, { namespace: "nope" }))
      assert.strictEqual(badNamespace.status, 404)
      assertSubset(badNamespace.body, { reason: "namespace_not_found", namespace: "nope" })
      assert.isString(badNamespace.body.remediation)
      assertWorkerEnvelope(badNamespace)

      const invalid = await register(server, { task_queue: "" })
      assert.strictEqual(invalid.status, 422)
      assert.strictEqual(invalid.body.reason, "validation_failed")
      assert.deepStrictEqual(Object.keys(invalid.body.errors), ["task_queue"])
      assert.deepStrictEqual(invalid.body.validation_errors, invalid.body.errors)
      assertWorkerEnvelope(invalid)

      assert.strictEqual((await register(server)).status, 201)
    }))

    it("enforces payload limits before authentication", withServer({ maxPayloadBytes: 256 }, async (server) => {
      const anonymous = { "content-type": "application/json", "x-namespace": "default" }
      const tooLarge = await post(server, "/api/worker/register", { task_queue: "x".repeat(300) }, anonymous)
      assert.strictEqual(tooLarge.status, 413)
      assertSubset(tooLarge.body, { reason: "payload_too_large", limit: 256 })
      assertWorkerEnvelope(tooLarge)
      const wrongType = await post(server, "/api/worker/register", "task_queue=orders", { ...anonymous, "content-type": "application/x-www-form-urlencoded" })
      assert.strictEqual(wrongType.status, 415)
      assert.strictEqual(wrongType.body.reason, "unsupported_media_type")
      assert.isArray(wrongType.body.accepted_content_types)
      const malformed = await post(server, "/api/worker/register", "{not json", anonymous)
      assert.strictEqual(malformed.status, 400)
      assert.strictEqual(malformed.body.reason, "malformed_json")
      assert.isString(malformed.body.json_error)
      const vendorJson = await post(server, "/api/worker/register", { worker_id: "w1", task_queue: "orders" }, {
        ...workerHeaders(server),
        "content-type": "application/vnd.api+json"
      })
      assert.strictEqual(vendorJson.status, 201)
    }))

    it("accepts a lower minor version by default, and only the exact version in exact mode", async () => {
      await withServer({}, async (server) => {
        assert.strictEqual((await register(server, {}, workerHeaders(server, { version: "1.0" }))).status, 201)
        assert.strictEqual((await register(server, {}, workerHeaders(server, { version: "1.2" }))).status, 400)
        // A validation error for a request whose version is not ours has no worker envelope.
        const invalid = await register(server, { task_queue: "" }, workerHeaders(server, { version: "1.0" }))
        assert.strictEqual(invalid.status, 422)
        assert.isUndefined(invalid.body.protocol_version)
      })()
      await withServer({ protocolVersionAcceptance: "exact" }, async (server) => {
        const older = await register(server, {}, workerHeaders(server, { version: "1.0" }))
        assert.strictEqual(older.status, 400)
        assert.strictEqual(older.body.requested_version, "1.0")
        assert.strictEqual((await register(server)).status, 201)
      })()
    })
  })

  describe("registration and heartbeat", () => {
    it("worker-register parity: accepts the fixture body and answers its response fields", withServer({
      allowedRuntimes: ["php", "python", "typescript", "go", "java", "external"]
    }, async (server) => {
      const fixture = parity("worker-register")
      const answer = await call(server, fixture.request.method, `/api${fixture.request.path}`, fixture.request.body)
      assert.strictEqual(answer.status, 201)
      assertSubset(answer.body, fixture.response_body)
      assertWorkerEnvelope(answer)
      const stored = server.registration("polyglot-worker-231")!
      assert.strictEqual(stored.buildId, "build-231")
      assert.deepStrictEqual(stored.supportedActivityTypes, ["inventory.sync"])
      assert.strictEqual(stored.maxConcurrentActivityTasks, 8)
    }))

    it("rejects the CLI-only runtime \"external\" like the local server", withServer({}, async (server) => {
      const fixture = parity("worker-register")
      const answer = await post(server, "/api/worker/register", fixture.request.body)
      assert.strictEqual(answer.status, 422)
      assert.deepStrictEqual(Object.keys(answer.body.errors), ["runtime"])
    }))

    it("generates a worker id, upserts, and refuses a changed definition fingerprint", withServer({}, async (server) => {
      const generated = await post(server, "/api/worker/register", { task_queue: "orders" })
      assert.match(generated.body.worker_id, /^[0-9A-HJKMNP-TV-Z]{26}$/)
      const first = await register(server, { supported_workflow_types: ["a"], workflow_definition_fingerprints: { a: "sha256:1" } })
      assert.strictEqual(first.status, 201)
      const again = await register(server, { supported_workflow_types: ["a"] })
      assert.strictEqual(again.status, 201)
      assert.deepStrictEqual(server.registration("w1")!.fingerprints, { a: "sha256:1" })
      const changed = await register(server, { supported_workflow_types: ["a"], workflow_definition_fingerprints: { a: "sha256:2" } })
      assert.strictEqual(changed.status, 409)
      assertSubset(changed.body, { reason: "workflow_definition_changed", workflow_type: "a" })
      assert.isString(changed.body.error)
      assert.isString(changed.body.remediation)
    }))

    it("acknowledges heartbeats of registered workers only", withServer({ heartbeatIntervalSeconds: 7 }, async (server) => {
      const unknown = await post(server, "/api/worker/heartbeat", { worker_id: "ghost" })
      assert.strictEqual(unknown.status, 404)
      assertSubset(unknown.body, { reason: "worker_not_registered", worker_id: "ghost" })
      assert.strictEqual((await register(server)).body.heartbeat_interval_seconds, 7)
      const slots = { workflow_available: 3, activity_available: 4 }
      const ack = await post(server, "/api/worker/heartbeat", { worker_id: "w1", task_slots: slots, process_metrics: { process_id: 1 } })
      assert.strictEqual(ack.status, 200)
      assertSubset(ack.body, { worker_id: "w1", acknowledged: true, heartbeat_interval_seconds: 7 })
      assertWorkerEnvelope(ack)
      assert.deepStrictEqual(server.registration("w1")!.heartbeats.map((h) => h["task_slots"]), [slots])
    }))
  })

  describe("workflow tasks", () => {
    it("refuses polls from unregistered workers, other queues and other build ids", withServer({}, async (server) => {
      const unregistered = await pollWorkflow(server)
      assert.strictEqual(unregistered.status, 412)
      assertSubset(unregistered.body, { reason: "worker_not_registered" })
      assert.include(unregistered.body.error, "Call POST /worker/register first.")
      await register(server, { build_id: "b1" })
      const otherQueue = await pollWorkflow(server, { task_queue: "billing" })
      assert.strictEqual(otherQueue.status, 409)
      assertSubset(otherQueue.body, { reason: "task_queue_mismatch", registered_task_queue: "orders", requested_task_queue: "billing" })
      const otherBuild = await pollWorkflow(server, { build_id: "b2" })
      assert.strictEqual(otherBuild.status, 409)
      assertSubset(otherBuild.body, { reason: "build_id_mismatch", registered_build_id: "b1", requested_build_id: "b2" })
    }))

    it("leases a task, takes its completion once, and records it", withServer({}, async (server) => {
      await register(server, { supported_workflow_types: ["orders.process"] })
      const { taskId, workflowId, runId } = server.enqueueWorkflowTask({
        workflowType: "orders.process",
        taskQueue: "orders",
        input: ["Ada", 7],
        historyEvents: [{ event_type: "WorkflowStarted", payload: {} }]
      })
      server.enqueueWorkflowTask({ workflowType: "other.type", taskQueue: "orders" })
      const polled = await pollWorkflow(server, { poll_request_id: "wf-poll-1" })
      assert.strictEqual(polled.status, 200)
      assertWorkerEnvelope(polled)
      const task = polled.body.task
      assertSubset(task, {
        task_id: taskId,
        workflow_id: workflowId,
        run_id: runId,
        workflow_task_attempt: 1,
        workflow_type: "orders.process",
        payload_codec: "avro",
        lease_owner: "w1",
        total_history_events: 1,
        next_history_page_token: null
      })
      assert.deepStrictEqual(Codec.decodeEnvelope(task.arguments), Either.right(["Ada", 7]))
      assert.strictEqual(task.history_events[0].sequence, 1)
      assert.isString(task.lease_expires_at)
      // The other workflow type is not one this worker supports.
      assert.strictEqual((await pollWorkflow(server)).body.task, null)

      const commands = [{ type: "complete_workflow", result: Either.getOrThrow(Codec.encodeEnvelope("done")) }]
      const completed = await post(server, `/api/worker/workflow-tasks/${taskId}/complete`, {
        lease_owner: "w1",
        workflow_task_attempt: 1,
        commands
      })
      assert.strictEqual(completed.status, 200)
      assertSubset(completed.body, {
        task_id: taskId,
        workflow_task_attempt: 1,
        outcome: "completed",
        recorded: true,
        run_id: runId,
        run_status: "completed",
        created_task_ids: [],
        reason: null
      })
      assertWorkerEnvelope(completed)
      assert.deepStrictEqual(server.completedWorkflowTasks.map((c) => [c.taskId, c.attempt, c.leaseOwner, c.commands]), [[taskId, 1, "w1", commands]])
      const again = await post(server, `/api/worker/workflow-tasks/${taskId}/complete`, { lease_owner: "w1", workflow_task_attempt: 1, commands })
      assert.strictEqual(again.status, 409)
      assert.strictEqual(again.body.reason, "task_not_leased")
    }))

    it("fences completions by task, lease owner, attempt and lease expiry", withServer({ workflowTaskLeaseSeconds: 10 }, async (server) => {
      await register(server)
      await register(server, { worker_id: "w2" })
      const { taskId } = server.enqueueWorkflowTask({ workflowType: "t", taskQueue: "orders" })
      await pollWorkflow(server)
      const commands = [{ type: "start_timer", delay_seconds: 5 }]
      const complete = (body: Record<string, unknown>, id = taskId) =>
        post(server, `/api/worker/workflow-tasks/${id}/complete`, { lease_owner: "w1", workflow_task_attempt: 1, commands, ...body })

      const missing = await complete({}, "nope")
      assert.strictEqual(missing.status, 404)
      assertSubset(missing.body, { reason: "task_not_found", task_id: "nope", workflow_task_attempt: 1 })
      assert.isString(missing.body.error)
      const otherOwner = await complete({ lease_owner: "w2" })
      assert.strictEqual(otherOwner.status, 409)
      assertSubset(otherOwner.body, { reason: "lease_owner_mismatch", lease_owner: "w1" })
      const otherAttempt = await complete({ workflow_task_attempt: 2 })
      assert.strictEqual(otherAttempt.status, 409)
      assertSubset(otherAttempt.body, { reason: "workflow_task_attempt_mismatch", current_attempt: 1 })

      server.advanceTime(10_001)
      const expired = await complete({})
      assert.strictEqual(expired.status, 409)
      assertSubset(expired.body, { reason: "lease_expired", task_status: "leased", lease_owner: "w1" })
      assert.isString(expired.body.lease_expires_at)

      // The recovered task goes to the next poller with the next attempt; the old attempt is fenced off.
      const repolled = await pollWorkflow(server, { worker_id: "w2" })
      assertSubset(repolled.body.task, { task_id: taskId, workflow_task_attempt: 2, lease_owner: "w2" })
      assert.strictEqual((await complete({})).body.reason, "lease_owner_mismatch")
      assert.strictEqual((await complete({ lease_owner: "w2" })).body.reason, "workflow_task_attempt_mismatch")
      assert.strictEqual((await complete({ lease_owner: "w2", workflow_task_attempt: 2 })).status, 200)
    }))

    it("re-leases an expired task on poll with the next attempt", withServer({ workflowTaskLeaseSeconds: 5 }, async (server) => {
      await register(server)
      const { taskId } = server.enqueueWorkflowTask({ workflowType: "t", taskQueue: "orders" })
      assert.strictEqual((await pollWorkflow(server)).body.task.workflow_task_attempt, 1)
      assert.strictEqual((await pollWorkflow(server)).body.task, null)
      server.advanceTime(5_000)
      const again = await pollWorkflow(server)
      assertSubset(again.body.task, { task_id: taskId, workflow_task_attempt: 2 })
      assert.strictEqual(server.workflowTask(taskId)!.attempt, 2)
    }))

    it("validates commands like the server: at least one, known types, scoped options", withServer({}, async (server) => {
      await register(server)
      const { taskId } = server.enqueueWorkflowTask({ workflowType: "t", taskQueue: "orders" })
      await pollWorkflow(server)
      const complete = (commands: unknown) =>
        post(server, `/api/worker/workflow-tasks/${taskId}/complete`, { lease_owner: "w1", workflow_task_attempt: 1, commands })
      const cases: Array<[unknown, string]> = [
        [[], "commands"],
        [[{ result: null }], "commands.0.type"],
        [[{ type: "launch_rocket" }], "commands.0.type"],
        [[{ type: "start_timer", delay_seconds: 1, retry_policy: { max_attempts: 2 } }], "commands.0.retry_policy"],
        [[{ type: "schedule_activity", activity_type: "a", heartbeat_timeout: 10, start_to_close_timeout: 5 }], "commands.0.heartbeat_timeout"],
        [[{ type: "schedule_activity", activity_type: "a", start_to_close_timeout: 0 }], "commands.0.start_to_close_timeout"],
        [[{ type: "complete_workflow", non_retryable: true }], "commands.0.non_retryable"],
        [[{ type: "start_child_workflow", workflow_type: "c", execution_timeout_seconds: 5, run_timeout_seconds: 9 }], "commands.0.run_timeout_seconds"],
        [[{ type: "start_timer", delay_seconds: 1, execution_timeout_seconds: 5 }], "commands.0.execution_timeout_seconds"]
      ]
      for (const [commands, field] of cases) {
        const answer = await complete(commands)
        assert.strictEqual(answer.status, 422, JSON.stringify(commands))
        assert.strictEqual(answer.body.reason, "validation_failed")
        assert.deepStrictEqual(Object.keys(answer.body.errors), [field], JSON.stringify(commands))
      }
      const fine = await complete([{ type: "fail_workflow", message: "no", non_retryable: true }])
      assert.strictEqual(fine.status, 200)
      assert.strictEqual(fine.body.run_status, "failed")
    }))

    it("returns the same leased task for a retried poll_request_id", withServer({}, async (server) => {
      await register(server)
      const { taskId } = server.enqueueWorkflowTask({ workflowType: "t", taskQueue: "orders" })
      const first = await pollWorkflow(server, { poll_request_id: "wf-poll-abc" })
      const retried = await pollWorkflow(server, { poll_request_id: "wf-poll-abc" })
      assert.deepStrictEqual(retried.body.task, first.body.task)
      assert.strictEqual(retried.body.task.task_id, taskId)
      assert.strictEqual((await pollWorkflow(server, { poll_request_id: "wf-poll-other" })).body.task, null)
      assert.strictEqual(server.workflowTask(taskId)!.attempt, 1)
    }))

    it("answers an immediate probe at once and holds a long poll until a task arrives", withServer({}, async (server) => {
      await register(server)
      const probe = await pollWorkflow(server, { timeout_seconds: 0 })
      assert.deepStrictEqual([probe.body.task, probe.body.poll_status], [null, "empty"])

      const startedAt = Date.now()
      const held = pollWorkflow(server, { timeout_seconds: 5 })
      await server.waitUntil(() => server.heldPolls("workflowTaskPoll") === 1)
      const { taskId } = server.enqueueWorkflowTask({ workflowType: "t", taskQueue: "orders" })
      const answer = await held
      assert.strictEqual(answer.body.task.task_id, taskId)
      assert.strictEqual(answer.body.poll_status, "leased")
      assert.isBelow(Date.now() - startedAt, 4000, "woken by the task, not by the 5 s timeout")
      assert.strictEqual(server.heldPolls("workflowTaskPoll"), 0)
    }))

    it("ends a held poll with { task: null } when its timeout passes", withServer({ maxPollHoldMs: 150 }, async (server) => {
      await register(server)
      const startedAt = Date.now()
      const answer = await pollWorkflow(server, { timeout_seconds: 30 })
      assert.isAtLeast(Date.now() - startedAt, 140)
      assert.strictEqual(answer.status, 200)
      assert.deepStrictEqual([answer.body.task, answer.body.poll_status], [null, "timeout"])
      const activity = await post(server, "/api/worker/activity-tasks/poll", { worker_id: "w1", task_queue: "orders", timeout_seconds: 1 })
      assert.strictEqual(activity.body.task, null)
    }))

    it("holds a poll no longer than the server's long-poll timeout, whatever timeout_seconds asks", withServer({ longPollTimeoutSeconds: 0.25 }, async (server) => {
      await register(server)
      const info = await call(server, "GET", "/api/cluster/info")
      assert.strictEqual(info.body.worker_protocol.server_capabilities.long_poll_timeout, 0.25)
      for (const body of [{ timeout_seconds: 30 }, { timeout_seconds: undefined }]) {
        const startedAt = Date.now()
        const answer = await pollWorkflow(server, body)
        const elapsed = Date.now() - startedAt
        assert.strictEqual(answer.body.poll_status, "timeout")
        assert.isAtLeast(elapsed, 240)
        assert.isBelow(elapsed, 5000, "held for the server's 0.25 s, not the requested 30 s")
      }
    }))

    it("stops holding a poll whose client went away, without leasing anything to it", withServer({}, async (server) => {
      await register(server)
      const controller = new AbortController()
      const abandoned = call(
        server,
        "POST",
        "/api/worker/workflow-tasks/poll",
        { worker_id: "w1", task_queue: "orders", timeout_seconds: 30 },
        workerHeaders(server),
        controller.signal
      ).catch((error) => error)
      await server.waitUntil(() => server.heldPolls("workflowTaskPoll") === 1)
      controller.abort()
      await abandoned
      await server.waitUntil(() => server.heldPolls("workflowTaskPoll") === 0)
      const { taskId } = server.enqueueWorkflowTask({ workflowType: "t", taskQueue: "orders" })
      assert.strictEqual(server.workflowTask(taskId)!.status, "ready")
      await server.waitUntil(() => server.requestsTo("workflowTaskPoll")[0]!.aborted)
      assert.isUndefined(server.requestsTo("workflowTaskPoll")[0]!.status)
    }))

    it("pages history with opaque tokens and rejects a bad token", withServer({}, async (server) => {
      await register(server)
      const events = Array.from({ length: 5 }, (_, i) => ({ event_type: `E${i + 1}`, payload: {} }))
      const { taskId } = server.enqueueWorkflowTask({ workflowType: "t", taskQueue: "orders", historyEvents: events })
      const polled = (await pollWorkflow(server, { history_page_size: 2 })).body.task
      assert.deepStrictEqual(polled.history_events.map((e: any) => e.event_type), ["E1", "E2"])
      assert.strictEqual(polled.total_history_events, 5)
      const seen: Array<string> = polled.history_events.map((e: any) => e.event_type)
      let token = polled.next_history_page_token
      while (token !== null) {
        const page = await post(server, `/api/worker/workflow-tasks/${taskId}/history`, {
          next_history_page_token: token,
          lease_owner: "w1",
          workflow_task_attempt: 1,
          history_page_size: 2
        })
        assert.strictEqual(page.status, 200)
        assertSubset(page.body, { task_id: taskId, workflow_task_attempt: 1, total_history_events: 5 })
        assertWorkerEnvelope(page)
        seen.push(...page.body.history_events.map((e: any) => e.event_type))
        token = page.body.next_history_page_token
      }
      assert.deepStrictEqual(seen, ["E1", "E2", "E3", "E4", "E5"])
      const bad = await post(server, `/api/worker/workflow-tasks/${taskId}/history`, {
        next_history_page_token: "%%%",
        lease_owner: "w1",
        workflow_task_attempt: 1
      })
      assert.strictEqual(bad.status, 400)
      assert.strictEqual(bad.body.reason, "invalid_page_token")
      const notOwner = await post(server, `/api/worker/workflow-tasks/${taskId}/history`, { lease_owner: "w9", workflow_task_attempt: 1 })
      assert.strictEqual(notOwner.body.reason, "lease_owner_mismatch")
    }))

    it("records a task failure and re-queues the task with the next attempt", withServer({}, async (server) => {
      await register(server)
      const { taskId, workflowId, runId } = server.enqueueWorkflowTask({ workflowType: "t", taskQueue: "orders" })
      await pollWorkflow(server)
      const noMessage = await post(server, `/api/worker/workflow-tasks/${taskId}/fail`, { lease_owner: "w1", workflow_task_attempt: 1, failure: {} })
      assert.strictEqual(noMessage.status, 422)
      assert.deepStrictEqual(Object.keys(noMessage.body.errors), ["failure.message"])
      const failure = { message: "replay failed: boom", type: "Error", stack_trace: "at x" }
      const failed = await post(server, `/api/worker/workflow-tasks/${taskId}/fail`, { lease_owner: "w1", workflow_task_attempt: 1, failure })
      assert.strictEqual(failed.status, 200)
      assertSubset(failed.body, { task_id: taskId, workflow_task_attempt: 1, outcome: "failed", recorded: true, reason: null })
      const nextTaskId = failed.body.next_task_id
      assert.isString(nextTaskId)
      assert.deepStrictEqual(server.failedWorkflowTasks, [{ taskId, workflowId, runId, attempt: 1, leaseOwner: "w1", failure, nextTaskId }])
      assertSubset((await pollWorkflow(server)).body.task, { task_id: nextTaskId, workflow_task_attempt: 2 })
    }))

    it("refuses completion for a closed run and renews a lease on workflow-task heartbeat", withServer({ workflowTaskLeaseSeconds: 10 }, async (server) => {
      await register(server)
      const { taskId, workflowId } = server.enqueueWorkflowTask({ workflowType: "t", taskQueue: "orders" })
      await pollWorkflow(server)
      server.advanceTime(8_000)
      const renewed = await post(server, `/api/worker/workflow-tasks/${taskId}/heartbeat`, { lease_owner: "w1", workflow_task_attempt: 1 })
      assertSubset(renewed.body, { task_id: taskId, renewed: true, task_status: "leased", run_status: "running" })
      server.advanceTime(8_000)
      server.closeRun(workflowId, "cancelled")
      const closed = await post(server, `/api/worker/workflow-tasks/${taskId}/complete`, {
        lease_owner: "w1",
        workflow_task_attempt: 1,
        commands: [{ type: "start_timer", delay_seconds: 1 }]
      })
      assert.strictEqual(closed.status, 409)
      assertSubset(closed.body, { reason: "run_closed", stop_reason: "run_cancelled", cancel_requested: true, can_continue: false, run_status: "cancelled" })
    }))

    it("answers poll_status draining to a worker whose registration is draining", withServer({}, async (server) => {
      server.putRegistration({ workerId: "w1", taskQueue: "orders", status: "draining" })
      server.enqueueWorkflowTask({ workflowType: "t", taskQueue: "orders" })
      const answer = await pollWorkflow(server)
      assertSubset(answer.body, { task: null, poll_status: "draining" })
      assert.isString(answer.body.drain_reason)
      assert.strictEqual(server.workflowTasks[0]!.status, "ready")
    }))

    it("serves a task without payload_codec or with a foreign one when asked to", withServer({}, async (server) => {
      await register(server)
      server.enqueueWorkflowTask({ workflowType: "t", taskQueue: "orders", payloadCodec: null, extra: { payload_codec: undefined } })
      server.enqueueWorkflowTask({ workflowType: "t", taskQueue: "orders", payloadCodec: "json", wireArguments: { codec: "json", blob: "bnVsbA==" } })
      const first = (await pollWorkflow(server)).body.task
      assert.isFalse("payload_codec" in first)
      const second = (await pollWorkflow(server)).body.task
      assert.strictEqual(second.payload_codec, "json")
      assert.deepStrictEqual(second.arguments, { codec: "json", blob: "bnVsbA==" })
      assert.strictEqual(Either.getLeft(Codec.requireAvroCodec(first.payload_codec)).pipe((e) => e._tag === "Some" && e.value.code), "unsupported_payload_codec")
    }))
  })

  describe("activity tasks", () => {
    const registerPolyglot = (server: DurableWorkflowServer) =>
      register(server, { worker_id: "polyglot-worker-231", task_queue: "external-workflows" })
    const pollActivity = (server: DurableWorkflowServer, workerId = "polyglot-worker-231") =>
      post(server, "/api/worker/activity-tasks/poll", {
        worker_id: workerId,
        task_queue: "external-workflows",
        poll_request_id: "activity-poll-1",
        timeout_seconds: 0
      })

    it("activity-complete parity: the SDK body completes the task with the fixture response", withServer({}, async (server) => {
      const fixture = parity("activity-complete")
      await registerPolyglot(server)
      server.enqueueActivityTask({
        taskId: "activity-task-231",
        attemptId: "activity-attempt-231",
        activityType: fixture.sdk_python.kwargs.activity_name,
        taskQueue: "external-workflows",
        input: [3],
        retryPolicy: { max_attempts: 3, start_to_close_timeout: 30 }
      })
      const polled = await pollActivity(server)
      assertWorkerEnvelope(polled)
      const task = polled.body.task
      assertSubset(task, {
        task_id: "activity-task-231",
        activity_attempt_id: "activity-attempt-231",
        attempt_number: 1,
        activity_type: "inventory.sync-page",
        payload_codec: "avro",
        lease_owner: "polyglot-worker-231"
      })
      assert.deepStrictEqual(Codec.decodeEnvelope(task.arguments), Either.right([3]))
      assert.isString(task.deadlines.start_to_close)
      assert.isFalse("external_executor" in task, "null fields are dropped")

      const body = {
        ...fixture.sdk_python.expected_body,
        result: Either.getOrThrow(Codec.encodeEnvelope(fixture.sdk_python.payload_envelope.decoded))
      }
      const answer = await call(server, fixture.request.method, `/api${fixture.request.path}`, body)
      assert.strictEqual(answer.status, 200)
      assertSubset(answer.body, fixture.response_body)
      assertSubset(answer.body, { recorded: true, reason: null, next_task_id: null })
      assertWorkerEnvelope(answer)
      const [completion] = server.completedActivityTasks
      assert.strictEqual(completion!.leaseOwner, "polyglot-worker-231")
      assert.deepStrictEqual(completion!.decodedResult, Either.right(fixture.semantic_body.result))
    }))

    it("activity-fail parity: the fixture body fails the task", withServer({}, async (server) => {
      const fixture = parity("activity-fail")
      await registerPolyglot(server)
      server.enqueueActivityTask({ taskId: "activity-task-231", attemptId: "activity-attempt-231", activityType: "inventory.sync", taskQueue: "external-workflows" })
      await pollActivity(server)
      const answer = await call(server, fixture.request.method, `/api${fixture.request.path}`, fixture.request.body)
      assert.strictEqual(answer.status, 200)
      assertSubset(answer.body, fixture.response_body)
      assert.deepStrictEqual(server.failedActivityTasks.map((f) => f.failure), [fixture.request.body.failure])
      const badKind = await post(server, "/api/worker/activity-tasks/activity-task-231/fail", {
        ...fixture.request.body,
        failure: { message: "x", kind: "meteor" }
      })
      assert.strictEqual(badKind.status, 422)
    }))

    it("fences activity calls by task, attempt and lease owner", withServer({}, async (server) => {
      await registerPolyglot(server)
      const a = server.enqueueActivityTask({ activityType: "a", taskQueue: "external-workflows" })
      const b = server.enqueueActivityTask({ activityType: "a", taskQueue: "external-workflows" })
      const attemptA = (await pollActivity(server)).body.task.activity_attempt_id
      const attemptB = (await pollActivity(server)).body.task.activity_attempt_id
      const complete = (taskId: string, body: Record<string, unknown>) =>
        post(server, `/api/worker/activity-tasks/${taskId}/complete`, { lease_owner: "polyglot-worker-231", result: null, ...body })
      const noTask = await complete("nope", { activity_attempt_id: attemptA })
      assert.deepStrictEqual([noTask.status, noTask.body.reason], [404, "task_not_found"])
      const noAttempt = await complete(a.taskId, { activity_attempt_id: "nope" })
      assert.deepStrictEqual([noAttempt.status, noAttempt.body.reason], [404, "attempt_not_found"])
      const mismatch = await complete(a.taskId, { activity_attempt_id: attemptB })
      assert.deepStrictEqual([mismatch.status, mismatch.body.reason], [409, "task_mismatch"])
      const owner = await complete(b.taskId, { activity_attempt_id: attemptB, lease_owner: "someone-else" })
      assert.deepStrictEqual([owner.status, owner.body.reason, owner.body.lease_owner], [409, "lease_owner_mismatch", "polyglot-worker-231"])
      assert.strictEqual((await complete(b.taskId, { activity_attempt_id: attemptB })).status, 200)
    }))

    it("reports cancellation requests and closed runs on heartbeat, and ignores late results", withServer({}, async (server) => {
      await registerPolyglot(server)
      const { taskId, workflowId } = server.enqueueActivityTask({ activityType: "a", taskQueue: "external-workflows" })
      const attemptId = (await pollActivity(server)).body.task.activity_attempt_id
      const heartbeat = () =>
        post(server, `/api/worker/activity-tasks/${taskId}/heartbeat`, {
          activity_attempt_id: attemptId,
          lease_owner: "polyglot-worker-231",
          details: { progress: 1 }
        })
      const calm = await heartbeat()
      assertSubset(calm.body, { task_id: taskId, cancel_requested: false, can_continue: true, heartbeat_recorded: true, reason: null })
      assertWorkerEnvelope(calm)
      server.requestActivityCancellation(taskId)
      assertSubset((await heartbeat()).body, { cancel_requested: true, can_continue: false })
      server.closeRun(workflowId, "cancelled")
      const closed = await heartbeat()
      assert.strictEqual(closed.status, 200)
      assertSubset(closed.body, { cancel_requested: true, can_continue: false, reason: "run_cancelled" })
      assert.strictEqual(server.activityHeartbeats.length, 3)
      const late = await post(server, `/api/worker/activity-tasks/${taskId}/complete`, {
        activity_attempt_id: attemptId,
        lease_owner: "polyglot-worker-231",
        result: null
      })
      assert.strictEqual(late.status, 409)
      assertSubset(late.body, { outcome: "ignored", reason: "run_cancelled", can_continue: false })
    }))
  })

  describe("query tasks", () => {
    const setup = async (server: DurableWorkflowServer) => {
      await register(server, { worker_id: "polyglot-worker-231", task_queue: "external-workflows" })
      const poll = parity("query-task-poll")
      server.enqueueQueryTask({
        queryTaskId: "query-task-231",
        workflowId: "order-231",
        runId: "run-231",
        workflowType: "orders.fulfillment",
        queryName: "current_status",
        taskQueue: "external-workflows",
        wireQueryArguments: poll.response_body.task.input,
        workflowInput: []
      })
      return poll
    }

    it("query-task-poll parity: the fixture body leases the query task", withServer({}, async (server) => {
      const fixture = await setup(server)
      const answer = await call(server, fixture.request.method, `/api${fixture.request.path}`, fixture.request.body)
      assert.strictEqual(answer.status, 200)
      assertWorkerEnvelope(answer)
      const { input, ...expected } = fixture.response_body.task
      assertSubset(answer.body.task, expected)
      assert.deepStrictEqual(answer.body.task.query_arguments, input)
      assert.deepStrictEqual(Codec.decodeEnvelope(answer.body.task.query_arguments), Either.right({ include_line_items: true }))
    }))

    it("query-task-complete parity: the SDK body (with result_envelope) completes; the CLI body is refused", withServer({}, async (server) => {
      const fixture = parity("query-task-complete")
      const poll = await setup(server)
      await call(server, "POST", `/api${poll.request.path}`, poll.request.body)
      const cli = await call(server, fixture.request.method, `/api${fixture.request.path}`, fixture.request.body)
      assert.strictEqual(cli.status, 422)
      assert.deepStrictEqual(Object.keys(cli.body.errors), ["result_envelope", "result_envelope.blob"])
      const answer = await call(server, fixture.request.method, `/api${fixture.request.path}`, fixture.sdk_python.request_body)
      assert.strictEqual(answer.status, 200)
      assertSubset(answer.body, { ...fixture.response_body, status: 200 })
      assert.deepStrictEqual(server.completedQueryTasks.map((q) => q.body["result_envelope"]), [fixture.sdk_python.request_body.result_envelope])
      const twice = await call(server, fixture.request.method, `/api${fixture.request.path}`, fixture.sdk_python.request_body)
      assert.strictEqual(twice.status, 409)
      assertSubset(twice.body, { outcome: "rejected", reason: "query_task_not_leased", status: 409 })
    }))

    it("query-task-fail parity: the fixture body fails the query task", withServer({}, async (server) => {
      const fixture = parity("query-task-fail")
      const poll = await setup(server)
      await call(server, "POST", `/api${poll.request.path}`, poll.request.body)
      const answer = await call(server, fixture.request.method, `/api${fixture.request.path}`, fixture.request.body)
      assert.strictEqual(answer.status, 200)
      assertSubset(answer.body, fixture.response_body)
      assert.strictEqual(server.failedQueryTasks[0]!.body["failure"] && (server.failedQueryTasks[0]!.body["failure"] as any).reason, "rejected_unknown_query")
    }))

    it("fences query results by task, lease owner and attempt", withServer({}, async (server) => {
      const poll = await setup(server)
      await call(server, "POST", `/api${poll.request.path}`, poll.request.body)
      const body = { lease_owner: "polyglot-worker-231", query_task_attempt: 1, result: 1, result_envelope: Either.getOrThrow(Codec.encodeEnvelope(1)) }
      const missing = await post(server, "/api/worker/query-tasks/nope/complete", body)
      assertSubset(missing.body, { outcome: "rejected", reason: "query_task_not_found", status: 404 })
      assert.strictEqual(missing.status, 404)
      const owner = await post(server, "/api/worker/query-tasks/query-task-231/complete", { ...body, lease_owner: "x" })
      assertSubset(owner.body, { reason: "lease_owner_mismatch", status: 409 })
      const attempt = await post(server, "/api/worker/query-tasks/query-task-231/complete", { ...body, query_task_attempt: 2 })
      assertSubset(attempt.body, { reason: "query_task_attempt_mismatch", status: 409 })
      server.advanceTime(61_000)
      const expired = await post(server, "/api/worker/query-tasks/query-task-231/complete", body)
      assertSubset(expired.body, { reason: "lease_expired", status: 409 })
    }))
  })

  describe("deregistration and control plane", () => {
    it("deregisters a worker registration on the worker plane and recovers its leased workflow tasks", withServer({}, async (server) => {
      await register(server, { worker_id: "worker / one" })
      const { taskId } = server.enqueueWorkflowTask({ workflowType: "t", taskQueue: "orders" })
      await pollWorkflow(server, { worker_id: "worker / one" })
      const forbidden = await call(server, "DELETE", "/api/worker/registrations/worker%20%2F%20one", undefined, workerHeaders(server, { token: server.tokens.admin! }))
      assert.strictEqual(forbidden.status, 403)
      const answer = await call(server, "DELETE", "/api/worker/registrations/worker%20%2F%20one")
      assert.strictEqual(answer.status, 200)
      assertSubset(answer.body, { worker_id: "worker / one", outcome: "deregistered", recovered_workflow_task_count: 1 })
      assertWorkerEnvelope(answer)
      assert.deepStrictEqual(server.workflowTask(taskId)!.status, "ready")
      assert.deepStrictEqual(server.deregistrations, [{ workerId: "worker / one", namespace: "default", recoveredWorkflowTaskCount: 1 }])
      const again = await call(server, "DELETE", "/api/worker/registrations/worker%20%2F%20one")
      assert.strictEqual(again.status, 404)
      assertSubset(again.body, { reason: "worker_not_found", worker_id: "worker / one" })
      assertWorkerEnvelope(again)
    }))

    it("worker-deregister parity: the control-plane DELETE needs admin and version 2 and answers the fixture body", withServer({}, async (server) => {
      const fixture = parity("worker-deregister")
      await register(server, { worker_id: "polyglot-worker-231" })
      const route = `/api${fixture.request.path}`
      const noVersion = await call(server, "DELETE", route, undefined, controlHeaders(server, { version: null }))
      assertSubset(noVersion.body, { reason: "missing_control_plane_version" })
      assert.strictEqual(noVersion.status, 400)
      const wrongVersion = await call(server, "DELETE", route, undefined, controlHeaders(server, { version: "1" }))
      assertSubset(wrongVersion.body, { reason: "unsupported_control_plane_version" })
      const workerToken = await call(server, "DELETE", route, undefined, controlHeaders(server, { token: server.tokens.worker! }))
      assert.strictEqual(workerToken.status, 403)
      const answer = await call(server, fixture.request.method, route, undefined, controlHeaders(server))
      assert.strictEqual(answer.status, 200)
      assert.deepStrictEqual(answer.body, fixture.response_body)
      assert.strictEqual(answer.headers.get("x-durable-workflow-control-plane-version"), "2")
      assert.isNull(answer.headers.get("x-durable-workflow-protocol-version"))
      assert.isUndefined(server.registration("polyglot-worker-231"))
      assert.deepStrictEqual(server.deregistrations, [], "not a worker-plane deregistration")
      const gone = await call(server, "DELETE", route, undefined, controlHeaders(server))
      assert.strictEqual(gone.status, 404)
      assertSubset(gone.body, { reason: "worker_not_found" })
      assert.isString(gone.body.message)
    }))

    it("worker-describe and worker-list parity", withServer({
      namespaces: ["default", "orders-prod"],
      allowedRuntimes: ["typescript", "external", "worker-runtime"]
    }, async (server) => {
      const describe = parity("worker-describe")
      const list = parity("worker-list")
      const headers = workerHeaders(server, { namespace: "orders-prod" })
      for (const worker of list.response_body.workers) {
        const full = worker.worker_id === describe.response_body.worker_id ? describe.response_body : worker
        await post(server, "/api/worker/register", {
          worker_id: full.worker_id,
          task_queue: full.task_queue,
          runtime: full.runtime,
          sdk_version: full.sdk_version,
          build_id: full.build_id,
          ...(full.supported_workflow_types === undefined ? {} : {
            supported_workflow_types: full.supported_workflow_types,
            supported_activity_types: full.supported_activity_types,
            max_concurrent_workflow_tasks: full.max_concurrent_workflow_tasks,
            max_concurrent_activity_tasks: full.max_concurrent_activity_tasks
          })
        }, headers)
      }
      const timestamps = ["last_heartbeat_at", "registered_at", "updated_at"]
      const described = await call(server, "GET", `/api${describe.request.path}`, undefined, controlHeaders(server, { namespace: "orders-prod", token: server.tokens.operator! }))
      assert.strictEqual(described.status, 200)
      assert.deepStrictEqual(Object.keys(described.body).sort(), Object.keys(describe.response_body).sort())
      assertSubset(described.body, Object.fromEntries(Object.entries(describe.response_body).filter(([k]) => !timestamps.includes(k))))
      for (const key of timestamps) assert.isString(described.body[key])

      const query = new URLSearchParams(list.request.query).toString()
      const listed = await call(server, "GET", `/api${list.request.path}?${query}`, undefined, controlHeaders(server, { namespace: "orders-prod" }))
      assert.strictEqual(listed.status, 200)
      assert.strictEqual(listed.body.namespace, list.response_body.namespace)
      assert.deepStrictEqual(
        listed.body.workers.map((w: any) => ({ ...w, last_heartbeat_at: null })),
        list.response_body.workers.map((w: any) => ({ ...w, last_heartbeat_at: null }))
      )
      const none = await call(server, "GET", `/api/workers?status=draining`, undefined, controlHeaders(server, { namespace: "orders-prod" }))
      assert.deepStrictEqual(none.body.workers, [])
    }))

    it("describes workflows on the control plane", withServer({}, async (server) => {
      await register(server)
      const { taskId, workflowId, runId } = server.enqueueWorkflowTask({ workflowId: "order-1", workflowType: "t", taskQueue: "orders" })
      const running = await call(server, "GET", `/api/workflows/${workflowId}`, undefined, controlHeaders(server, { token: server.tokens.operator! }))
      assert.strictEqual(running.status, 200)
      assertSubset(running.body, { workflow_id: "order-1", run_id: runId, status: "running", workflow_type: "t" })
      await pollWorkflow(server)
      const result = Either.getOrThrow(Codec.encodeEnvelope("ok"))
      await post(server, `/api/worker/workflow-tasks/${taskId}/complete`, { lease_owner: "w1", workflow_task_attempt: 1, commands: [{ type: "complete_workflow", result }] })
      const done = await call(server, "GET", `/api/workflows/${workflowId}`, undefined, controlHeaders(server))
      assertSubset(done.body, { status: "completed", result })
      const missing = await call(server, "GET", "/api/workflows/nope", undefined, controlHeaders(server))
      assert.strictEqual(missing.status, 404)
      assert.strictEqual(missing.body.reason, "workflow_not_found")
      const workerOnly = await call(server, "GET", `/api/workflows/${workflowId}`, undefined, controlHeaders(server, { token: server.tokens.worker! }))
      assert.strictEqual(workerOnly.status, 403)
    }))
  })

  describe("test API", () => {
    it("records every request in order with method, path, headers and body", withServer({}, async (server) => {
      await register(server)
      await post(server, "/api/worker/heartbeat", { worker_id: "w1" })
      await call(server, "DELETE", "/api/worker/registrations/w1")
      await call(server, "GET", "/api/nowhere")
      assert.deepStrictEqual(server.requests.map((r) => [r.seq, r.method, r.path, r.route, r.status]), [
        [1, "POST", "/api/worker/register", "register", 201],
        [2, "POST", "/api/worker/heartbeat", "heartbeat", 200],
        [3, "DELETE", "/api/worker/registrations/w1", "deregisterRegistration", 200],
        [4, "GET", "/api/nowhere", undefined, 404]
      ])
      const first = server.requests[0]!
      assert.strictEqual(first.headers["authorization"], "Bearer worker-token")
      assert.strictEqual(first.headers["x-namespace"], "default")
      assert.strictEqual(first.headers["x-durable-workflow-protocol-version"], "1.1")
      assert.deepStrictEqual(first.body, { worker_id: "w1", task_queue: "orders", runtime: "typescript" })
      assert.strictEqual((first.responseBody as any).registered, true)
      assert.strictEqual(server.requests[2]!.rawBody, "")
      assert.deepStrictEqual(server.requestsTo("heartbeat").map((r) => r.seq), [2])
      const seen = await server.waitForRequest((r) => r.route === "heartbeat")
      assert.strictEqual(seen.seq, 2)
      server.clearRequests()
      assert.strictEqual(server.requests.length, 0)
    }))

    it("injects faults: status and body for the next N calls, then back to normal", withServer({}, async (server) => {
      server.failNext("register", 401)
      const unauthorized = await register(server)
      assert.strictEqual(unauthorized.status, 401)
      assertSubset(unauthorized.body, { reason: "unauthorized" })
      assertWorkerEnvelope(unauthorized)
      assert.strictEqual((await register(server)).status, 201)

      server.failNext("deregisterRegistration", 403, { reason: "worker_registration_forbidden", message: "no" }, 2)
      for (let i = 0; i < 2; i++) {
        const forbidden = await call(server, "DELETE", "/api/worker/registrations/w1")
        assert.strictEqual(forbidden.status, 403)
        assertSubset(forbidden.body, { reason: "worker_registration_forbidden", message: "no" })
      }
      assert.strictEqual((await call(server, "DELETE", "/api/worker/registrations/w1")).status, 200)

      server.injectFault("heartbeat", { status: 503, body: { message: "busy" }, envelope: false, headers: { "retry-after": "1" } })
      const busy = await post(server, "/api/worker/heartbeat", { worker_id: "w1" })
      assert.strictEqual(busy.status, 503)
      assert.deepStrictEqual(busy.body, { message: "busy" })
      assert.strictEqual(busy.headers.get("retry-after"), "1")
      server.failNext("heartbeat", 500)
      server.clearFaults()
      assert.strictEqual((await post(server, "/api/worker/heartbeat", { worker_id: "w1" })).status, 404)
    }))

    it("injects delays and dropped connections", withServer({}, async (server) => {
      server.injectFault("register", { delayMs: 150 })
      const startedAt = Date.now()
      assert.strictEqual((await register(server)).status, 201)
      assert.isAtLeast(Date.now() - startedAt, 140)
      server.injectFault("heartbeat", { destroy: true })
      const dropped = await post(server, "/api/worker/heartbeat", { worker_id: "w1" }).then(() => "answered", () => "network error")
      assert.strictEqual(dropped, "network error")
      assert.isTrue(server.requestsTo("heartbeat")[0]!.aborted)
      assert.strictEqual((await post(server, "/api/worker/heartbeat", { worker_id: "w1" })).status, 200)
    }))

    it("emits events a test can use to script an orchestrator", withServer({}, async (server) => {
      await register(server)
      const seen: Array<string> = []
      const unsubscribe = server.onEvent((event) => {
        seen.push(event._tag)
        if (event._tag === "ActivityTaskCompleted") {
          server.enqueueWorkflowTask({
            workflowId: event.completion.workflowId,
            workflowType: "orders.process",
            taskQueue: "orders",
            historyEvents: [{ event_type: "ActivityCompleted", payload: { result: (event.completion.result as any).blob } }]
          })
        }
      })
      const { taskId } = server.enqueueActivityTask({ workflowId: "order-9", activityType: "charge", taskQueue: "orders" })
      const attemptId = (await post(server, "/api/worker/activity-tasks/poll", { worker_id: "w1", task_queue: "orders", timeout_seconds: 0 })).body.task.activity_attempt_id
      const held = pollWorkflow(server, { timeout_seconds: 5 })
      await server.waitUntil(() => server.heldPolls("workflowTaskPoll") === 1)
      const result = Either.getOrThrow(Codec.encodeEnvelope("charged"))
      await post(server, `/api/worker/activity-tasks/${taskId}/complete`, { activity_attempt_id: attemptId, lease_owner: "w1", result })
      const next = (await held).body.task
      assert.strictEqual(next.workflow_id, "order-9")
      assert.deepStrictEqual(Codec.decodeBlob(next.history_events[0].payload.result), Either.right("charged"))
      unsubscribe()
      await call(server, "DELETE", "/api/worker/registrations/w1")
      assert.deepStrictEqual(seen, ["ActivityTaskCompleted"])
    }))

    it("advertises the pre-accept update-validation contract only when asked to", async () => {
      const plain = await start({})
      const capable = await start({ updateValidation: true })
      try {
        const off = (await call(plain, "GET", "/api/cluster/info")).body.worker_protocol.server_capabilities
        assert.isUndefined(off.update_validation_tasks)
        const on = (await call(capable, "GET", "/api/cluster/info")).body.worker_protocol.server_capabilities
        assert.strictEqual(on.update_validation_tasks, true)
        assert.deepStrictEqual(on.synchronous_update_validation.task_poll, {
          strategy: "multiplexed",
          endpoint: "/worker/workflow-tasks/poll",
          request_field: "task_kinds",
          response_discriminator: "task.task_kind",
          task_kinds: ["workflow", "update_validation"]
        })
      } finally {
        await plain.stop()
        await capable.stop()
      }
    })

    it("hands update-validation tasks only to multiplexed polls of workers that validate that update", withServer({ updateValidation: true }, async (server) => {
      const contracts = { "orders.approval": { update_validators: ["setDiscount"] } }
      await register(server, { worker_id: "plain", supported_workflow_types: ["orders.approval"] })
      await register(server, {
        worker_id: "w1",
        capabilities: ["update_validation_tasks"],
        workflow_command_contracts: contracts
      })
      const refused = await register(server, { worker_id: "w2", capabilities: ["telepathy"] })
      assert.strictEqual(refused.status, 422)
      const { updateValidationTaskId } = server.enqueueUpdateValidationTask({
        workflowType: "orders.approval",
        updateName: "setDiscount",
        taskQueue: "orders",
        workflowInput: [1],
        updateInput: [2]
      })
      assert.isNull((await pollWorkflow(server, { worker_id: "plain", task_kinds: ["workflow", "update_validation"] })).body.task)
      assert.isNull((await pollWorkflow(server)).body.task, "a poll without task_kinds never gets one")
      const badKinds = await pollWorkflow(server, { task_kinds: ["workflow", "telepathy"] })
      assert.strictEqual(badKinds.status, 422)
      const polled = await pollWorkflow(server, { task_kinds: ["workflow", "update_validation"] })
      const task = polled.body.task
      assertSubset(task, {
        task_kind: "update_validation",
        update_validation_task_id: updateValidationTaskId,
        update_validation_attempt: 1,
        workflow_type: "orders.approval",
        update_name: "setDiscount",
        payload_codec: "avro",
        lease_owner: "w1"
      })
      assert.deepStrictEqual(Codec.decodeEnvelope(task.update_arguments), Either.right([2]))
      assert.deepStrictEqual(task.history_export.history_events, task.history_events)
      // a multiplexed poll marks plain workflow tasks with their kind
      server.enqueueWorkflowTask({ workflowType: "orders.approval", taskQueue: "orders" })
      assert.strictEqual((await pollWorkflow(server, { task_kinds: ["workflow", "update_validation"] })).body.task.task_kind, "workflow")
    }))

    it("answers approve/reject after the pipeline checks, then validation, then ownership, with final reasons", withServer({ updateValidation: true, updateValidationLeaseSeconds: 10 }, async (server) => {
      await register(server, { capabilities: ["update_validation_tasks"], workflow_command_contracts: { t: { update_validators: ["u"] } } })
      const enqueue = () =>
        server.enqueueUpdateValidationTask({ workflowType: "t", updateName: "u", taskQueue: "orders", updateInput: [] }).updateValidationTaskId
      const id = enqueue()
      const route = (verb: string, taskId = id) => `/api/worker/update-validation-tasks/${taskId}/${verb}`
      const approve = { lease_owner: "w1", update_validation_attempt: 1 }
      // pipeline first: authentication, protocol version
      assert.strictEqual((await post(server, route("approve"), approve, workerHeaders(server, { token: null }))).status, 401)
      const noVersion = await post(server, route("approve"), approve, workerHeaders(server, { version: null }))
      assert.strictEqual(noVersion.status, 400)
      assert.strictEqual(noVersion.body.reason, "missing_protocol_version")
      // then validation
      const invalid = await post(server, route("reject"), { lease_owner: "w1", update_validation_attempt: 1, failure: { message: "no", reason: "because" } })
      assert.strictEqual(invalid.status, 422)
      assert.property(invalid.body.errors, "failure.reason")
      // then ownership
      const missing = await post(server, route("approve", "nope"), approve)
      assert.strictEqual(missing.status, 404)
      assertSubset(missing.body, { reason: "update_validation_task_not_found", retryable: false, update_validation_task_id: "nope" })
      assertWorkerEnvelope(missing)
      const notLeased = await post(server, route("approve"), approve)
      assertSubset(notLeased.body, { reason: "update_validation_task_not_leased" })
      assert.strictEqual(notLeased.status, 409)
      await pollWorkflow(server, { task_kinds: ["workflow", "update_validation"] })
      assertSubset((await post(server, route("approve"), { ...approve, lease_owner: "w9" })).body, { reason: "update_validator_worker_lost", lease_owner: "w1" })
      assertSubset((await post(server, route("approve"), { ...approve, update_validation_attempt: 2 })).body, { reason: "stale_update_validation_completion", current_attempt: 1 })
      const rejected = await post(server, route("reject"), {
        ...approve,
        failure: { message: "too much", reason: "update_validator_rejected", type: "UpdateRejected", validation_errors: { percent: ["max 50"] } }
      })
      assert.strictEqual(rejected.status, 200)
      assertSubset(rejected.body, { update_validation_task_id: id, outcome: "rejected", recorded: true })
      const duplicate = await post(server, route("approve"), approve)
      assert.strictEqual(duplicate.status, 409)
      assertSubset(duplicate.body, { reason: "duplicate_update_validation_completion", outcome: "rejected" })
      assert.deepStrictEqual(server.updateValidations.map((v) => [v.updateValidationTaskId, v.outcome]), [[id, "rejected"]])
      // an expired lease
      const second = enqueue()
      await pollWorkflow(server, { task_kinds: ["workflow", "update_validation"] })
      server.advanceTime(11_000)
      const late = await post(server, route("approve", second), approve)
      assertSubset(late.body, { reason: "update_validation_lease_expired" })
      const again = await pollWorkflow(server, { task_kinds: ["workflow", "update_validation"] })
      assertSubset(again.body.task, { update_validation_task_id: second, update_validation_attempt: 2 })
      assert.strictEqual((await post(server, route("approve", second), { ...approve, update_validation_attempt: 2 })).status, 200)
    }))

    it("accepted-update tasks carry workflow_update_id; update commands are validated", withServer({}, async (server) => {
      await register(server)
      const { taskId } = server.enqueueWorkflowTask({ workflowType: "t", taskQueue: "orders", updateId: "upd-1" })
      const task = (await pollWorkflow(server)).body.task
      assertSubset(task, { task_id: taskId, workflow_update_id: "upd-1", resume_source_kind: "workflow_update", resume_source_id: "upd-1" })
      const complete = (commands: unknown) =>
        post(server, `/api/worker/workflow-tasks/${taskId}/complete`, { lease_owner: "w1", workflow_task_attempt: 1, commands })
      const noId = await complete([{ type: "complete_update", result: null }])
      assert.strictEqual(noId.status, 422)
      assert.property(noId.body.errors, "commands.0.update_id")
      const noMessage = await complete([{ type: "fail_update", update_id: "upd-1", non_retryable: true }])
      assert.property(noMessage.body.errors, "commands.0.message")
      const ok = await complete([{ type: "fail_update", update_id: "upd-1", message: "no", exception_type: "UnknownUpdate", non_retryable: true }])
      assert.strictEqual(ok.status, 200)
    }))

    it("runs without authentication when auth is \"none\"", withServer({ auth: "none" }, async (server) => {
      const answer = await register(server, {}, workerHeaders(server))
      assert.isUndefined(server.requests[0]!.headers["authorization"])
      assert.strictEqual(answer.status, 201)
    }))

    it.scoped("is a scoped resource: reachable inside the scope, closed after it", () =>
      Effect.gen(function*() {
        const url = yield* Effect.scoped(
          Effect.gen(function*() {
            const server = yield* scoped()
            const answer = yield* Effect.promise(() => register(server))
            assert.strictEqual(answer.status, 201)
            return server.url
          })
        )
        const after = yield* Effect.promise(() => fetch(`${url}/api/cluster/info`).then(() => "answered", () => "refused"))
        assert.strictEqual(after, "refused")
      }))
  })
})
