import { assert, describe, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import type * as Duration from "effect/Duration"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as TestClock from "effect/TestClock"
import { RegistrationError, Transport } from "../../src/seam/Transport.js"
import type { DurableWorkflowServer } from "../support/durableWorkflowServer.js"
import { describedWorker, servingSteps } from "../support/handlers.js"
import { DurableWorkflow, DW, greet, QUEUE, registered, setup, startWorker, transportLayer, until, Worker } from "./support.js"

const hello = DurableWorkflow.make("orders.hello", (ctx, name: string) => ctx.activity<string>("greeting.compose", [name]))

/** Runs a worker whose registration is expected to fail; returns the failure. */
const failedRun = (server: DurableWorkflowServer) =>
  Effect.gen(function*() {
    const { running } = yield* startWorker(server, { steps: [greet] })
    const exit = yield* Fiber.await(running)
    assert.isTrue(Exit.isFailure(exit))
    const error = Cause.squash((exit as Exit.Failure<void, unknown>).cause)
    assert.instanceOf(error, RegistrationError)
    assert.strictEqual(server.requestsTo("register").length, 0, "no register call")
    assert.strictEqual(server.requestsTo("deregisterRegistration").length, 0, "no deregistration")
    return error as RegistrationError
  })

describe("Durable Workflow registration", () => {
  it.scoped("registers once after one discovery: queue, types, fingerprints, limits, capabilities, slots, metrics", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const { worker } = yield* startWorker(server, { steps: [greet], durableWorkflows: [hello] })
      yield* registered(server)
      assert.deepStrictEqual(server.requests.slice(0, 2).map((r) => r.route), ["clusterInfo", "register"])
      assert.strictEqual(server.requestsTo("clusterInfo").length, 1)
      const body = server.requestsTo("register")[0]!.body as Record<string, any>
      assert.strictEqual(body["worker_id"], worker.id)
      assert.match(worker.id, /^ts-.+-\d+-[0-9a-f]{8}$/)
      assert.strictEqual(body["task_queue"], QUEUE)
      assert.strictEqual(body["runtime"], "typescript")
      assert.deepStrictEqual(body["supported_workflow_types"], ["orders.hello"])
      assert.deepStrictEqual(body["supported_activity_types"], ["greeting.compose"])
      assert.match(body["workflow_definition_fingerprints"]["orders.hello"], /^sha256:[0-9a-f]{64}$/)
      assert.deepStrictEqual(body["capabilities"], ["query_tasks"])
      assert.strictEqual(body["max_concurrent_workflow_tasks"], 10)
      assert.strictEqual(body["max_concurrent_activity_tasks"], 10)
      assert.deepStrictEqual(body["task_slots"], { workflow_available: 10, activity_available: 10 })
      assert.strictEqual(body["process_metrics"]["process_id"], process.pid)
      assert.match(body["process_metrics"]["process_started_at"], /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
      assert.notProperty(body, "build_id")
    }))

  it.scoped("custom limits and build id are forwarded at registration and on every poll", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const options = Either.getOrThrow(DW.workerOptions({ maxConcurrentWorkflowTasks: 3, maxConcurrentActivityTasks: 7, buildId: "b1" }))
      yield* startWorker(server, { steps: [greet], ...options })
      yield* until(server, () =>
        ["workflowTaskPoll", "activityTaskPoll", "queryTaskPoll"].every((route) => server.requestsTo(route as any).length > 0))
      const body = server.requestsTo("register")[0]!.body as Record<string, any>
      assert.strictEqual(body["max_concurrent_workflow_tasks"], 3)
      assert.strictEqual(body["max_concurrent_activity_tasks"], 7)
      assert.deepStrictEqual(body["task_slots"], { workflow_available: 3, activity_available: 7 })
      assert.strictEqual(body["build_id"], "b1")
      for (const route of ["workflowTaskPoll", "activityTaskPoll", "queryTaskPoll"] as const) {
        assert.strictEqual((server.requestsTo(route)[0]!.body as any)["build_id"], "b1", route)
      }
    }))

  it.scoped("an explicit worker id is kept", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const { worker } = yield* startWorker(server, { steps: [greet], workerId: "worker-7" })
      yield* registered(server)
      assert.strictEqual(worker.id, "worker-7")
      assert.strictEqual((server.requestsTo("register")[0]!.body as any)["worker_id"], "worker-7")
    }))

  it("options are validated with the SDK's messages", () => {
    const error = (options: Parameters<typeof DW.workerOptions>[0]) => Either.getLeft(DW.workerOptions(options)).pipe((o) => o._tag === "Some" ? o.value.message : undefined)
    assert.strictEqual(error({ buildId: "" }), "build_id must be a non-empty string when provided")
    assert.strictEqual(error({ buildId: "   " }), "build_id must be a non-empty string when provided")
    assert.strictEqual(error({ maxConcurrentWorkflowTasks: 0 }), "max_concurrent_workflow_tasks must be at least 1")
    assert.strictEqual(error({ maxConcurrentActivityTasks: 0 }), "max_concurrent_activity_tasks must be at least 1")
    const defaults = Either.getOrThrow(DW.workerOptions({}))
    assert.deepStrictEqual(defaults, { workflowConcurrency: 10, concurrency: 10, pollTimeout: "35 seconds", shutdownTimeout: "30 seconds" })
  })

  it.effect("the transport rejects bad options before any I/O", () =>
    Effect.gen(function*() {
      const layer = DW.layer({ baseUrl: "http://127.0.0.1:1", taskQueue: "q", heartbeatInterval: 0 })
      const built = yield* Effect.either(Effect.scoped(Effect.asVoid(Effect.provide(Effect.void, layer))))
      assert.strictEqual(Either.getLeft(built).pipe((o) => o._tag === "Some" ? o.value.message : ""), "heartbeatInterval must be a positive, finite duration (milliseconds, or a string such as \"60 seconds\" or \"1m30s\"), got 0")
      const api = yield* Effect.either(Effect.provide(Effect.void, DW.layer({ baseUrl: "http://127.0.0.1:1/api", taskQueue: "q" })))
      assert.match(Either.getLeft(api).pipe((o) => o._tag === "Some" ? o.value.message : ""), /not end in \/api/)
      const refusalOf = (options: Record<string, unknown>) =>
        Effect.map(
          Effect.either(Effect.scoped(Effect.provide(Effect.void, DW.layer({ taskQueue: "q", ...options } as never)))),
          (built) => Either.getLeft(built).pipe((o) => o._tag === "Some" ? o.value : undefined)
        )
      const messageOf = (options: Record<string, unknown>) =>
        Effect.map(refusalOf(options), (refused) => refused?.message ?? "built")
      // every refusal names its option in `option`, as the other transports' config errors do
      const optionOf = (options: Record<string, unknown>) => Effect.map(refusalOf(options), (refused) => refused?.option)
      const at = "http://127.0.0.1:1"
      assert.strictEqual(yield* optionOf({ baseUrl: at, heartbeatInterval: 0 }), "heartbeatInterval")
      assert.strictEqual(yield* optionOf({ baseUrl: at, requestTimeout: 0 }), "requestTimeout")
      assert.strictEqual(yield* optionOf({ baseUrl: at, requestTimout: "1s" }), "requestTimout")
      assert.strictEqual(yield* optionOf({ baseUrl: at, waitForBroker: "yes" }), "waitForBroker")
      assert.strictEqual(yield* optionOf({ baseUrl: at, token: "" }), "token")
      assert.strictEqual(yield* optionOf({ baseUrl: at, controlToken: 42 }), "controlToken")
      assert.strictEqual(yield* optionOf({ baseUrl: at, namespace: " shop" }), "namespace")
      assert.strictEqual(yield* optionOf({ baseUrl: at, controlPlaneVersion: "" }), "controlPlaneVersion")
      assert.strictEqual(yield* optionOf({ baseUrl: at, externalStorageThresholdBytes: 1.5 }), "externalStorageThresholdBytes")
      assert.strictEqual(yield* optionOf({ baseUrl: at, taskQueue: "  " }), "taskQueue")
      assert.strictEqual(yield* optionOf({ baseUrl: "durable-workflow:8080" }), "baseUrl")
      assert.strictEqual(yield* optionOf({ baseUrl: `${at}/api` }), "baseUrl")
      assert.strictEqual(yield* optionOf({ baseUrl: `${at}/?x=1` }), "baseUrl")
      // refused, not thrown (JSON.stringify throws on a bigint)
      assert.strictEqual(yield* messageOf({ baseUrl: 5n }), "baseUrl must be an absolute http(s) URL, got 5n")
      // an unknown key is refused, as the other transports refuse theirs (it was ignored)
      assert.match(
        yield* messageOf({ baseUrl: "http://127.0.0.1:1", requestTimout: "1s" }),
        /^unknown Durable Workflow option "requestTimout"; did you mean "requestTimeout"\?/
      )
      // the task queue is required, and not blanks only
      assert.strictEqual(yield* messageOf({ baseUrl: at, taskQueue: undefined }), "taskQueue must be a non-empty string, got undefined")
      assert.strictEqual(yield* messageOf({ baseUrl: at, taskQueue: "  " }), 'taskQueue must be a non-empty string, got "  "')
      assert.strictEqual(yield* messageOf({ baseUrl: at, taskQueue: 7 }), "taskQueue must be a non-empty string, got 7")
      assert.strictEqual(yield* messageOf({ baseUrl: at, token: 42 }), "token must be a string or a Redacted string")
      assert.strictEqual(yield* messageOf({ baseUrl: at, waitForBroker: "yes" }), 'waitForBroker must be true or false, got "yes"')
      // a host and port without a scheme parse as a URL of the scheme "durable-workflow:", and every
      // request would then fail as a server that cannot be reached
      assert.strictEqual(
        yield* messageOf({ baseUrl: "durable-workflow:8080" }),
        'baseUrl must be an absolute http(s) URL, got "durable-workflow:8080" (its scheme is durable-workflow:; for a host ' +
          'and port, write "http://durable-workflow:8080")'
      )
      assert.match(yield* messageOf({ baseUrl: "ftp://h" }), /^baseUrl must be an absolute http\(s\) URL, got "ftp:\/\/h" \(its scheme is ftp:\)$/)
      // as an env file gives them: an empty token went out as "Bearer ", an empty namespace as an empty header
      assert.strictEqual(yield* messageOf({ baseUrl: "http://127.0.0.1:1", workerToken: "" }), "workerToken is empty: leave it out for a server without tokens")
      // from the environment, an empty variable is unset, as an empty AWS key is
      const { ConfigProvider, Layer } = yield* Effect.promise(() => import("effect"))
      const fromEnv = yield* Effect.either(Effect.scoped(Layer.build(DW.layerConfig({ taskQueue: "q" }).pipe(
        Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([
          ["DURABLE_WORKFLOW_SERVER_URL", "http://127.0.0.1:1"],
          ["DURABLE_WORKFLOW_AUTH_TOKEN", ""]
        ]))))
      ))))
      assert.isTrue(Either.isRight(fromEnv), "built: an empty DURABLE_WORKFLOW_AUTH_TOKEN is no token")
      // a value read from a variable, refused: named by the variable (the application wrote no baseUrl)
      const fromVariables = (variables: ReadonlyArray<readonly [string, string]>, options: Partial<DW.DurableWorkflowOptions> = {}) =>
        Effect.flip(Effect.scoped(Layer.build(DW.layerConfig({ taskQueue: "q", ...options }).pipe(
          Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(variables))))
        ))))
      const serverUrl = yield* fromVariables([["DURABLE_WORKFLOW_SERVER_URL", "durable-workflow:8080"]])
      assert.match(serverUrl.message, /^DURABLE_WORKFLOW_SERVER_URL: baseUrl must be an absolute http\(s\) URL, got "durable-workflow:8080"/)
      assert.strictEqual((serverUrl as DW.DurableWorkflowConfigError).option, "baseUrl")
      const namespaceRead = yield* fromVariables([["DURABLE_WORKFLOW_SERVER_URL", "http://127.0.0.1:1"], ["DURABLE_WORKFLOW_NAMESPACE", " shop"]])
      assert.match(namespaceRead.message, /^DURABLE_WORKFLOW_NAMESPACE: namespace must be a non-empty string without blanks around it/)
      // given in code, over the variable: the option's own refusal
      const namespaceGiven = yield* fromVariables([["DURABLE_WORKFLOW_SERVER_URL", "http://127.0.0.1:1"]], { namespace: " shop" })
      assert.match(namespaceGiven.message, /^namespace must be/)
      assert.strictEqual(
        yield* messageOf({ baseUrl: "http://127.0.0.1:1", namespace: "" }),
        'namespace must be a non-empty string without blanks around it, got ""'
      )
      assert.match(yield* messageOf({ baseUrl: "http://127.0.0.1:1", protocolVersion: " 1.1" }), /^protocolVersion must be/)
      // the URL's blank is trimmed: it passes, and the next check speaks
      assert.match(yield* messageOf({ baseUrl: "http://127.0.0.1:1 ", requestTimeout: 0 }), /^requestTimeout must be/)
      assert.strictEqual(
        yield* messageOf({ baseUrl: "http://127.0.0.1:1", externalStorageThresholdBytes: 0 }),
        "externalStorageThresholdBytes must be a whole number of at least 1, got 0"
      )
      // Duration.decode reads -1 as zero, and no time for a request fails every one of them
      for (const requestTimeout of [0, -1, "-5 seconds", "soon"] as Array<Duration.DurationInput>) {
        const timeout = yield* Effect.either(
          Effect.scoped(Effect.provide(Effect.void, DW.layer({ baseUrl: "http://127.0.0.1:1", taskQueue: "q", requestTimeout })))
        )
        assert.match(
          Either.getLeft(timeout).pipe((o) => o._tag === "Some" ? o.value.message : ""),
          /^requestTimeout must be a positive duration \(milliseconds, or a string such as "60 seconds" or "1m30s"\), got /,
          String(requestTimeout)
        )
      }
    }))

  it.scoped("the poll timeout stays above the server's long poll: long_poll_timeout 12 → 17 s", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ longPollTimeoutSeconds: 12 })
      yield* startWorker(server, { steps: [greet], pollTimeout: 10 })
      yield* until(server, () => server.requestsTo("activityTaskPoll").length > 0)
      assert.strictEqual((server.requestsTo("activityTaskPoll")[0]!.body as any)["timeout_seconds"], 17)
    }))

  it.scoped("default poll timeout: 35 s in the body", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      yield* startWorker(server, { steps: [greet] })
      yield* until(server, () => server.requestsTo("workflowTaskPoll").length > 0)
      const body = server.requestsTo("workflowTaskPoll")[0]!.body as any
      assert.strictEqual(body["timeout_seconds"], 35)
      assert.match(body["poll_request_id"], /^wf-poll-[0-9a-f]{32}$/)
    }))

  it.scoped("without the query_tasks capability: no capability advertised and no query polling", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ queryTasks: false })
      yield* startWorker(server, { steps: [greet] })
      yield* until(server, () => server.requestsTo("workflowTaskPoll").length > 0 && server.requestsTo("activityTaskPoll").length > 0)
      assert.notProperty(server.requestsTo("register")[0]!.body as object, "capabilities")
      assert.strictEqual(server.requestsTo("queryTaskPoll").length, 0)
    }))

  it.scoped("the top-level app version is ignored; the protocol manifests decide", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ clusterInfo: (d) => ({ ...d, version: "0.0.1-ancient" }) })
      yield* startWorker(server, { steps: [greet] })
      yield* registered(server)
    }))

  it.scoped("a higher compatible minor (1.2) is accepted", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ protocolVersion: "1.2" })
      yield* startWorker(server, { steps: [greet] })
      yield* registered(server)
    }))

  it.scoped("a newer feature floor the server lacks (worker_sessions) does not block protocol 1.1", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ serverCapabilities: { worker_sessions: false, update_validation_tasks: false } })
      yield* startWorker(server, { steps: [greet] })
      yield* registered(server)
    }))

  const incompatible: ReadonlyArray<readonly [string, (d: Record<string, any>) => unknown, string]> = [
    ["missing control_plane manifest", (d) => ({ ...d, control_plane: undefined }), "Server compatibility error: missing control_plane manifest"],
    ["unsupported control_plane.version", (d) => ({ ...d, control_plane: { ...d.control_plane, version: "3" } }), "Server compatibility error: unsupported control_plane.version"],
    ["missing request contract", (d) => ({ ...d, control_plane: { ...d.control_plane, request_contract: undefined } }), "Server compatibility error: missing control_plane.request_contract"],
    ["missing worker_protocol manifest", (d) => ({ ...d, worker_protocol: undefined }), "Server compatibility error: missing worker_protocol manifest"],
    ["major mismatch 2.0", (d) => ({ ...d, worker_protocol: { ...d.worker_protocol, version: "2.0" } }), "Server compatibility error: incompatible worker_protocol.version '2.0'"],
    ["below the payload-codec floor 1.0", (d) => ({ ...d, worker_protocol: { ...d.worker_protocol, version: "1.0" } }), "minor>='1.1'"],
    ["missing auth composition contract", (d) => ({ ...d, auth_composition_contract: undefined }), "Server compatibility error: missing auth_composition_contract manifest"],
    ["unsupported auth composition contract", (d) => ({ ...d, auth_composition_contract: { ...d.auth_composition_contract, version: 2 } }), "Server compatibility error: unsupported auth_composition_contract"]
  ]
  for (const [label, edit, message] of incompatible) {
    it.scoped(`refuses an incompatible server (${label}) before registering, and never deregisters`, () =>
      Effect.gen(function*() {
        const { server } = yield* setup({ clusterInfo: edit })
        const error = yield* failedRun(server)
        assert.include(error.message, message)
        assert.isTrue(error.message.startsWith("Server compatibility error: "))
      }))
  }

  it.scoped("fails closed when /api/cluster/info cannot be read", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      server.failNext("clusterInfo", 401)
      const error = yield* failedRun(server)
      assert.match(error.message, /^Server compatibility error: unable to read \/api\/cluster\/info: /)
    }))

  it.live("a register request the server does not answer ends at requestTimeout, and is sent again", () =>
    Effect.scoped(Effect.gen(function*() {
      const { server } = yield* setup()
      // the server answers the first register request 5 s after it took it
      server.injectFault("register", { delayMs: 5_000 })
      const registering = yield* Effect.fork(Effect.gen(function*() {
        const transport = yield* Transport
        return yield* transport.register(describedWorker("w-timeout", servingSteps([greet.name])))
      }).pipe(Effect.provide(transportLayer(server, { requestTimeout: "200 millis" }))))
      // the transport retry's next send, while the one before is still unanswered at the server
      yield* until(server, () => server.requestsTo("register").length === 2)
      assert.strictEqual(server.requestsTo("register")[0]!.status, undefined, "sent again at its timeout, not once answered")
      assert.isTrue(Exit.isSuccess(yield* Fiber.await(registering)))
    })))

  it.scoped("a failed registration: run fails with it and a later stop sends no DELETE", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      server.failNext("register", 403)
      const { worker, running } = yield* startWorker(server, { steps: [greet] })
      const exit = yield* Fiber.await(running)
      assert.isTrue(Exit.isFailure(exit))
      const error = Cause.squash((exit as Exit.Failure<void, unknown>).cause) as RegistrationError
      assert.instanceOf(error, RegistrationError)
      assert.include(error.message, "403")
      yield* worker.stop
      assert.strictEqual(server.requestsTo("deregisterRegistration").length, 0)
    }))

  it.scoped("discovery with a worker token uses worker headers; with only a control token, control headers", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      yield* startWorker(server, { steps: [greet] }, { token: undefined, workerToken: server.tokens.worker! })
      yield* registered(server)
      const discovery = server.requestsTo("clusterInfo")[0]!.headers
      assert.strictEqual(discovery["authorization"], `Bearer ${server.tokens.worker}`)
      assert.strictEqual(discovery["x-durable-workflow-protocol-version"], "1.1")
      assert.isUndefined(discovery["x-durable-workflow-control-plane-version"])
      server.clearRequests()
      const w2 = yield* Effect.orDie(Worker.make({ steps: [greet] }))
      const exit = yield* Effect.exit(
        Effect.provide(w2.run, DW.layer({ baseUrl: server.url, controlToken: server.tokens.operator!, taskQueue: QUEUE }))
      )
      const control = server.requestsTo("clusterInfo")[0]!.headers
      assert.strictEqual(control["authorization"], `Bearer ${server.tokens.operator}`)
      assert.strictEqual(control["x-durable-workflow-control-plane-version"], "2")
      assert.isUndefined(control["x-durable-workflow-protocol-version"])
      // the worker plane refuses a control-only token before any I/O
      assert.isTrue(Exit.isFailure(exit))
      assert.include((Cause.squash((exit as Exit.Failure<void, unknown>).cause) as Error).message, "controlToken cannot authorize worker operations")
      assert.strictEqual(server.requestsTo("register").length, 0)
    }))
})

