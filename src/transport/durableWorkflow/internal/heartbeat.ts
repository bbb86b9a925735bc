import * as Duration from "effect/Duration"
import * as Option from "effect/Option"
import * as Predicate from "effect/Predicate"

/** The longest interval a server may announce (reference §1.6: "[1s, 1h]"). */
const MAX_INTERVAL_SECONDS = 3600

/**
 * `heartbeat_interval_seconds` of a register or heartbeat answer, when it is a positive integer (the
 * reference's adoption rule, §2.3 step 8 and §2.6); capped at one hour, the bound servers announce
 * within. Anything else (absent, 0, negative, fractional, a string) is ignored.
 *
 * @internal
 */
export const advertisedInterval = (answer: unknown): Option.Option<Duration.Duration> => {
  const value = Predicate.isRecord(answer) ? answer["heartbeat_interval_seconds"] : undefined
  return typeof value === "number" && Number.isInteger(value) && value > 0
    ? Option.some(Duration.seconds(Math.min(value, MAX_INTERVAL_SECONDS)))
    : Option.none()
}
