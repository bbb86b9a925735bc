/**
 * Conformance: ONE workflow body, run both ways on the real nestjs-durable engine over Redis/BullMQ —
 * in-process on the engine (`engine.register`), and remotely on our worker (`worker.workflow`, turn by
 * turn) — gives the same output and the same ordered `(seq, name, kind)` checkpoints. The body's
 * steps are served by our worker in both cases; the two runs live on two engines (own prefixes, own
 * stores), so they can share the run id, the signal token and every step input.
 */
import { isWorkflowControlFlowSignal, type StepCheckpoint } from "@dudousxd/nestjs-durable-core"
import { afterAll, assert, describe, it } from "vitest"
import { FatalError, type Worker } from "../../src/promise.js"
import type { EngineHarness } from "../support/engine.js"
import { engines, plain, serveFacade } from "../support/workflowWorkers.js"

/** The ops the body uses, as both the engine's `WorkflowCtx` and our `AsyncWorkflowContext` have them. */
interface PortableCtx {
  readonly now: () => Promise<number>
  readonly sideEffect: <A>(fn: () => A | Promise<A>) => Promise<A>
  readonly step: <A>(name: string, input: unknown) => Promise<A>
  readonly sleep: (duration: string) => Promise<void>
  readonly waitForSignal: <A>(token: string) => Promise<A>
  readonly child: <A>(workflow: string, input: unknown) => Promise<A>
}

interface Input {
  readonly order: string
  readonly amount: number
}

const TOKEN = "conformance:approve"

/** The single body under test: local ops, steps (sequential and parallel), a caught failure, a timer, a signal, a child. */
const body = async (ctx: PortableCtx, input: Input) => {
  const startedAt = await ctx.now()
  const ref = await ctx.sideEffect(() => `ref-${input.order}`)
  const reserved = await ctx.step<string>("conf.reserve", { order: input.order })
  const prices = await Promise.all([ctx.step<number>("conf.price", { sku: "a" }), ctx.step<number>("conf.price", { sku: "b" })])
  let payment: string
  try {
    payment = await ctx.step<string>("conf.charge", { amount: input.amount })
  } catch (error) {
    // the in-process engine suspends by throwing; a catch-all must hand that back (our worker's
    // context suspends on a promise that never settles, so there it is never seen)
    if (isWorkflowControlFlowSignal(error)) throw error
    payment = await ctx.step<string>("conf.refund", { reason: (error as Error).message })
  }
  await ctx.sleep("200ms")
  const approval = await ctx.waitForSignal<{ by: string }>(TOKEN)
  const child = await ctx.child<number>("conf.child", { n: 7 })
  return { ref, reserved, prices, payment, approvedBy: approval.by, child, clock: typeof startedAt }
}

const childBody = async (ctx: PortableCtx, input: { n: number }) => ctx.step<number>("conf.square", input.n)

const serveSteps = (worker: Worker) => {
  worker.step("conf.reserve", async (input: { order: string }) => `reserved-${input.order}`)
  worker.step("conf.price", async (input: { sku: string }) => input.sku.charCodeAt(0))
  worker.step("conf.charge", async () => {
    throw new FatalError("card declined", "card_declined")
  })
  worker.step("conf.refund", async (input: { reason: string }) => `refund(${input.reason})`)
  worker.step("conf.square", async (n: number) => n * n)
}

const RUN_ID = "conformance-run"
const INPUT: Input = { order: "o-42", amount: 20_000 }

const fleet = engines()
afterAll(() => fleet.closeAll())

/** Starts the run, delivers the signal once it waits, and returns its result and checkpoints. */
const drive = async (engine: EngineHarness) => {
  await engine.start("conf", INPUT, { runId: RUN_ID })
  await engine.waitForSignalWaiter(TOKEN)
  await engine.signal(TOKEN, { by: "ops" })
  const result = await engine.waitForRun(RUN_ID)
  const checkpoints = [...await engine.checkpoints(RUN_ID)].sort((a, b) => a.seq - b.seq)
  return { result, checkpoints }
}

