/**
 * How a repeated operation's failures reach the log: the first failure of a run a warning, the
 * rest debug lines, and the first success after them one info line. A broker away for an hour must
 * not write a warning at every heartbeat or every lease renewal, and the operator still learns
 * when it started and when it ended.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Ref from "effect/Ref"

/** The failure log of one repeated operation (a heartbeat, one task's lease). */
export interface FailureRun {
  /** A failure: `first` as a warning when it starts a run, else `again(n)` (n: failures so far) as a debug line. */
  readonly failed: (first: string, again: (failures: number) => string) => Effect.Effect<void>
  /** A success: after a run of failures, `back(n)` (n: how many) as an info line; else nothing. */
  readonly worked: (back: (failures: number) => string) => Effect.Effect<void>
}

/** A failure log with no failure yet. */
export const make = (): FailureRun => {
  const failures = Ref.unsafeMake(0)
  return {
    failed: (first, again) =>
      Effect.flatMap(
        Ref.updateAndGet(failures, (n) => n + 1),
        (n) => n === 1 ? Effect.logWarning(first) : Effect.logDebug(again(n))
      ),
    worked: (back) => Effect.flatMap(Ref.getAndSet(failures, 0), (n) => n === 0 ? Effect.void : Effect.logInfo(back(n)))
  }
}
