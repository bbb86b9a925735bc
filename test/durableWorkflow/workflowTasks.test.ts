import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as TestClock from "effect/TestClock"
import { isTransient } from "../../src/transport/durableWorkflow/internal/client.js"
import { blob, DurableWorkflow, DW, QUEUE, setup, startWorker, until, value } from "./support.js"


const greeting = DurableWorkflow.make("orders.greet", (ctx, name: string) =>
  Effect.map(ctx.activity<string>("greeting.compose", [name]), (greeting) => `${greeting}!`))

describe("Durable Workflow workflow tasks", () => {
  it.scoped("replays a task and completes it with its commands, fenced by lease owner and attempt", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const { worker } = yield* startWorker(server, { durableWorkflows: [greeting] })
      server.enqueueWorkflowTask({ workflowType: "orders.greet", taskQueue: QUEUE, input: ["Ada"] })
      yield* until(server, () => server.completedWorkflowTasks.length === 1)
      const first = server.completedWorkflowTasks[0]!
      assert.strictEqual(first.leaseOwner, worker.id)
      assert.strictEqual(first.body["workflow_task_attempt"], 1)
      assert.strictEqual(first.commands[0]!["type"], "schedule_activity")
      server.enqueueWorkflowTask({
        workflowType: "orders.greet",
        taskQueue: QUEUE,
        workflowId: "wf-2",
        input: ["Ada"],
        historyEvents: [
          { event_type: "ActivityScheduled", payload: { activity_type: "greeting.compose" } },
          { event_type: "ActivityCompleted", payload: { activity_type: "greeting.compose", result: blob("hello Ada") } }
        ]
      })
      yield* until(server, () => server.completedWorkflowTasks.length === 2)
      const done = server.completedWorkflowTasks[1]!.commands[0]!
      assert.strictEqual(done["type"], "complete_workflow")
      assert.deepStrictEqual(value(done["result"]), "hello Ada!")
    }))

  it.scoped("pages the rest of a long history before replaying", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ historyPageSize: 2 })
      const many = DurableWorkflow.fromGenerator("orders.many", function*(ctx) {
        const a: number = yield ctx.activity("a")
        const b: number = yield ctx.activity("b")
        const c: number = yield ctx.activity("c")
        return a + b + c
      })
      yield* startWorker(server, { durableWorkflows: [many] })
      server.enqueueWorkflowTask({
        workflowType: "orders.many",
        taskQueue: QUEUE,
        historyEvents: [
          { event_type: "WorkflowStarted", payload: {} },
          { event_type: "ActivityCompleted", payload: { result: blob(1) } },
          { event_type: "ActivityCompleted", payload: { result: blob(2) } },
          { event_type: "ActivityCompleted", payload: { result: blob(3) } }
        ]
      })
      yield* until(server, () => server.completedWorkflowTasks.length === 1)
      assert.strictEqual(server.requestsTo("workflowTaskHistory").length, 1)
      assert.deepStrictEqual(value(server.completedWorkflowTasks[0]!.commands[0]!["result"]), 6)
    }))

  const manyActivities = DurableWorkflow.fromGenerator("orders.many", function*(ctx) {
    const a: number = yield ctx.activity("a")
    const b: number = yield ctx.activity("b")
    const c: number = yield ctx.activity("c")
    return a + b + c
  })
  const threeDone = [
    { event_type: "WorkflowStarted", payload: {} },
    { event_type: "ActivityCompleted", payload: { result: blob(1) } },
    { event_type: "ActivityCompleted", payload: { result: blob(2) } },
    { event_type: "ActivityCompleted", payload: { result: blob(3) } }
  ]
  /** Moves the test clock on (the transport retry sleeps on it) until `check` holds. */
  const advanceUntil = (check: () => boolean) =>
    Effect.gen(function*() {
      for (let i = 0; i < 200 && !check(); i++) {
        yield* TestClock.adjust("100 millis")
        yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 5)))
      }
      assert.isTrue(check())
    })

  it.scoped("a history page that cannot be fetched fails the task (never a completion from part of the history); the retry replays it all", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ historyPageSize: 2 })
      yield* startWorker(server, { durableWorkflows: [manyActivities] })
      // more than the transport retry rides out
      server.failNext("workflowTaskHistory", 503, undefined, 3)
      const { taskId } = server.enqueueWorkflowTask({ workflowType: "orders.many", taskQueue: QUEUE, historyEvents: threeDone })
      yield* advanceUntil(() => server.failedWorkflowTasks.length === 1)
      const failed = server.failedWorkflowTasks[0]!
      assert.strictEqual(failed.taskId, taskId)
      assert.match(String(failed.failure["message"]), /^workflow task history incomplete: a history page could not be fetched: .*503/)
      assert.strictEqual(failed.failure["type"], "WorkflowTaskHistoryUnavailable")
      // the server hands the task out again: replayed on the whole history, it completes the workflow
      yield* advanceUntil(() => server.completedWorkflowTasks.length === 1)
      const commands = server.completedWorkflowTasks[0]!.commands
      assert.deepStrictEqual(commands.map((c) => c["type"]), ["complete_workflow"])
      assert.deepStrictEqual(value(commands[0]!["result"]), 6)
    }))

  it.scoped("a history page token that comes back a second time fails the task instead of paging for ever", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ historyPageSize: 2, retryFailedWorkflowTasks: false })
      yield* startWorker(server, { durableWorkflows: [manyActivities] })
      // a misbehaving server: every page points at the same next page
      server.injectFault("workflowTaskHistory", {
        status: 200,
        body: { history_events: [], next_history_page_token: "c2FtZQ==" },
        times: 50
      })
      server.enqueueWorkflowTask({ workflowType: "orders.many", taskQueue: QUEUE, historyEvents: threeDone })
      yield* until(server, () => server.failedWorkflowTasks.length === 1)
      assert.match(String(server.failedWorkflowTasks[0]!.failure["message"]), /the same history page token twice/)
      assert.strictEqual(server.requestsTo("workflowTaskHistory").length, 2)
      assert.strictEqual(server.completedWorkflowTasks.length, 0)
    }))

  it.scoped("history pages with more events than total_history_events fail the task", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ historyPageSize: 2, retryFailedWorkflowTasks: false })
      yield* startWorker(server, { durableWorkflows: [manyActivities] })
      server.injectFault("workflowTaskHistory", {
        status: 200,
        body: {
          history_events: [
            { event_type: "ActivityCompleted", payload: { result: blob(2) } },
            { event_type: "ActivityCompleted", payload: { result: blob(3) } },
            { event_type: "ActivityCompleted", payload: { result: blob(4) } }
          ],
          total_history_events: 4,
          next_history_page_token: null
        },
        times: 1
      })
      server.enqueueWorkflowTask({ workflowType: "orders.many", taskQueue: QUEUE, historyEvents: threeDone })
      yield* until(server, () => server.failedWorkflowTasks.length === 1)
      assert.match(String(server.failedWorkflowTasks[0]!.failure["message"]), /more events \(5\) than the server's total_history_events \(4\)/)
      assert.strictEqual(server.completedWorkflowTasks.length, 0)
    }))

  it.scoped("task failures: unsupported codec, unknown type, replay failure — with the nested failure object", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ retryFailedWorkflowTasks: false })
      yield* startWorker(server, { durableWorkflows: [greeting] })
      server.enqueueWorkflowTask({ workflowType: "orders.greet", taskQueue: QUEUE, payloadCodec: null, input: ["x"] })
      yield* until(server, () => server.failedWorkflowTasks.length === 1)
      const codec = server.failedWorkflowTasks[0]!.failure
      assert.match(String(codec["message"]), /^cannot decode workflow start input with codec null: unsupported_payload_codec/)
      assert.strictEqual(codec["type"], "PayloadDecodeError")
      server.enqueueWorkflowTask({ workflowType: "orders.greet", taskQueue: QUEUE, input: ["x"], historyEvents: [{ event_type: "TimerFired", payload: {} }] })
      yield* until(server, () => server.failedWorkflowTasks.length === 2)
      const replay = server.failedWorkflowTasks[1]!.failure
      assert.match(String(replay["message"]), /^replay failed: non-deterministic replay at workflow sequence 1/)
      assert.strictEqual(replay["type"], "NonDeterministicReplayError")
      assert.isString(replay["stack_trace"])
      assert.deepStrictEqual(Object.keys(server.requestsTo("workflowTaskFail")[0]!.body as object).sort(), ["failure", "lease_owner", "workflow_task_attempt"])
    }))

  it.scoped("an unknown workflow type fails the task naming the type", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ retryFailedWorkflowTasks: false })
      // registered with no workflow types: every type is routed here
      yield* startWorker<never>(server, {})
      server.enqueueWorkflowTask({ workflowType: "nobody.knows", taskQueue: QUEUE, input: [] })
      yield* until(server, () => server.failedWorkflowTasks.length === 1)
      assert.deepStrictEqual(server.failedWorkflowTasks[0]!.failure, { message: "no workflow registered for type 'nobody.knows'" })
    }))

  it.scoped("a transient completion error (500) is retried after the backoff (0.2 s, ±25 %) with the same commands", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      yield* startWorker(server, { durableWorkflows: [greeting] })
      server.failNext("workflowTaskComplete", 500)
      server.enqueueWorkflowTask({ workflowType: "orders.greet", taskQueue: QUEUE, input: ["Ada"] })
      yield* until(server, () => server.requestsTo("workflowTaskComplete").length === 1 && server.requestsTo("workflowTaskComplete")[0]!.status === 500)
      yield* TestClock.adjust("149 millis")
      yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 50)))
      assert.strictEqual(server.requestsTo("workflowTaskComplete").length, 1)
      yield* TestClock.adjust("101 millis")
      yield* until(server, () => server.completedWorkflowTasks.length === 1)
      const [a, b] = server.requestsTo("workflowTaskComplete")
      assert.deepStrictEqual(a!.body, b!.body)
      assert.strictEqual(server.failedWorkflowTasks.length, 0)
    }))

  it.scoped("a completion the server cannot take for a moment (503 x3) is retried until it is recorded", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      yield* startWorker(server, { durableWorkflows: [greeting] })
      server.failNext("workflowTaskComplete", 503, undefined, 3)
      server.enqueueWorkflowTask({ workflowType: "orders.greet", taskQueue: QUEUE, input: ["Ada"] })
      yield* advanceUntil(() => server.completedWorkflowTasks.length === 1)
      assert.deepStrictEqual(server.requestsTo("workflowTaskComplete").map((r) => r.status), [503, 503, 503, 200])
      assert.strictEqual(server.requestsTo("workflowTaskFail").length, 0)
    }))

  it.scoped("a completion still unavailable when the report retry is spent (30 s) is logged only: no failure report", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      yield* startWorker(server, { durableWorkflows: [greeting] })
      server.failNext("workflowTaskComplete", 503, undefined, 1_000)
      server.enqueueWorkflowTask({ workflowType: "orders.greet", taskQueue: QUEUE, input: ["Ada"] })
      yield* until(server, () => server.requestsTo("workflowTaskComplete").length === 1)
      for (let i = 0; i < 32; i++) {
        yield* TestClock.adjust("1 second")
        yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 10)))
      }
      const sent = server.requestsTo("workflowTaskComplete").length
      assert.isAbove(sent, 6)
      yield* TestClock.adjust("1 minute")
      yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 50)))
      assert.strictEqual(server.requestsTo("workflowTaskComplete").length, sent)
      assert.strictEqual(server.requestsTo("workflowTaskFail").length, 0)
    }))

  for (const [label, status, body] of [
    ["a 422 validation failure", 422, { reason: "validation_failed", message: "bad command", errors: {} }],
    ["a 409 with another reason", 409, { reason: "structural_limit_exceeded", message: "too many" }],
    ["a 401 (typed)", 401, undefined]
  ] as const) {
    it.scoped(`a definite completion rejection (${label}) reports the task as failed`, () =>
      Effect.gen(function*() {
        const { server } = yield* setup({ retryFailedWorkflowTasks: false })
        yield* startWorker(server, { durableWorkflows: [greeting] })
        server.failNext("workflowTaskComplete", status, body)
        server.enqueueWorkflowTask({ workflowType: "orders.greet", taskQueue: QUEUE, input: ["Ada"] })
        yield* until(server, () => server.failedWorkflowTasks.length === 1)
        const failure = server.failedWorkflowTasks[0]!.failure
        assert.match(String(failure["message"]), /^workflow task completion failed after commands were produced: /)
        assert.strictEqual(server.requestsTo("workflowTaskComplete").length, 1, "definite errors are not retried")
      }))
  }

  for (const reason of ["lease_expired", "lease_owner_mismatch", "task_not_leased", "workflow_task_attempt_mismatch", "run_closed"]) {
    it.scoped(`an ambiguous completion rejection (409 ${reason}) keeps the commands: no failure report`, () =>
      Effect.gen(function*() {
        const { server } = yield* setup()
        yield* startWorker(server, { durableWorkflows: [greeting] })
        server.failNext("workflowTaskComplete", 409, { reason })
        server.enqueueWorkflowTask({ workflowType: "orders.greet", taskQueue: QUEUE, input: ["Ada"] })
        yield* until(server, () => server.requestsTo("workflowTaskComplete").some((r) => r.status === 409))
        yield* TestClock.adjust("1 second")
        yield* until(server, () => server.heldPolls("workflowTaskPoll") === 1)
        assert.strictEqual(server.requestsTo("workflowTaskFail").length, 0)
        assert.strictEqual(server.requestsTo("workflowTaskComplete").length, 1)
      }))
  }

  it("classifies completion errors as the SDK does", () => {
    const server = (status: number, reason?: string) =>
      new DW.DurableWorkflowServerError({ status, ...(reason === undefined ? {} : { reason }), body: {}, message: "x" })
    const request = new DW.DurableWorkflowRequestError({ method: "POST", path: "/p", timeout: true, message: "t" })
    assert.isTrue(DW.isDefiniteCompletionError(new DW.DurableWorkflowInvalidArgument({ message: "x" })))
    assert.isTrue(DW.isDefiniteCompletionError(new DW.DurableWorkflowUnauthorized({ message: "x" })))
    assert.isTrue(DW.isDefiniteCompletionError(new DW.DurableWorkflowNotFound({ message: "x", context: "workflow" })))
    assert.isTrue(DW.isDefiniteCompletionError(server(400, "unsupported_protocol_version")))
    assert.isTrue(DW.isDefiniteCompletionError(server(409, "something_else")))
    for (const reason of ["lease_expired", "lease_owner_mismatch", "run_already_closed", "run_closed", "task_not_found", "task_not_leased", "workflow_task_attempt_mismatch"]) {
      assert.isFalse(DW.isDefiniteCompletionError(server(409, reason)), reason)
    }
    assert.isFalse(DW.isDefiniteCompletionError(server(500)))
    assert.isFalse(DW.isDefiniteCompletionError(server(429)))
    assert.isFalse(DW.isDefiniteCompletionError(request))
    assert.isTrue(isTransient(server(502)))
    assert.isTrue(isTransient(server(429)))
    assert.isTrue(isTransient(request))
    assert.isFalse(isTransient(server(409, "lease_expired")))
  })
})

