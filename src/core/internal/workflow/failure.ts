import * as Cause from "effect/Cause"
import * as Option from "effect/Option"
import type { WorkflowStepError } from "../../../wire/WorkflowProtocol.js"
import { carriedBy, readSafely } from "../stepError.js"

const describe = (value: unknown, subject: string): string => {
  if (typeof value === "string") return value.length > 0 ? value : `${subject} failed with an empty string`
  if (value === undefined || value === null) return `${subject} failed with ${String(value)}`
  if (typeof value === "object") {
    const message = (value as { readonly message?: unknown }).message
    if (typeof message === "string" && message.length > 0) return message
    const tag = (value as { readonly _tag?: unknown })._tag
    if (value instanceof Error) return typeof tag === "string" ? tag : value.name
    try {
      const json = JSON.stringify(value)
      if (json !== undefined && json !== "{}") return `${subject} failed with ${json}`
    } catch {
      // cyclic or otherwise unserialisable: described by its type below
    }
    if (typeof tag === "string") return tag
    const ctor = (value as { readonly constructor?: { readonly name?: unknown } }).constructor?.name
    return `${subject} failed with a ${typeof ctor === "string" ? ctor : "value"} that has no message`
  }
  return `${subject} failed with ${typeof value} ${String(value)}`
}

/**
 * Maps anything a workflow body or a local op failed with to the wire error: a message a person can
 * read (for a non-`Error` value, a description of the value), a string `code` and a boolean
 * `retryable` when the value carries them, and the stack of an `Error`.
 *
 * @internal
 */
export const toWorkflowStepError = (failure: unknown, subject: string): WorkflowStepError => {
  // a hostile value's getters may throw: read each one on its own, so the turn is still answered
  // (a throw here would end it without a decision, to be given back and replayed for ever)
  const { code, retryable, stack } = carriedBy(failure)
  const message = readSafely(() => describe(failure, subject))
  return {
    message: typeof message === "string" ? message : `${subject} failed with a value whose properties throw when read`,
    ...(typeof code === "string" && code.length > 0 ? { code } : {}),
    ...(typeof retryable === "boolean" ? { retryable } : {}),
    ...(typeof stack === "string" ? { stack } : {})
  }
}

/**
 * The failure a non-interrupt `Cause` carries: its first typed error, else its first defect.
 *
 * @internal
 */
export const failureOfCause = (cause: Cause.Cause<unknown>): Option.Option<unknown> =>
  Option.orElse(Cause.failureOption(cause), () => Cause.dieOption(cause))
