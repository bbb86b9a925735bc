/**
 * Starting in any order: a broker, a queue or a table that is not there yet is waited for — logged
 * once with what is waited for, retried with a capped backoff — rather than failing the start.
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Ref from "effect/Ref"
import * as Schedule from "effect/Schedule"
import { RegistrationWaits } from "../../seam/Transport.js"

/** The first retry's delay. */
export const FIRST_RETRY = Duration.millis(250)

/** The longest delay between two attempts. */
export const MAX_RETRY = Duration.seconds(5)

/**
 * The backoff of a start that waits: 250 ms, doubling, capped at 5 s, for as long as it takes
 * (the union takes the shorter of the two delays).
 */
export const waitSchedule: Schedule.Schedule<unknown> = Schedule.exponential(FIRST_RETRY, 2).pipe(
  Schedule.union(Schedule.spaced(MAX_RETRY))
)

/**
 * Runs `attempt` until it succeeds, retrying with {@link waitSchedule} while its error is one to
 * wait out (`waitingFor` gives what is waited for, e.g. `queue "durable-results" to be created`)
 * and failing at once with any other error. The first wait is logged once, at warning level, with
 * the reason; the end of the wait is logged at info level. While it waits, the wait and its latest
 * reason are told to {@link RegistrationWaits} (for readiness), and taken back however it ends.
 */
export const waitFor = <A, E, R>(
  attempt: Effect.Effect<A, E, R>,
  waitingFor: (error: E) => string | undefined,
  options: { readonly describe?: (error: E) => string | undefined; readonly schedule?: Schedule.Schedule<unknown> } = {}
): Effect.Effect<A, E, R> =>
  Effect.gen(function*() {
    const waits = yield* RegistrationWaits
    const wait = Symbol()
    // what the wait was for when it began: the log's two lines name it
    const waited = yield* Ref.make<string | undefined>(undefined)
    const told = (error: E) =>
      Effect.flatMap(Ref.getAndUpdate(waited, (was) => was ?? waitingFor(error)), (was) => {
        const what = waitingFor(error)
        if (what === undefined) return Effect.void
        const why = options.describe?.(error)
        // readiness shows what this attempt waits for now (a queue may be missing once the endpoint answers)
        const tell = waits.waiting(wait, what, why)
        return was !== undefined ? tell : Effect.zipRight(
          tell,
          Effect.logWarning(
            `waiting for ${what}${why === undefined ? "" : ` (${why})`}; ` +
              `retrying with backoff up to every ${Duration.format(MAX_RETRY)} until it is there`
          )
        )
      })
    const result = yield* attempt.pipe(
      Effect.tapError(told),
      Effect.retry({ schedule: options.schedule ?? waitSchedule, while: (error) => waitingFor(error) !== undefined }),
      Effect.ensuring(Effect.flatMap(Ref.get(waited), (what) => what === undefined ? Effect.void : waits.done(wait)))
    )
    const what = yield* Ref.get(waited)
    if (what !== undefined) yield* Effect.logInfo(`done waiting for ${what}`)
    return result
  })

/**
 * `Effect.forEach` over `items` all at once, except that one item alone (one broker, one step name:
 * the usual worker) runs in the calling fiber. The concurrent form forks a fiber per item and joins
 * them, which is no small part of a worker's start when it buys nothing.
 */
export const forEachAtOnce = <A, B, E, R>(
  items: ReadonlyArray<A>,
  f: (item: A) => Effect.Effect<B, E, R>
): Effect.Effect<Array<B>, E, R> => Effect.forEach(items, f, { concurrency: items.length > 1 ? "unbounded" : 1 })
