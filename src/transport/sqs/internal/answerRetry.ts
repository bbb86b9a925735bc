/**
 * The SQS transport's retry of a task's answer (its result sent, its message deleted) that reached no
 * SQS endpoint.
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import type { TransportError } from "../../../seam/TransportError.js"

/**
 * An answer from SQS itself (as opposed to a connection that failed).
 *
 * @internal
 */
export const isServiceError = (error: unknown): boolean => typeof error === "object" && error !== null && "$fault" in error

/**
 * How often a result or delete that reached no SQS endpoint is tried again.
 *
 * @internal
 */
export const ANSWER_RETRY = Duration.millis(500)

/**
 * The longest one attempt at a result or delete goes on retrying it.
 *
 * @internal
 */
export const ANSWER_RETRY_AT_MOST = Duration.seconds(10)

/**
 * How long one attempt at a result or delete goes on retrying it: a third of the visibility timeout,
 * at most {@link ANSWER_RETRY_AT_MOST}.
 *
 * @internal
 */
export const answerRetryFor = (visibilityTimeoutSeconds: number): Duration.Duration =>
  Duration.min(Duration.seconds(visibilityTimeoutSeconds / 3), ANSWER_RETRY_AT_MOST)

/**
 * A send or delete whose connection failed (no answer from SQS at all: the endpoint away, a
 * connection cut) is tried again every {@link ANSWER_RETRY} for up to a third of the visibility
 * timeout (at most 10 s; the runtime's retries each try as long), the task's visibility being
 * extended meanwhile by its lease, rather than given up after the runtime's few quick retries: a
 * delete given up on leaves the task to come back once its visibility lapses, and run again.
 * Both are safe to send again: a result sent twice is taken once by the engine (it keeps the
 * result of a pending step), and a delete of a deleted message succeeds. What SQS itself
 * refused is not retried here. Given up, it fails with the last attempt's error.
 *
 * @internal
 */
export const untilAnswered = (visibilityTimeoutSeconds: number) => {
  const schedule = Schedule.spaced(ANSWER_RETRY).pipe(Schedule.upTo(answerRetryFor(visibilityTimeoutSeconds)))
  return <A>(effect: Effect.Effect<A, TransportError>): Effect.Effect<A, TransportError> =>
    Effect.retry(effect, {
      schedule,
      // a call that reached no endpoint fails with the client's error as its cause; SQS's own
      // refusals (a service error, or a failed entry of a batch, which has no cause) are final
      while: (error) => error.cause !== undefined && !isServiceError(error.cause)
    })
}
