/**
 * Whether the worker can reach its broker, for readiness: while it registers, what the
 * registration waits for (a broker that does not answer yet, with `waitForBroker`); then what the
 * transport knows between calls
 * (`Registration.unreachable`) and what the worker's own calls see (a poller whose last poll
 * failed, until one works again, or a heartbeat still unanswered when the next is due, until it is). The heartbeat counts
 * because a broker that accepts connections and does not answer (paused, a failover, a black hole)
 * fails no poll: a blocking take that waits looks the same as an idle queue.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import type { Registration, RegistrationWaits } from "../../seam/Transport.js"

/** @internal */
export interface Reachability {
  /** A poll of `poller` failed with `reason`. */
  readonly pollFailed: (poller: string, reason: string) => Effect.Effect<void>
  /** A poll of `poller` worked after failures. Not called while its polls keep working. */
  readonly pollWorked: (poller: string) => Effect.Effect<void>
  /** A heartbeat got no answer in time, with `reason`. */
  readonly heartbeatFailed: (reason: string) => Effect.Effect<void>
  /** A heartbeat was answered (with success or an error). */
  readonly heartbeatWorked: Effect.Effect<void>
  /** Reads the transport's own word from `registration` from now on. */
  readonly watch: (registration: Registration) => Effect.Effect<void>
  /** Why the broker cannot be reached, if it cannot: the transport's word first, then a failing call. */
  readonly unreachable: Effect.Effect<Option.Option<string>>
  /** Where the registration tells what it waits for; provided to `register`. */
  readonly registrationWaits: RegistrationWaits["Type"]
  /** What the registration waits for now, and why (`waiting for Redis at … to answer (…)`), if anything. */
  readonly waiting: Effect.Effect<Option.Option<string>>
}

/** `map` without `key` (itself when it has none, so that nothing changes). */
const without = <K, V>(map: ReadonlyMap<K, V>, key: K): ReadonlyMap<K, V> => {
  if (!map.has(key)) return map
  const next = new Map(map)
  next.delete(key)
  return next
}

/** @internal */
export const makeReachability: Effect.Effect<Reachability> = Effect.gen(function*() {
  const failing = yield* Ref.make<ReadonlyMap<string, string>>(new Map())
  const transport = yield* Ref.make<Effect.Effect<Option.Option<string>>>(Effect.succeedNone)
  // the calls failing now, each as "<call>" of "the last <call> failed: <reason>"
  const firstFailing = Effect.map(Ref.get(failing), (calls) => {
    const [first] = calls
    return first === undefined ? Option.none() : Option.some(`the last ${first[0]} failed: ${first[1]}`)
  })
  // what the registration waits for, in the order its waits began, each with its latest reason
  const waits = yield* Ref.make<ReadonlyMap<symbol, { readonly what: string; readonly why: string | undefined }>>(new Map())
  const failed = (call: string, reason: string) => Ref.update(failing, (calls) => new Map(calls).set(call, reason))
  const worked = (call: string) => Ref.update(failing, (calls) => without(calls, call))
  return {
    pollFailed: (poller, reason) => failed(`poll of ${poller}`, reason),
    pollWorked: (poller) => worked(`poll of ${poller}`),
    heartbeatFailed: (reason) => failed("heartbeat", reason),
    heartbeatWorked: worked("heartbeat"),
    watch: (registration) => Ref.set(transport, registration.unreachable ?? Effect.succeedNone),
    unreachable: Effect.gen(function*() {
      const own = yield* Effect.flatten(Ref.get(transport))
      return Option.isSome(own) ? own : yield* firstFailing
    }),
    registrationWaits: {
      waiting: (wait, what, why) => Ref.update(waits, (now) => new Map(now).set(wait, { what, why })),
      done: (wait) => Ref.update(waits, (now) => without(now, wait))
    },
    waiting: Effect.map(Ref.get(waits), (now) =>
      now.size === 0
        ? Option.none()
        : Option.some(
          // waits for the same thing at once (the queues of one endpoint) are shown once
          [...new Set([...now.values()].map(({ what, why }) => `waiting for ${what}${why === undefined ? "" : ` (${why})`}`))]
            .join("; ")
        ))
  }
})
