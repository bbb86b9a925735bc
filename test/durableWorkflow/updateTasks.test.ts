import { assert, describe, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import { WorkerLoopError } from "../../src/runtime/WorkerError.js"
import { RegistrationError } from "../../src/seam/Transport.js"
import {
  type DurableWorkflowServer,
  type UpdateValidationTaskInput,
  updateValidationCapabilities
} from "../support/durableWorkflowServer.js"
import {
  blob,
  counterValue,
  DurableWorkflow,
  DW,
  eventually,
  failureOf,
  greet,
  QUEUE,
  registered,
  setup,
  startWorker,
  until,
  value,
  Worker
} from "./support.js"


/** A gate validators of `orders.approval` wait on when `gate` is set (to hold a validation task). */
const hold = { gate: undefined as Deferred.Deferred<void> | undefined, started: undefined as Deferred.Deferred<void> | undefined }

/** Holds `orders.approval`'s validators for the rest of the test: each completes `started`, then waits for `gate`. */
const holdValidators = Effect.gen(function*() {
  const gate = yield* Deferred.make<void>()
  const started = yield* Deferred.make<void>()
  hold.gate = gate
  hold.started = started
  yield* Effect.addFinalizer(() => Effect.sync(() => (hold.gate = hold.started = undefined)))
  return { gate, started }
})

const approval = DurableWorkflow.make("orders.approval", (ctx, limit: number) =>
  Effect.gen(function*() {
    let discount = 0
    ctx.onUpdate("setDiscount", (percent, note) => {
      discount = percent
      return { discount, note }
    })
    ctx.onUpdateValidator("setDiscount", (percent) =>
      Effect.gen(function*() {
        if (hold.gate !== undefined) {
          if (hold.started !== undefined) yield* Deferred.succeed(hold.started, undefined)
          yield* Deferred.await(hold.gate)
        }
        if (percent < 0) return yield* new DurableWorkflow.UpdateRejected({ message: "negative discount", validationErrors: { percent: ["must be at least 0"] } })
        return percent <= limit
      }))
    ctx.onUpdate("reset", () => {
      if (discount === 0) throw new Error("nothing to reset")
      discount = 0
    })
    ctx.onQuery("discount", () => discount)
    yield* ctx.waitCondition(() => discount > 0)
    return discount
  }), {
  updates: {
    setDiscount: [DurableWorkflow.param("percent", Schema.Int), DurableWorkflow.param("note", Schema.NullOr(Schema.String), { default: null })],
    reset: []
  },
  updateValidators: ["setDiscount"],
  queries: { discount: [] }
})

/** Updates without validators. */
const ledger = DurableWorkflow.make("orders.ledger", (ctx) =>
  Effect.gen(function*() {
    let total = 0
    ctx.onSignal("credit", (n: number) => {
      total += n
    })
    ctx.onUpdate("debit", (amount) => (total -= amount))
    yield* ctx.waitCondition(() => total < 0)
  }), {
  signals: { credit: [DurableWorkflow.param("amount", Schema.Number)] },
  updates: { debit: [DurableWorkflow.param("amount", Schema.Number)] }
})

const plain = DurableWorkflow.make("orders.plain", (ctx, name: string) => ctx.activity<string>("greeting.compose", [name]))

const registerBody = (server: DurableWorkflowServer, index = 0) => server.requestsTo("register")[index]!.body as Record<string, any>

const validationSetup = (options: Parameters<typeof setup>[0] = {}) => setup({ updateValidation: true, ...options })


describe("Durable Workflow registration: command contracts, capabilities, fingerprints", () => {
  it.scoped("typed command contracts per workflow type, identical on re-registration; query_tasks + workflow_updates; build id", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const options = Either.getOrThrow(DW.workerOptions({ buildId: "b-7", workerId: "contracts-worker" }))
      const first = yield* startWorker(server, { steps: [greet], durableWorkflows: [ledger, plain], ...options })
      yield* registered(server)
      yield* first.worker.stop
      yield* Fiber.join(first.running)
      const second = yield* startWorker(server, { steps: [greet], durableWorkflows: [ledger, plain], ...options })
      yield* until(server, () => server.requestsTo("register").filter((r) => r.status === 201).length === 2)
      const [a, b] = [registerBody(server, 0), registerBody(server, 1)]
      assert.deepStrictEqual(a["workflow_command_contracts"], {
        "orders.ledger": {
          queries: [],
          query_contracts: [],
          signals: ["credit"],
          signal_contracts: [{
            name: "credit",
            parameters: [{ name: "amount", position: 0, required: true, variadic: false, default_available: false, default: null, type: "float", allows_null: false }]
          }],
          updates: ["debit"],
          update_contracts: [{
            name: "debit",
            parameters: [{ name: "amount", position: 0, required: true, variadic: false, default_available: false, default: null, type: "float", allows_null: false }]
          }],
          update_validators: []
        },
        // nothing declared: an empty contract
        "orders.plain": { queries: [], query_contracts: [], signals: [], signal_contracts: [], updates: [], update_contracts: [], update_validators: [] }
      })
      assert.deepStrictEqual(b["workflow_command_contracts"], a["workflow_command_contracts"])
      assert.deepStrictEqual(b["workflow_definition_fingerprints"], a["workflow_definition_fingerprints"])
      assert.deepStrictEqual(a["capabilities"], ["query_tasks", "workflow_updates"])
      assert.strictEqual(a["build_id"], "b-7")
      yield* second.worker.stop
    }))

  it.scoped("a worker without updates or validators advertises only query_tasks, and none at all without query tasks", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ queryTasks: false })
      yield* startWorker(server, { steps: [greet], durableWorkflows: [plain] })
      yield* registered(server)
      assert.notProperty(registerBody(server), "capabilities")
    }))

  it.scoped("validators need the full pre-accept contract: without it, a compatibility error and no register call", () =>
    Effect.gen(function*() {
      // the full contract but for its poll: dedicated, not multiplexed
      const partial = {
        ...updateValidationCapabilities,
        synchronous_update_validation: {
          ...updateValidationCapabilities.synchronous_update_validation,
          task_poll: { strategy: "dedicated", endpoint: "/worker/update-validation-tasks/poll" }
        }
      }
      for (const serverOptions of [{}, { serverCapabilities: partial }, { serverCapabilities: { update_validation_tasks: true } }]) {
        const { server } = yield* setup(serverOptions)
        const { running } = yield* startWorker(server, { durableWorkflows: [approval, ledger] })
        const exit = yield* Fiber.await(running)
        assert.isTrue(Exit.isFailure(exit))
        const error = failureOf(exit) as RegistrationError
        assert.instanceOf(error, RegistrationError)
        assert.match(
          error.message,
          /^Server compatibility error: this worker declares update validators, but the server does not advertise synchronous pre-accept update validation .*orders\.approval$/
        )
        assert.strictEqual(server.requestsTo("clusterInfo").length, 1)
        assert.strictEqual(server.requestsTo("register").length, 0, "no register call")
        assert.strictEqual(server.requestsTo("deregisterRegistration").length, 0)
      }
    }))

  it.scoped("with the contract: update_validation_tasks advertised and workflow polls multiplexed", () =>
    Effect.gen(function*() {
      const { server } = yield* validationSetup()
      yield* startWorker(server, { durableWorkflows: [approval, ledger] })
      yield* until(server, () => server.requestsTo("workflowTaskPoll").length > 0)
      assert.deepStrictEqual(registerBody(server)["capabilities"], ["query_tasks", "update_validation_tasks", "workflow_updates"])
      assert.deepStrictEqual(registerBody(server)["workflow_command_contracts"]["orders.approval"]["update_validators"], ["setDiscount"])
      assert.deepStrictEqual((server.requestsTo("workflowTaskPoll")[0]!.body as any)["task_kinds"], ["workflow", "update_validation"])
    }))

  it.scoped("no validators: no validation capability and no task_kinds, even when the server supports validation", () =>
    Effect.gen(function*() {
      const { server } = yield* validationSetup()
      yield* startWorker(server, { durableWorkflows: [ledger] })
      yield* until(server, () => server.requestsTo("workflowTaskPoll").length > 0)
      assert.deepStrictEqual(registerBody(server)["capabilities"], ["query_tasks", "workflow_updates"])
      assert.notProperty(server.requestsTo("workflowTaskPoll")[0]!.body as object, "task_kinds")
    }))

  it.scoped("registration advertises the worker's own definitions, not the last one made under a name", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const served = DurableWorkflow.make("orders.twice", () => Effect.succeed(1), { updates: { served: [] } })
      const later = DurableWorkflow.make("orders.twice", () => Effect.succeed(2), { updates: { later: [] } })
      assert.notStrictEqual(served.fingerprint, later.fingerprint)
      yield* startWorker(server, { durableWorkflows: [served] })
      yield* registered(server)
      const body = registerBody(server, 0)
      const contracts = body["workflow_command_contracts"] as Record<string, { updates: ReadonlyArray<string> }>
      assert.deepStrictEqual(contracts["orders.twice"]!.updates, ["served"])
      assert.deepStrictEqual(body["workflow_definition_fingerprints"], { "orders.twice": served.fingerprint })
    }))

  it.scoped("a changed definition under the same worker id fails before any I/O, asking for a process restart", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const v1 = DurableWorkflow.make("orders.evolving", (ctx) => ctx.activity("greeting.compose", ["v1"]))
      const first = yield* startWorker(server, { durableWorkflows: [v1], workerId: "evolving-worker" })
      yield* registered(server)
      yield* first.worker.stop
      yield* Fiber.join(first.running)
      // the same definition again under the same id is fine
      const again = yield* startWorker(server, { durableWorkflows: [v1], workerId: "evolving-worker" })
      yield* until(server, () => server.requestsTo("register").filter((r) => r.status === 201).length === 2)
      yield* again.worker.stop
      yield* Fiber.join(again.running)
      server.clearRequests()
      const v2 = DurableWorkflow.make("orders.evolving", (ctx) => ctx.activity("greeting.compose", ["v2"]))
      // refused when the worker is built, as the SDK's constructor does: nothing is sent
      const changed = yield* Effect.flip(Worker.make({ durableWorkflows: [v2], workerId: "evolving-worker" }))
      assert.instanceOf(changed, DurableWorkflow.WorkflowDefinitionChanged)
      assert.include(changed.message, "Workflow definition changed for worker 'evolving-worker' and workflow type 'orders.evolving'")
      assert.include(changed.message, "restart the worker process")
      assert.strictEqual(server.requests.length, 0, "no discovery, no register call")
      // another worker id may serve the new definition
      yield* startWorker(server, { durableWorkflows: [v2], workerId: "evolving-worker-2" })
      yield* registered(server)
    }))
})

