/**
 * How every option object of the package refuses a key it does not know: the key named, the
 * option most likely meant (a misspelling, another case, or the other unit's name: the promise
 * facade's `…Ms` numbers against the Effect API's durations), and the options there are.
 *
 * @internal
 */
import * as Config from "effect/Config"
import * as ConfigError from "effect/ConfigError"
import * as Duration from "effect/Duration"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Predicate from "effect/Predicate"

/**
 * The first key of `options` not in `known`.
 *
 * @internal
 */
export const unknownKey = (options: object, known: ReadonlyArray<string>): string | undefined =>
  Object.keys(options).find((key) => !known.includes(key))

/**
 * Edits from `a` to `b` (insert, delete, replace, or swap two neighbours: "prot" is one from
 * "port"), or `limit + 1` once over `limit`.
 */
const distance = (a: string, b: string, limit: number): number => {
  if (Math.abs(a.length - b.length) > limit) return limit + 1
  const rows: Array<Array<number>> = [Array.from({ length: b.length + 1 }, (_, j) => j)]
  for (let i = 1; i <= a.length; i++) {
    const row = [i]
    for (let j = 1; j <= b.length; j++) {
      let edits = Math.min(rows[i - 1]![j]! + 1, row[j - 1]! + 1, rows[i - 1]![j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1))
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) edits = Math.min(edits, rows[i - 2]![j - 2]! + 1)
      row[j] = edits
    }
    if (Math.min(...row) > limit) return limit + 1
    rows.push(row)
  }
  return rows[a.length]![b.length]!
}

/**
 * The names the drivers and their users use (`pg`'s `connectionString` and `user`, ioredis's `host`
 * and `port`, SQS's `queueUrl`), for the option each means here, when that option is among the known.
 */
const DRIVER_NAMES: Readonly<Record<string, ReadonlyArray<string>>> = {
  connectionString: ["url"],
  uri: ["url"],
  user: ["username"],
  db: ["database"],
  dbname: ["database"],
  pass: ["password"],
  host: ["url", "connection"],
  hostname: ["host", "url", "connection"],
  port: ["url", "connection"],
  queueUrl: ["taskQueueUrl"],
  url: ["baseUrl"],
  server: ["baseUrl"]
}

/** The option of `known` that a driver's name means, with how to write it where it takes an object. */
const driverName = (key: string, known: ReadonlyArray<string>): string | undefined => {
  if (!Object.hasOwn(DRIVER_NAMES, key)) return undefined
  const meant = DRIVER_NAMES[key]!.filter((name) => known.includes(name))
  if (meant.length === 0) return undefined
  return meant.map((name) => name === "connection" ? `"connection" ({ ${key}: … })` : `"${name}"`).join(" or ")
}

/** What the user most likely meant by `key`, as a clause of the message, if anything stands out. */
const suggestion = (key: string, known: ReadonlyArray<string>): string => {
  const driver = driverName(key, known)
  if (driver !== undefined) return `; did you mean ${driver}?`
  const millis = `${key}Ms`
  if (known.includes(millis)) return `; did you mean "${millis}"? durations are in milliseconds here`
  const duration = key.endsWith("Ms") ? key.slice(0, -2) : undefined
  if (duration !== undefined && known.includes(duration)) {
    return `; did you mean "${duration}"? it takes a duration: ${durationForms("5 seconds")}`
  }
  const near = closest(key, known)
  return near === undefined ? "" : `; did you mean "${near}"?`
}

/** The name of `known` that `word` most likely means: the same letters in another case, or a slip of a letter or two. */
const closest = (word: string, known: ReadonlyArray<string>): string | undefined => {
  const lower = word.toLowerCase()
  const sameLetters = known.find((name) => name.toLowerCase() === lower)
  if (sameLetters !== undefined) return sameLetters
  // not for short words, where two edits reach half the names
  const limit = word.length <= 4 ? 1 : 2
  let best: { readonly name: string; readonly edits: number } | undefined
  for (const name of known) {
    const edits = distance(lower, name.toLowerCase(), limit)
    if (edits <= limit && (best === undefined || edits < best.edits)) best = { name, edits }
  }
  return best?.name
}

