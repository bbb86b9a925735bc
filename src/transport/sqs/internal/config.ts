/**
 * The SQS transport's options, checked once when the transport is built: every option with a
 * constraint is checked here, and an unknown key or a bad value fails with an
 * {@link SqsConfigError} that names the option, says what it accepts and shows what it got.
 *
 * @since 0.2.0
 * @internal
 */
import type { SQSClient, SQSClientConfig } from "@aws-sdk/client-sqs"
import * as Duration from "effect/Duration"
import * as Either from "effect/Either"
import * as Predicate from "effect/Predicate"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import { isDefaultScope } from "../../../protocol/NestDurableProtocol.js"
import { checkDuration, definedOnly, unknownKey } from "../../../core/internal/options.js"
import { checks, millisHint, show } from "../../internal/options.js"
import type { SqsOptions, TaskQueueUrl } from "../../SqsTransport.js"
import * as Naming from "./naming.js"

/**
 * An invalid or unknown option of the SQS transport, named, with the accepted forms and the value
 * given. Raised when the transport is built, before any request is sent.
 *
 * @since 0.2.0
 * @category errors
 */
export class SqsConfigError extends Schema.TaggedError<SqsConfigError>()("SqsConfigError", {
  option: Schema.String,
  message: Schema.String
}) {}

/**
 * The client settings `layerConfig` reads from the environment: the endpoint, the region (`us-east-1`
 * for an endpoint with none, as a local SQS-compatible server needs one), and the keys as a
 * provider, so they stay `Redacted` in the settings and are read only to sign a request. What is not
 * set is left to the AWS SDK's own lookup.
 *
 * @internal
 */
export const clientConfigOf = (env: {
  readonly endpoint: string | undefined
  readonly region: string | undefined
  readonly accessKeyId: Redacted.Redacted | undefined
  readonly secretAccessKey: Redacted.Redacted | undefined
  readonly sessionToken: Redacted.Redacted | undefined
}): SQSClientConfig => {
  const { accessKeyId, secretAccessKey, sessionToken } = env
  return definedOnly({
    endpoint: env.endpoint,
    region: env.region ?? (env.endpoint === undefined ? undefined : "us-east-1"),
    credentials: accessKeyId === undefined || secretAccessKey === undefined ? undefined : () =>
      Promise.resolve(definedOnly({
        accessKeyId: Redacted.value(accessKeyId),
        secretAccessKey: Redacted.value(secretAccessKey),
        sessionToken: sessionToken === undefined ? undefined : Redacted.value(sessionToken)
      }))
  })
}

/**
 * An AWS key of the environment, an empty one (`AWS_ACCESS_KEY_ID=` in an env file) as unset: given
 * to the client as it is, an empty key would stand in front of the SDK's own lookup (a profile, an
 * instance or IRSA role) and be refused.
 *
 * @internal
 */
export const environmentKey = (key: Redacted.Redacted | undefined): Redacted.Redacted | undefined =>
  key !== undefined && Redacted.value(key).trim() !== "" ? key : undefined

/**
 * The visibility a received task gets and how often it is extended while it runs or waits.
 *
 * @since 0.1.0
 */
export interface Visibility {
  /** `VisibilityTimeout` of a receive and of every extension, whole seconds. */
  readonly timeoutSeconds: number
  /** How often a held message's visibility is extended (back to `timeoutSeconds` from then). */
  readonly extendEvery: Duration.Duration
}

/**
 * The checked options, defaults applied.
 *
 * @since 0.2.0
 */
export interface Resolved {
  readonly client: SQSClient | undefined
  readonly clientConfig: SQSClientConfig
  readonly prefix: string
  readonly partition: string | undefined
  readonly autoCreate: boolean
  readonly taskQueueUrl: TaskQueueUrl | undefined
  readonly resultsQueueUrl: SqsOptions["resultsQueueUrl"]
  readonly marker: string | undefined
  readonly waitTime: Duration.Duration
  readonly visibility: Visibility
  readonly connectTimeout: Duration.Duration
  /** Whether an endpoint that does not answer at start is waited for. */
  readonly waitForBroker: boolean
}

const KEYS: ReadonlyArray<keyof SqsOptions> = [
  "client",
  "clientConfig",
  "prefix",
  "partition",
  "autoCreate",
  "taskQueueUrl",
  "resultsQueueUrl",
  "marker",
  "waitTime",
  "visibilityTimeout",
  "visibilityExtendInterval",
  "connectTimeout",
  "waitForBroker"
]

