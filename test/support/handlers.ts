import { assert } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Step from "../../src/core/Step.js"
import type { Handlers } from "../../src/seam/Protocol.js"
import type { Delivery, WorkerDescription } from "../../src/seam/Transport.js"

/** What a worker serving these steps (each answering `null`) describes itself with. */
export const servingSteps = (names: ReadonlyArray<string>): Handlers =>
  ({
    steps: new Map(names.map((name) => [name, Step.make(name, () => Effect.succeed(null))])),
    workflows: new Map(),
    durableWorkflows: new Map()
  })

/**
 * The description a transport is registered with in its own tests: a fixed-concurrency worker of
 * `handlers`, started at 0.
 */
export const describedWorker = (
  workerId: string,
  handlers: Handlers,
  pollTimeout: Duration.Duration = Duration.seconds(35)
): WorkerDescription => ({
  workerId,
  buildId: undefined,
  handlers,
  startedAt: 0,
  pollTimeout,
  status: Effect.succeed({ runtime: "node", concurrency: { mode: "fixed", limit: 1 }, inFlight: 0 })
})

/** The completed step result answering a step task `delivery`, with `output` (by default the step's seq). */
export const completedReply = (delivery: Delivery, output?: unknown) => {
  const payload = delivery.payload as { runId: string; seq: number; stepId: string }
  return {
    _tag: "StepResult" as const,
    result: { runId: payload.runId, seq: payload.seq, stepId: payload.stepId, status: "completed" as const, output: output ?? payload.seq }
  }
}

/** Waits until `check` holds (every 10 ms, 10 s at most), else fails the test naming `what`. */
export const untilTrue = (what: string, check: () => Promise<boolean>): Effect.Effect<void> =>
  Effect.promise(async () => {
    for (let i = 0; i < 1_000; i++) {
      if (await check()) return
      await new Promise((resolve) => setTimeout(resolve, 10))
    }
    assert.fail(`timed out waiting for ${what}`)
  })
