/**
 * How long a stop waits for the SQS long polls left running by interrupted polls (see the transport's
 * `receiveDetached`): each may bring a message, which is then given back at once rather than hidden
 * from the other workers for its visibility timeout.
 *
 * @internal
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"

/**
 * How long past its wait time shutdown gives a receive left running by an interrupted poll (the
 * answer's way back) before aborting it.
 *
 * @internal
 */
export const DETACHED_RECEIVE_MARGIN = Duration.seconds(2)

/**
 * Waits for the receives `left` running, up to their wait time and {@link DETACHED_RECEIVE_MARGIN},
 * and no longer than what is left of the worker's shutdown deadline (`shutdownMillis`, counted from
 * `pollsStoppedAt`, when the polls stopped; from now when they never did); then leaves them (the
 * scope that holds them aborts them). Interruptible inside, since it runs in a finalizer.
 *
 * @internal
 */
export const awaitDetachedReceives = (
  left: ReadonlyArray<Fiber.Fiber<unknown, unknown>>,
  options: { readonly waitSeconds: number; readonly shutdownMillis: number; readonly pollsStoppedAt: number | undefined }
): Effect.Effect<void> =>
  Effect.gen(function*() {
    if (left.length === 0) return
    const now = yield* Clock.currentTimeMillis
    const bound = Math.min(
      Duration.toMillis(Duration.sum(Duration.seconds(options.waitSeconds), DETACHED_RECEIVE_MARGIN)),
      Math.max(0, options.shutdownMillis - (now - (options.pollsStoppedAt ?? now)))
    )
    yield* Effect.logDebug(
      `waiting up to ${Duration.format(Duration.millis(bound))} for ${left.length} SQS long poll(s) to end, so that none hides a message`
    )
    yield* Effect.forEach(left, Fiber.await, { discard: true }).pipe(
      Effect.interruptible, // finalizers run uninterruptibly: let the timeout cut the wait short
      Effect.timeout(Duration.millis(bound)),
      Effect.ignore
    )
  })