const traceOf = (checkpoints: ReadonlyArray<StepCheckpoint>) =>
  checkpoints.map(({ kind, name, seq, status }) => ({ seq, name, kind, status }))

describe("conformance: one body, in-process on the engine and remote on our worker", () => {
  it("same output, same ordered (seq, name, kind) checkpoints", async () => {
    // (A) in-process on the engine; our worker serves the steps only
    const inProcess = await fleet.start()
    inProcess.register("conf", (ctx, input) => body(ctx as unknown as PortableCtx, input as Input))
    inProcess.register("conf.child", (ctx, input) => childBody(ctx as unknown as PortableCtx, input as { n: number }))
    const stepsOnly = fleet.track(await serveFacade(inProcess, serveSteps, { workflows: [] }))
    const a = await drive(inProcess)
    await stepsOnly.stop()

    // (B) remote: the engine knows neither workflow; our worker serves both, and the steps
    const remote = await fleet.start()
    const worker = fleet.track(await serveFacade(remote, (w) => {
      serveSteps(w)
      w.workflow("conf", (ctx, input: Input) => body(ctx, input))
      w.workflow("conf.child", (ctx, input: { n: number }) => childBody(ctx, input))
    }, { workflows: ["conf", "conf.child"] }))
    const b = await drive(remote)
    await worker.stop()

    assert.strictEqual(a.result.status, "completed", JSON.stringify(a.result.error))
    assert.strictEqual(b.result.status, "completed", JSON.stringify(b.result.error))
    assert.deepStrictEqual(a.result.output, {
      ref: "ref-o-42",
      reserved: "reserved-o-42",
      prices: [97, 98],
      payment: "refund(card declined)",
      approvedBy: "ops",
      child: 49,
      clock: "number"
    })
    assert.deepStrictEqual(b.result.output, a.result.output)

    // The engine names a timer checkpoint `sleep` when the body runs in-process and `sleep:<seq>` when
    // it applies a remote `sleep` command (engine-side naming, `applyCommands`); everything else matches.
    const expected = [
      { seq: 0, name: "now", kind: "local", status: "completed" },
      { seq: 1, name: "sideEffect", kind: "local", status: "completed" },
      { seq: 2, name: "conf.reserve", kind: "remote", status: "completed" },
      { seq: 3, name: "conf.price", kind: "remote", status: "completed" },
      { seq: 4, name: "conf.price", kind: "remote", status: "completed" },
      { seq: 5, name: "conf.charge", kind: "remote", status: "failed" },
      { seq: 6, name: "conf.refund", kind: "remote", status: "completed" },
      { seq: 7, name: "sleep", kind: "sleep", status: "<timer>" },
      { seq: 8, name: `signal:${TOKEN}`, kind: "signal", status: "completed" },
      { seq: 9, name: `signal:child:${RUN_ID}.child.9`, kind: "signal", status: "completed" }
    ]
    const normalized = (checkpoints: ReadonlyArray<StepCheckpoint>) =>
      traceOf(checkpoints).map((entry) =>
        entry.kind === "sleep" ? { ...entry, name: entry.name.replace(/^sleep:\d+$/, "sleep"), status: "<timer>" } : entry
      )
    assert.deepStrictEqual(normalized(a.checkpoints), expected)
    assert.deepStrictEqual(normalized(b.checkpoints), expected)
    assert.strictEqual(a.checkpoints[7]!.name, "sleep")
    assert.strictEqual(b.checkpoints[7]!.name, "sleep:7")

    // recorded values agree too: the failed step's error, the step inputs, the signal and child payloads
    const values = (checkpoints: ReadonlyArray<StepCheckpoint>) =>
      checkpoints.filter((c) => c.kind !== "sleep" && c.name !== "now").map((c) => {
        const { error, input, output, seq } = plain(c)
        return { seq, input, output, error: error === undefined ? undefined : { message: error.message, code: error.code } }
      })
    assert.deepStrictEqual(values(b.checkpoints), values(a.checkpoints))
    assert.deepStrictEqual(
      (await inProcess.getRun(`${RUN_ID}.child.9`))?.output,
      (await remote.getRun(`${RUN_ID}.child.9`))?.output
    )
  })
})
