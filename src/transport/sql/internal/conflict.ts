/**
 * A completion of the SQL transport that finds an earlier result of its step still waiting for the
 * engine (the engine has not read it yet): the completion was rolled back, and is tried again.
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import { TransportError } from "../../../seam/TransportError.js"
import { NAME } from "./connection.js"

/**
 * An earlier result row of the step still waits for the engine: the completion was rolled back.
 *
 * @internal
 */
export class ResultConflict extends Schema.TaggedError<ResultConflict>()("ResultConflict", { stepId: Schema.String }) {}

/**
 * How often a completion that found an earlier result waiting is tried again.
 *
 * @internal
 */
export const CONFLICT_RETRY = Duration.millis(100)

/**
 * Tries a completion that found an earlier result of its step waiting again, every
 * {@link CONFLICT_RETRY} for up to a lease; still in conflict then, it fails with a
 * `TransportError` saying that the result waits in `results` (the task stays claimed, and the
 * runtime's retry writes it later). Other errors pass through untouched.
 *
 * @internal
 */
export const untilNoConflict = (options: { readonly lease: Duration.Duration; readonly results: string }) => {
  // counted from the first retry, one spacing after the conflict: the last try is a lease after it
  const schedule = Schedule.spaced(CONFLICT_RETRY).pipe(Schedule.upTo(Duration.subtract(options.lease, CONFLICT_RETRY)))
  return <A>(stepId: string, attempt: Effect.Effect<A, TransportError | ResultConflict>): Effect.Effect<A, TransportError> =>
    attempt.pipe(
      // the retry is only set up when an earlier result was found waiting, and its first try waits
      // one spacing too: at once, the earlier result would still be there
      Effect.catchTag("ResultConflict", () =>
        Effect.zipRight(
          Effect.sleep(CONFLICT_RETRY),
          Effect.retry(attempt, {
            while: (error) => error._tag === "ResultConflict",
            schedule
          })
        )),
      Effect.mapError((error) =>
        error._tag === "ResultConflict"
          ? new TransportError({
            transport: NAME,
            operation: "complete",
            message: `an earlier result of step ${stepId} is still waiting in ${options.results} for the engine ` +
              "to read it; the task stays claimed and its result is written once that row is gone"
          })
          : error
      )
    )
}