/** Settings of the SQS client, which belong in `clientConfig`. */
const CLIENT_KEYS: ReadonlyArray<string> = ["endpoint", "region", "credentials", "maxAttempts", "retryMode"]

const { boolean, duration, fail, refuseUnknown, string } = checks(
  "SQS",
  (option, message) => new SqsConfigError({ option, message }),
  "10 seconds"
)

/** Refuses an unknown key; a setting of the SQS client is pointed to `clientConfig`. */
const refuseUnknownKey = (options: object) => {
  // options that are not an object are refused as a whole
  const key = Predicate.isRecord(options) ? unknownKey(options, KEYS) : undefined
  return key !== undefined && CLIENT_KEYS.includes(key)
    ? fail(
      key,
      `unknown SQS option "${key}": settings of the SQS client go in clientConfig, ` +
        `e.g. { clientConfig: { endpoint, region, credentials } }`
    )
    : refuseUnknown(options, KEYS)
}

/** Refuses a prefix that makes `name`, a queue looked up by name, one SQS refuses; `instead` replaces the lookup. */
const queueName = (name: string, invalid: string, instead: string) => {
  const problem = Naming.queueNameProblem(name)
  return problem === undefined ? Either.void : fail(
    "prefix",
    `${invalid} (${problem}); ${Naming.QUEUE_NAME_RULE}: choose another prefix or pass ${instead}`
  )
}

/** SQS's rule for a message attribute name (the marker). */
const isAttributeName = (name: string) =>
  /^[A-Za-z0-9_.-]{1,256}$/.test(name) && !/^\.|\.$|\.\./.test(name) && !/^(aws|amazon)\./i.test(name)

/**
 * Checks the visibility settings: the timeout is whole seconds in 1..43200 (a fraction is rounded
 * up), the extension interval defaults to a third of it, so one failed extension still leaves time
 * for the next, and must be shorter than the timeout.
 *
 * @since 0.1.0
 */
export const visibility = (
  timeout: Duration.Duration,
  extendEvery: Duration.Duration | undefined,
  /** The timeout as the options gave it, for the message. */
  given?: unknown
): Either.Either<Visibility, SqsConfigError> => {
  const timeoutSeconds = Math.ceil(Duration.toSeconds(timeout))
  if (Duration.lessThan(timeout, Duration.seconds(1)) || timeoutSeconds > Naming.MAX_VISIBILITY_SECONDS) {
    return fail(
      "visibilityTimeout",
      `visibilityTimeout must be between 1 second and 12 hours (got ${Duration.format(timeout)}${millisHint(given)})`
    )
  }
  const every = extendEvery ?? Duration.millis(Math.floor((timeoutSeconds * 1000) / 3))
  if (!Duration.greaterThan(every, Duration.zero) || !Duration.lessThan(every, Duration.seconds(timeoutSeconds))) {
    return fail(
      "visibilityExtendInterval",
      `visibilityExtendInterval must be more than 0 and less than visibilityTimeout (${timeoutSeconds}s), ` +
        `or a running task becomes visible to other workers before it is extended (got ${Duration.format(every)})`
    )
  }
  return Either.right({ timeoutSeconds, extendEvery: every })
}

/**
 * `waitTime`: 0 (short polls, the poll timeout's pause between empty ones) or a whole-second wait,
 * capped at 20 s and by the poll timeout where it is used. Under a second SQS would not wait at all.
 */
const waitTime = (value: unknown) =>
  Either.flatMap(decode("waitTime", value), (given) =>
    given === undefined || Duration.isZero(given) || !Duration.lessThan(given, Duration.seconds(1))
      ? Either.right(given)
      : fail(
        "waitTime",
        `waitTime must be 0 (short polls) or at least 1 second: SQS waits whole seconds (got ${Duration.format(given)}${
          millisHint(value)
        })`
      ))

/** A duration option whose range is checked where it is used (or that needs none). */
const decode = (option: string, value: unknown) =>
  value === undefined
    ? Either.right(undefined)
    : Either.mapLeft(checkDuration(option, value, { example: "60 seconds" }), (message) => new SqsConfigError({ option, message }))

/**
 * Checks the options and applies the defaults. Besides each value, it refuses what would make a
 * queue looked up by name one that SQS cannot have: a prefix SQS refuses in `<prefix>-results`
 * (without `resultsQueueUrl`) or in `<prefix>-tasks-<step>` (without `taskQueueUrl`), and a
 * partition (it puts `@` into every task queue name) without `taskQueueUrl`. Step names are checked
 * at registration, where they are known.
 *
 * @since 0.2.0
 */