/**
 * The message refusing `value` for the option `what` unless it is one of `allowed`, with the value
 * most likely meant (the same letters in another case, a slip, or the start of a name: `"warn"`
 * for `"Warning"`).
 *
 * @internal
 */
export const notOneOf = (value: unknown, allowed: ReadonlyArray<string>, what: string): string | undefined => {
  if (typeof value === "string" && allowed.includes(value)) return undefined
  const word = typeof value === "string" ? value : undefined
  const near = word === undefined
    ? undefined
    : closest(word, allowed) ??
      (word.length >= 3 ? allowed.find((name) => name.toLowerCase().startsWith(word.toLowerCase())) : undefined)
  return `${what} must be one of ${allowed.map((name) => `"${name}"`).join(", ")}, got ${
    typeof value === "string" ? JSON.stringify(value) : String(value)
  }${near === undefined ? "" : `; did you mean "${near}"?`}`
}

/** The message refusing options that are not an object; a URL given alone is shown the option it belongs in. */
const notAnObject = (options: unknown, known: ReadonlyArray<string>, what: string): string => {
  const isUrl = typeof options === "string" && /^[a-z][a-z0-9+.-]*:\/\//i.test(options)
  const urlOption = isUrl ? ["url", "baseUrl"].find((name) => known.includes(name)) : undefined
  // a connection string may carry a password
  const shown = typeof options === "string" ? JSON.stringify(options.replace(/\/\/[^@/]*@/, "//***@")) : showValue(options)
  return `${what} options must be an object, got ${shown}${
    urlOption === undefined ? "" : `: a URL goes in its ${urlOption} option, { ${urlOption}: ${shown} }`
  }`
}

/**
 * The first key of `options` not in `known`, with the message that refuses it:
 * `unknown <what> option "<key>"; did you mean "<name>"?; the options are …`.
 *
 * @internal
 */
export const unknownOption = (
  options: object | undefined,
  known: ReadonlyArray<string>,
  what: string
): { readonly key: string; readonly message: string } | undefined => {
  // from JavaScript, `redis("redis://…")` would be read key by key, a string's being "0", "1", …,
  // and `new Worker(4)`, having no keys, as no option at all
  if (options !== undefined && !Predicate.isRecord(options)) {
    return { key: "", message: notAnObject(options, known, what) }
  }
  const key = options === undefined ? undefined : unknownKey(options, known)
  if (key === undefined) return undefined
  return { key, message: `unknown ${what} option "${key}"${suggestion(key, known)}; the options are ${known.join(", ")}` }
}

/**
 * `options` without the keys whose value is `undefined`. An option given as `undefined` (read from
 * an unset variable, or passed on conditionally) means the option not given, so where given options
 * are spread over the environment's it must not hide the environment's value.
 *
 * @internal
 */
export const definedOnly = <A extends object>(options: A): DefinedOnly<A> =>
  Object.fromEntries(Object.entries(options).filter(([, value]) => value !== undefined)) as DefinedOnly<A>

/**
 * The options given in code over those read from the environment, each without its `undefined`s.
 * Options that are not an object are handed on as given, for the constructor to refuse with its
 * own message: spread, a string's characters would read as options "0", "1", … and a number as
 * none at all.
 *
 * @internal
 */
export const overRead = <R extends object, G extends object>(read: R, given: G): DefinedOnly<R> & DefinedOnly<G> =>
  Predicate.isRecord(given) ? { ...definedOnly(read), ...definedOnly(given as G) } : given as never

/**
 * `A` with each key that may be `undefined` made optional and not `undefined`, as
 * {@link definedOnly} leaves it.
 *
 * @internal
 */
export type DefinedOnly<A> =
  & { [K in keyof A as undefined extends A[K] ? never : K]: A[K] }
  & { [K in keyof A as undefined extends A[K] ? K : never]?: Exclude<A[K], undefined> }

/**
 * A variable that may be unset, read as its value or `undefined` (the option not given), so that
 * what is read from the environment and what is given in code follow one rule, {@link definedOnly}.
 *
 * @internal
 */
export const optional = <A>(config: Config.Config<A>): Config.Config<A | undefined> => Config.withDefault(config, undefined)

/** The short form's units, largest first, each with its milliseconds. */
const SHORT_UNITS: Readonly<Record<string, number>> = { d: 86_400_000, h: 3_600_000, m: 60_000, s: 1_000, ms: 1 }

