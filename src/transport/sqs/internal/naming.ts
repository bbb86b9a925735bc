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
