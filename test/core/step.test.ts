import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as HashMap from "effect/HashMap"
import * as Logger from "effect/Logger"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import * as Interruption from "../../src/core/internal/interruption.js"
import * as Step from "../../src/core/Step.js"
import { decodeStepTask, StepTask } from "../../src/wire/StepProtocol.js"

const task = (name: string, input?: unknown, extra: Partial<typeof StepTask.Encoded> = {}) =>
  StepTask.make({
    runId: "run-1",
    seq: 3,
    name,
    stepId: "run-1:3",
    group: name,
    attempt: 1,
    ...(input === undefined ? {} : { input }),
    ...extra
  })

const run = (steps: ReadonlyArray<Step.Step>, t: StepTask) =>
  Effect.flatMap(Step.registry(steps), (registry) => Step.processStep(registry, t))

describe("processStep", () => {
  it.effect("completes with the handler's output and echoes runId, seq and stepId", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(1_700_000_000_000)
      const charge = Step.fromPromise("payments.charge-card", async (input: { amount: number }) => ({
        chargeId: `ch_${input.amount}`
      }))
      const result = yield* run([charge], task("payments.charge-card", { amount: 99 }))
      assert.deepStrictEqual(result, {
        runId: "run-1",
        seq: 3,
        stepId: "run-1:3",
        startedAt: 1_700_000_000_000,
        status: "completed",
        output: { chargeId: "ch_99" }
      })
    }))

  it.effect("no handler for the name fails non-retryably with the engine's message", () =>
    Effect.gen(function*() {
      const result = yield* run([], task("missing.step"))
      assert.strictEqual(result.status, "failed")
      assert.deepStrictEqual(result.error, { message: "no handler for missing.step", retryable: false })
    }))

  it.effect("a FatalError is final: retryable false with its code", () =>
    Effect.gen(function*() {
      const step = Step.fromPromise("pay", async () => {
        throw new Step.FatalError("card declined", "card_declined")
      })
      const result = yield* run([step], task("pay"))
      assert.strictEqual(result.error?.message, "card declined")
      assert.strictEqual(result.error?.code, "card_declined")
      assert.strictEqual(result.error?.retryable, false)
    }))

  it.effect("a FatalError from an Effect handler is final too", () =>
    Effect.gen(function*() {
      const step = Step.make("pay", () => Effect.fail(new Step.FatalError("no such account")))
      const result = yield* run([step], task("pay"))
      assert.strictEqual(result.error?.retryable, false)
      assert.isUndefined(result.error?.code)
    }))

  it.effect("any other error is retryable: no retryable key, message and stack kept", () =>
    Effect.gen(function*() {
      const step = Step.fromPromise("pay", async () => {
        throw new Error("gateway timeout")
      })
      const result = yield* run([step], task("pay"))
      assert.strictEqual(result.status, "failed")
      assert.strictEqual(result.error?.message, "gateway timeout")
      assert.isFalse("retryable" in (result.error ?? {}))
      assert.include(result.error?.stack ?? "", "gateway timeout")
    }))

  it.effect("a string code and a boolean retryable on the thrown value are carried through", () =>
    Effect.gen(function*() {
      const step = Step.fromPromise("pay", async () => {
        throw Object.assign(new Error("rate limited"), { code: "rate_limited", retryable: true })
      })
      const result = yield* run([step], task("pay"))
      assert.strictEqual(result.error?.code, "rate_limited")
      assert.strictEqual(result.error?.retryable, true)
      const notString = Step.fromPromise("pay", async () => {
        throw Object.assign(new Error("x"), { code: 42, retryable: "no" })
      })
      const other = yield* run([notString], task("pay"))
      assert.isFalse("code" in (other.error ?? {}))
      assert.isFalse("retryable" in (other.error ?? {}))
    }))

  it.effect("thrown non-Errors still give a useful message", () =>
    Effect.gen(function*() {
      const cases: Array<[unknown, string]> = [
        ["plain string", "plain string"],
        [42, "step handler failed with number 42"],
        [undefined, "step handler failed with undefined"],
        [null, "step handler failed with null"],
        [{ reason: "over limit" }, "step handler failed with {\"reason\":\"over limit\"}"],
        [{ message: "object with message", code: "E1" }, "object with message"]
      ]
      for (const [thrown, message] of cases) {
        const step = Step.fromPromise("pay", async () => {
          throw thrown
        })
        const result = yield* run([step], task("pay"))
        assert.strictEqual(result.error?.message, message)
      }
      const cyclic: Record<string, unknown> = {}
      cyclic.self = cyclic
      const step = Step.fromPromise("pay", async () => {
        throw cyclic
      })
      const result = yield* run([step], task("pay"))
      assert.strictEqual(result.error?.message, "step handler failed with a Object that has no message")
    }))

  it.effect("a handler that answers synchronously: its value, or what it throws, as from an async one", () =>
    Effect.gen(function*() {
      const ok = yield* run([Step.fromPromise("sync.ok", (input: { n: number }) => input.n * 2)], task("sync.ok", { n: 21 }))
      assert.strictEqual(ok.status, "completed")
      assert.strictEqual(ok.output, 42)
      const thrown = yield* run([Step.fromPromise("sync.throw", () => {
        throw "plain string"
      })], task("sync.throw"))
      assert.strictEqual(thrown.status, "failed")
      assert.strictEqual(thrown.error?.message, "plain string")
      assert.isUndefined(thrown.error?.retryable)
      const fatal = yield* run([Step.fromPromise("sync.fatal", () => {
        throw new Step.FatalError("no such card", "card_missing")
      })], task("sync.fatal"))
      assert.deepInclude(fatal.error, { message: "no such card", code: "card_missing", retryable: false })
      // a thenable that is not a Promise is awaited too
      const thenable = yield* run([Step.fromPromise("sync.thenable", () => ({ then: (resolve: (v: string) => void) => resolve("later") }) as unknown as Promise<string>)], task("sync.thenable"))
      assert.strictEqual(thenable.output, "later")
    }))

  it.effect("a defect in an Effect handler becomes a retryable failure", () =>
    Effect.gen(function*() {
      const step = Step.make("pay", () => Effect.die(new Error("bug")))
      const result = yield* run([step], task("pay"))
      assert.strictEqual(result.error?.message, "bug")
      assert.isUndefined(result.error?.retryable)
    }))

  it.effect("a handler that throws instead of returning an effect fails the step, traced or not", () =>
    Effect.gen(function*() {
      const step = Step.make("pay", (): Effect.Effect<never> => {
        throw new Error("built no effect")
      })
      const asStep = yield* run([step], task("pay"))
      assert.strictEqual(asStep.status, "failed")
      assert.strictEqual(asStep.error?.message, "built no effect")
      assert.isUndefined(asStep.error?.retryable)
      const traced = yield* run([step], task("pay", undefined, { traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" }))
      assert.strictEqual(traced.error?.message, "built no effect")
      // a step with an input schema that throws as it decodes (a filter's own bug) fails likewise
      const decoding = Step.fromPromise("decode", (input: number) => input, {
        input: Schema.Number.pipe(Schema.filter(() => {
          throw new Error("filter bug")
        }))
      })
      const decoded = yield* run([decoding], task("decode", 1))
      assert.strictEqual(decoded.status, "failed")
      assert.include(decoded.error?.message, "filter bug")
    }))

  it.effect("startedAt is the pickup time, not the finish time", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(5_000)
      const step = Step.make("slow", () => Effect.as(Effect.sleep("3 seconds"), "done"))
      const registry = yield* Step.registry([step])
      const fiber = yield* Effect.fork(Step.processStep(registry, task("slow")))
      yield* TestClock.adjust("3 seconds")
      const result = yield* Fiber.join(fiber)
      assert.strictEqual(result.startedAt, 5_000)
      assert.strictEqual(result.output, "done")
    }))

  it.effect("events from ctx.log and Effect.log are returned, and omitted when there are none", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(10)
      const logs = Step.make("etl", (_input, ctx) =>
        Effect.gen(function*() {
          ctx.log.info("loaded", { rows: 3 })
          yield* Effect.logWarning("slow source")
          ctx.log.sub("shard-1", "failed", "shard failed", { phase: "load" })
          return "ok"
        }))
      const result = yield* run([logs], task("etl"))
      assert.deepStrictEqual(result.events, [
        { at: 10, level: "info", message: "loaded", data: { rows: 3 } },
        { at: 10, level: "warn", message: "slow source" },
        { at: 10, level: "error", message: "shard failed", subId: "shard-1", status: "failed", phase: "load" }
      ])
      const quiet = yield* run([Step.make("quiet", () => Effect.succeed(1))], task("quiet"))
      assert.isFalse("events" in quiet)
    }))

  it.effect("what a handler logs carries the task's annotations: ctx.log from an async handler, Effect.log from an Effect one", () =>
    Effect.gen(function*() {
      const lines: Array<{ readonly message: unknown; readonly annotations: Record<string, unknown> }> = []
      const collect = Logger.make(({ annotations, message }) => {
        lines.push({ message, annotations: Object.fromEntries(HashMap.toEntries(annotations)) })
      })
      const asyncStep = Step.fromPromise("notify", async (_input: unknown, ctx) => {
        ctx.log.info("sending")
        return "sent"
      })
      const effectStep = Step.make("etl", () => Effect.as(Effect.logInfo("loading"), "ok"))
      const withLogger = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
        Effect.provide(effect, Logger.replace(Logger.defaultLogger, collect))
      const sent = yield* withLogger(run([asyncStep], task("notify")))
      yield* withLogger(run([effectStep], task("etl")))
      assert.deepStrictEqual(sent.events?.map((e) => e.message), ["sending"])
      const byMessage = new Map(lines.map((line) => [String(line.message), line.annotations]))
      for (const [message, name] of [["sending", "notify"], ["loading", "etl"]] as const) {
        assert.deepInclude(byMessage.get(message), { runId: "run-1", stepId: "run-1:3", step: name, attempt: 1 }, message)
      }
    }))

  it.effect("the worker's line of a failed step says whether the engine retries it, and its code", () =>
    Effect.gen(function*() {
      const lines: Array<{ readonly message: unknown; readonly annotations: Record<string, unknown> }> = []
      const collect = Logger.make(({ annotations, message }) => {
        lines.push({ message, annotations: Object.fromEntries(HashMap.toEntries(annotations)) })
      })
      const declined = Step.fromPromise("charge", async () => {
        throw new Step.FatalError("card declined", "card_declined")
      })
      const timedOut = Step.fromPromise("mail", async () => {
        throw Object.assign(new Error("smtp timeout"), { code: "ETIMEDOUT" })
      })
      const plain = Step.fromPromise("plain", async () => {
        throw new Error("boom")
      })
      for (const [step, name] of [[declined, "charge"], [timedOut, "mail"], [plain, "plain"]] as const) {
        yield* Effect.provide(run([step], task(name)), Logger.replace(Logger.defaultLogger, collect))
      }
      const failedLines = lines.filter((line) => String(line.message).startsWith("step failed: "))
      assert.deepStrictEqual(failedLines.map((line) => [String(line.message), line.annotations["step"], line.annotations["retryable"], line.annotations["code"]]), [
        ["step failed: card declined", "charge", false, "card_declined"],
        ["step failed: smtp timeout", "mail", true, "ETIMEDOUT"],
        ["step failed: boom", "plain", true, undefined]
      ])
    }))

  it.effect("events are kept when the handler fails", () =>
    Effect.gen(function*() {
      const step = Step.fromPromise("pay", async (_: unknown, ctx) => {
        ctx.log.info("about to fail")
        throw new Error("boom")
      })
      const result = yield* run([step], task("pay"))
      assert.strictEqual(result.events?.[0]?.message, "about to fail")
    }))

  it.effect("the handler gets runId, seq, stepId, attempt, traceparent and context", () =>
    Effect.gen(function*() {
      const step = Step.make("echo", (_input, ctx) =>
        Effect.succeed({
          runId: ctx.runId,
          seq: ctx.seq,
          stepId: ctx.stepId,
          attempt: ctx.attempt,
          traceparent: ctx.traceparent,
          context: ctx.context,
          aborted: ctx.signal.aborted
        }))
      const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
      const result = yield* run(
        [step],
        task("echo", undefined, { attempt: 2, traceparent, context: { tenant: "acme" } })
      )
      assert.deepStrictEqual(result.output, {
        runId: "run-1",
        seq: 3,
        stepId: "run-1:3",
        attempt: 2,
        traceparent,
        context: { tenant: "acme" },
        aborted: false
      })
    }))

  it.effect("the step span continues the task's traceparent", () =>
    Effect.gen(function*() {
      const step = Step.make("trace", () =>
        Effect.map(Effect.currentSpan, (span) => ({
          traceId: span.traceId,
          parent: span.parent._tag === "Some" ? span.parent.value.spanId : undefined
        })))
      const result = yield* run(
        [step],
        task("trace", undefined, { traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" })
      )
      assert.deepStrictEqual(result.output, { traceId: "0af7651916cd43dd8448eb211c80319c", parent: "b7ad6b7169203331" })
      const invalid = yield* run([step], task("trace", undefined, { traceparent: "garbage" }))
      assert.strictEqual(invalid.status, "completed")
      assert.notStrictEqual((invalid.output as { traceId: string }).traceId, "0af7651916cd43dd8448eb211c80319c")
    }))

  it.effect("interrupting the step aborts the handler's signal; a stop's interruption ends when the handler does, any other at once", () =>
    Effect.gen(function*() {
      let aborted = 0
      let settle: () => void = () => {}
      const step = Step.fromPromise("wait", (_: unknown, ctx) =>
        new Promise<never>((_resolve, reject) => {
          ctx.signal.addEventListener("abort", () => {
            aborted++
            settle = () => reject(ctx.signal.reason)
          })
        }))
      const registry = yield* Step.registry([step])
      // the shutdown deadline: the task goes back to the broker, so the handler must have ended
      const stopped = yield* Effect.fork(Step.processStep(registry, task("wait")))
      yield* Effect.yieldNow()
      const interrupting = yield* Effect.fork(Fiber.interruptAs(stopped, Interruption.byDeadline))
      yield* Effect.repeatN(Effect.yieldNow(), 20)
      assert.strictEqual(aborted, 1)
      assert.isNull(interrupting.unsafePoll(), "the handler has not ended yet")
      settle()
      assert.isTrue(Exit.isInterrupted(yield* Fiber.join(interrupting)))
      // anything else (a cancel, a timeout of the application's): at once, the signal told
      const other = yield* Effect.fork(Step.processStep(registry, task("wait")))
      yield* Effect.yieldNow()
      assert.isTrue(Exit.isInterrupted(yield* Fiber.interrupt(other)))
      assert.strictEqual(aborted, 2)
    }))

  it.effect("input and output schemas: decoded input, encoded output, non-retryable when they do not fit", () =>
    Effect.gen(function*() {
      const step = Step.make(
        "add",
        (input: { a: number; b: number }) => Effect.succeed({ sum: input.a + input.b, at: new Date(0) }),
        {
          input: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
          output: Schema.Struct({ sum: Schema.Number, at: Schema.Date })
        }
      )
      const ok = yield* run([step], task("add", { a: 1, b: 2 }))
      assert.deepStrictEqual(ok.output, { sum: 3, at: "1970-01-01T00:00:00.000Z" })
      const bad = yield* run([step], task("add", { a: "1" }))
      assert.strictEqual(bad.status, "failed")
      assert.strictEqual(bad.error?.code, "invalid_input")
      assert.strictEqual(bad.error?.retryable, false)
      // the first problem only (the step's decoder stops there), by its field, on one line
      assert.strictEqual(bad.error?.message, "invalid input for step \"add\": a: Expected number, actual \"1\"")
      // no stack: it would be this library's and Effect's frames, stored by the engine for nothing
      assert.notProperty(bad.error, "stack")
      const odd = Step.make("odd", () => Effect.succeed({ sum: "x" as unknown as number }), { output: Schema.Struct({ sum: Schema.Number }) })
      const badOutput = yield* run([odd], task("odd", {}))
      assert.strictEqual(badOutput.error?.code, "invalid_output")
      assert.notProperty(badOutput.error, "stack")
    }))

  it.effect("duplicate step names are refused", () =>
    Effect.gen(function*() {
      const a = Step.make("dup", () => Effect.void)
      const error = yield* Effect.flip(Step.registry([a, a]))
      assert.strictEqual(error._tag, "DuplicateStepError")
      assert.strictEqual(error.registeredName, "dup")
      assert.strictEqual(error.message, "step \"dup\" is registered twice; each step name must have exactly one handler")
      // an error's name is its class's, which String(error) and loggers print before the message
      assert.strictEqual(error.name, "DuplicateStepError")
      assert.match(String(error), /^DuplicateStepError: step "dup" is registered twice/)
    }))
})