describe("Durable Workflow registration lost by the server", () => {
  const workerIdOf = (server: DurableWorkflowServer) => String((server.requestsTo("register")[0]!.body as Record<string, unknown>)["worker_id"])

  it.scopedLive("polls answered worker_not_registered send the registration again, once for all the pollers, and the worker resumes", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ maxPollHoldMs: 200 })
      yield* startWorker(server, { steps: [greet], durableWorkflows: [hello] })
      yield* registered(server)
      const first = server.requestsTo("register")[0]!.body as Record<string, unknown>
      // pruned as stale, or the server lost its state
      server.removeRegistration(workerIdOf(server))
      yield* until(server, () => server.requestsTo("register").length === 2 && server.registration(workerIdOf(server)) !== undefined)
      const again = server.requestsTo("register")[1]!.body as Record<string, unknown>
      assert.strictEqual(again["worker_id"], first["worker_id"])
      assert.deepStrictEqual(again["supported_activity_types"], first["supported_activity_types"])
      assert.deepStrictEqual(again["workflow_definition_fingerprints"], first["workflow_definition_fingerprints"])
      server.enqueueActivityTask({ activityType: "greeting.compose", taskQueue: QUEUE, input: ["Ada"] })
      yield* until(server, () => server.completedActivityTasks.length === 1)
      // every poller (workflow, activity, query) saw the loss: one registration for all of them
      assert.isAbove(server.requests.filter((r) => r.status === 412).length, 1)
      assert.strictEqual(server.requestsTo("register").length, 2)
    }))

  it.scopedLive("a re-registration the server refuses ends the run with a message saying so", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ maxPollHoldMs: 200 })
      const { running } = yield* startWorker(server, { steps: [greet] })
      yield* registered(server)
      server.failNext("register", 409, { reason: "task_queue_mismatch", message: "Worker registered on another queue." })
      server.removeRegistration(workerIdOf(server))
      const exit = yield* Fiber.await(running).pipe(Effect.timeout("5 seconds"))
      assert.isTrue(Exit.isFailure(exit))
      const error = Cause.squash((exit as Exit.Failure<void, unknown>).cause) as Error
      assert.include(error.message, "no longer has worker")
      assert.include(error.message, "refused to register it again: HTTP 409 task_queue_mismatch")
      assert.strictEqual(server.requestsTo("register").length, 2)
    }))

  it.scopedLive("a server that forgets the registration again at once ends the run instead of registering in a loop", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ maxPollHoldMs: 200 })
      const { running } = yield* startWorker(server, { steps: [greet] })
      yield* registered(server)
      const workerId = workerIdOf(server)
      // from now on every registration is forgotten as soon as it is made
      server.onEvent((event) => {
        if (event._tag === "WorkerRegistered") server.removeRegistration(workerId)
      })
      server.removeRegistration(workerId)
      const exit = yield* Fiber.await(running).pipe(Effect.timeout("5 seconds"))
      assert.isTrue(Exit.isFailure(exit))
      const error = Cause.squash((exit as Exit.Failure<void, unknown>).cause) as Error
      assert.include(error.message, `lost the registration of worker ${workerId} again right after it was registered again`)
      assert.strictEqual(server.requestsTo("register").length, 2)
    }))

  it.scoped("a heartbeat answered worker_not_registered (404) sends the registration again", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ maxPollHoldMs: 60_000 })
      yield* startWorker(server, { steps: [greet], heartbeatInterval: "1 second" })
      yield* registered(server)
      // the pollers all wait in held polls: only the heartbeat can find the loss
      yield* until(server, () => (["workflowTaskPoll", "activityTaskPoll", "queryTaskPoll"] as const).every((route) => server.heldPolls(route) === 1))
      server.removeRegistration(workerIdOf(server))
      yield* TestClock.adjust("1 second")
      yield* until(server, () => server.requestsTo("register").length === 2)
      assert.deepStrictEqual(server.requestsTo("heartbeat").map((r) => r.status), [404])
      assert.isDefined(server.registration(workerIdOf(server)))
    }))
})
