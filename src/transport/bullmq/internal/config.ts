/**
 * The BullMQ transport's options, checked once when the transport is built: every option with a
 * constraint is checked here, and an unknown key or a bad value fails with a
 * {@link BullMQConfigError} that names the option, says what it accepts and shows what it got.
 *
 * @since 0.2.0
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Either from "effect/Either"
import * as Predicate from "effect/Predicate"
import * as Schema from "effect/Schema"
import { unknownOption } from "../../../core/internal/options.js"
import type { BrokerTarget, BullMQOptions } from "../../BullMQTransport.js"
import { checks, show } from "../../internal/options.js"
import { isSecret, reveal } from "../../internal/redact.js"
import { DEFAULT_COMMANDS_PER_WRITE } from "./coalesce.js"
import * as Naming from "./naming.js"

/**
 * An invalid or unknown option of the BullMQ transport, named, with the accepted forms and the
 * value given. Raised when the transport is built, before anything connects.
 *
 * @since 0.2.0
 * @category errors
 */
export class BullMQConfigError extends Schema.TaggedError<BullMQConfigError>()("BullMQConfigError", {
  option: Schema.String,
  message: Schema.String
}) {}

/**
 * A checked broker target: its URL revealed (a `Redacted` given as the option is unwrapped here).
 *
 * @since 0.3.0
 */
export type Target = Omit<BrokerTarget, "url"> & { readonly url?: string }

/**
 * The checked options, defaults applied.
 *
 * @since 0.2.0
 */
export interface Resolved {
  /** The main broker. */
  readonly target: Target
  /** The engine's pool id of the main broker. */
  readonly brokerId: string
  /** The further brokers of the pool, by id. */
  readonly brokers: ReadonlyArray<readonly [string, Target]>
  /** The effective prefix: the namespace folded in. */
  readonly prefix: string
  readonly namespace: string | undefined
  readonly partition: string | undefined
  readonly lockDuration: Duration.Duration
  readonly stepBeatInterval: Duration.Duration | undefined
  readonly connectTimeout: Duration.Duration
  /** Whether a Redis that does not answer at start is waited for (else the start fails after `connectTimeout`). */
  readonly waitForBroker: boolean
  readonly stalledInterval: Duration.Duration
  readonly commandsPerWrite: number
}

const KEYS: ReadonlyArray<keyof BullMQOptions> = [
  "url",
  "connection",
  "prefix",
  "namespace",
  "partition",
  "lockDuration",
  "stepBeatInterval",
  "brokers",
  "brokerId",
  "connectTimeout",
  "waitForBroker",
  "stalledInterval",
  "commandsPerWrite"
]

const TARGET_KEYS: ReadonlyArray<keyof BrokerTarget> = ["url", "connection"]

const { boolean, duration, fail, namePart, refuseUnknown, string } = checks(
  "BullMQ",
  (option, message) => new BullMQConfigError({ option, message })
)

/** Refuses an unknown key of one further broker, `scope` (`brokers.<id>`) in its option name. */
const refuseUnknownOfBroker = (value: object, scope: string) => {
  const unknown = unknownOption(value, TARGET_KEYS, scope)
  return unknown === undefined ? Either.void : fail(`${scope}.${unknown.key}`, unknown.message)
}

