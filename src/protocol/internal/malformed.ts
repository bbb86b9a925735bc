/**
 * The log line of a task that cannot be read: one message, with the decoder's account and the
 * run's coordinates (when the payload had them) as annotations, so a logfmt or JSON logger shows
 * them as fields of their own.
 *
 * @internal
 */
import * as Effect from "effect/Effect"

/** @internal */
export const logMalformed = (
  kind: "step" | "workflow",
  detail: string,
  identity: object | undefined
): Effect.Effect<void> =>
  Effect.logError(`malformed ${kind} task`).pipe(Effect.annotateLogs({ ...identity, detail }))
