/**
 * The option checks the transports share, so every transport words a bad option the same way.
 * Each transport binds them to its own error class with {@link checks} and keeps only its own
 * rules beside them.
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Either from "effect/Either"
import { inspect } from "node:util"
import { checkDuration, unknownOption } from "../../core/internal/options.js"

/**
 * A value for a message: strings quoted, the credentials of a URL (`//user:pass@`) masked, since
 * a bad value may well be a connection string.
 *
 * @internal
 */
export const show = (value: unknown): string =>
  typeof value === "string" ? JSON.stringify(value.replace(/\/\/[^@/]*@/, "//***@")) : inspect(value, { depth: 0 })

/**
 * For a number under a thousand where a setting counts seconds (an SQS wait, a lease): that a number
 * is milliseconds, `60` being 60 ms, not the 60 seconds the broker's own settings would mean.
 *
 * @internal
 */
export const millisHint = (given: unknown): string =>
  typeof given === "number" && given > 0 && given < 1000
    ? `; a number is milliseconds: ${given} seconds is "${given} seconds"`
    : ""

/**
 * For a `layerConfig`: a refusal of a value it read from a variable, not from the options given in
 * code, names the variable (`REDIS_URL: url must be …`), since the application never wrote the
 * option. `variables` names the variable of each option read; `read` is what was read (an option
 * absent when its variable is unset), `given` the options given in code, which win over the
 * variables; `remake` is the error's constructor.
 *
 * @internal
 */
export const namingVariables = <E extends { readonly option?: string | undefined; readonly message: string }>(
  variables: Readonly<Record<string, string>>,
  read: Readonly<Record<string, unknown>>,
  given: object,
  remake: (option: string, message: string) => E
) =>
(error: E): E => {
  const option = error.option
  return option !== undefined && Object.hasOwn(variables, option) && read[option] !== undefined &&
      (given as Readonly<Record<string, unknown>>)[option] === undefined
    ? remake(option, `${variables[option]}: ${error.message}`)
    : error
}

/**
 * The shared checks, failing with the transport's own error. Each check passes `undefined` through
 * (the caller applies its default with `??`) and fails naming the option, what it accepts and what
 * it got.
 *
 * @param transport - How an unknown key names the transport: `unknown <transport> option "…"`.
 * @param makeError - The transport's error for an option and a message.
 * @param example - The duration shown in the duration message; a transport keeps its own.
 * @internal
 */
export const checks = <E>(
  transport: string,
  makeError: (option: string, message: string) => E,
  example = "30 seconds"
) => {
  const fail = (option: string, message: string): Either.Either<never, E> => Either.left(makeError(option, message))
  return {
    fail,
    /** Refuses the first key not in `known`, listing the options. */
    refuseUnknown: (options: object, known: ReadonlyArray<string>): Either.Either<void, E> => {
      const unknown = unknownOption(options, known, transport)
      return unknown === undefined ? Either.void : fail(unknown.key, unknown.message)
    },
    /** A string option; an empty one only with `empty`, where it means the default (a namespace, a partition). */
    string: (option: string, value: unknown, empty = false): Either.Either<string | undefined, E> =>
      value === undefined || (typeof value === "string" && (empty || value !== ""))
        ? Either.right(value as string | undefined)
        : fail(option, `${option} must be a ${empty ? "" : "non-empty "}string, got ${show(value)}`),
    boolean: (option: string, value: unknown): Either.Either<boolean | undefined, E> =>
      value === undefined || typeof value === "boolean"
        ? Either.right(value as boolean | undefined)
        : fail(option, `${option} must be true or false, got ${show(value)}`),
    /** A whole number from `min` (to `max`, where there is one). */
    integer: (option: string, value: unknown, min: number, max = Number.MAX_SAFE_INTEGER): Either.Either<number | undefined, E> =>
      value === undefined || (Number.isInteger(value) && (value as number) >= min && (value as number) <= max)
        ? Either.right(value as number | undefined)
        : fail(
          option,
          `${option} must be a whole number ${
            max === Number.MAX_SAFE_INTEGER ? `of at least ${min}` : `from ${min} to ${max}`
          }, got ${show(value)}`
        ),
    /**
     * A part of the names the worker takes tasks by (a prefix, namespace or partition), checked as a
     * string already: no blank or quote around it — `"shop"` as an env file may keep it, a stray
     * blank — which would make names the engine never uses, the worker taking nothing for ever; and,
     * with `colon`, no `:` (BullMQ refuses it in a queue name).
     */
    namePart: (option: string, value: string | undefined, colon = false): Either.Either<string | undefined, E> =>
      value === undefined
        ? Either.right(value)
        : value.trim() !== value || /^['"`]|['"`]$/.test(value)
        ? fail(
          option,
          `${option} ${JSON.stringify(value)} has blanks or quotes around it (a value quoted in an env file?): ` +
            "the worker would take tasks by names the engine never uses"
        )
        : colon && value.includes(":")
        ? fail(option, `${option} ${JSON.stringify(value)} has a ":", which BullMQ refuses in a queue name`)
        : Either.right(value),
    /** A positive, finite duration, given as anything `Duration.decode` takes or a short form (`"30s"`). */
    duration: (option: string, value: unknown): Either.Either<Duration.Duration | undefined, E> =>
      value === undefined
        ? Either.right(undefined)
        : Either.mapLeft(checkDuration(option, value, { positive: true, finite: true, example }), (message) => makeError(option, message))
  }
}