/** The most parts a short form has: as many as `WorkerConfig.DurationOption`'s type takes (`"1h30m15s"`). */
const SHORT_PARTS = 3

/** A short form's shape: amounts of digits (a decimal point if need be), each with its unit. */
const SHORT_SHAPE = /^(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+$/

/**
 * The parts of a short form, or `undefined` when `value` is not one: up to {@link SHORT_PARTS}
 * parts, largest unit first, each unit once. `"1m30m"` (meant as `"1m30s"`) or `"30s1m"` would
 * otherwise be added up into a duration no one wrote.
 */
const shortParts = (value: string): ReadonlyArray<readonly [amount: number, millis: number]> | undefined => {
  if (!SHORT_SHAPE.test(value)) return undefined
  const parts = Array.from(value.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h|d)/g), ([, amount, unit]) => [Number(amount), SHORT_UNITS[unit!]!] as const)
  const descending = parts.every(([, millis], i) => i === 0 || millis < parts[i - 1]![1])
  return parts.length <= SHORT_PARTS && descending ? parts : undefined
}

/**
 * Why `value`, written as a short form, is not one, as a clause for the message refusing it: too
 * many parts, a unit repeated or after a smaller one, or an amount in exponent form (`"1e3s"`,
 * which `${number}` in the option's type cannot tell from digits). `undefined` for anything else.
 */
const shortFormProblem = (value: unknown): string | undefined => {
  const text = typeof value === "string" ? value.trim() : undefined
  if (text === undefined) return undefined
  if (SHORT_SHAPE.test(text) && shortParts(text) === undefined) {
    return `: a short form has up to ${SHORT_PARTS} parts, largest unit first, each unit once ("1h30m15s")`
  }
  return /^(?:\d+(?:\.\d+)?(?:e[+-]?\d+)?(?:ms|s|m|h|d))+$/i.test(text) && /\de/i.test(text)
    ? `: a short form's amounts are digits, with no exponent ("1000s", not "1e3s")`
    : undefined
}

/**
 * Whether a duration is given below zero, or as `NaN`. `Duration.decode` reads either as zero, so
 * `shutdownTimeout: -1` (often meant as "no deadline") would interrupt every running task at a stop.
 */
const belowZero = (value: unknown): boolean =>
  typeof value === "number"
    ? !(value >= 0)
    : typeof value === "bigint"
    ? value < 0n
    : typeof value === "string"
    ? value.trim().startsWith("-")
    : Array.isArray(value) && value.some((part) => typeof part === "number" && !(part >= 0))

/**
 * A duration as the options and the `DURABLE_*` variables take it: what `Duration.decode` accepts
 * (milliseconds as a number, `"30 seconds"`, `"500 millis"`), and the short forms of Go and
 * Kubernetes that operators write (`"30s"`, `"500ms"`, `"1m30s"`; up to three parts, largest unit
 * first, each unit once), and `"infinity"` (any case), so a variable can say what `Duration.infinity`
 * says in code; none for anything else, nor for a value below zero or `NaN`.
 *
 * @internal
 */
export const decodeDuration = (given: unknown): Option.Option<Duration.Duration> => {
  // " 30 seconds " from an env file decodes as "30 seconds" does
  const value = typeof given === "string" ? given.trim() : given
  if (belowZero(value)) return Option.none()
  const decoded = Duration.decodeUnknown(value)
  if (Option.isSome(decoded)) return decoded
  if (typeof value === "string" && value.toLowerCase() === "infinity") return Option.some(Duration.infinity)
  const parts = typeof value === "string" ? shortParts(value) : undefined
  if (parts === undefined) return Option.none()
  return Option.some(Duration.millis(parts.reduce((sum, [amount, millis]) => sum + amount * millis, 0)))
}

/**
 * What a duration option must be beyond a duration: more than zero (`positive`), not
 * `Duration.infinity` (`finite`); `example` is the form its message shows.
 *
 * @internal
 */
export interface DurationRule {
  readonly positive?: boolean | undefined
  readonly finite?: boolean | undefined
  readonly example?: string | undefined
}