export const resolve = (options: SqsOptions): Either.Either<Resolved, SqsConfigError> =>
  Either.gen(function*() {
    yield* refuseUnknownKey(options)
    if (options.client !== undefined && typeof (options.client as { send?: unknown } | null)?.send !== "function") {
      return yield* fail("client", `client must be an SQSClient of @aws-sdk/client-sqs v3, got ${show(options.client)}`)
    }
    if (options.clientConfig !== undefined && !Predicate.isRecord(options.clientConfig)) {
      return yield* fail(
        "clientConfig",
        `clientConfig must be an SQSClientConfig such as { endpoint, region, credentials }, got ${show(options.clientConfig)}`
      )
    }
    const endpoint = options.clientConfig?.endpoint
    if (typeof endpoint === "string" && !/^https?:\/\/[^/]/i.test(endpoint)) {
      // the SDK takes it as given and fails each call with "Invalid URL", which reads as SQS being away
      return yield* fail(
        "clientConfig.endpoint",
        `clientConfig.endpoint must be an http:// or https:// URL such as http://127.0.0.1:4566, got ${show(endpoint)}`
      )
    }
    const prefix = (yield* string("prefix", options.prefix)) ?? Naming.DEFAULT_PREFIX
    const { taskQueueUrl, resultsQueueUrl } = options
    if (
      taskQueueUrl !== undefined && typeof taskQueueUrl !== "function" &&
      !(Predicate.isRecord(taskQueueUrl) && Object.values(taskQueueUrl).every((url) => typeof url === "string" && url !== ""))
    ) {
      return yield* fail(
        "taskQueueUrl",
        `taskQueueUrl must be a function of the group or a record of queue URLs by group, got ${show(taskQueueUrl)}`
      )
    }
    if (resultsQueueUrl !== undefined && typeof resultsQueueUrl !== "function") {
      yield* string("resultsQueueUrl", resultsQueueUrl)
    }
    if (resultsQueueUrl === undefined) {
      yield* queueName(
        Naming.resultsQueueName(prefix),
        `the results queue "${Naming.resultsQueueName(prefix)}" is not a valid SQS queue name`,
        "resultsQueueUrl"
      )
    }
    if (taskQueueUrl === undefined) {
      yield* queueName(
        Naming.tasksQueueName(prefix, ""),
        `the task queues "${Naming.tasksQueueName(prefix, "<step>")}" are not valid SQS queue names`,
        "taskQueueUrl"
      )
    }
    const partition = yield* string("partition", options.partition, true)
    if (!isDefaultScope(partition) && taskQueueUrl === undefined) {
      return yield* fail(
        "partition",
        `partition "${partition}" puts '@' into every task queue name (${Naming.tasksQueueName(prefix, `<step>@${partition}`)}), ` +
          `which SQS refuses (${Naming.QUEUE_NAME_RULE}); map each group to an existing queue with taskQueueUrl ` +
          "(the engine must be given the same mapping)"
      )
    }
    const autoCreate = (yield* boolean("autoCreate", options.autoCreate)) ?? false
    const marker = yield* string("marker", options.marker)
    if (marker !== undefined && !isAttributeName(marker)) {
      return yield* fail(
        "marker",
        `marker must be an SQS message attribute name (1-256 letters, digits, '_', '-' or '.', no leading, trailing ` +
          `or double '.', not starting with "AWS." or "Amazon."), got ${show(marker)}`
      )
    }
    return {
      client: options.client,
      clientConfig: options.clientConfig ?? {},
      prefix,
      partition,
      autoCreate,
      taskQueueUrl,
      resultsQueueUrl,
      marker,
      // capped at 20 s and by the poll timeout where it is used
      waitTime: (yield* waitTime(options.waitTime)) ?? Duration.seconds(20),
      visibility: yield* visibility(
        (yield* decode("visibilityTimeout", options.visibilityTimeout)) ?? Duration.seconds(60),
        yield* decode("visibilityExtendInterval", options.visibilityExtendInterval),
        options.visibilityTimeout
      ),
      connectTimeout: (yield* duration("connectTimeout", options.connectTimeout)) ?? Duration.seconds(10),
      waitForBroker: (yield* boolean("waitForBroker", options.waitForBroker)) ?? false
    }
  })
