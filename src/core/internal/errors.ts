/**
 * A readable message for anything thrown: an `Error`'s message, the `message` of an object that
 * carries one (through Effect's `UnknownException`, to what it wraps), else the value as a string. An error with an empty message (a wrapper such as
 * `@effect/platform`'s `ServeError`) speaks through its `cause`: the first non-empty message down the
 * chain, else its tag or name.
 *
 * @internal
 */
export const messageOf = (error: unknown): string => {
  const carries = (value: unknown): value is { readonly message: string; readonly cause?: unknown } =>
    value instanceof Error ||
    (typeof value === "object" && value !== null && typeof (value as { message?: unknown }).message === "string")
  if (!carries(error)) return String(error)
  let current: unknown = error
  for (let depth = 0; depth < 5 && carries(current); depth++) {
    // Effect's wrapper of what a promise rejected with says only "An unknown error occurred in
    // Effect.tryPromise": what it wraps is the reason
    if ((current as { readonly _tag?: unknown })._tag === "UnknownException") {
      const wrapped = (current as { readonly error?: unknown }).error
      if (!carries(wrapped)) return wrapped === undefined ? current.message : String(wrapped)
      current = wrapped
      continue
    }
    if (current.message !== "") return current.message
    current = current.cause
  }
  if (typeof current === "string" && current !== "") return current
  const { _tag, name } = error as { readonly _tag?: unknown; readonly name?: unknown }
  return typeof _tag === "string" ? _tag : typeof name === "string" ? name : ""
}

/**
 * Whether a failure asks not to be retried: `retryable: false` (a `FatalError`, from any copy
 * of this package: an application that loads both the CommonJS and the ES module build has two
 * `FatalError` classes, so `instanceof` would miss one), or the `nonRetryable` / `non_retryable: true`
 * that errors written for the Durable Workflow SDKs carry.
 *
 * @internal
 */
export const isNonRetryable = (error: unknown): boolean =>
  typeof error === "object" && error !== null &&
  ((error as { retryable?: unknown }).retryable === false || (error as { nonRetryable?: unknown }).nonRetryable === true ||
    (error as { non_retryable?: unknown }).non_retryable === true)

/**
 * What a log line says of a failure: `text`, the error's message, then what follows of it (`then`),
 * on one line. An error given
 * to `Effect.log` as a second message would be a second `message=` of the line, as indented JSON
 * over many lines, which line-based log shippers and logfmt parsers take apart.
 *
 * @internal
 */
export const withReason = (text: string, error: unknown, then?: string): string =>
  `${text}: ${messageOf(error).replace(/\s*\n\s*/g, " ")}${then === undefined ? "" : `; ${then}`}`
