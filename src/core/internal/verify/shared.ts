import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import type { CaseError } from "../../ReplayReport.js"
import { messageOf } from "../errors.js"

/** The `class` of an error in a case: its tag, else its name or constructor. @internal */
export const classOf = (error: unknown): string => {
  if (typeof error === "object" && error !== null) {
    const tag = (error as { _tag?: unknown })._tag
    if (typeof tag === "string") return tag
    if (error instanceof Error) return error.name
    return error.constructor?.name ?? "Object"
  }
  return typeof error
}

/** An error as a case reports it: class and message, and the reason when the error has one. @internal */
export const caseError = (error: unknown): CaseError => {
  const reason = (error as { reason?: unknown } | null)?.reason
  return {
    class: classOf(error),
    message: messageOf(error),
    ...(typeof reason === "string" ? { reason } : {})
  }
}

/** Runs one replay, turning a defect into a failure, so one bad case never stops a verification. @internal */
export const exitOf = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<Exit.Exit<A, E | unknown>, never, R> =>
  Effect.map(Effect.exit(Effect.suspend(() => effect)), (exit) => {
    if (Exit.isSuccess(exit)) return exit
    const failure = Cause.failureOption(exit.cause)
    if (Option.isSome(failure)) return Exit.fail(failure.value)
    return Exit.fail(Cause.squash(exit.cause))
  })

/**
 * A decoded payload as JSON can carry it, for reports: a long is a number when it is safe, else its
 * digits; a double its number; bytes base64.
 *
 * @internal
 */
export const toJson = (value: unknown): unknown => {
  if (typeof value === "bigint") return Number.isSafeInteger(Number(value)) ? Number(value) : value.toString()
  if (value instanceof Uint8Array) return Buffer.from(value).toString("base64")
  if (Array.isArray(value)) return value.map(toJson)
  if (typeof value === "object" && value !== null) {
    const valueOf = (value as { valueOf?: () => unknown }).valueOf?.()
    if (typeof valueOf === "number") return valueOf
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, toJson(v)]))
  }
  return value
}

/** Structural equality of JSON-like values (key order ignored). @internal */
export const jsonEqual = (a: unknown, b: unknown): boolean => {
  if (a === b) return true
  if (typeof a !== typeof b || a === null || b === null || typeof a !== "object") return false
  if (Array.isArray(a) !== Array.isArray(b)) return false
  if (Array.isArray(a)) {
    const other = b as ReadonlyArray<unknown>
    return a.length === other.length && a.every((item, i) => jsonEqual(item, other[i]))
  }
  const ka = Object.keys(a as object).filter((k) => (a as Record<string, unknown>)[k] !== undefined)
  const kb = Object.keys(b as object).filter((k) => (b as Record<string, unknown>)[k] !== undefined)
  return ka.length === kb.length &&
    ka.every((k) => Object.hasOwn(b as object, k) && jsonEqual((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]))
}

/** The index of the first element where two lists differ, or -1. @internal */
export const firstDifference = (a: ReadonlyArray<unknown>, b: ReadonlyArray<unknown>): number => {
  const n = Math.max(a.length, b.length)
  for (let i = 0; i < n; i++) if (!jsonEqual(a[i], b[i])) return i
  return -1
}
