/**
 * Whether the worker can reach its broker, for readiness: what the transport knows between calls
 * (`Registration.unreachable`) and what the worker's own polls see (a poller whose last poll
 * failed, until one works again).
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import type { Registration } from "../../seam/Transport.js"

/** @internal */
export interface Reachability {
  /** A poll of `poller` failed with `reason`. */
  readonly pollFailed: (poller: string, reason: string) => Effect.Effect<void>
  /** A poll of `poller` worked after failures. Not called while its polls keep working. */
  readonly pollWorked: (poller: string) => Effect.Effect<void>
  /** Reads the transport's own word from `registration` from now on. */
  readonly watch: (registration: Registration) => Effect.Effect<void>
  /** Why the broker cannot be reached, if it cannot: the transport's word first, then a failing poll. */
  readonly unreachable: Effect.Effect<Option.Option<string>>
}

/** @internal */
export const makeReachability: Effect.Effect<Reachability> = Effect.gen(function*() {
  const failing = yield* Ref.make<ReadonlyMap<string, string>>(new Map())
  const transport = yield* Ref.make<Effect.Effect<Option.Option<string>>>(Effect.succeedNone)
  const firstFailing = Effect.map(Ref.get(failing), (polls) => {
    const [first] = polls
    return first === undefined ? Option.none() : Option.some(`the last poll of ${first[0]} failed: ${first[1]}`)
  })
  return {
    pollFailed: (poller, reason) => Ref.update(failing, (polls) => new Map(polls).set(poller, reason)),
    pollWorked: (poller) =>
      Ref.update(failing, (polls) => {
        const next = new Map(polls)
        next.delete(poller)
        return next
      }),
    watch: (registration) => Ref.set(transport, registration.unreachable ?? Effect.succeedNone),
    unreachable: Effect.gen(function*() {
      const own = yield* Effect.flatten(Ref.get(transport))
      return Option.isSome(own) ? own : yield* firstFailing
    })
  }
})
