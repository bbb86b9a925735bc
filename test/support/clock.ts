/**
 * What the `TestClock` tests of timing rules share: letting forked fibers run, and reading a fiber's
 * exit that must be there already.
 */
import { assert } from "@effect/vitest"
import * as Effect from "effect/Effect"
import type * as Exit from "effect/Exit"
import type * as Fiber from "effect/Fiber"

/** Lets forked fibers run until they block. */
export const settle = Effect.repeatN(Effect.yieldNow(), 20)

/** The fiber's exit, which must be there now (rather than waiting for it: a wrong bound would hang the test). */
export const exitNow = <A, E>(fiber: Fiber.RuntimeFiber<A, E>, what: string): Effect.Effect<Exit.Exit<A, E>> =>
  Effect.flatMap(settle, () => {
    const exit = fiber.unsafePoll()
    assert.isNotNull(exit, what)
    return Effect.succeed(exit!)
  })
