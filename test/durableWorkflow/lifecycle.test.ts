import { assert, describe, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as TestClock from "effect/TestClock"
import { DeregistrationError } from "../../src/seam/Transport.js"
import { WorkerLoopError } from "../../src/runtime/WorkerError.js"
import { DurableWorkflow, DW, failureOf, greet, QUEUE, setup, startWorker, until } from "./support.js"


/** An activity that waits for `gate` and records how it ended. */
const gated = (gate: Deferred.Deferred<void>, ended: Array<string>, started?: Deferred.Deferred<void>) =>
  DurableWorkflow.activity("gated.job", (id: string) =>
    (started === undefined ? Effect.void : Deferred.succeed(started, undefined)).pipe(
      Effect.zipRight(Deferred.await(gate)),
      Effect.zipRight(Effect.sync(() => ended.push(`done ${id}`))),
      Effect.onInterrupt(() => Effect.sync(() => ended.push(`interrupted ${id}`))),
      Effect.as(id)
    ))

describe("Durable Workflow shutdown and deregistration", () => {
  it.scoped("stop on an idle worker interrupts the long polls at once and deregisters once", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ maxPollHoldMs: 60_000 })
      const { worker, running } = yield* startWorker(server, { steps: [greet] })
      yield* until(server, () => server.heldPolls("workflowTaskPoll") === 1 && server.heldPolls("activityTaskPoll") === 1)
      yield* worker.stop
      yield* Fiber.join(running)
      yield* until(server, () => server.heldPolls("workflowTaskPoll") === 0 && server.heldPolls("activityTaskPoll") === 0, 2_000)
      assert.strictEqual(server.requestsTo("deregisterRegistration").length, 1)
      const del = server.requestsTo("deregisterRegistration")[0]!
      assert.strictEqual(del.method, "DELETE")
      assert.strictEqual(del.path, `/api/worker/registrations/${worker.id}`)
      const slots = (yield* worker.status).slots!
      assert.strictEqual(slots.workflow.inUse, 0, "the stopped poll released its reservation")
      assert.strictEqual(slots.step.inUse, 0)
    }))

  it.scoped("stop drains an in-flight activity: it completes before the DELETE", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const gate = yield* Deferred.make<void>()
      const ended: Array<string> = []
      const started = yield* Deferred.make<void>()
      const { worker, running } = yield* startWorker(server, { steps: [gated(gate, ended, started)] })
      server.enqueueActivityTask({ activityType: "gated.job", taskQueue: QUEUE, input: ["a"] })
      yield* Deferred.await(started)
      const stopping = yield* Effect.fork(worker.stop)
      yield* Effect.yieldNow()
      assert.strictEqual(server.requestsTo("deregisterRegistration").length, 0, "no DELETE while work runs")
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(stopping)
      yield* Fiber.join(running)
      assert.deepStrictEqual(ended, ["done a"])
      const complete = server.requestsTo("activityTaskComplete")[0]!
      const del = server.requestsTo("deregisterRegistration")[0]!
      assert.isBelow(complete.seq, del.seq)
      assert.strictEqual(server.requestsTo("deregisterRegistration").length, 1)
    }))

  it.scoped("the shutdown deadline interrupts running work (no fail report), then deregisters", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const gate = yield* Deferred.make<void>()
      const ended: Array<string> = []
      const started = yield* Deferred.make<void>()
      const { worker, running } = yield* startWorker(server, { steps: [gated(gate, ended, started)], shutdownTimeout: "10 millis" })
      server.enqueueActivityTask({ activityType: "gated.job", taskQueue: QUEUE, input: ["a"] })
      yield* Deferred.await(started)
      const stopping = yield* Effect.fork(worker.stop)
      yield* TestClock.adjust("10 millis")
      yield* Fiber.join(stopping)
      yield* Fiber.join(running)
      assert.deepStrictEqual(ended, ["interrupted a"])
      assert.strictEqual(server.failedActivityTasks.length, 0)
      assert.strictEqual(server.completedActivityTasks.length, 0)
      assert.strictEqual(server.requestsTo("deregisterRegistration").length, 1)
    }))

  it.scoped("an async activity that ignores its signal (aborted at the deadline) fails the stop by name, with no DELETE", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const started = yield* Deferred.make<void>()
      const reasons: Array<unknown> = []
      const deaf = DurableWorkflow.activityFromPromise("deaf.job", () =>
        new Promise(() => {
          const signal = DurableWorkflow.activityContext().signal
          Deferred.unsafeDone(started, Exit.void)
          signal.addEventListener("abort", () => void reasons.push(signal.reason))
        }))
      const { worker, running } = yield* startWorker(server, {
        steps: [deaf],
        shutdownTimeout: "10 millis",
        interruptTimeout: "1 second"
      })
      server.enqueueActivityTask({ activityType: "deaf.job", taskQueue: QUEUE, input: [] })
      yield* Deferred.await(started)
      const stopping = yield* Effect.fork(worker.stop)
      yield* TestClock.adjust("10 millis")
      yield* Effect.yieldNow()
      assert.lengthOf(reasons, 1, "the deadline aborts the activity's signal")
      assert.strictEqual((reasons[0] as { why?: unknown }).why, "shutdown")
      yield* TestClock.adjust("1 second")
      const error = yield* Effect.flip(Fiber.join(stopping))
      assert.strictEqual(error._tag, "ShutdownTimeoutError")
      assert.strictEqual(server.requestsTo("deregisterRegistration").length, 0, "the registration is left in place")
      yield* Fiber.interrupt(running)
    }))

  it.scoped("concurrent and repeated stops share one DELETE", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const { worker, running } = yield* startWorker(server, { steps: [greet] })
      yield* until(server, () => server.requestsTo("activityTaskPoll").length > 0)
      yield* Effect.all([worker.stop, worker.stop, worker.stop], { concurrency: "unbounded" })
      yield* worker.stop
      yield* Fiber.join(running)
      assert.strictEqual(server.requestsTo("deregisterRegistration").length, 1)
    }))

  it.scoped("a 403 from the DELETE surfaces from every stop() and from run(), and is not retried", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const { worker, running } = yield* startWorker(server, { steps: [greet] })
      yield* until(server, () => server.requestsTo("activityTaskPoll").length > 0)
      server.failNext("deregisterRegistration", 403, { reason: "worker_registration_forbidden", message: "not yours" })
      const first = yield* Effect.exit(worker.stop)
      const second = yield* Effect.exit(worker.stop)
      const ran = yield* Fiber.await(running)
      for (const exit of [first, second, ran]) {
        const error = failureOf(exit)
        assert.instanceOf(error, DeregistrationError)
        const cause = (error as DeregistrationError).cause as DW.DurableWorkflowServerError
        assert.strictEqual(cause._tag, "DurableWorkflowServerError")
        assert.strictEqual(cause.status, 403)
        assert.strictEqual(cause.reason, "worker_registration_forbidden")
      }
      assert.strictEqual(failureOf(first), failureOf(second))
      assert.strictEqual(server.requestsTo("deregisterRegistration").length, 1)
    }))

  for (const [status, refusal, tag] of [
    [401, "refused the credentials (authentication failed: HTTP 401", "AuthenticationError"],
    [403, "refused the operation (permission denied: HTTP 403", "PermissionError"]
  ] as const) {
    it.scopedLive(`a token refused mid-run (${status} on the polls) ends the run within a few seconds, naming the refusal`, () =>
      Effect.gen(function*() {
        const { server } = yield* setup({ maxPollHoldMs: 500 })
        const { running } = yield* startWorker(server, { steps: [greet] })
        yield* until(server, () => server.requestsTo("activityTaskPoll").length > 0)
        // the token is revoked: every worker-plane call and the probe are refused from now on
        for (const route of ["activityTaskPoll", "workflowTaskPoll", "queryTaskPoll", "clusterInfo", "heartbeat"] as const) {
          server.failNext(route, status, undefined, 10_000)
        }
        const exit = yield* Fiber.await(running).pipe(Effect.timeout("5 seconds"))
        const error = failureOf(exit) as WorkerLoopError
        assert.instanceOf(error, WorkerLoopError)
        assert.include(error.message, `the Durable Workflow server at ${server.url} ${refusal}`)
        assert.include(error.message, status === 401 ? "check DURABLE_WORKFLOW_AUTH_TOKEN" : "the worker plane")
        const reason = error.reason as { readonly fatal: boolean; readonly cause: { readonly _tag: string } }
        assert.isTrue(reason.fatal)
        assert.strictEqual(reason.cause._tag, tag)
        // refused polls were not retried for ever: a handful at most
        assert.isBelow(server.requests.filter((r) => r.status === status).length, 10)
      }))
  }

  it.scoped("a 401 from the DELETE surfaces as Unauthorized from stop() and run()", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const { worker, running } = yield* startWorker(server, { steps: [greet] })
      yield* until(server, () => server.requestsTo("activityTaskPoll").length > 0)
      server.failNext("deregisterRegistration", 401)
      const stopped = yield* Effect.exit(worker.stop)
      const ran = yield* Fiber.await(running)
      for (const exit of [stopped, ran]) {
        const error = failureOf(exit) as DeregistrationError
        assert.instanceOf(error, DeregistrationError)
        assert.strictEqual((error.cause as DW.DurableWorkflowUnauthorized)._tag, "DurableWorkflowUnauthorized")
      }
    }))

  it.scoped("an absent registration (404 worker_not_found) counts as already deregistered", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const { worker, running } = yield* startWorker(server, { steps: [greet] })
      yield* until(server, () => server.requestsTo("activityTaskPoll").length > 0)
      server.failNext("deregisterRegistration", 404, { reason: "worker_not_found", message: "gone" })
      yield* worker.stop
      yield* Fiber.join(running)
    }))

  it.scoped("the DELETE path percent-encodes the worker id and uses worker-plane headers only", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const { worker, running } = yield* startWorker(server, { steps: [greet], workerId: "worker / one" })
      yield* until(server, () => server.requestsTo("activityTaskPoll").length > 0)
      yield* worker.stop
      yield* Fiber.join(running)
      const del = server.requestsTo("deregisterRegistration")[0]!
      assert.strictEqual(del.path, "/api/worker/registrations/worker%20%2F%20one")
      assert.strictEqual(del.headers["authorization"], `Bearer ${server.tokens.worker}`)
      assert.strictEqual(del.headers["x-namespace"], "default")
      assert.strictEqual(del.headers["x-durable-workflow-protocol-version"], "1.1")
      assert.isUndefined(del.headers["x-durable-workflow-control-plane-version"])
      assert.strictEqual(server.deregistrations[0]!.workerId, "worker / one")
    }))

  it.scoped("a worker loop error stays primary; the failed DELETE is its cause", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const { running } = yield* startWorker(server, { steps: [greet] })
      yield* until(server, () => server.requestsTo("workflowTaskPoll").length > 0)
      server.failNext("deregisterRegistration", 403)
      server.enqueueWorkflowTask({ workflowType: "x", taskQueue: QUEUE, extra: { task_kind: "bogus" } })
      const error = failureOf(yield* Fiber.await(running)) as WorkerLoopError
      assert.instanceOf(error, WorkerLoopError)
      assert.include(error.message, "task.task_kind discriminator")
      assert.instanceOf(error.cause, DeregistrationError)
    }))

  it.scoped("L9: the worker-plane DELETE is separate from the control-plane deregisterWorker", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const { worker, running } = yield* startWorker(server, { steps: [greet] })
      yield* until(server, () => server.requestsTo("activityTaskPoll").length > 0)
      yield* worker.stop
      yield* Fiber.join(running)
      assert.strictEqual(server.requestsTo("controlDeregisterWorker").length, 0, "shutdown never retires the worker")
      server.putRegistration({ workerId: "old-worker", taskQueue: QUEUE })
      const retired = yield* DW.deregisterWorker("old-worker").pipe(
        Effect.provide(DW.layer({ baseUrl: server.url, controlToken: server.tokens.admin!, taskQueue: QUEUE }))
      )
      assert.deepStrictEqual(retired["outcome"], "deregistered")
      const call = server.requestsTo("controlDeregisterWorker")[0]!
      assert.strictEqual(call.method, "DELETE")
      assert.strictEqual(call.path, "/api/workers/old-worker")
      assert.strictEqual(call.headers["x-durable-workflow-control-plane-version"], "2")
      assert.isUndefined(call.headers["x-durable-workflow-protocol-version"])
      assert.strictEqual(server.requestsTo("deregisterRegistration").length, 1)
      const missing = yield* Effect.flip(DW.deregisterWorker("nobody").pipe(
        Effect.provide(DW.layer({ baseUrl: server.url, controlToken: server.tokens.admin!, taskQueue: QUEUE }))
      ))
      assert.strictEqual(missing._tag, "DurableWorkflowServerError")
    }))

  it.scoped("a worker-token-only worker runs the whole lifecycle on the worker plane", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const { worker, running } = yield* startWorker(server, { steps: [greet], workerId: "worker-only" }, { token: undefined, workerToken: server.tokens.worker! })
      yield* until(server, () => server.requestsTo("activityTaskPoll").length > 0 && server.requestsTo("workflowTaskPoll").length > 0)
      yield* TestClock.adjust("60 seconds")
      yield* until(server, () => server.requestsTo("heartbeat").length === 1)
      yield* worker.stop
      yield* Fiber.join(running)
      const routes = new Set(server.requests.map((r) => r.route))
      for (const route of ["clusterInfo", "register", "workflowTaskPoll", "activityTaskPoll", "heartbeat", "deregisterRegistration"]) {
        assert.isTrue(routes.has(route as any), route)
      }
      for (const request of server.requests) {
        assert.strictEqual(request.headers["authorization"], `Bearer ${server.tokens.worker}`, request.path)
        assert.isUndefined(request.headers["x-durable-workflow-control-plane-version"], request.path)
      }
      assert.strictEqual(server.requestsTo("deregisterRegistration")[0]!.path, "/api/worker/registrations/worker-only")
    }))
})

