/**
 * `captureHistories` as a worker option (Effect): the worker records the turns it answers without a
 * layer of the user's, and a bad option is a WorkerConfigError naming it, before anything runs.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Workflow from "../../src/core/Workflow.js"
import * as Worker from "../../src/runtime/Worker.js"
import * as InMemoryTransport from "../../src/transport/InMemoryTransport.js"
import * as Memory from "../../src/services/Memory.js"

const order = Workflow.make("order", (id: string, ctx) => ctx.step<string>("fetch", { id }))

const turn = (runId: string) => ({
  taskId: `${runId}:wf:1`,
  runId,
  workflow: "order",
  workflowVersion: "1",
  input: "o-1",
  history: [],
  group: "order",
  attempt: 1
})

describe("captureHistories (worker option)", () => {
  it.live("records each answered turn with the decision, through the option alone", () =>
    Effect.gen(function*() {
      const records: Array<{ readonly run_id?: string; readonly decision?: unknown }> = []
      const broker = yield* InMemoryTransport.make()
      const worker = yield* Worker.make({ workflows: [order], captureHistories: { onCapture: (r) => void records.push(r as never) } })
      yield* worker.runUntil(
        Effect.forEach(["run-1", "run-2"], (id) => Effect.zipRight(broker.enqueue(turn(id)), broker.takeReply)),
        { timeout: "10 seconds" }
      ).pipe(Effect.provide(Layer.merge(broker.layer, Memory.layerTest({ usage: 1, limit: 1024 }))))
      assert.deepStrictEqual(records.map((r) => r.run_id).sort(), ["run-1", "run-2"])
      assert.isDefined(records[0]?.decision)
    }))

  it.effect("a bad option fails Worker.make with a WorkerConfigError naming it", () =>
    Effect.gen(function*() {
      for (
        const [option, key] of [
          [{}, "captureHistories"],
          [{ directory: "" }, "captureHistories.directory"],
          [{ onCapture: () => {}, sampleRate: 2 }, "captureHistories.sampleRate"],
          // a mistyped key is refused, as every option's is
          [{ directory: "./histories", sampelRate: 0.5 }, "captureHistories.sampelRate"],
          [{ directory: "./histories", queueCapacity: 0 }, "captureHistories.queueCapacity"],
          // null, which no type allows, is refused rather than read into
          [null, "captureHistories"]
        ] as const
      ) {
        const made = yield* Effect.either(Worker.make({ workflows: [order], captureHistories: option as never }))
        assert.isTrue(Either.isLeft(made))
        if (Either.isLeft(made)) {
          assert.strictEqual(made.left._tag, "WorkerConfigError")
          assert.strictEqual((made.left as { option?: string }).option, key)
        }
      }
      // every option it has is taken
      const full = yield* Effect.either(
        Worker.make({ workflows: [order], captureHistories: { directory: "./histories", sampleRate: 0.5, queueCapacity: 5 } })
      )
      assert.isTrue(Either.isRight(full), String(Either.isLeft(full) ? full.left : ""))
    }))
})