describe("Durable Workflow polls", () => {
  for (const [kind, route] of [["workflow", "workflowTaskPoll"], ["activity", "activityTaskPoll"], ["query", "queryTaskPoll"]] as const) {
    it.scoped(`a timed-out ${kind} poll is retried once with the same poll_request_id, then counts as empty`, () =>
      Effect.gen(function*() {
        const { server } = yield* setup({ maxPollHoldMs: 60_000 })
        server.injectFault(route, { delayMs: 60_000, times: 2 })
        yield* startWorker(server, { steps: [], durableWorkflows: [greeting] })
        yield* until(server, () => server.requestsTo(route).length === 1)
        yield* TestClock.adjust("40 seconds") // the HTTP timeout: 35 s + 5 s
        yield* until(server, () => server.requestsTo(route).length === 2)
        yield* TestClock.adjust("40 seconds")
        yield* until(server, () => server.requestsTo(route).length === 3)
        const [a, b, c] = server.requestsTo(route).map((r) => (r.body as any)["poll_request_id"])
        assert.strictEqual(a, b)
        assert.notStrictEqual(b, c)
        assert.isTrue(server.requestsTo(route)[0]!.aborted)
      }))
  }
})

describe("Durable Workflow poll errors", () => {
  it.scoped("a 503 poll is retried by the transport retry with the same body; a 412 is not fatal: the worker registers again and polls again", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      server.failNext("activityTaskPoll", 503)
      yield* startWorker<never>(server, { steps: [] })
      yield* until(server, () => server.requestsTo("activityTaskPoll").length === 1)
      yield* TestClock.adjust("125 millis") // 100 ms backoff, +25 % jitter at most
      yield* until(server, () => server.requestsTo("activityTaskPoll").length === 2)
      const [a, b] = server.requestsTo("activityTaskPoll")
      assert.deepStrictEqual(a!.body, b!.body)
      server.failNext("workflowTaskPoll", 412)
      const before = server.requestsTo("workflowTaskPoll").length
      // the held poll ends (maxPollHoldMs), the next one gets the 412 (worker_not_registered): the
      // registration is sent again and polling resumes
      yield* until(server, () => server.requestsTo("workflowTaskPoll").some((r) => r.status === 412))
      yield* TestClock.adjust("1 second")
      yield* until(server, () => server.requestsTo("workflowTaskPoll").length >= before + 2)
      const last = server.requestsTo("workflowTaskPoll").at(-1)!
      assert.notStrictEqual((last.body as any)["poll_request_id"], (server.requestsTo("workflowTaskPoll").find((r) => r.status === 412)!.body as any)["poll_request_id"])
    }))
})
