import { assert, describe, it } from "vitest"
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import { durableWorkflow, param, UpdateRejected, Worker, WorkflowDefinitionChanged } from "../../src/promise.js"
import * as Codec from "../../src/wire/DurableWorkflowCodec.js"
import { start } from "../support/durableWorkflowServer.js"

const blob = (value: unknown) => Either.getOrThrow(Codec.encodeBlob(value))

describe("promise facade on a Durable Workflow server", () => {
  it("serves an activity and a workflow, then stops with one worker-plane DELETE", async () => {
    const server = await start()
    try {
      const worker = new Worker({ handleSignals: false, logLevel: "None" })
      worker.activity("greeting.compose", async (name: string) => `hello ${name}`)
      worker.durableWorkflow("orders.greet", async (ctx, name: string) => ctx.activity("greeting.compose", [name]))
      const running = worker.run(durableWorkflow({ baseUrl: server.url, token: server.tokens.worker!, taskQueue: "orders" }))
      server.enqueueActivityTask({ activityType: "greeting.compose", taskQueue: "orders", input: ["Ada"] })
      await server.waitUntil(() => server.completedActivityTasks.length === 1, 10_000)
      assert.strictEqual(Either.getOrThrow(server.completedActivityTasks[0]!.decodedResult!), "hello Ada")
      assert.match(worker.id, /^ts-.+-\d+-[0-9a-f]{8}$/)
      await worker.stop()
      await running
      assert.strictEqual(server.deregistrations.length, 1)
      assert.strictEqual(server.deregistrations[0]!.workerId, worker.id)
      const register = server.requests.find((request) => request.method === "POST" && request.path === "/api/worker/register")
      assert.include(JSON.stringify(register?.body), "orders.greet")
      assert.include(JSON.stringify(register?.body), "greeting.compose")
    } finally {
      await server.stop()
    }
  })

  it("declares updates and validators on async and generator workflows: contracts, validation and accepted updates over HTTP", async () => {
    const server = await start({ updateValidation: true, maxPollHoldMs: 2_000 })
    try {
      const worker = new Worker({ handleSignals: false, logLevel: "None" })
      worker.durableWorkflow("orders.cart", async (ctx) => {
        const items: Array<string> = []
        ctx.onUpdate("add", (item, quantity) => {
          items.push(`${quantity}x ${item}`)
          return items.length
        })
        ctx.onUpdateValidator("add", (item, quantity) => {
          if (quantity > 10) throw new UpdateRejected({ message: "too many", validationErrors: { quantity: ["at most 10"] } })
          return item !== ""
        })
        await ctx.waitCondition(() => items.length >= 3)
        return items
      }, {
        updates: { add: [param("item", Schema.String), param("quantity", Schema.Int, { default: 1 })] },
        updateValidators: ["add"]
      })
      worker.durableWorkflowGenerator("orders.tally", function*(ctx) {
        let n = 0
        ctx.onUpdate("bump", (by) => (n += by))
        yield ctx.waitCondition(() => n > 5)
        return n
      }, { updates: { bump: [param("by", Schema.Number)] } })
      const running = worker.run(durableWorkflow({ baseUrl: server.url, token: server.tokens.worker!, taskQueue: "orders" }))
      const validate = (updateInput: ReadonlyArray<unknown>) =>
        server.enqueueUpdateValidationTask({ workflowType: "orders.cart", updateName: "add", taskQueue: "orders", updateInput })
      validate(["apple", 2])
      validate(["pear", 11])
      validate(["", 1])
      await server.waitUntil(() => server.updateValidations.length === 3, 10_000)
      assert.deepStrictEqual(server.updateValidations.map((v) => [v.outcome, (v.body["failure"] as any)?.validation_errors]), [
        ["approved", undefined],
        ["rejected", { quantity: ["at most 10"] }],
        ["rejected", undefined]
      ])
      server.enqueueWorkflowTask({
        workflowType: "orders.tally",
        taskQueue: "orders",
        updateId: "u-2",
        historyEvents: [
          { event_type: "UpdateApplied", payload: { update_id: "u-1", update_name: "bump", arguments: blob([2]) } },
          { event_type: "UpdateAccepted", payload: { update_id: "u-2", update_name: "bump", arguments: blob([1.5]) } }
        ]
      })
      await server.waitUntil(() => server.completedWorkflowTasks.length === 1, 10_000)
      const [command] = server.completedWorkflowTasks[0]!.commands
      assert.strictEqual(command!["type"], "complete_update")
      assert.deepStrictEqual(Codec.decodeEnvelope(command!["result"] as Codec.PayloadEnvelope), Either.right(3.5))
      await worker.stop()
      await running
      const body = server.requests.find((r) => r.route === "register")!.body as Record<string, any>
      assert.deepStrictEqual(body["capabilities"], ["query_tasks", "update_validation_tasks", "workflow_updates"])
      assert.deepStrictEqual(body["workflow_command_contracts"]["orders.cart"]["update_contracts"][0]["parameters"][1], {
        name: "quantity",
        position: 1,
        required: false,
        variadic: false,
        default_available: true,
        default: 1,
        type: "int",
        allows_null: false
      })
      assert.deepStrictEqual(body["workflow_command_contracts"]["orders.tally"]["update_validators"], [])
    } finally {
      await server.stop()
    }
  })

  it("with an explicit worker id, a changed definition throws WorkflowDefinitionChanged when it is added", () => {
    const first = new Worker({ handleSignals: false, logLevel: "None", workerId: "facade-guarded" })
    first.durableWorkflow("orders.guarded", async () => "v1")
    // the same definition under the same id is fine
    new Worker({ handleSignals: false, logLevel: "None", workerId: "facade-guarded" }).durableWorkflow("orders.guarded", async () => "v1")
    const changed = new Worker({ handleSignals: false, logLevel: "None", workerId: "facade-guarded" })
    assert.throws(() => changed.durableWorkflow("orders.guarded", async () => "v2"), WorkflowDefinitionChanged, /restart the worker process/)
    // another id is independent
    new Worker({ handleSignals: false, logLevel: "None", workerId: "facade-guarded-2" }).durableWorkflow("orders.guarded", async () => "v2")
  })
})
