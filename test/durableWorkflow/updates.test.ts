import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import * as DurableWorkflow from "../../src/core/DurableWorkflow.js"
import { contractTypeOf } from "../../src/core/internal/durableWorkflow/contract.js"
import { applyUpdate, query, replay, type ReplayFailure, validateUpdate } from "../../src/core/internal/durableWorkflow/run.js"
import { blob, replayInput, value } from "./support.js"


const accepted = (updateId: string, name: string, args: ReadonlyArray<unknown>) => ({
  event_type: "UpdateAccepted",
  payload: { update_id: updateId, update_name: name, arguments: blob(args) }
})
const applied = (updateId: string, name: string, args: ReadonlyArray<unknown>, sequence = 1) => ({
  event_type: "UpdateApplied",
  payload: { sequence, update_id: updateId, update_name: name, arguments: blob(args) }
})

const declarations = {
  updates: {
    setDiscount: [
      DurableWorkflow.param("percent", Schema.Int),
      DurableWorkflow.param("reason", Schema.NullOr(Schema.String), { default: null })
    ],
    addNotes: [DurableWorkflow.rest("lines", Schema.String)],
    explode: []
  },
  updateValidators: ["setDiscount"],
  signals: { approve: [DurableWorkflow.param("who", Schema.String)] },
  queries: { discount: [] }
} as const

/** The same workflow in the three authoring styles: updates change state the workflow waits on. */
const styles = {
  effect: DurableWorkflow.make("orders.pricing", (ctx) =>
    Effect.gen(function*() {
      let discount = 0
      let approvedBy = ""
      const notes: Array<string> = []
      ctx.onSignal("approve", (who) => {
        approvedBy = who
      })
      ctx.onUpdate("setDiscount", (percent, reason) => {
        discount = percent
        return { discount, reason }
      })
      ctx.onUpdateValidator("setDiscount", (percent) => percent <= 50)
      ctx.onUpdate("addNotes", (...lines) => Effect.sync(() => notes.push(...lines)))
      ctx.onUpdate("explode", () => Effect.fail(new Error("no can do")))
      ctx.onQuery("discount", () => ({ discount, approvedBy, notes }))
      yield* ctx.waitCondition(() => approvedBy !== "")
      return yield* ctx.activity("orders.bill", [discount, notes])
    }), declarations),
  generator: DurableWorkflow.fromGenerator("orders.pricing", function*(ctx) {
    let discount = 0
    let approvedBy = ""
    const notes: Array<string> = []
    ctx.onSignal("approve", (who) => {
      approvedBy = who
    })
    ctx.onUpdate("setDiscount", (percent, reason) => {
      discount = percent
      return { discount, reason }
    })
    ctx.onUpdateValidator("setDiscount", (percent) => percent <= 50)
    ctx.onUpdate("addNotes", (...lines) => notes.push(...lines))
    ctx.onUpdate("explode", () => {
      throw new Error("no can do")
    })
    ctx.onQuery("discount", () => ({ discount, approvedBy, notes }))
    yield ctx.waitCondition(() => approvedBy !== "")
    return yield ctx.activity("orders.bill", [discount, notes])
  }, declarations),
  async: DurableWorkflow.fromAsync("orders.pricing", async (ctx) => {
    let discount = 0
    let approvedBy = ""
    const notes: Array<string> = []
    ctx.onSignal("approve", (who) => {
      approvedBy = who
    })
    ctx.onUpdate("setDiscount", async (percent, reason) => {
      discount = percent
      return { discount, reason }
    })
    ctx.onUpdateValidator("setDiscount", async (percent) => percent <= 50)
    ctx.onUpdate("addNotes", (...lines) => notes.push(...lines))
    ctx.onUpdate("explode", async () => {
      throw new Error("no can do")
    })
    ctx.onQuery("discount", () => ({ discount, approvedBy, notes }))
    await ctx.waitCondition(() => approvedBy !== "")
    return ctx.activity("orders.bill", [discount, notes])
  }, declarations)
}