describe("Durable Workflow heartbeats and capacity", () => {
  it.scoped("heartbeats every interval (first one interval in) with slot state and process metrics", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ maxPollHoldMs: 60_000 })
      const gate = yield* Deferred.make<void>()
      const { worker } = yield* startWorker(server, { steps: [gated(gate, [])], concurrency: 2, workflowConcurrency: 4 })
      server.enqueueActivityTask({ activityType: "gated.job", taskQueue: QUEUE, input: ["a"] })
      yield* until(server, () => server.requestsTo("activityTaskPoll").some((r) => (r.responseBody as any)?.task))
      yield* until(server, () => server.heldPolls("workflowTaskPoll") === 1)
      yield* TestClock.adjust("59 seconds")
      assert.strictEqual(server.requestsTo("heartbeat").length, 0)
      yield* TestClock.adjust("1 second")
      yield* until(server, () => server.requestsTo("heartbeat").length === 1)
      const body = server.requestsTo("heartbeat")[0]!.body as any
      assert.strictEqual(body["worker_id"], worker.id)
      assert.strictEqual(body["task_slots"]["activity_available"], 1)
      // the outstanding workflow poll holds one reservation
      assert.strictEqual(body["task_slots"]["workflow_available"], 3)
      assert.strictEqual(body["process_metrics"]["process_id"], process.pid)
      assert.isAbove(body["process_metrics"]["memory_bytes"], 0)
      assert.isAtLeast(body["process_metrics"]["cpu_percent"], 0)
      assert.isAtMost(body["process_metrics"]["cpu_percent"], 100)
      yield* TestClock.adjust("60 seconds")
      yield* until(server, () => server.requestsTo("heartbeat").length === 2)
      yield* Deferred.succeed(gate, undefined)
    }))

  it.scoped("adopts the server-advertised heartbeat cadence", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ heartbeatIntervalSeconds: 7 })
      yield* startWorker(server, { steps: [greet] })
      yield* until(server, () => server.requestsTo("activityTaskPoll").length > 0)
      yield* TestClock.adjust("6 seconds")
      assert.strictEqual(server.requestsTo("heartbeat").length, 0)
      yield* TestClock.adjust("1 second")
      yield* until(server, () => server.requestsTo("heartbeat").length === 1)
    }))

  it.scoped("a failed heartbeat does not stop later heartbeats", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      yield* startWorker(server, { steps: [greet] })
      yield* until(server, () => server.requestsTo("activityTaskPoll").length > 0)
      server.failNext("heartbeat", 404, { reason: "worker_not_registered", error: "gone" })
      yield* TestClock.adjust("60 seconds")
      yield* until(server, () => server.requestsTo("heartbeat").length === 1)
      // the failed beat registers the worker again over real time, and the loop's next wait starts only
      // once that is answered: the clock moves on an interval at a time until a later beat got through
      const beatWorked = () => server.requestsTo("heartbeat").some((r) => r.status === 200)
      for (let interval = 0; interval < 5 && !beatWorked(); interval++) {
        yield* TestClock.adjust("60 seconds")
        yield* Effect.promise(() => server.waitUntil(beatWorked, 1_000).catch(() => undefined))
      }
      assert.isTrue(beatWorked(), "no heartbeat went through after the failed one")
      assert.strictEqual(server.requestsTo("heartbeat")[0]!.status, 404)
    }))

  it.scoped("activities run concurrently up to the activity limit; the next waits for a free slot", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const gate = yield* Deferred.make<void>()
      const ended: Array<string> = []
      yield* startWorker(server, { steps: [gated(gate, ended)], concurrency: 2 })
      for (const id of ["a", "b", "c"]) server.enqueueActivityTask({ activityType: "gated.job", taskQueue: QUEUE, input: [id] })
      yield* until(server, () => server.requestsTo("activityTaskPoll").filter((r) => (r.responseBody as any)?.task).length === 2)
      // two running, no slot free: the third task stays with the server, no poll is outstanding
      assert.strictEqual(server.heldPolls("activityTaskPoll"), 0)
      assert.strictEqual(server.workflowTasks.length, 0)
      yield* Deferred.succeed(gate, undefined)
      yield* until(server, () => server.completedActivityTasks.length === 3)
      assert.sameMembers(ended, ["done a", "done b", "done c"])
    }))
})

