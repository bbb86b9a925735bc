import { assert, describe, it } from "vitest"
import * as Either from "effect/Either"
import { durableWorkflow, Worker } from "../../src/promise.js"
import { start } from "../support/durableWorkflowServer.js"

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
      assert.match(worker.id, /^ts-worker-[0-9a-f]{8}$/)
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
})
