import { Cause } from "effect"
import { assert, describe, it } from "vitest"
import { FatalError, inMemory, type StepResult, Worker } from "../src/promise.js"
import { stepTask as task } from "./support/local.js"


const quiet = { handleSignals: false, logLevel: "None" } as const

describe("promise facade", () => {
  it("runs steps on a transport, stops single-flight and drains before resolving run()", async () => {
    const worker = new Worker({ ...quiet, concurrency: 4, shutdownTimeoutMs: 30_000 })
    worker.step("payments.charge-card", async (input: { amount: number }) => ({ chargeId: `ch_${input.amount}` }))
    const broker = inMemory()
    const running = worker.run(broker)
    await broker.enqueue(task("r1", "payments.charge-card", { amount: 99 }))
    const reply = await broker.takeReply()
    assert.strictEqual(reply._tag, "StepResult")
    if (reply._tag !== "StepResult") return
    const { result } = reply
    assert.strictEqual(result.status, "completed")
    assert.deepStrictEqual(result.output, { chargeId: "ch_99" })
    await Promise.all([worker.stop(), worker.stop()])
    await running
    const deregistrations = (await import("effect")).Effect.runSync(broker.broker.journal)
      .filter((e) => e.op === "deregister")
    assert.strictEqual(deregistrations.length, 1)
  })

  it("processTask maps FatalError, other errors and unknown names like the wire expects", async () => {
    const worker = new Worker(quiet)
    worker.step("pay", async (input: { declined: boolean }) => {
      if (input.declined) throw new FatalError("card declined", "card_declined")
      throw "gateway said no"
    })
    const fatal = await worker.processTask(task("r1", "pay", { declined: true })) as StepResult
    assert.deepStrictEqual(
      { message: fatal.error?.message, code: fatal.error?.code, retryable: fatal.error?.retryable },
      { message: "card declined", code: "card_declined", retryable: false }
    )
    const other = await worker.processTask(task("r2", "pay", { declined: false })) as StepResult
    assert.deepStrictEqual(other.error, { message: "gateway said no" })
    const missing = await worker.processTask(task("r3", "nope")) as StepResult
    assert.deepStrictEqual(missing.error, { message: "no handler for nope", retryable: false })
    await worker.processTask("garbage").then(() => assert.fail("should reject"), (e: Error) => assert.match(e.message, /malformed step task/))
  })

  it("invalid options throw at construction, naming the option", () => {
    assert.throws(() => new Worker({ concurrency: 1.5 }), /concurrency/)
    assert.throws(() => new Worker({ buildId: "" }), /buildId must be a non-empty string/)
  })

  it("a step cannot be registered twice, nor after the worker started", async () => {
    const worker = new Worker(quiet)
    worker.step("a", () => 1)
    assert.throws(() => worker.step("a", () => 2), /registered twice/)
    const running = worker.run(inMemory())
    assert.throws(() => worker.step("b", () => 2), /already started/)
    await worker.stop()
    await running
  })

  it("a failed deregistration rejects every stop() and run() with the same error", async () => {
    const worker = new Worker(quiet)
    const broker = inMemory()
    ;(await import("effect")).Effect.runSync(broker.broker.setDeregisterFault({ _tag: "Fail", message: "403 forbidden" }))
    const running = worker.run(broker)
    const outcomes = await Promise.allSettled([worker.stop(), worker.stop(), running])
    for (const outcome of outcomes) {
      assert.strictEqual(outcome.status, "rejected")
      if (outcome.status === "rejected") {
        assert.strictEqual(outcome.reason._tag, "DeregistrationError")
        assert.strictEqual(outcome.reason.message, "403 forbidden")
      }
    }
  })

  it("run() after stop() rejects clearly", async () => {
    const worker = new Worker(quiet)
    await worker.stop()
    await worker.run(inMemory()).then(() => assert.fail("should reject"), (e: Error) => assert.match(e.message, /cannot run after stop\(\)/))
  })

  it("runUntil resolves when the predicate holds, and rejects with an interruption on an external stop", async () => {
    const worker = new Worker(quiet)
    let done = 0
    worker.step("count", () => ++done)
    const broker = inMemory()
    const until = worker.runUntil(broker, { until: () => done >= 3, pollIntervalMs: 5 })
    for (let i = 0; i < 3; i++) await broker.enqueue(task(`r${i}`, "count"))
    await until
    assert.strictEqual(done, 3)

    const other = new Worker(quiet)
    const waiting = other.runUntil(inMemory(), { until: new Promise(() => {}) })
    await other.stop()
    const error = await waiting.then(() => undefined, (e: unknown) => e)
    assert.isTrue(Cause.isInterruptedException(error))
  })

  it("SIGTERM stops gracefully; a second signal interrupts running work", async () => {
    const worker = new Worker({ logLevel: "None", shutdownTimeoutMs: 60_000 })
    let aborted = false
    let started!: () => void
    const running = new Promise<void>((resolve) => (started = resolve))
    worker.step("long", (_input: unknown, ctx) =>
      new Promise((_, reject) => {
        started()
        ctx.signal.addEventListener("abort", () => {
          aborted = true
          reject(new Error("aborted"))
        })
      }))
    const broker = inMemory()
    const run = worker.run(broker)
    await broker.enqueue(task("r1", "long"))
    await running
    const silence = console.error
    console.error = () => {}
    try {
      process.emit("SIGTERM", "SIGTERM")
      await new Promise((resolve) => setImmediate(resolve))
      assert.isFalse(aborted)
      process.emit("SIGTERM", "SIGTERM")
      await run
    } finally {
      console.error = silence
    }
    assert.isTrue(aborted)
    assert.strictEqual(process.listenerCount("SIGTERM"), 0)
  })
})