describe("Durable Workflow workflow capacity", () => {
  /** An interceptor that holds every workflow task until `gate` opens. */
  const holding = (gate: Deferred.Deferred<void>, started: Deferred.Deferred<void>): DW.WorkerInterceptor => ({
    executeWorkflowTask: (_ctx, next) => Effect.zipRight(Effect.zipRight(Deferred.succeed(started, undefined), Deferred.await(gate)), next)
  })
  const wf = DurableWorkflow.make("orders.wf", (ctx) => ctx.activity("a"))

  it.scoped("a workflow completion in progress finishes before the DELETE", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const gate = yield* Deferred.make<void>()
      const started = yield* Deferred.make<void>()
      const { worker, running } = yield* startWorker(server, { durableWorkflows: [wf] }, { interceptors: [holding(gate, started)] })
      server.enqueueWorkflowTask({ workflowType: "orders.wf", taskQueue: QUEUE, input: [] })
      yield* Deferred.await(started)
      const stopping = yield* Effect.fork(worker.stop)
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(stopping)
      yield* Fiber.join(running)
      const complete = server.requestsTo("workflowTaskComplete")[0]!
      const del = server.requestsTo("deregisterRegistration")[0]!
      assert.strictEqual(complete.status, 200)
      assert.isBelow(complete.seq, del.seq)
    }))

  it.scoped("a full workflow pool reports 0 free workflow slots and takes no more tasks; capacity returns after", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ retryFailedWorkflowTasks: false })
      const gate = yield* Deferred.make<void>()
      const started = yield* Deferred.make<void>()
      const { worker } = yield* startWorker(server, { durableWorkflows: [wf], workflowConcurrency: 1 }, { interceptors: [holding(gate, started)] })
      server.enqueueWorkflowTask({ workflowType: "orders.wf", taskQueue: QUEUE, input: [] })
      server.enqueueWorkflowTask({ workflowType: "orders.wf", taskQueue: QUEUE, input: [] })
      yield* Deferred.await(started)
      yield* TestClock.adjust("60 seconds")
      yield* until(server, () => server.requestsTo("heartbeat").length === 1)
      assert.strictEqual((server.requestsTo("heartbeat")[0]!.body as any)["task_slots"]["workflow_available"], 0)
      assert.strictEqual(server.requestsTo("workflowTaskPoll").length, 1, "no poll without a free workflow slot")
      yield* Deferred.succeed(gate, undefined)
      yield* until(server, () => server.completedWorkflowTasks.length === 2)
      server.failNext("workflowTaskComplete", 422, { reason: "validation_failed", message: "no" })
      server.enqueueWorkflowTask({ workflowType: "orders.wf", taskQueue: QUEUE, input: [] })
      yield* until(server, () => server.failedWorkflowTasks.length === 1)
      yield* until(server, () => server.heldPolls("workflowTaskPoll") === 1)
      const slots = (yield* worker.status).slots!
      assert.strictEqual(slots.workflow.running, 0, "completed and failed tasks released their slots")
    }))
})

