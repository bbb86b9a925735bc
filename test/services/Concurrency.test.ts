import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Concurrency from "../../src/services/Concurrency.js"

const ok = (input: unknown): Concurrency.ResolvedConcurrency => {
  const result = Concurrency.resolveEither(input)
  if (Either.isLeft(result)) throw new Error(`expected ${JSON.stringify(input)} to resolve: ${result.left.message}`)
  return result.right
}

const error = (input: unknown): Concurrency.ConcurrencyOptionError => {
  const result = Concurrency.resolveEither(input)
  if (Either.isRight(result)) throw new Error(`expected ${JSON.stringify(input)} to be rejected`)
  return result.left
}

describe("Concurrency.resolve", () => {
  it("a whole number is fixed and unchanged", () => {
    const c = ok(6)
    assert.deepStrictEqual([c.mode, c.limit, c.min, c.max], ["fixed", 6, 6, 6])
  })

  it("zero and negative numbers become fixed 1", () => {
    assert.strictEqual(ok(0).limit, 1)
    assert.strictEqual(ok(-3).limit, 1)
  })

  it("undefined and null are fixed 1", () => {
    for (const input of [undefined, null]) {
      const c = ok(input)
      assert.deepStrictEqual([c.mode, c.limit, c.min, c.max], ["fixed", 1, 1, 1])
    }
  })

  it("a fixed configuration carries the memory defaults", () => {
    const c = ok(4)
    assert.deepStrictEqual(
      [c.ramAdmitPct, c.ramResumePct, c.ramCeilingPct, c.tickMs, c.stepCostTracking],
      [75, 65, 85, 2000, true]
    )
  })

  it("\"adaptive\" (any case, blanks trimmed) gets the safe defaults", () => {
    for (const input of ["adaptive", "  Adaptive "]) {
      const c = ok(input)
      assert.deepStrictEqual(c, {
        mode: "adaptive",
        limit: 1,
        min: 1,
        max: 32,
        ramCeilingPct: 85,
        cpuCeilingPct: undefined,
        tickMs: 2000,
        ramAdmission: true,
        ramAdmitPct: 75,
        ramResumePct: 65,
        admissionPollMs: 250,
        admissionMaxWaitMs: 0,
        growHeadroomTicks: 3,
        subtractPageCache: true,
        stepCostTracking: true
      })
    }
  })

  it("an object is always adaptive; it overrides defaults and clamps start into [min, max]", () => {
    const c = ok({ min: 2, max: 10, start: 50, tickMs: 500 })
    assert.deepStrictEqual([c.mode, c.min, c.max, c.limit, c.tickMs], ["adaptive", 2, 10, 10, 500])
    assert.strictEqual(ok({ min: 3, max: 10, start: 1 }).limit, 3)
    assert.strictEqual(ok({ min: 3 }).limit, 3)
    assert.strictEqual(ok({}).mode, "adaptive")
    assert.strictEqual(ok({ mode: "adaptive", max: 4 }).max, 4)
  })

  it("min 0 means 1, max 0 means 32, and max below min is raised to min", () => {
    const zero = ok({ min: 0, max: 0 })
    assert.deepStrictEqual([zero.min, zero.max], [1, 32])
    const inverted = ok({ min: 5, max: 2 })
    assert.deepStrictEqual([inverted.min, inverted.max, inverted.limit], [5, 5, 5])
  })

  it("accepts camelCase and snake_case keys; null means absent", () => {
    const snake = ok({
      ram_ceiling_pct: 90,
      cpu_ceiling_pct: 70,
      tick_ms: 100,
      ram_admission: false,
      ram_admit_pct: 80,
      ram_resume_pct: 60,
      admission_poll_ms: 50,
      admission_max_wait_ms: 1000,
      grow_headroom_ticks: 5,
      subtract_page_cache: false,
      step_cost_tracking: false
    })
    const camel = ok({
      ramCeilingPct: 90,
      cpuCeilingPct: 70,
      tickMs: 100,
      ramAdmission: false,
      ramAdmitPct: 80,
      ramResumePct: 60,
      admissionPollMs: 50,
      admissionMaxWaitMs: 1000,
      growHeadroomTicks: 5,
      subtractPageCache: false,
      stepCostTracking: false
    })
    assert.deepStrictEqual(snake, camel)
    assert.deepStrictEqual(
      [camel.ramCeilingPct, camel.cpuCeilingPct, camel.tickMs, camel.ramAdmission, camel.ramAdmitPct],
      [90, 70, 100, false, 80]
    )
    assert.deepStrictEqual(
      [camel.ramResumePct, camel.admissionPollMs, camel.admissionMaxWaitMs, camel.growHeadroomTicks],
      [60, 50, 1000, 5]
    )
    assert.strictEqual(ok({ ramAdmitPct: null, ram_admit_pct: 70 }).ramAdmitPct, 70)
  })

  it("the marks are ordered resume <= admit <= ceiling", () => {
    const c = ok({ ramCeilingPct: 60, ramAdmitPct: 90, ramResumePct: 95 })
    assert.deepStrictEqual([c.ramCeilingPct, c.ramAdmitPct, c.ramResumePct], [60, 60, 60])
  })

  it("admission can be disabled", () => {
    assert.isFalse(ok({ ramAdmission: false }).ramAdmission)
  })

  it("poll, wait, headroom and tick knobs are clamped to their minimums", () => {
    const c = ok({ admissionPollMs: 0, admissionMaxWaitMs: -5, growHeadroomTicks: 0, tickMs: 0 })
    assert.deepStrictEqual(
      [c.admissionPollMs, c.admissionMaxWaitMs, c.growHeadroomTicks, c.tickMs],
      [1, 0, 1, 1]
    )
  })

  it.effect("an unknown string fails with a typed error naming the option and the accepted forms", () =>
    Effect.gen(function*() {
      const e = yield* Effect.flip(Concurrency.resolve("adaptve"))
      assert.strictEqual(e._tag, "ConcurrencyOptionError")
      assert.strictEqual(e.option, "concurrency")
      assert.include(e.message, "\"adaptve\"")
      assert.include(e.message, "\"adaptive\"")
      assert.include(e.message, "whole number")
    }))

  it("fractional numbers, booleans, arrays and functions are rejected", () => {
    for (const input of [2.5, Number.NaN, Number.POSITIVE_INFINITY, true, [4], () => 4]) {
      const e = error(input)
      assert.strictEqual(e.option, "concurrency")
      assert.include(e.message, "expected a whole number (fixed concurrency), \"adaptive\", or an object")
    }
  })

  it("a key of the wrong type is named in the error", () => {
    const e = error({ min: 1, ramAdmitPct: "75" })
    assert.strictEqual(e.option, "concurrency.ramAdmitPct")
    assert.include(e.message, "concurrency.ramAdmitPct")
    assert.include(e.message, "percentage")
    assert.strictEqual(error({ max: 2.5 }).option, "concurrency.max")
    assert.strictEqual(error({ min: -1 }).option, "concurrency.min")
    assert.strictEqual(error({ ram_admission: "yes" }).option, "concurrency.ram_admission")
  })

  it("a percentage given as a fraction, or over 100, is refused: 0.85 would hold the limit at min for good", () => {
    for (const [input, option] of [
      [{ ramCeilingPct: 0.85 }, "concurrency.ramCeilingPct"],
      [{ cpu_ceiling_pct: 0.9 }, "concurrency.cpu_ceiling_pct"],
      [{ ramAdmitPct: 1 }, "concurrency.ramAdmitPct"],
      [{ ramResumePct: 650 }, "concurrency.ramResumePct"],
      // every reading is at or above 0 %
      [{ ramCeilingPct: 0 }, "concurrency.ramCeilingPct"]
    ] as const) {
      const e = error(input)
      assert.strictEqual(e.option, option)
      assert.include(e.message, "expected a percentage more than 1 up to 100 (85 for 85 %")
    }
    const taken = Concurrency.resolveEither({ ramCeilingPct: 90, cpuCeilingPct: 100, ramAdmitPct: 1.5, ramResumePct: 2 })
    assert.isTrue(Either.isRight(taken))
  })

  it("an unknown key is rejected (a typo never silently falls back to a default)", () => {
    const e = error({ ramCeilingPercent: 90 })
    assert.strictEqual(e.option, "concurrency.ramCeilingPercent")
    assert.include(e.message, "ramCeilingPct")
  })

  it("a mode other than \"adaptive\" in an object is rejected", () => {
    const e = error({ mode: "fixed", min: 4 })
    assert.strictEqual(e.option, "concurrency.mode")
    assert.include(e.message, "whole number for fixed concurrency")
  })
})
