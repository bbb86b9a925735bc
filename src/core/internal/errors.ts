/**
 * A readable message for anything thrown: an `Error`'s message, the `message` of an object that
 * carries one, else the value as a string.
 *
 * @internal
 */
export const messageOf = (error: unknown): string =>
  error instanceof Error
    ? error.message
    : typeof error === "object" && error !== null && typeof (error as { message?: unknown }).message === "string"
    ? (error as { message: string }).message
    : String(error)
