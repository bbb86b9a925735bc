import * as Duration from "effect/Duration"
import * as Either from "effect/Either"

const UNIT_MS: Record<string, number> = {
  ms: 1, millis: 1, millisecond: 1, milliseconds: 1,
  s: 1_000, sec: 1_000, secs: 1_000, second: 1_000, seconds: 1_000,
  m: 60_000, min: 60_000, mins: 60_000, minute: 60_000, minutes: 60_000,
  h: 3_600_000, hr: 3_600_000, hrs: 3_600_000, hour: 3_600_000, hours: 3_600_000,
  d: 86_400_000, day: 86_400_000, days: 86_400_000,
  w: 604_800_000, week: 604_800_000, weeks: 604_800_000
}

const PATTERN = /^\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*$/i

/**
 * A sleep duration: milliseconds as a number, an Effect `Duration`, or a string such as `"30s"`,
 * `"2h"`, `"7 days"` or `"5 minutes"`.
 *
 * @internal
 */
export type SleepDuration = number | string | Duration.Duration

/**
 * Resolves a sleep duration to whole milliseconds (rounded up, so a sleep never ends early), or a
 * reason it cannot be used.
 *
 * @internal
 */
export const toSleepMillis = (duration: SleepDuration): Either.Either<number, string> => {
  let ms: number
  if (typeof duration === "number") {
    ms = duration
  } else if (typeof duration === "string") {
    const match = PATTERN.exec(duration)
    const unit = match === null ? undefined : UNIT_MS[match[2]!.toLowerCase()]
    if (match === null || unit === undefined) {
      return Either.left(
        `cannot read the duration ${JSON.stringify(duration)}; pass milliseconds, a Duration, or a string like "30s", "2h" or "5 minutes"`
      )
    }
    ms = Number(match[1]) * unit
  } else if (Duration.isDuration(duration)) {
    if (!Duration.isFinite(duration)) return Either.left("an infinite duration cannot be a durable timer")
    ms = Duration.toMillis(duration)
  } else {
    return Either.left(`expected milliseconds, a Duration or a duration string, got ${typeof duration}`)
  }
  if (!Number.isFinite(ms) || ms < 0) {
    return Either.left(`the duration must be a finite, non-negative number of milliseconds, got ${String(ms)}`)
  }
  return Either.right(Math.ceil(ms))
}