describe("accepted updates (apply_update)", () => {
  for (const [style, workflow] of Object.entries(styles)) {
    it.effect(`${style}: the handler's result is one complete_update command`, () =>
      Effect.gen(function*() {
        const command = yield* applyUpdate(workflow, replayInput([accepted("u-1", "setDiscount", [20])]), "u-1")
        assert.strictEqual(command.type, "complete_update")
        assert.strictEqual(command["update_id"], "u-1")
        // the declared default fills the missing second argument
        assert.deepStrictEqual(value(command["result"]), { discount: 20, reason: null })
        assert.deepStrictEqual(Object.keys(command).sort(), ["result", "type", "update_id"])
      }))

    it.effect(`${style}: a failing handler is one non-retryable fail_update with its type and class`, () =>
      Effect.gen(function*() {
        const command = yield* applyUpdate(workflow, replayInput([accepted("u-9", "explode", [])]), "u-9")
        assert.deepStrictEqual(command, {
          type: "fail_update",
          update_id: "u-9",
          message: "no can do",
          exception_type: "Error",
          exception_class: "effect-durable-worker.Error",
          non_retryable: true
        })
      }))

    it.effect(`${style}: recorded applications (UpdateApplied) and signals are replayed in history order`, () =>
      Effect.gen(function*() {
        const history = [
          applied("u-1", "setDiscount", [10]),
          applied("u-2", "addNotes", ["a", "b"]),
          { event_type: "SignalReceived", payload: { signal_name: "approve", arguments: blob(["ann"]) } }
        ]
        const { commands } = yield* replay(workflow, replayInput(history))
        assert.strictEqual(commands.length, 1)
        assert.strictEqual(commands[0]!.type, "schedule_activity")
        assert.deepStrictEqual(value(commands[0]!["arguments"]), [10, ["a", "b"]])
        const answered = yield* query(workflow, replayInput(history), "discount", [])
        assert.deepStrictEqual(answered, { discount: 10, approvedBy: "ann", notes: ["a", "b"] })
      }))
  }

  it.effect("structural problems: UpdateNotFound, UnknownUpdate, InvalidUpdate (undecodable or not fitting the declaration)", () =>
    Effect.gen(function*() {
      const wf = styles.effect
      const notFound = yield* applyUpdate(wf, replayInput([accepted("u-1", "setDiscount", [1])]), "u-2")
      assert.strictEqual(notFound.type, "fail_update")
      assert.strictEqual(notFound["exception_type"], "UpdateNotFound")
      assert.strictEqual(notFound["non_retryable"], true)
      assert.include(String(notFound["message"]), "u-2")
      const unknown = yield* applyUpdate(wf, replayInput([accepted("u-1", "rename", ["x"])]), "u-1")
      assert.strictEqual(unknown["exception_type"], "UnknownUpdate")
      assert.include(String(unknown["message"]), "rename")
      const badType = yield* applyUpdate(wf, replayInput([accepted("u-1", "setDiscount", ["ten"])]), "u-1")
      assert.strictEqual(badType["exception_type"], "InvalidUpdate")
      assert.include(String(badType["message"]), "percent")
      const tooMany = yield* applyUpdate(wf, replayInput([accepted("u-1", "setDiscount", [1, "x", "y"])]), "u-1")
      assert.strictEqual(tooMany["exception_type"], "InvalidUpdate")
      const undecodable = yield* applyUpdate(wf, replayInput([{ event_type: "UpdateAccepted", payload: { update_id: "u-1", update_name: "setDiscount", arguments: "not avro" } }]), "u-1")
      assert.strictEqual(undecodable["exception_type"], "InvalidUpdate")
      assert.include(String(undecodable["message"]), "invalid_payload_framing")
    }))

  it.effect("the update being applied is not replayed from a recorded application of itself", () =>
    Effect.gen(function*() {
      const wf = DurableWorkflow.make("orders.counter-update", (ctx) =>
        Effect.gen(function*() {
          let n = 0
          ctx.onUpdate("inc", () => ++n)
          yield* ctx.waitCondition(() => false)
        }), { updates: { inc: [] } })
      const history = [applied("u-1", "inc", []), accepted("u-2", "inc", []), applied("u-2", "inc", [])]
      const command = yield* applyUpdate(wf, replayInput(history), "u-2")
      assert.strictEqual(value(command["result"]), 2)
    }))

  it.effect("an UpdateApplied without a handler is a replay failure naming the update", () =>
    Effect.gen(function*() {
      const failure = yield* Effect.flip(replay(styles.effect, replayInput([applied("u-1", "rename", ["x"])])))
      assert.match(String((failure as ReplayFailure).error), /unknown update 'rename'/)
    }))

  it.effect("a signal whose arguments do not fit its declaration is ignored, like an unknown signal", () =>
    Effect.gen(function*() {
      const history = [
        { event_type: "SignalReceived", payload: { signal_name: "approve", arguments: blob([42]) } },
        { event_type: "SignalReceived", payload: { signal_name: "nobody", arguments: blob([]) } }
      ]
      const answered = yield* query(styles.effect, replayInput(history), "discount", [])
      assert.deepStrictEqual(answered, { discount: 0, approvedBy: "", notes: [] })
    }))
})

