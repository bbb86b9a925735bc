/**
 * `FatalError`: the failure that tells the engine not to retry a step.
 *
 * @since 0.1.0
 */

/**
 * A deterministic business failure: reported with `retryable: false` (and its `code`), so the engine
 * fails the step after this attempt instead of retrying it. Throw it from an async handler or fail
 * an Effect handler with it.
 *
 * @example
 * throw new FatalError("card declined", "card_declined")
 *
 * @since 0.1.0
 * @category errors
 */
export class FatalError extends Error {
  readonly _tag = "FatalError" as const
  readonly retryable = false as const
  readonly code: string | undefined

  // `{ cause }` rather than the ES2022 lib's `ErrorOptions`, so projects compiling for an older lib
  // (NestJS's default ES2021) check these declarations too
  constructor(message: string, code?: string, options?: { readonly cause?: unknown }) {
    super(message, options)
    this.name = "FatalError"
    this.code = code
  }
}
