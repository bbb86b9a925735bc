import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Step from "../../src/core/Step.js"
import * as Workflow from "../../src/core/Workflow.js"
import { StepTask } from "../../src/wire/StepProtocol.js"
import { makeTask } from "./workflowSupport.js"

const task = (name: string) => StepTask.make({ runId: "run-1", seq: 1, name, stepId: "run-1:1", group: name, attempt: 1 })

const outputOf = (output: unknown) =>
  Effect.flatMap(
    Step.registry([Step.make("s", () => Effect.succeed(output))]),
    (registry) => Step.processStep(registry, task("s"))
  )

const cyclic: Record<string, unknown> = { name: "a" }
cyclic["self"] = cyclic
const throwingToJSON = { toJSON: () => { throw new Error("no JSON for you") } }
const throwingGetter = Object.defineProperty({}, "amount", {
  enumerable: true,
  get: () => { throw new Error("getter exploded") }
})

describe("a result that JSON cannot carry", () => {
  for (
    const [label, output, path, reason] of [
      ["a BigInt", { total: 10n }, "$.total", /BigInt/],
      ["a cycle", cyclic, "$.self", /cycle/],
      ["a nested function", { items: [{ fn: () => 1 }] }, "$.items[0].fn", /function/],
      ["a symbol", [Symbol("x")], "$[0]", /symbol/],
      ["a non-finite number", { ratio: Number.NaN }, "$.ratio", /NaN/],
      ["undefined in an array", [1, undefined], "$[1]", /undefined/],
      ["a key that is not an identifier", { "a b": Infinity }, `$["a b"]`, /Infinity/],
      ["a toJSON that throws", { nested: throwingToJSON }, "$.nested", /toJSON.*no JSON for you/],
      ["a getter that throws", throwingGetter, "$.amount", /getter exploded/],
      // JSON would carry these as {}: their contents lost without a word
      ["a Map", { byId: new Map([["a", 1]]) }, "$.byId", /a Map becomes \{\} in JSON \(return Object\.fromEntries\(map\)/],
      ["a Set", [new Set([1])], "$[0]", /a Set becomes \{\} in JSON \(return \[\.\.\.set\]\)/],
      ["a Promise", { later: Promise.resolve(1) }, "$.later", /a Promise becomes \{\} in JSON \(await it\)/],
      ["an Error", { error: new Error("x") }, "$.error", /an Error becomes \{\} in JSON/]
    ] as const
  ) {
    it.effect(`${label} fails the step at once, for good, naming where it is`, () =>
      Effect.gen(function*() {
        const result = yield* outputOf(output)
        assert.strictEqual(result.status, "failed")
        assert.strictEqual(result.error?.code, "unserializable_output")
        assert.strictEqual(result.error?.retryable, false)
        assert.include(result.error?.message, `at ${path}`)
        assert.match(result.error?.message ?? "", reason)
      }))
  }

  it.effect("undefined, absent properties, dates and toJSON values keep their meaning", () =>
    Effect.gen(function*() {
      assert.strictEqual((yield* outputOf(undefined)).status, "completed")
      const dated = yield* outputOf({ at: new Date(0), skip: undefined, n: 1 })
      assert.strictEqual(dated.status, "completed")
      const custom = yield* outputOf({ toJSON: () => "plain" })
      assert.strictEqual(custom.status, "completed")
      // a Map subclass that says how it goes on the wire is its own business
      class Registry extends Map<string, number> {
        toJSON() {
          return Object.fromEntries(this)
        }
      }
      assert.strictEqual((yield* outputOf({ registry: new Registry([["a", 1]]) })).status, "completed")
    }))

  it.effect("a workflow whose output cannot be encoded fails its turn with unserializable_output", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("wf", (_: unknown) => Effect.succeed({ id: 1n }))
      const decision = yield* Workflow.processWorkflowTask([wf], makeTask("wf"))
      assert.strictEqual(decision.status, "failed")
      const error = (decision as { error?: { code?: unknown; message?: string } }).error
      assert.strictEqual(error?.code, "unserializable_output")
      assert.include(error?.message, "at $.id")
    }))
})

/** `{ n: { n: … } }`, `depth` levels deep: past what JSON.stringify (or a recursive walk) has stack for. */
const nested = (depth: number) => {
  const root: Record<string, unknown> = {}
  let at = root
  for (let i = 0; i < depth; i++) at = (at["n"] = {}) as Record<string, unknown>
  return root
}