describe("update validation (validate_update)", () => {
  for (const [style, workflow] of Object.entries(styles)) {
    it.effect(`${style}: approved, rejected by false, rejected for arguments not fitting the declaration`, () =>
      Effect.gen(function*() {
        yield* validateUpdate(workflow, replayInput([]), "setDiscount", [30])
        const refused = yield* Effect.flip(validateUpdate(workflow, replayInput([]), "setDiscount", [80]))
        assert.strictEqual(refused._tag, "UpdateRejected")
        const invalid = yield* Effect.flip(validateUpdate(workflow, replayInput([]), "setDiscount", ["lots"]))
        assert.strictEqual(invalid._tag, "UpdateRejected")
        assert.deepStrictEqual(Object.keys((invalid as DurableWorkflow.UpdateRejected).validationErrors ?? {}), ["percent"])
      }))
  }

  it.effect("the validator sees the replayed state; UpdateRejected carries validation errors; other failures reject too", () =>
    Effect.gen(function*() {
      const wf = DurableWorkflow.make("orders.limits", (ctx) =>
        Effect.gen(function*() {
          let used = 0
          ctx.onSignal("use", (n: number) => {
            used += n
          })
          ctx.onUpdate("spend", (n) => (used += n))
          ctx.onUpdateValidator("spend", (n) =>
            used + n > 10
              ? Effect.fail(new DurableWorkflow.UpdateRejected({ message: "over budget", validationErrors: { n: [`only ${10 - used} left`] } }))
              : n === 0
              ? Effect.die(new Error("zero is not a spend"))
              : Effect.void)
          yield* ctx.waitCondition(() => false)
        }), { updates: { spend: [DurableWorkflow.param("n", Schema.Int)] }, updateValidators: ["spend"] })
      const history = [{ event_type: "SignalReceived", payload: { signal_name: "use", arguments: blob([7]) } }]
      yield* validateUpdate(wf, replayInput(history), "spend", [3])
      const over = yield* Effect.flip(validateUpdate(wf, replayInput(history), "spend", [4]))
      assert.strictEqual(over._tag, "UpdateRejected")
      assert.strictEqual(over.message, "over budget")
      assert.deepStrictEqual((over as DurableWorkflow.UpdateRejected).validationErrors, { n: ["only 3 left"] })
      const zero = yield* Effect.flip(validateUpdate(wf, replayInput(history), "spend", [0]))
      assert.strictEqual(zero._tag, "UpdateRejected")
      assert.strictEqual(zero.message, "zero is not a spend")
    }))

  it.effect("worker-side problems are UpdateValidationFailed: no declared validator, no handler, failed replay", () =>
    Effect.gen(function*() {
      const noValidator = yield* Effect.flip(validateUpdate(styles.effect, replayInput([]), "addNotes", ["x"]))
      assert.strictEqual(noValidator._tag, "UpdateValidationFailed")
      assert.include(noValidator.message, "declares no validator for update 'addNotes'")
      const undeclaredAtRuntime = DurableWorkflow.make("orders.lazy", (ctx) =>
        Effect.gen(function*() {
          ctx.onUpdate("go", () => 1)
          yield* ctx.waitCondition(() => false)
        }), { updates: { go: [] }, updateValidators: ["go"] })
      const missing = yield* Effect.flip(validateUpdate(undeclaredAtRuntime, replayInput([]), "go", []))
      assert.strictEqual(missing._tag, "UpdateValidationFailed")
      assert.include(missing.message, "unknown update 'go'")
      const replayFailed = yield* Effect.flip(validateUpdate(styles.effect, replayInput([applied("u-1", "rename", [])]), "setDiscount", [1]))
      assert.strictEqual(replayFailed._tag, "UpdateValidationFailed")
      assert.include(replayFailed.message, "workflow replay failed before update validation")
    }))
})