/**
 * A duration option's value, checked: the duration, or the message refusing it, which names
 * `option`, says what it must be and the forms it takes, and shows what it got. Every duration
 * option goes through it, each wrapping the message in its own error.
 *
 * @internal
 */
export const checkDuration = (option: string, value: unknown, rule: DurationRule = {}): Either.Either<Duration.Duration, string> => {
  const decoded = decodeDuration(value)
  if (
    Option.isSome(decoded) && !(rule.positive === true && Duration.isZero(decoded.value)) &&
    !(rule.finite === true && !Duration.isFinite(decoded.value))
  ) {
    return Either.right(decoded.value)
  }
  const kind = rule.positive === true
    ? rule.finite === true ? "a positive, finite duration" : "a positive duration"
    : rule.finite === true
    ? "a finite duration of zero or more"
    : "a duration of zero or more"
  return Either.left(`${option} must be ${kind} (${durationForms(rule.example)}), got ${showValue(value)}${shortFormProblem(value) ?? ""}`)
}

/**
 * A `DURABLE_*` variable holding a whole number from `min` to `max`: digits only, where Effect's
 * `Config.integer` reads `""` (an empty `FOO=` in an env file) as 0, and `0x1F90` or `8e3` as
 * numbers.
 *
 * @internal
 */
export const wholeNumberConfig = (name: string, min: number, max = Number.MAX_SAFE_INTEGER): Config.Config<number> =>
  Config.mapOrFail(Config.string(name), (text) => wholeNumber(text, min, max))

/**
 * The text of a variable as a whole number from `min` to `max` ({@link wholeNumberConfig}); `also`
 * names what else the variable takes, for the message.
 *
 * @internal
 */
export const wholeNumber = (text: string, min: number, max: number, also = ""): Either.Either<number, ConfigError.ConfigError> => {
  const trimmed = text.trim()
  const value = Number(trimmed)
  return /^\d+$/.test(trimmed) && value >= min && value <= max
    ? Either.right(value)
    : Either.left(ConfigError.InvalidData(
      [],
      `Expected a whole number ${max === Number.MAX_SAFE_INTEGER ? `of at least ${min}` : `from ${min} to ${max}`}${also}, got ${
        JSON.stringify(text)
      }`
    ))
}

/**
 * A value for a message: a string quoted, so that `"8080"` does not read as the number it is not.
 *
 * @internal
 */
export const showValue = (value: unknown): string =>
  typeof value === "string"
    ? JSON.stringify(value)
    : typeof value === "function"
    ? "a function"
    : Duration.isDuration(value)
    ? Duration.isZero(value) ? "0ms" : Duration.format(value)
    : Array.isArray(value) || (typeof value === "object" && value !== null && Object.getPrototypeOf(value) === Object.prototype)
    ? json(value)
    : String(value)

const json = (value: unknown): string => {
  try {
    return JSON.stringify(value)
  } catch {
    return String(value)
  }
}

/**
 * What a duration option accepts, for the message refusing or suggesting one: `example` in Effect's
 * words, and the short form every option takes as well.
 *
 * @internal
 */
export const durationForms = (example = "30 seconds"): string => `milliseconds, or a string such as "${example}" or "1m30s"`

/**
 * {@link durationForms} as a message puts it, in parentheses after the option: the promise facade,
 * whose `…Ms` options take milliseconds only, leaves it out of the message it passes on.
 *
 * @internal
 */
export const durationFormsClause = / \(milliseconds, or a string such as "[^"]*" or "1m30s"\)/

/**
 * A `DURABLE_*` variable holding a duration in any form {@link decodeDuration} takes.
 *
 * @internal
 */
export const durationConfig = (name: string): Config.Config<Duration.Duration> =>
  Config.mapOrFail(Config.string(name), (text) =>
    Option.match(decodeDuration(text), {
      // a bare number is not taken: 30 of what? (the options' numbers are milliseconds)
      onNone: () =>
        Either.left(ConfigError.InvalidData(
          [],
          `Expected a duration of zero or more such as "30 seconds" or "30s", got ${JSON.stringify(text)}${
            /^\s*\d+(\.\d+)?\s*$/.test(text) ? " (a number needs its unit here)" : shortFormProblem(text) ?? ""
          }`
        )),
      onSome: Either.right
    }))