describe("a result the walk itself cannot finish", () => {
  it.effect("a value nested too deeply for JSON fails the step, for good, rather than ending it without a result", () =>
    Effect.gen(function*() {
      assert.throws(() => JSON.stringify(nested(100_000)), RangeError)
      const result = yield* outputOf(nested(100_000))
      assert.strictEqual(result.status, "failed")
      assert.strictEqual(result.error?.code, "unserializable_output")
      assert.strictEqual(result.error?.retryable, false)
      assert.match(result.error?.message ?? "", /nested \d+ or more levels deep/)
      // a deep value JSON can carry is still a result
      assert.strictEqual((yield* outputOf(nested(500))).status, "completed")
    }))

  it.effect("a proxy whose traps throw fails the step, for good, naming what threw", () =>
    Effect.gen(function*() {
      const hostile = new Proxy({}, { ownKeys: () => { throw new Error("ownKeys exploded") } })
      const result = yield* outputOf({ inner: hostile })
      assert.strictEqual(result.status, "failed")
      assert.strictEqual(result.error?.code, "unserializable_output")
      assert.match(result.error?.message ?? "", /ownKeys exploded/)
      const revoked = Proxy.revocable({}, {})
      revoked.revoke()
      const gone = yield* outputOf([revoked.proxy])
      assert.strictEqual(gone.status, "failed")
      assert.match(gone.error?.message ?? "", /revoked/)
    }))

  it.effect("a workflow whose output is nested too deeply fails its turn with unserializable_output", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("wf", (_: unknown) => Effect.succeed(nested(100_000)))
      const decision = yield* Workflow.processWorkflowTask([wf], makeTask("wf"))
      assert.strictEqual(decision.status, "failed")
      assert.strictEqual((decision as { error?: { code?: unknown } }).error?.code, "unserializable_output")
    }))
})

describe("events a handler logged that JSON cannot carry", () => {
  it.effect("leave out only what cannot be carried, saying what and where; the result goes on the wire", () =>
    Effect.gen(function*() {
      const cycle: Record<string, unknown> = {}
      cycle["self"] = cycle
      const registry = yield* Step.registry([
        Step.fromPromise("s", async (_: unknown, ctx) => {
          ctx.log.info("fine", { n: 1 })
          ctx.log.info("counted", { total: 10n })
          ctx.log.sub("child-1", "failed", "child failed", { name: "child", data: cycle })
          ctx.log.warn(1n as unknown as string)
          return { ok: true }
        })
      ])
      const result = yield* Step.processStep(registry, task("s"))
      assert.strictEqual(result.status, "completed")
      assert.deepStrictEqual(result.output, { ok: true })
      const events = result.events ?? []
      assert.doesNotThrow(() => JSON.stringify(result))
      assert.deepStrictEqual(events.map((e) => e.message.slice(0, 12)), ["fine", "counted", "child failed", "(left out: a"])
      assert.deepStrictEqual(events[0]!.data, { n: 1 })
      assert.match(String(events[1]!.data), /^\(left out: a BigInt has no JSON form .* at data\.total\)$/)
      assert.match(String(events[2]!.data), /cycle.* at data\.self\)$/)
      assert.deepStrictEqual([events[2]!.subId, events[2]!.name, events[2]!.status], ["child-1", "child", "failed"])
      assert.match(events[3]!.message, /BigInt .* at message\)$/)
    }))

  it.effect("a failed step's events are made encodable too", () =>
    Effect.gen(function*() {
      const registry = yield* Step.registry([
        Step.make("s", (_: unknown, ctx) => {
          ctx.log.error("about to fail", { error: new Error("x") })
          return Effect.fail(new Error("failed"))
        })
      ])
      const result = yield* Step.processStep(registry, task("s"))
      assert.strictEqual(result.status, "failed")
      assert.strictEqual(result.error?.message, "failed")
      assert.match(String(result.events?.[0]?.data), /an Error becomes \{\} in JSON.* at data\.error\)$/)
    }))
})