describe("Durable Workflow accepted-update tasks", () => {
  it.scoped("replays, applies the accepted update and completes with exactly one complete_update", () =>
    Effect.gen(function*() {
      const { server } = yield* validationSetup()
      const { worker } = yield* startWorker(server, { durableWorkflows: [approval] })
      const { taskId } = server.enqueueWorkflowTask({
        workflowType: "orders.approval",
        taskQueue: QUEUE,
        input: [50],
        updateId: "upd-1",
        historyEvents: [
          { event_type: "WorkflowStarted", payload: {} },
          { event_type: "ConditionWaitOpened", payload: { sequence: 1 } },
          { event_type: "UpdateAccepted", payload: { update_id: "upd-1", update_name: "setDiscount", arguments: blob([15, "loyal"]) } }
        ]
      })
      yield* until(server, () => server.completedWorkflowTasks.length === 1)
      const completion = server.completedWorkflowTasks[0]!
      assert.strictEqual(completion.taskId, taskId)
      assert.strictEqual(completion.leaseOwner, worker.id)
      assert.strictEqual(completion.body["workflow_task_attempt"], 1)
      assert.strictEqual(completion.commands.length, 1)
      const [command] = completion.commands
      assert.strictEqual(command!["type"], "complete_update")
      assert.strictEqual(command!["update_id"], "upd-1")
      assert.deepStrictEqual(value(command!["result"]), { discount: 15, note: "loyal" })
    }))

  it.scoped("a failing handler and a structural problem are fail_update commands the server accepts", () =>
    Effect.gen(function*() {
      const failing = DurableWorkflow.make("orders.failing-update", (ctx) =>
        Effect.gen(function*() {
          ctx.onUpdate("boom", () => Effect.fail(new DurableWorkflow.UpdateRejected({ message: "late rejection" })))
          yield* ctx.waitCondition(() => false)
        }), { updates: { boom: [] } })
      const { server } = yield* setup()
      yield* startWorker(server, { durableWorkflows: [ledger, failing] })
      server.enqueueWorkflowTask({
        workflowType: "orders.failing-update",
        taskQueue: QUEUE,
        updateId: "u-1",
        historyEvents: [{ event_type: "UpdateAccepted", payload: { update_id: "u-1", update_name: "boom", arguments: blob([]) } }]
      })
      server.enqueueWorkflowTask({
        workflowType: "orders.ledger",
        taskQueue: QUEUE,
        updateId: "u-missing",
        historyEvents: [{ event_type: "UpdateAccepted", payload: { update_id: "u-other", update_name: "debit", arguments: blob([1]) } }]
      })
      yield* until(server, () => server.completedWorkflowTasks.length === 2)
      const commandsOf = (updateId: string) => server.completedWorkflowTasks.find((c) => c.commands[0]!["update_id"] === updateId)!.commands
      assert.deepStrictEqual(commandsOf("u-1"), [{
        type: "fail_update",
        update_id: "u-1",
        message: "late rejection",
        exception_type: "UpdateRejected",
        exception_class: "effect-durable-worker.UpdateRejected",
        non_retryable: true
      }])
      const [notFound] = commandsOf("u-missing")
      assert.strictEqual(notFound!["type"], "fail_update")
      assert.strictEqual(notFound!["exception_type"], "UpdateNotFound")
      assert.strictEqual(notFound!["update_id"], "u-missing")
    }))

  it.scoped("the update completion goes through the retrying completion path (a 500 is retried after the backoff, at most 0.25 s)", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      yield* startWorker(server, { durableWorkflows: [ledger] })
      server.failNext("workflowTaskComplete", 500)
      server.enqueueWorkflowTask({
        workflowType: "orders.ledger",
        taskQueue: QUEUE,
        updateId: "u-1",
        historyEvents: [
          { event_type: "SignalReceived", payload: { signal_name: "credit", arguments: blob([10]) } },
          { event_type: "UpdateAccepted", payload: { update_id: "u-1", update_name: "debit", arguments: blob([4]) } }
        ]
      })
      yield* until(server, () => server.requestsTo("workflowTaskComplete").length === 1 && server.requestsTo("workflowTaskComplete")[0]!.status === 500)
      yield* TestClock.adjust("250 millis")
      yield* until(server, () => server.completedWorkflowTasks.length === 1)
      const [a, b] = server.requestsTo("workflowTaskComplete")
      assert.deepStrictEqual(a!.body, b!.body)
      assert.strictEqual(value(server.completedWorkflowTasks[0]!.commands[0]!["result"]), 6)
    }))

  it.scoped("a replay failure of an accepted-update task is a task failure", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ retryFailedWorkflowTasks: false })
      yield* startWorker(server, { durableWorkflows: [ledger] })
      server.enqueueWorkflowTask({
        workflowType: "orders.ledger",
        taskQueue: QUEUE,
        updateId: "u-2",
        historyEvents: [
          { event_type: "UpdateApplied", payload: { update_id: "u-1", update_name: "vanished", arguments: blob([]) } },
          { event_type: "UpdateAccepted", payload: { update_id: "u-2", update_name: "debit", arguments: blob([1]) } }
        ]
      })
      yield* until(server, () => server.failedWorkflowTasks.length === 1)
      assert.match(String(server.failedWorkflowTasks[0]!.failure["message"]), /^replay failed: unknown update 'vanished'/)
      assert.strictEqual(server.completedWorkflowTasks.length, 0)
    }))
})

