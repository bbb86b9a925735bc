import type { StepError } from "../../wire/StepProtocol.js"

const describe = (value: unknown): string => {
  if (typeof value === "string") return value.length > 0 ? value : "step handler failed with an empty string"
  if (value === undefined || value === null) return `step handler failed with ${String(value)}`
  if (typeof value === "object") {
    const message = (value as { message?: unknown }).message
    if (typeof message === "string" && message.length > 0) return message
    try {
      const json = JSON.stringify(value)
      if (json !== undefined && json !== "{}") return `step handler failed with ${json}`
    } catch {
      // fall through: cyclic or otherwise unserialisable values are described by their type
    }
    const ctor = (value as { constructor?: { name?: unknown } }).constructor?.name
    return `step handler failed with a ${typeof ctor === "string" ? ctor : "value"} that has no message`
  }
  return `step handler failed with ${typeof value} ${String(value)}`
}

/**
 * Maps whatever a handler failed with to the wire `StepError`: the message (for non-`Error` values a
 * description of the value), a string `code` and a boolean `retryable` when the value carries them,
 * and the stack of an `Error`.
 *
 * @internal
 */
export const toStepError = (failure: unknown): StepError => {
  // a hostile value's getters may throw: read each one on its own, so the failure is still reported
  const { code, retryable, stack } = carriedBy(failure)
  const message = readSafely(() => describe(failure))
  return {
    message: typeof message === "string" ? message : "step handler failed with a value whose properties throw when read",
    ...(typeof code === "string" ? { code } : {}),
    ...(typeof retryable === "boolean" ? { retryable } : {}),
    ...(typeof stack === "string" ? { stack } : {})
  }
}

/**
 * The `code`, `retryable` and (of an `Error`) `stack` a thrown value carries, each read on its own:
 * a getter that throws leaves only its own field out.
 *
 * @internal
 */
export const carriedBy = (failure: unknown): { readonly code: unknown; readonly retryable: unknown; readonly stack: unknown } => {
  const carrier = typeof failure === "object" && failure !== null ? failure as Record<string, unknown> : {}
  return {
    code: readSafely(() => carrier["code"]),
    retryable: readSafely(() => carrier["retryable"]),
    stack: failure instanceof Error ? readSafely(() => failure.stack) : undefined
  }
}

/** `get()`, or `undefined` when it throws. @internal */
export const readSafely = (get: () => unknown): unknown => {
  try {
    return get()
  } catch {
    return undefined
  }
}