describe("command contracts", () => {
  it("schema → contract type and nullability", () => {
    const cases: ReadonlyArray<readonly [Schema.Schema.Any, string | null, boolean]> = [
      [Schema.String, "string", false],
      [Schema.Number, "float", false],
      [Schema.Int, "int", false],
      [Schema.BigIntFromSelf, "int", false],
      [Schema.Boolean, "bool", false],
      [Schema.Literal("a", "b"), "string", false],
      [Schema.Literal(1, 2.5), "int|float", false],
      [Schema.Array(Schema.String), "array", false],
      [Schema.Struct({ a: Schema.String }), "array", false],
      [Schema.Record({ key: Schema.String, value: Schema.Number }), "array", false],
      [Schema.Tuple(Schema.String, Schema.Number), "array", false],
      [Schema.Unknown, "mixed", true],
      [Schema.Any, "mixed", true],
      [Schema.Null, "null", true],
      [Schema.NullOr(Schema.String), "string", true],
      [Schema.Union(Schema.String, Schema.Int, Schema.Null), "string|int", true],
      [Schema.NumberFromString, "string", false],
      [Schema.Date, "string", false],
      [Schema.DateFromSelf, null, false],
      [Schema.Uint8ArrayFromSelf, null, false]
    ]
    for (const [schema, type, allowsNull] of cases) {
      assert.deepStrictEqual(contractTypeOf(schema), { type, allowsNull }, String(schema))
    }
  })

  it("a definition's contract: sorted names, per-handler parameters, sorted validators", () => {
    assert.deepStrictEqual(styles.effect.contract, {
      queries: ["discount"],
      query_contracts: [{ name: "discount", parameters: [] }],
      signals: ["approve"],
      signal_contracts: [{
        name: "approve",
        parameters: [{ name: "who", position: 0, required: true, variadic: false, default_available: false, default: null, type: "string", allows_null: false }]
      }],
      updates: ["addNotes", "explode", "setDiscount"],
      update_contracts: [
        {
          name: "addNotes",
          parameters: [{ name: "lines", position: 0, required: false, variadic: true, default_available: false, default: null, type: "string", allows_null: false }]
        },
        { name: "explode", parameters: [] },
        {
          name: "setDiscount",
          parameters: [
            { name: "percent", position: 0, required: true, variadic: false, default_available: false, default: null, type: "int", allows_null: false },
            { name: "reason", position: 1, required: false, variadic: false, default_available: true, default: null, type: "string", allows_null: true }
          ]
        }
      ],
      update_validators: ["setDiscount"]
    })
    // nothing declared: every list empty; a parameter without schema or type is `mixed`, nullable
    const plain = DurableWorkflow.make("orders.plain", () => Effect.succeed(1))
    assert.deepStrictEqual(plain.contract, {
      queries: [],
      query_contracts: [],
      signals: [],
      signal_contracts: [],
      updates: [],
      update_contracts: [],
      update_validators: []
    })
    const loose = DurableWorkflow.make("orders.loose", () => Effect.succeed(1), {
      updates: { touch: [DurableWorkflow.param("anything"), DurableWorkflow.param("cb", { type: "callable" }), DurableWorkflow.param("n", { type: "int", default: 3 })] }
    })
    assert.deepStrictEqual(loose.contract.update_contracts[0]!.parameters.map((p) => [p.type, p.allows_null, p.required, p.default]), [
      ["mixed", true, true, null],
      ["callable", false, true, null],
      ["int", false, false, 3]
    ])
  })

  it("declared handlers are typed by their parameter schemas (checked by the compiler)", () => {
    const typed = DurableWorkflow.fromAsync("types.check", async (ctx) => {
      ctx.onUpdate("setDiscount", (percent, reason) => {
        const n: number = percent
        const r: string | null = reason
        // @ts-expect-error a declared Int parameter is a number, not a string
        const wrong: string = percent
        return [n, r, wrong]
      })
      ctx.onUpdate("addNotes", (...lines) => lines.map((line) => line.toUpperCase()))
      // @ts-expect-error the validator of setDiscount takes (number, string | null)
      ctx.onUpdateValidator("setDiscount", (percent: string) => percent === "")
      ctx.onSignal("approve", (who) => who.toUpperCase())
      // undeclared receivers take any arguments
      ctx.onSignal("other", (x: number, y: string) => [x, y])
    }, declarations)
    assert.strictEqual(typed.name, "types.check")
  })

  it("declarations are checked when the workflow is defined, with actionable errors", () => {
    const attempt = (declare: () => unknown) => {
      try {
        declare()
        return undefined
      } catch (error) {
        return error
      }
    }
    const noUpdate = attempt(() => DurableWorkflow.make("orders.bad", () => Effect.void, { updateValidators: ["ghost"] }))
    assert.instanceOf(noUpdate, DurableWorkflow.InvalidWorkflowDeclaration)
    assert.include((noUpdate as Error).message, "'ghost', which is not a declared update")
    const restFirst = attempt(() =>
      DurableWorkflow.make("orders.bad", () => Effect.void, { updates: { u: [DurableWorkflow.rest("xs"), DurableWorkflow.param("y")] } }))
    assert.include((restFirst as Error).message, "the rest parameter 'xs' must be the last one")
    const twice = attempt(() =>
      DurableWorkflow.make("orders.bad", () => Effect.void, { signals: { s: [DurableWorkflow.param("x"), DurableWorkflow.param("x")] } }))
    assert.include((twice as Error).message, "declares the parameter 'x' twice")
  })

  it("the fingerprint covers the declarations", () => {
    const body = () => Effect.void
    const a = DurableWorkflow.make("orders.fp", body, { updates: { u: [DurableWorkflow.param("x", Schema.String)] } })
    const b = DurableWorkflow.make("orders.fp", body, { updates: { u: [DurableWorkflow.param("x", Schema.Int)] } })
    const c = DurableWorkflow.make("orders.fp", body, { updates: { u: [DurableWorkflow.param("x", Schema.String)] } })
    assert.notStrictEqual(a.fingerprint, b.fingerprint)
    assert.strictEqual(a.fingerprint, c.fingerprint)
  })

  it("the process-wide guard pins a definition per (worker id, workflow type)", () => {
    const v1 = DurableWorkflow.make("orders.guarded", () => Effect.succeed(1))
    const v2 = DurableWorkflow.make("orders.guarded", () => Effect.succeed(2))
    assert.isTrue(Either.isRight(DurableWorkflow.guardDefinitions("guard-worker", [v1])))
    assert.isTrue(Either.isRight(DurableWorkflow.guardDefinitions("guard-worker", [v1])), "the same definition again is fine")
    assert.isTrue(Either.isRight(DurableWorkflow.guardDefinitions("other-worker", [v2])), "another worker id is independent")
    const changed = DurableWorkflow.guardDefinitions("guard-worker", [v2])
    assert.isTrue(Either.isLeft(changed))
    const error = Either.getLeft(changed).pipe((o) => (o._tag === "Some" ? o.value : undefined))!
    assert.instanceOf(error, DurableWorkflow.WorkflowDefinitionChanged)
    assert.strictEqual(error.workflowType, "orders.guarded")
    assert.match(error.message, /^Workflow definition changed for worker 'guard-worker'.*restart the worker process before re-registering this workflow type/)
    // a refused set pins nothing: the original stays
    assert.isTrue(Either.isRight(DurableWorkflow.guardDefinitions("guard-worker", [v1])))
  })
})