describe("Durable Workflow update-validation tasks (multiplexed polls)", () => {
  /** A `setDiscount` validation of an `orders.approval` run started with limit 30, on {@link QUEUE} unless `more` says otherwise. */
  const enqueue = (server: DurableWorkflowServer, updateInput: ReadonlyArray<unknown>, more: Partial<UpdateValidationTaskInput> = {}) =>
    server.enqueueUpdateValidationTask({
      workflowType: "orders.approval",
      updateName: "setDiscount",
      taskQueue: QUEUE,
      workflowInput: [30],
      updateInput,
      ...more
    })

  it.scoped("approve, reject (false / UpdateRejected with validation errors / undecodable arguments), worker failure: bodies, reasons, metrics", () =>
    Effect.gen(function*() {
      const queue = `validation-${Math.random().toString(16).slice(2)}`
      const { server } = yield* validationSetup()
      const { worker } = yield* startWorker(server, { durableWorkflows: [approval] }, { taskQueue: queue })
      const task = (updateInput: ReadonlyArray<unknown> | undefined, extra: Record<string, unknown> = {}) =>
        enqueue(server, updateInput ?? [], {
          taskQueue: queue,
          extra,
          ...(updateInput === undefined ? { wireUpdateArguments: "not-a-payload" } : {})
        })
      const ok = task([20])
      const tooMuch = task([40])
      const negative = task([-1])
      const garbage = task(undefined)
      const replayBroken = task([5], {
        history_events: [{ event_type: "UpdateApplied", payload: { update_id: "u-0", update_name: "vanished", arguments: blob([]) } }]
      })
      yield* until(server, () => server.updateValidations.length === 5)
      const byId = (id: string) => server.updateValidations.find((v) => v.updateValidationTaskId === id)!
      assert.deepStrictEqual(byId(ok.updateValidationTaskId).body, { lease_owner: worker.id, update_validation_attempt: 1 })
      assert.strictEqual(byId(ok.updateValidationTaskId).outcome, "approved")
      const path = server.requestsTo("updateValidationApprove")[0]!.path
      assert.strictEqual(path, `/api/worker/update-validation-tasks/${ok.updateValidationTaskId}/approve`)
      assert.deepStrictEqual(byId(tooMuch.updateValidationTaskId).body, {
        lease_owner: worker.id,
        update_validation_attempt: 1,
        failure: { message: "update 'setDiscount' was rejected by its validator", reason: "update_validator_rejected", type: "UpdateRejected" }
      })
      assert.deepStrictEqual(byId(negative.updateValidationTaskId).body["failure"], {
        message: "negative discount",
        reason: "update_validator_rejected",
        type: "UpdateRejected",
        validation_errors: { percent: ["must be at least 0"] }
      })
      const undecodable = byId(garbage.updateValidationTaskId).body["failure"] as Record<string, unknown>
      assert.strictEqual(undecodable["reason"], "update_validator_rejected")
      assert.include(String(undecodable["message"]), "cannot decode the update arguments")
      const broken = byId(replayBroken.updateValidationTaskId).body["failure"] as Record<string, unknown>
      assert.strictEqual(broken["reason"], "update_validation_worker_failed")
      assert.strictEqual(broken["type"], "UpdateValidationFailed")
      assert.include(String(broken["message"]), "unknown update 'vanished'")
      const tags = { task_kind: "update_validation", task_queue: queue }
      yield* eventually(counterValue("durable_workflow_worker_tasks", { ...tags, outcome: "approved" }), (n) => n === 1)
      yield* eventually(counterValue("durable_workflow_worker_tasks", { ...tags, outcome: "rejected" }), (n) => n === 3)
      yield* eventually(counterValue("durable_workflow_worker_tasks", { ...tags, outcome: "failed" }), (n) => n === 1)
      yield* eventually(counterValue("durable_workflow_worker_polls", { ...tags, outcome: "task" }), (n) => n === 5)
      assert.strictEqual(server.completedWorkflowTasks.length + server.failedWorkflowTasks.length, 0, "validation never completes a workflow task")
    }))

  it.scoped("a task without a workflow type or update name is a worker failure", () =>
    Effect.gen(function*() {
      const { server } = yield* validationSetup()
      yield* startWorker(server, { durableWorkflows: [approval] })
      enqueue(server, [1], { extra: { update_name: undefined } })
      yield* until(server, () => server.updateValidations.length === 1)
      assert.deepStrictEqual(server.updateValidations[0]!.body["failure"], {
        message: "the update-validation task names no workflow_type or update_name",
        reason: "update_validation_worker_failed",
        type: "UpdateValidationFailed"
      })
    }))

  it.scoped("final rejections of the answer (fenced reasons) are outcome expired; other answer errors are error", () =>
    Effect.gen(function*() {
      const queue = `fenced-${Math.random().toString(16).slice(2)}`
      const { server } = yield* validationSetup()
      yield* startWorker(server, { durableWorkflows: [approval] }, { taskQueue: queue })
      const fenced = [
        "duplicate_update_validation_completion",
        "stale_update_validation_completion",
        "update_validation_lease_expired",
        "update_validation_task_not_found",
        "update_validation_task_not_leased",
        "update_validator_worker_lost"
      ]
      for (const reason of fenced) {
        server.failNext("updateValidationApprove", 409, { reason, message: "fenced", retryable: false })
        enqueue(server, [1], { taskQueue: queue })
        yield* until(server, () => server.requestsTo("updateValidationApprove").filter((r) => r.status === 409).length === fenced.indexOf(reason) + 1)
      }
      const tags = { task_kind: "update_validation", task_queue: queue }
      yield* eventually(counterValue("durable_workflow_worker_tasks", { ...tags, outcome: "expired" }), (n) => n === fenced.length)
      // a refusal that is not final (422) is an error outcome
      server.failNext("updateValidationReject", 422, { reason: "validation_failed", message: "bad", errors: {} })
      enqueue(server, [99], { taskQueue: queue })
      yield* eventually(counterValue("durable_workflow_worker_tasks", { ...tags, outcome: "error" }), (n) => n === 1)
      assert.strictEqual(server.updateValidations.length, 0)
    }))

  it.scoped("the server fences a late answer: the expired lease is re-leased (attempt 2), the late answer is expired", () =>
    Effect.gen(function*() {
      const queue = `late-${Math.random().toString(16).slice(2)}`
      const { server } = yield* validationSetup({ updateValidationLeaseSeconds: 1 })
      const { gate, started } = yield* holdValidators
      yield* startWorker(server, { durableWorkflows: [approval], workflowConcurrency: 1 }, { taskQueue: queue })
      const { updateValidationTaskId } = enqueue(server, [3], { taskQueue: queue })
      yield* Deferred.await(started)
      server.advanceTime(2_000)
      yield* Deferred.succeed(gate, undefined)
      // the slot comes back, the re-leased task is validated again and approved
      yield* until(server, () => server.updateValidations.length === 1)
      const [late, retried] = server.requestsTo("updateValidationApprove")
      assert.strictEqual(late!.status, 409)
      assert.strictEqual((late!.responseBody as any)["reason"], "update_validation_lease_expired")
      assert.strictEqual((late!.body as any)["update_validation_attempt"], 1)
      assert.strictEqual(retried!.status, 200)
      assert.strictEqual((retried!.body as any)["update_validation_attempt"], 2)
      assert.deepStrictEqual(server.updateValidationTask(updateValidationTaskId), { status: "approved", attempt: 2, leaseOwner: server.updateValidations[0]!.leaseOwner })
      const tags = { task_kind: "update_validation", task_queue: queue }
      yield* eventually(counterValue("durable_workflow_worker_tasks", { ...tags, outcome: "expired" }), (n) => n === 1)
      yield* eventually(counterValue("durable_workflow_worker_tasks", { ...tags, outcome: "approved" }), (n) => n === 1)
    }))

  it.scoped("one workflow slot covers poll and execution: a held validation shows 0 free slots, and the other kind waits", () =>
    Effect.gen(function*() {
      const { server } = yield* validationSetup()
      const { gate, started } = yield* holdValidators
      const { worker } = yield* startWorker(server, { durableWorkflows: [approval], workflowConcurrency: 1 })
      enqueue(server, [1])
      yield* Deferred.await(started)
      server.enqueueWorkflowTask({ workflowType: "orders.approval", taskQueue: QUEUE, input: [10] })
      yield* TestClock.adjust("60 seconds")
      yield* until(server, () => server.requestsTo("heartbeat").length === 1)
      assert.strictEqual((server.requestsTo("heartbeat")[0]!.body as any)["task_slots"]["workflow_available"], 0)
      assert.strictEqual(server.requestsTo("workflowTaskPoll").length, 1, "no poll while the validation holds the only slot")
      assert.strictEqual((yield* worker.status).slots!.workflow.running, 1)
      yield* Deferred.succeed(gate, undefined)
      // the released slot polls again and promptly gets the workflow task
      yield* until(server, () => server.updateValidations.length === 1 && server.completedWorkflowTasks.length === 1)
      assert.strictEqual(server.completedWorkflowTasks[0]!.commands[0]!["type"], "open_condition_wait")
      yield* until(server, () => server.heldPolls("workflowTaskPoll") === 1)
      const slots = (yield* worker.status).slots!
      assert.strictEqual(slots.workflow.running, 0, "both outcomes released their slot")
      assert.strictEqual(slots.workflow.inUse, 0, "an idle poll holds no permit in use")
    }))

  it.scoped("an approval the server cannot take for a moment (503 x3) is retried until it is recorded", () =>
    Effect.gen(function*() {
      const { server } = yield* validationSetup()
      yield* startWorker(server, { durableWorkflows: [approval] })
      server.failNext("updateValidationApprove", 503, undefined, 3)
      enqueue(server, [5])
      // the retry sleeps on the test clock: move it on until the answer is recorded
      for (let i = 0; i < 100 && server.updateValidations.length === 0; i++) {
        yield* TestClock.adjust("100 millis")
        yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 5)))
      }
      assert.deepStrictEqual(server.requestsTo("updateValidationApprove").map((r) => r.status), [503, 503, 503, 200])
      assert.deepStrictEqual(server.updateValidations.map((v) => v.outcome), ["approved"])
    }))

  it.scoped("with one workflow slot, approval, rejection and a failed answer (report retry's budget spent) each release it", () =>
    Effect.gen(function*() {
      const queue = `release-${Math.random().toString(16).slice(2)}`
      const { server } = yield* validationSetup()
      const { worker } = yield* startWorker(server, { durableWorkflows: [approval], workflowConcurrency: 1 }, { taskQueue: queue })
      const task = (percent: number) => enqueue(server, [percent], { taskQueue: queue })
      task(5)
      yield* until(server, () => server.updateValidations.length === 1)
      task(90)
      yield* until(server, () => server.updateValidations.length === 2)
      server.failNext("updateValidationApprove", 503, undefined, 1000)
      task(6)
      // the report retry (backoff on the Effect clock, at most 30 s) gives up: outcome error
      const errors = counterValue("durable_workflow_worker_tasks", { task_kind: "update_validation", task_queue: queue, outcome: "error" })
      for (let i = 0; i < 60 && (yield* errors) === 0; i++) {
        yield* TestClock.adjust("1 second")
        yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 10)))
      }
      yield* eventually(errors, (n) => n === 1)
      server.clearFaults()
      // the only slot is free again: the next task is taken and approved
      task(7)
      yield* until(server, () => server.updateValidations.length === 3)
      assert.deepStrictEqual(server.updateValidations.map((v) => v.outcome), ["approved", "rejected", "approved"])
      yield* until(server, () => server.heldPolls("workflowTaskPoll") === 1)
      const slots = (yield* worker.status).slots!
      assert.strictEqual(slots.workflow.running, 0)
      assert.strictEqual(slots.workflow.inUse, 0, "an idle poll holds no permit in use")
    }))

  it.scoped("a burst of validations never leases beyond the workflow capacity", () =>
    Effect.gen(function*() {
      const { server } = yield* validationSetup()
      const { gate } = yield* holdValidators
      const { worker } = yield* startWorker(server, { durableWorkflows: [approval], workflowConcurrency: 2 })
      const ids = Array.from({ length: 5 }, (_, i) => enqueue(server, [i + 1]).updateValidationTaskId)
      yield* until(server, () => server.requestsTo("workflowTaskPoll").filter((r) => r.status === 200).length === 2)
      const leased = () => ids.filter((id) => server.updateValidationTask(id)?.status === "leased")
      assert.strictEqual((yield* worker.status).slots!.workflow.running, 2)
      assert.strictEqual(leased().length, 2)
      assert.strictEqual(server.heldPolls("workflowTaskPoll"), 0)
      yield* Deferred.succeed(gate, undefined)
      yield* until(server, () => server.updateValidations.length === 5)
      assert.isTrue(server.updateValidations.every((v) => v.outcome === "approved"))
    }))

  it.scoped("stop cancels an idle multiplexed poll at once, frees its slot and deregisters once", () =>
    Effect.gen(function*() {
      const { server } = yield* validationSetup({ maxPollHoldMs: 60_000 })
      const { running, worker } = yield* startWorker(server, { durableWorkflows: [approval], workflowConcurrency: 1 })
      yield* until(server, () => server.heldPolls("workflowTaskPoll") === 1)
      assert.deepStrictEqual((server.requestsTo("workflowTaskPoll")[0]!.body as any)["task_kinds"], ["workflow", "update_validation"])
      yield* worker.stop
      yield* Fiber.join(running)
      yield* until(server, () => server.heldPolls("workflowTaskPoll") === 0, 2_000)
      assert.strictEqual(server.requestsTo("deregisterRegistration").length, 1)
      assert.strictEqual((yield* worker.status).slots!.workflow.inUse, 0)
    }))

  it.scoped("stop with a running validation: the deadline interrupts it (no answer), releases capacity, then one DELETE", () =>
    Effect.gen(function*() {
      const { server } = yield* validationSetup()
      const { started } = yield* holdValidators
      const { running, worker } = yield* startWorker(server, { durableWorkflows: [approval], workflowConcurrency: 1, shutdownTimeout: "10 millis" })
      enqueue(server, [1])
      yield* Deferred.await(started)
      const stopping = yield* Effect.fork(worker.stop)
      yield* TestClock.adjust("10 millis")
      yield* Fiber.join(stopping)
      yield* Fiber.join(running)
      assert.strictEqual(server.updateValidations.length, 0, "an interrupted validation is not answered")
      assert.strictEqual(server.requestsTo("deregisterRegistration").length, 1)
      const slots = (yield* worker.status).slots!
      assert.strictEqual(slots.workflow.running, 0)
      assert.strictEqual(slots.workflow.inUse, 0)
    }))

  it.scoped("a validation interrupted before its validator starts (still resolving its history) releases its slot", () =>
    Effect.gen(function*() {
      const { server } = yield* validationSetup()
      const reading = yield* Deferred.make<void>()
      const stuck: DW.ExternalStorageDriver = {
        put: () => Effect.die("unused"),
        get: () => Effect.zipRight(Deferred.succeed(reading, undefined), Effect.never)
      } as unknown as DW.ExternalStorageDriver
      const { running, worker } = yield* startWorker(
        server,
        { durableWorkflows: [approval], workflowConcurrency: 1, shutdownTimeout: "10 millis" },
        { externalStorage: stuck }
      )
      enqueue(server, [1], {
        extra: {
          history_events: [{
            event_type: "SignalReceived",
            payload: {
              signal_name: "x",
              arguments: {
                codec: "avro",
                external_storage: {
                  schema: "durable-workflow.v2.external-payload-reference.v1",
                  uri: "file:///nowhere",
                  sha256: "0".repeat(64),
                  size_bytes: 4,
                  codec: "avro"
                }
              }
            }
          }]
        }
      })
      yield* Deferred.await(reading)
      const stopping = yield* Effect.fork(worker.stop)
      yield* TestClock.adjust("10 millis")
      yield* Fiber.join(stopping)
      yield* Fiber.join(running)
      assert.strictEqual(server.updateValidations.length, 0)
      assert.strictEqual((yield* worker.status).slots!.workflow.inUse, 0)
      assert.strictEqual(server.requestsTo("deregisterRegistration").length, 1)
    }))

  it.scoped("a multiplexed poll returning an unknown or missing task_kind ends run() with a loop error", () =>
    Effect.gen(function*() {
      for (const extra of [{ task_kind: "mystery" }, { task_kind: undefined }]) {
        const { server } = yield* validationSetup()
        const { running } = yield* startWorker(server, { durableWorkflows: [approval] })
        server.enqueueWorkflowTask({ workflowType: "orders.approval", taskQueue: QUEUE, input: [1], extra })
        const exit = yield* Fiber.await(running)
        const error = failureOf(exit)
        assert.instanceOf(error, WorkerLoopError)
        assert.include(String((error as WorkerLoopError).reason), "task.task_kind discriminator")
        assert.strictEqual(server.requestsTo("deregisterRegistration").length, 1)
      }
    }))
})
