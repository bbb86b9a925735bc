/**
 * The SQS transport's options that need no driver type (the client's are in `SqsOptions`), so
 * declarations that only carry options (the promise facade's) need no `@aws-sdk/client-sqs` installed.
 */
import type { DurationOption } from "../../../runtime/WorkerConfig.js"

/**
 * Maps a routing token (the task's `group`) to the URL of an existing tasks queue: a function (sync or
 * async, as the engine's `taskQueueUrl`) or a record.
 *
 * @since 0.1.0
 * @category models
 */
export type TaskQueueUrl =
  | ((group: string) => string | PromiseLike<string>)
  | Readonly<Record<string, string>>

/**
 * Options of the SQS transport but its client (`SqsOptions` adds `client` and `clientConfig`),
 * checked when the transport is built: an unknown key or a bad value fails with an `SqsConfigError`.
 *
 * @since 0.3.0
 * @category models
 */
export interface SqsTransportOptions {
  /**
   * Queue-name prefix shared with the engine: `<prefix>-tasks-<token>`, `<prefix>-results`; it must make
   * valid SQS queue names of those looked up by name (not given by `taskQueueUrl` / `resultsQueueUrl`).
   * Default `durable`.
   */
  readonly prefix?: string | undefined
  /**
   * Isolation suffix of this worker pool: consumes `<name>@<partition>` tokens (engine namespaces).
   * Needs `taskQueueUrl`: SQS refuses the `@` in such queue names. Default none.
   */
  readonly partition?: string | undefined
  /**
   * Create the by-name queues that do not exist (not those given by URL). Default `false`: a queue
   * that does not exist yet is waited for until the engine (or anyone) creates it.
   */
  readonly autoCreate?: boolean | undefined
  /** Maps a routing token to an existing tasks-queue URL, instead of the `<prefix>-tasks-<token>` name. Default none. */
  readonly taskQueueUrl?: TaskQueueUrl | undefined
  /** The results queue URL (or a resolver), instead of the `<prefix>-results` name. Default none. */
  readonly resultsQueueUrl?: string | (() => string | PromiseLike<string>) | undefined
  /**
   * When set, only messages carrying this attribute are taken (others are released), and results carry
   * it; an SQS message attribute name. Default none.
   */
  readonly marker?: string | undefined
  /**
   * Longest receive wait: 0 (short polls) or at least 1 second, capped at 20 s and by the worker's
   * poll timeout. Default 20 seconds.
   */
  readonly waitTime?: DurationOption | undefined
  /**
   * Visibility of a received task, renewed while it runs or waits: 1 second to 12 hours, in whole
   * seconds (rounded up). Default 60 seconds.
   */
  readonly visibilityTimeout?: DurationOption | undefined
  /** How often a held task's visibility is extended; shorter than `visibilityTimeout`. Default a third of it. */
  readonly visibilityExtendInterval?: DurationOption | undefined
  /**
   * How long one attempt at resolving a queue at start may take (positive); without
   * `waitForBroker`, an endpoint that does not answer within it fails the start. Default 10 seconds.
   */
  readonly connectTimeout?: DurationOption | undefined
  /**
   * Wait for an SQS endpoint that does not answer at start (logged once, retried with a backoff of
   * up to 5 s) instead of failing the start. Refused credentials still fail at once. Default `false`.
   */
  readonly waitForBroker?: boolean | undefined
}
