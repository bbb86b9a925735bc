/**
 * Names and numbers of the nestjs-durable SQS wire: queue names (`<prefix>-tasks-<token>`,
 * `<prefix>-results`), the SQS queue-name rule they must satisfy to be looked up or created by name,
 * the receive wait and the visibility settings. Pure functions, no I/O.
 *
 * @since 0.1.0
 * @internal
 */
import * as Duration from "effect/Duration"
import { routingToken } from "../../../protocol/NestDurableProtocol.js"

/**
 * The default queue-name prefix shared with the engine's `SqsTransport`.
 *
 * @since 0.1.0
 */
export const DEFAULT_PREFIX = "durable"

/**
 * The longest receive wait SQS allows (`WaitTimeSeconds`).
 *
 * @since 0.1.0
 */
export const MAX_WAIT_SECONDS = 20

/**
 * The most messages one `ReceiveMessage` returns.
 *
 * @since 0.1.0
 */
export const MAX_RECEIVE = 10

/**
 * The longest visibility timeout SQS allows (12 hours).
 *
 * @since 0.1.0
 */
export const MAX_VISIBILITY_SECONDS = 43_200

/**
 * The routing token (the task's `group`) of a registered step: `:` becomes `-`, and a non-default
 * partition is appended as `@<partition>` — exactly the engine's `tenantGroup(sanitizeQueueToken(name), tenant)`.
 *
 * @since 0.1.0
 */
export const token = (name: string, partition?: string | undefined): string => routingToken(name, partition)

/**
 * `<prefix>-tasks-<token>`: the queue the engine's `SqsTransport` sends a group's tasks to when it
 * resolves queues by name.
 *
 * @since 0.1.0
 */
export const tasksQueueName = (prefix: string, group: string): string => `${prefix}-tasks-${group}`

/**
 * `<prefix>-results`: the queue of step results, worker → engine.
 *
 * @since 0.1.0
 */
export const resultsQueueName = (prefix: string): string => `${prefix}-results`

/**
 * The SQS rule for a standard queue name, stated for error messages.
 *
 * @since 0.1.0
 */
export const QUEUE_NAME_RULE = "SQS queue names allow only letters, digits, '-' and '_', at most 80 characters"

/**
 * Why `name` cannot be an SQS standard queue name, or `undefined` when it can. (`.fifo` queues are not
 * accepted: the engine sends no FIFO fields.)
 *
 * @since 0.1.0
 */
export const queueNameProblem = (name: string): string | undefined => {
  if (name.length === 0) return "it is empty"
  if (name.length > 80) return `it is ${name.length} characters long`
  const bad = Array.from(new Set(name.replace(/[A-Za-z0-9_-]/g, "")))
  return bad.length === 0 ? undefined : `it contains ${bad.map((c) => `'${c}'`).join(", ")}`
}

/**
 * The `WaitTimeSeconds` of a receive: the configured wait, capped by the worker's poll timeout and by
 * SQS's 20 s, in whole seconds (rounded down, so a receive never outlasts the poll timeout).
 *
 * @since 0.1.0
 */
export const waitTimeSeconds = (waitTime: Duration.Duration, pollTimeout: Duration.Duration): number =>
  Math.max(0, Math.min(MAX_WAIT_SECONDS, Math.floor(Duration.toSeconds(Duration.min(waitTime, pollTimeout)))))

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
 * Validates the visibility options: the timeout is whole seconds in 1..43200 (a fraction is rounded
 * up), the extension interval defaults to a third of it, so one failed extension still leaves time for
 * the next, and must be shorter than the timeout. Returns the problem as text when they are invalid.
 *
 * @since 0.1.0
 */
export const visibility = (
  timeout: Duration.Duration,
  extendEvery: Duration.Duration | undefined
): Visibility | string => {
  const timeoutSeconds = Math.ceil(Duration.toSeconds(timeout))
  if (!(timeoutSeconds >= 1 && timeoutSeconds <= MAX_VISIBILITY_SECONDS)) {
    return `visibilityTimeout must be between 1 second and 12 hours (got ${Duration.format(timeout)})`
  }
  const every = extendEvery ?? Duration.millis(Math.floor((timeoutSeconds * 1000) / 3))
  if (!Duration.greaterThan(every, Duration.zero) || !Duration.lessThan(every, Duration.seconds(timeoutSeconds))) {
    return `visibilityExtendInterval must be more than 0 and less than visibilityTimeout (${timeoutSeconds}s), ` +
      `or a running task becomes visible to other workers before it is extended (got ${Duration.format(every)})`
  }
  return { timeoutSeconds, extendEvery: every }
}
