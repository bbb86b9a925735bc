import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as ReplayCapture from "../../src/core/ReplayCapture.js"
import { captureLayer, verifyDirectory, verifyDurableWorkflows, verifyWorkflows } from "../../src/facade/verify.js"
import { greet, order } from "../fixtures/replay-cases/workflows.js"

const cases = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "fixtures", "replay-cases")

describe("promise twins of verify", () => {
  it("verifyDirectory resolves with the report of a directory", async () => {
    const passing = await verifyDirectory(path.join(cases, "passing"), { durableWorkflows: [greet], workflows: [order] })
    assert.strictEqual(passing.status, "replayed")
    const drifted = await verifyDirectory(path.join(cases, "drifted"), { durableWorkflows: [greet], workflows: [order] })
    assert.strictEqual(drifted.status, "drifted")
    assert.strictEqual(drifted.summary.drifted, 1)
  })

  it("verifyDurableWorkflows and verifyWorkflows resolve with reports", async () => {
    const dw = await verifyDurableWorkflows([greet], [{ id: "empty", history: [], workflowType: "orders.greet", startInput: ["Ada"] }])
    assert.deepStrictEqual(dw.cases[0]!.observed, { command_type: "ScheduleActivity", activity_type: "greeting.compose", arguments: ["Ada"] })
    const nest = await verifyWorkflows([order], [{ id: "t", task: { taskId: "t", runId: "r", workflow: "order", input: "o", history: [] } }])
    assert.strictEqual(nest.cases[0]!.status, "replayed")
  })

  it("captureLayer writes to a directory over node:fs", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "capture-facade-"))
    try {
      const record: ReplayCapture.CapturedHistory = {
        schema: "effect-durable-worker.nestjs-durable-history.v1",
        workflow: "order",
        run_id: "r-1",
        task: { taskId: "t", runId: "r-1", workflow: "order", input: "o", history: [] }
      }
      await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
        const ctx = yield* Layer.build(captureLayer({ directory: dir }))
        yield* ReplayCapture.capture(Effect.succeed(record)).pipe(Effect.provide(ctx))
      })))
      assert.deepStrictEqual(fs.readdirSync(dir), ["nestjs-durable.r-1.json"])
      assert.deepStrictEqual(JSON.parse(fs.readFileSync(path.join(dir, "nestjs-durable.r-1.json"), "utf8")), record)
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  })
})
