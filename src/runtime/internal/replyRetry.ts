import * as Schedule from "effect/Schedule"

/**
 * The runtime's retries of a reply the transport could not deliver: a few quick attempts (100 ms,
 * doubling, four times) before the task is left to the broker to redeliver.
 *
 * @internal
 */
export const replyRetry = Schedule.exponential("100 millis").pipe(Schedule.intersect(Schedule.recurs(4)))