describe("hostile values: getters and toJSON that throw", () => {
  it.effect("an error whose message, code and stack getters throw still fails the step with a readable error", () =>
    Effect.gen(function*() {
      const hostile = new Error("x")
      void hostile.stack // Node renders the stack lazily, through the message: render it before the getters go in
      for (const name of ["message", "code", "retryable", "stack"]) {
        Object.defineProperty(hostile, name, { get: () => { throw new Error(`${name} exploded`) } })
      }
      const plain = Object.defineProperties({}, {
        message: { enumerable: true, get: () => { throw new Error("message exploded") } },
        code: { enumerable: true, get: () => { throw new Error("code exploded") } }
      })
      for (const failure of [hostile, plain]) {
        const registry = yield* Step.registry([Step.make("s", () => Effect.fail(failure))])
        const result = yield* Step.processStep(registry, task("s"))
        assert.strictEqual(result.status, "failed")
        assert.isString(result.error?.message)
        assert.isAbove(result.error?.message.length ?? 0, 0)
        assert.isUndefined(result.error?.code)
      }
    }))
})

describe("hostile values a workflow body fails with", () => {
  it.effect("a failure whose message, code or stack getters throw still fails the turn with a readable error", () =>
    Effect.gen(function*() {
      const plain = Object.defineProperty({}, "message", { enumerable: true, get: () => { throw new Error("message exploded") } })
      const error = new Error("readable")
      void error.stack // Node renders the stack lazily: render it before the getters go in
      for (const name of ["code", "stack"]) {
        Object.defineProperty(error, name, { get: () => { throw new Error(`${name} exploded`) } })
      }
      const cases = [
        ["fails", Workflow.make("fails", (_: unknown) => Effect.fail(plain)), /failed with a value whose properties throw/],
        ["dies", Workflow.make("dies", (_: unknown) => Effect.die(plain)), /failed with a value whose properties throw/],
        ["getters", Workflow.make("getters", (_: unknown) => Effect.fail(error)), /^readable$/]
      ] as const
      for (const [name, wf, message] of cases) {
        const decision = yield* Workflow.processWorkflowTask([wf], makeTask(name))
        assert.strictEqual(decision.status, "failed", name)
        const failed = (decision as { error?: { message: string; code?: unknown; stack?: unknown } }).error
        assert.match(failed?.message ?? "", message)
        assert.isUndefined(failed?.code)
        assert.isUndefined(failed?.stack)
      }
    }))
})

describe("a workflow command carrying a value JSON cannot carry", () => {
  it.effect("fails the turn, for good, naming the command, with the commands before it", () =>
    Effect.gen(function*() {
      const cases = [
        ["call", (ctx: Workflow.WorkflowContext) => ctx.step("charge", { amount: 10n }), /^the input of step "charge" \(seq 1\) .*BigInt.* at \$\.amount$/, "unserializable_input"],
        ["child", (ctx: Workflow.WorkflowContext) => ctx.child("sub", [() => 1]), /^the input of child workflow "sub" \(seq 1\) .*function.* at \$\[0\]$/, "unserializable_input"],
        ["local", (ctx: Workflow.WorkflowContext) => ctx.sideEffect(Effect.succeed(new Map())), /^the output of local step "sideEffect" \(seq 1\) .*a Map/, "unserializable_output"]
      ] as const
      for (const [name, op, message, code] of cases) {
        const wf = Workflow.make(name, (_: unknown, ctx) => Effect.zipRight(ctx.now(), op(ctx)))
        const decision = yield* Workflow.processWorkflowTask([wf], makeTask(name))
        assert.doesNotThrow(() => JSON.stringify(decision))
        assert.strictEqual(decision.status, "failed", name)
        const error = (decision as { error?: { message: string; code?: unknown; retryable?: unknown } }).error
        assert.match(error?.message ?? "", message)
        assert.strictEqual(error?.code, code)
        assert.strictEqual(error?.retryable, false)
        // the clock read before it is kept
        assert.deepStrictEqual(decision.commands.map((c) => [c.kind, c.seq]), [["recordStep", 0]])
      }
    }))

  it.effect("a local step's events are made encodable, the rest of the turn unchanged", () =>
    Effect.gen(function*() {
      const wf = Workflow.make("logs", (_: unknown, ctx) =>
        ctx.sideEffect((local) => Effect.sync(() => {
          local.log.info("counted", { total: 10n })
          return 1
        })))
      const decision = yield* Workflow.processWorkflowTask([wf], makeTask("logs"))
      assert.strictEqual(decision.status, "completed")
      assert.doesNotThrow(() => JSON.stringify(decision))
      const recorded = decision.commands[0] as { events?: ReadonlyArray<{ data?: unknown }> }
      assert.match(String(recorded.events?.[0]?.data), /BigInt .* at data\.total\)$/)
    }))
})
