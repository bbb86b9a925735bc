/**
 * The SQS transport's pause after a receive that brought only messages that are not this worker's
 * (no marker, where `marker` is set), which it gives back at once.
 *
 * Without it such a message made a tight loop: given back with visibility 0, it is visible again at
 * once, so the next long poll returns it at once, and the worker received and released it a few
 * hundred times a second for as long as it stayed on the queue.
 *
 * The message is still given back with visibility 0, and this worker waits instead: a non-zero
 * visibility would hide the message from the consumer it belongs to (sharing the queue is what the
 * marker is for) for that long, on every one of our receives; the wait costs only this worker, whose
 * own tasks on that queue are picked up at most {@link FOREIGN_BACKOFF_AT_MOST} late while a message
 * no one else takes sits there.
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"

/**
 * The wait after the first receive that brought only foreign messages; it doubles with each such
 * receive in a row.
 *
 * @internal
 */
export const FOREIGN_BACKOFF_FIRST = Duration.millis(200)

/**
 * The longest wait between two receives that bring only foreign messages.
 *
 * @internal
 */
export const FOREIGN_BACKOFF_AT_MOST = Duration.seconds(2)

/**
 * One poller's pause after foreign-only receives.
 *
 * @internal
 */
export interface ForeignBackoff {
  /**
   * Waits before the next receive: {@link FOREIGN_BACKOFF_FIRST} after the first foreign-only
   * receive, doubling with each one in a row, at most {@link FOREIGN_BACKOFF_AT_MOST}.
   */
  readonly wait: Effect.Effect<void>
  /** A receive brought work of ours, or nothing: the next foreign-only receive waits the first delay again. */
  readonly reset: Effect.Effect<void>
}

/**
 * A backoff starting at its first delay, on Effect's `Clock`.
 *
 * @internal
 */
export const make: Effect.Effect<ForeignBackoff> = Effect.map(
  // the union of two schedules takes the shorter delay: the doubling, capped
  Schedule.driver(Schedule.union(Schedule.exponential(FOREIGN_BACKOFF_FIRST), Schedule.spaced(FOREIGN_BACKOFF_AT_MOST))),
  (driver) => ({
    // both schedules recur for ever: `next` never ends the driver
    wait: Effect.ignore(driver.next(undefined)),
    reset: driver.reset
  })
)
