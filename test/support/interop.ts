/**
 * Scenarios every interop suite runs the same way, whatever the transport (BullMQ, SQL, SQS): the
 * real nestjs-durable engine on that transport, our worker serving its steps through the promise
 * facade. Each suite supplies its own engine harness, worker and transport handle.
 */
import type { RunResult, StepCheckpoint, WorkflowCtx } from "@dudousxd/nestjs-durable-core"
import { assert } from "vitest"
import { FatalError, type TransportHandle, type Worker } from "../../src/promise.js"

/** What the scenarios need of an engine harness (each transport's harness has this much). */
export interface InteropEngine {
  readonly register: (name: string, fn: (ctx: WorkflowCtx, input: unknown) => Promise<unknown>) => void
  readonly start: (workflow: string, input: unknown) => Promise<string>
  readonly waitForRun: (runId: string) => Promise<RunResult>
  readonly run: (workflow: string, input: unknown) => Promise<RunResult>
  readonly checkpoint: (runId: string, seq: number) => Promise<StepCheckpoint | null>
}

/**
 * Runs `worker` on `transport` while `body` runs, then stops it and waits until its run has ended;
 * resolves with what `body` resolved with.
 */
export const whileServing = async <A>(worker: Worker, transport: TransportHandle, body: () => Promise<A>): Promise<A> => {
  const running = worker.run(transport)
  const result = await body()
  await worker.stop()
  await running
  return result
}

/**
 * The step fails its run at its first attempt, not retried though `retries: 3` allows it, with the
 * non-retryable `code` on its checkpoint: its handler ran once. `meanwhile` runs while the worker
 * still serves, after the run ended (to give a task left behind time to come back). Resolves with
 * the checkpoint, for what else the caller checks.
 */
export const failsOnceWith = async (
  engine: InteropEngine,
  worker: Worker,
  transport: TransportHandle,
  stepName: string,
  handler: () => Promise<unknown>,
  code: string,
  meanwhile: () => Promise<void> = async () => {}
): Promise<{ readonly status: string; readonly error: { readonly code: string; readonly retryable: boolean; readonly message: string } }> => {
  let calls = 0
  worker.step(stepName, async () => {
    calls++
    return handler()
  })
  engine.register("checkout", async (ctx) => ctx.step(stepName, {}, { retries: 3 }))
  const { runId, result } = await whileServing(worker, transport, async () => {
    const runId = await engine.start("checkout", {})
    const result = await engine.waitForRun(runId)
    await meanwhile()
    return { runId, result }
  })
  assert.strictEqual(result.status, "failed")
  assert.strictEqual(calls, 1)
  const checkpoint = JSON.parse(JSON.stringify(await engine.checkpoint(runId, 0)))
  assert.strictEqual(checkpoint.status, "failed")
  assert.strictEqual(checkpoint.error.code, code)
  assert.strictEqual(checkpoint.error.retryable, false)
  return checkpoint
}

/** A `FatalError` fails the run after exactly one attempt and keeps its code on the checkpoint. */
export const fatalErrorFailsOnce = async (
  engine: InteropEngine,
  worker: Worker,
  transport: TransportHandle,
  stepName: string
): Promise<void> => {
  await failsOnceWith(engine, worker, transport, stepName, async () => {
    throw new FatalError("card declined", "card_declined")
  }, "card_declined")
}

/** A retryable error recovers within `retries: 3`: attempts 1, 2, 3, the third succeeding. */
export const retryableErrorRecovers = async (
  engine: InteropEngine,
  worker: Worker,
  transport: TransportHandle
): Promise<void> => {
  const attempts: Array<number> = []
  worker.step("flaky", async (_input: unknown, ctx) => {
    attempts.push(ctx.attempt)
    if (ctx.attempt < 3) throw Object.assign(new Error("try again"), { code: "busy" })
    return "ok"
  })
  engine.register("wf", async (ctx) => ctx.step("flaky", {}, { retries: 3 }))
  const result = await whileServing(worker, transport, () => engine.run("wf", {}))
  assert.strictEqual(result.status, "completed")
  assert.strictEqual(result.output, "ok")
  assert.deepStrictEqual(attempts, [1, 2, 3])
}
