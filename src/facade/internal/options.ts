/**
 * What the promise facade's modules share: refusing unknown option keys, and settling an effect as a
 * promise that rejects with the error itself.
 */
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import { durationFormsClause, showValue, unknownOption } from "../../core/internal/options.js"
import type { Transport } from "../../seam/Transport.js"

export { notOneOf } from "../../core/internal/options.js"

/**
 * A broker to run a worker on: what `inMemory()`, `redis(...)` and the other transport functions
 * return.
 *
 * @since 0.1.0
 * @category models
 */
export interface TransportHandle {
  readonly layer: Layer.Layer<Transport, unknown>
}

/**
 * The layer of what `run` was given, or one that fails with a `TypeError` saying what a transport
 * handle is, when it was given something else (from JavaScript: `redis` itself, a URL, nothing).
 */
export const layerOf = (transport: unknown): Layer.Layer<Transport, unknown> => {
  if (typeof transport === "object" && transport !== null && Layer.isLayer((transport as { layer?: unknown }).layer)) {
    return (transport as TransportHandle).layer
  }
  const given = typeof transport === "function"
    ? `the function ${transport.name === "" ? "" : `${transport.name} `}itself; call it (e.g. redis({ url }))`
    : transport === null || transport === undefined
    ? String(transport)
    : typeof transport === "object"
    ? "an object that is not one"
    : `a ${typeof transport}`
  return Layer.fail(
    new TypeError(
      `run needs a transport handle, as inMemory(), redis(…), sqs(…), postgres(…), mysql(…) or durableWorkflow(…) return; got ${given}`
    )
  )
}

/**
 * An option the facade cannot take: a key it does not know, or a `…Ms` option that is not a number
 * of zero or more. The Effect API takes any duration (`"1 second"`), and would refuse a bad one under
 * its own name (`shutdownTimeout`), not the one the application wrote.
 */
export const badOption = (
  options: object | undefined,
  known: ReadonlyArray<string>,
  what: string
): { readonly key: string; readonly message: string } | undefined => {
  const unknown = unknownOption(options, known, what)
  if (unknown !== undefined || options === undefined || options === null) return unknown
  for (const [key, value] of Object.entries(options)) {
    if (key.endsWith("Ms") && value !== undefined && !(typeof value === "number" && value >= 0)) {
      return {
        key,
        message: `${what} option "${key}" is a number of milliseconds, zero or more; got ${showValue(value)}`
      }
    }
  }
  return undefined
}

/** Throws a `TypeError` naming an option of `options` the facade cannot take. */
export const refuseUnknown = (options: object | undefined, known: ReadonlyArray<string>, what: string): void => {
  const bad = badOption(options, known, what)
  if (bad !== undefined) throw new TypeError(bad.message)
}

/**
 * `error`, where it refuses an option that the facade takes in milliseconds under another name
 * (`connectTimeout` for `connectTimeoutMs: 0`), naming the option as the application wrote it:
 * its `option` (or, for an error without one, the message's first word) and the message's start,
 * without the duration forms the facade does not take.
 * `known` are the facade's keys of the object, `prefix` the path to it (`"health."`).
 */
export const inFacadeTerms = <E>(error: E, known: ReadonlyArray<string>, prefix = ""): E => {
  // only an option's refusal: a `…ConfigError`, whose fields are `message` and perhaps `option`, so
  // that it can be made again (a connection's error, with a cause and more, passes as it is)
  const tag = typeof error === "object" && error !== null ? (error as { _tag?: unknown })._tag : undefined
  if (typeof tag !== "string" || !tag.endsWith("ConfigError")) return error
  if (typeof (error as { message?: unknown }).message !== "string") return error
  const { message: given, option } = error as unknown as { readonly message: string; readonly option?: unknown }
  const message = given.replace(durationFormsClause, "")
  const named = typeof option === "string" ? option : /^[\w.]+/.exec(message)?.[0]
  if (named === undefined || !named.startsWith(prefix) || !known.includes(`${named.slice(prefix.length)}Ms`)) return error
  const written = `${named}Ms`
  const props = { message: message.startsWith(named) ? written + message.slice(named.length) : message }
  // the error's own class (a Schema.TaggedError of { option?, message }), so its tag and type stay
  const Class = (error as object).constructor as new(props: object) => E
  return new Class(typeof option === "string" ? { ...props, option: written } : props)
}

/**
 * `layer()`, its refusals of a milliseconds option named as the application wrote it; or, when
 * `options` has an option it cannot take, a layer that fails with `error` when a run builds it.
 */
export const refusingUnknown = <ROut, E>(
  options: object,
  known: ReadonlyArray<string>,
  what: string,
  error: (unknown: { readonly key: string; readonly message: string }) => E,
  layer: () => Layer.Layer<ROut, E>
): Layer.Layer<ROut, E> => {
  const bad = badOption(options, known, what)
  return bad === undefined
    ? Layer.mapError(layer(), (refused) => inFacadeTerms(refused, known))
    : Layer.unwrapEffect(Effect.fail(error(bad)))
}

/** Runs an effect and settles with its value, or rejects with its error itself (not a wrapper). */
export const settle = async <A, E>(effect: Effect.Effect<A, E>): Promise<A> => {
  const exit = await Effect.runPromiseExit(effect)
  if (Exit.isSuccess(exit)) return exit.value
  throw Cause.squash(exit.cause)
}

/** Runs a synchronous effect, throwing its error itself (not a wrapper). */
export const settleSync = <A, E>(effect: Effect.Effect<A, E>): A => {
  const exit = Effect.runSyncExit(effect)
  if (Exit.isSuccess(exit)) return exit.value
  throw Cause.squash(exit.cause)
}