const isRedisUrl = (value: unknown) => {
  if (typeof value !== "string" || !/^rediss?:\/\//i.test(value)) return false
  try {
    new URL(value)
    return true
  } catch {
    return false
  }
}

/** Checks where a broker is; `name` gives the option name of each of its fields. */
const target = (value: { readonly url?: unknown; readonly connection?: unknown }, name: (key: string) => string) =>
  Either.gen(function*() {
    const url = isSecret(value.url) ? reveal(value.url) : value.url
    if (url !== undefined && !isRedisUrl(url)) {
      return yield* fail(
        name("url"),
        `${name("url")} must be a redis:// or rediss:// URL such as redis://127.0.0.1:6379 (a string or a Redacted), got ${
          show(url)
        }`
      )
    }
    if (value.connection !== undefined && !Predicate.isRecord(value.connection)) {
      return yield* fail(name("connection"), `${name("connection")} must be ioredis options, got ${show(value.connection)}`)
    }
    return {
      ...(url === undefined ? {} : { url: url as string }),
      ...(value.connection === undefined ? {} : { connection: value.connection as NonNullable<BrokerTarget["connection"]> })
    } satisfies Target
  })

/** Checks one further broker of the pool. */
const broker = (id: string, value: unknown) =>
  Either.gen(function*() {
    const option = `brokers.${id}`
    if (!Predicate.isRecord(value)) return yield* fail(option, `${option} must be { url } or { connection }, got ${show(value)}`)
    yield* refuseUnknownOfBroker(value, option)
    // the main broker defaults to 127.0.0.1:6379; a further one never does (a url read from an unset
    // variable would otherwise serve that pool's queues from the main Redis)
    if (value["url"] === undefined && value["connection"] === undefined) {
      return yield* fail(option, `${option} needs a url or a connection: it has neither (a url from an unset variable?)`)
    }
    return yield* target(value, (key) => `${option}.${key}`)
  })

/**
 * Checks the options and applies the defaults. Besides each value, it refuses a partition together
 * with a namespace (the engine never dispatches tenant tokens on a namespaced transport) and a
 * further broker under the main broker's id.
 *
 * @since 0.2.0
 */
export const resolve = (options: BullMQOptions): Either.Either<Resolved, BullMQConfigError> =>
  Either.gen(function*() {
    yield* refuseUnknown(options, KEYS)
    const main = yield* target(options, (key) => key)
    const prefix = (yield* namePart("prefix", yield* string("prefix", options.prefix), true)) ?? Naming.DEFAULT_PREFIX
    const namespace = yield* namePart("namespace", yield* string("namespace", options.namespace, true), true)
    const partition = yield* namePart("partition", yield* string("partition", options.partition, true), true)
    if (!Naming.isDefaultScope(namespace) && !Naming.isDefaultScope(partition)) {
      return yield* fail(
        "partition",
        `partition "${partition}" cannot be used with namespace "${namespace}": the engine never dispatches ` +
          "tenant (@) tokens on a namespaced transport, so this worker would consume nothing; set one of them"
      )
    }
    const brokerId = (yield* string("brokerId", options.brokerId)) ?? "default"
    if (options.brokers !== undefined && !Predicate.isRecord(options.brokers)) {
      return yield* fail("brokers", `brokers must be a record of brokers by pool id, got ${show(options.brokers)}`)
    }
    const brokers: Array<readonly [string, Target]> = []
    for (const [id, value] of Object.entries(options.brokers ?? {})) {
      if (id === brokerId) {
        return yield* fail(
          `brokers.${id}`,
          `brokers.${id} has the id of the main broker (brokerId "${brokerId}"); give each broker of the pool its own id`
        )
      }
      brokers.push([id, yield* broker(id, value)])
    }
    const commandsPerWrite = options.commandsPerWrite ?? DEFAULT_COMMANDS_PER_WRITE
    if (!Number.isInteger(commandsPerWrite) || commandsPerWrite < 1) {
      return yield* fail(
        "commandsPerWrite",
        `commandsPerWrite must be a whole number of at least 1 (1 turns write coalescing off), got ${show(commandsPerWrite)}`
      )
    }
    return {
      target: main,
      brokerId,
      brokers,
      prefix: Naming.effectivePrefix(prefix, namespace),
      namespace,
      partition,
      lockDuration: (yield* duration("lockDuration", options.lockDuration)) ?? Duration.seconds(30),
      stepBeatInterval: yield* duration("stepBeatInterval", options.stepBeatInterval),
      connectTimeout: (yield* duration("connectTimeout", options.connectTimeout)) ?? Duration.seconds(5),
      waitForBroker: (yield* boolean("waitForBroker", options.waitForBroker)) ?? false,
      stalledInterval: (yield* duration("stalledInterval", options.stalledInterval)) ?? Duration.seconds(30),
      commandsPerWrite
    }
  })