describe("StepTask decoding", () => {
  it("decodes the engine's captured bytes, optional fields optional", () => {
    const wire = JSON.parse(
      "{\"runId\":\"r-ok\",\"seq\":0,\"name\":\"payments.charge-card\",\"stepId\":\"r-ok:0\",\"group\":\"payments.charge-card\",\"input\":{\"amount\":5},\"priority\":9,\"attempt\":1,\"transport\":\"default\"}"
    )
    const decoded = decodeStepTask(wire)
    assert.isTrue(Either.isRight(decoded))
    if (Either.isRight(decoded)) {
      assert.strictEqual(decoded.right.priority, 9)
      assert.deepStrictEqual(decoded.right.input, { amount: 5 })
    }
    const noInput = decodeStepTask({ runId: "r", seq: 1, name: "n", stepId: "r:1", group: "n", attempt: 1 })
    assert.isTrue(Either.isRight(noInput))
  })

  it("accepts exactly what the StepTask schema accepts, with the same decoded value", () => {
    const base = { runId: "r", seq: 3, name: "n", stepId: "r:3", group: "n", attempt: 1 }
    const payloads: Array<unknown> = [
      base,
      { ...base, input: { a: [1, 2] }, traceparent: "00-abc-def-01", context: { k: 1 }, priority: 2.5, transport: "default" },
      { ...base, input: undefined, traceparent: undefined, context: undefined, priority: undefined, transport: undefined },
      { ...base, extra: "ignored", nested: { deep: true } },
      { ...base, priority: Number.NaN },
      { ...base, seq: 1.5 },
      { ...base, seq: 2 ** 53 },
      { ...base, seq: "3" },
      { ...base, attempt: 0 },
      { ...base, attempt: 2.5 },
      { ...base, runId: 1 },
      { ...base, name: undefined },
      { ...base, group: null },
      { ...base, traceparent: 7 },
      { ...base, context: [1, 2] },
      { ...base, context: null },
      { ...base, context: "x" },
      { ...base, priority: "high" },
      { ...base, transport: 1 },
      Object.assign(Object.create(null), base),
      [base],
      null,
      "task",
      42
    ]
    const bySchema = Schema.decodeUnknownEither(StepTask)
    for (const payload of payloads) {
      const ours = decodeStepTask(payload)
      const theirs = bySchema(payload)
      assert.strictEqual(Either.isRight(ours), Either.isRight(theirs), JSON.stringify(payload))
      if (Either.isRight(ours) && Either.isRight(theirs)) assert.deepStrictEqual(ours.right, theirs.right)
    }
  })

  it("a malformed task is a typed error that keeps the run coordinates when it has them", () => {
    const bad = decodeStepTask({ runId: "r", seq: 1, stepId: "r:1", attempt: 0 })
    assert.isTrue(Either.isLeft(bad))
    if (Either.isLeft(bad)) {
      assert.strictEqual(bad.left._tag, "TaskDecodeError")
      assert.deepStrictEqual(bad.left.identity, { runId: "r", seq: 1, stepId: "r:1" })
      assert.include(bad.left.message, "name")
    }
    const anonymous = decodeStepTask("not an object")
    assert.isTrue(Either.isLeft(anonymous) && anonymous.left.identity === undefined)
  })
})