describe("Durable Workflow: what cannot be stopped, and configuration from the environment", () => {
  it.scoped("a query task that ignores interruption fails stop() by name and leaves the registration (no DELETE)", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const counter = DurableWorkflow.make("orders.q", (ctx) => {
        ctx.onQuery("n", () => 1)
        return ctx.waitCondition(() => false)
      })
      const started = yield* Deferred.make<void>()
      const stuck: DW.WorkerInterceptor = {
        executeQueryTask: () => Effect.zipRight(Deferred.succeed(started, undefined), Effect.uninterruptible(Effect.never))
      }
      const { worker } = yield* startWorker(server, { durableWorkflows: [counter], shutdownTimeout: 0, interruptTimeout: "100 millis" }, { interceptors: [stuck] })
      server.enqueueQueryTask({ workflowType: "orders.q", queryName: "n", taskQueue: QUEUE })
      yield* Deferred.await(started)
      const stopping = yield* Effect.fork(worker.stop)
      yield* TestClock.adjust("100 millis")
      const exit = yield* Fiber.await(stopping)
      const error = failureOf(exit) as Error
      assert.include(error.message, "query task")
      assert.include(error.message, "the worker registration remains active")
      assert.strictEqual(server.requestsTo("deregisterRegistration").length, 0)
    }))

  it.scoped("layerConfig reads DURABLE_WORKFLOW_SERVER_URL, _NAMESPACE and _AUTH_TOKEN", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ namespaces: ["billing"] })
      const { ConfigProvider } = yield* Effect.promise(() => import("effect"))
      const { Worker } = yield* Effect.promise(() => import("./support.js"))
      const worker = yield* Effect.orDie(Worker.make({ steps: [greet] }))
      const fiber = yield* Effect.forkDaemon(
        worker.run.pipe(
          Effect.provide(DW.layerConfig({ taskQueue: QUEUE })),
          Effect.withConfigProvider(ConfigProvider.fromMap(new Map([
            ["DURABLE_WORKFLOW_SERVER_URL", server.url],
            ["DURABLE_WORKFLOW_NAMESPACE", "billing"],
            ["DURABLE_WORKFLOW_AUTH_TOKEN", server.tokens.worker!]
          ])))
        )
      )
      yield* until(server, () => server.requestsTo("register").some((r) => r.status === 201))
      assert.strictEqual(server.requestsTo("register")[0]!.headers["x-namespace"], "billing")
      yield* worker.stop
      yield* Fiber.join(fiber)
    }))
})

describe("Durable Workflow: nothing is taken after stop", () => {
  it.scoped("a query arriving while the worker stops is not dispatched; the held query poll is abandoned before the DELETE", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ maxPollHoldMs: 60_000 })
      const counter = DurableWorkflow.make("orders.q", (ctx) => {
        ctx.onQuery("n", () => 1)
        return ctx.waitCondition(() => false)
      })
      const { worker, running } = yield* startWorker(server, { durableWorkflows: [counter] })
      yield* until(server, () => server.heldPolls("queryTaskPoll") === 1)
      yield* worker.stop
      server.enqueueQueryTask({ workflowType: "orders.q", queryName: "n", taskQueue: QUEUE })
      yield* Fiber.join(running)
      const queryPoll = server.requestsTo("queryTaskPoll")[0]!
      const del = server.requestsTo("deregisterRegistration")[0]!
      assert.isTrue(queryPoll.aborted)
      assert.isBelow(queryPoll.seq, del.seq)
      assert.strictEqual(server.requestsTo("queryTaskPoll").length, 1)
      assert.strictEqual(server.completedQueryTasks.length + server.failedQueryTasks.length, 0)
    }))
})
