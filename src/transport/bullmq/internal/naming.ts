/**
 * Every name the nestjs-durable BullMQ wire uses: the effective prefix (namespace folding), routing
 * tokens, queue / pub-sub channel / Redis key names, job names and job options, and the engine's
 * priority mapping onto BullMQ priorities. Pure string functions, no I/O.
 *
 * BullMQ's own key prefix is left at its default `bull`, so a queue `<P>-tasks-<T>` lives under the
 * Redis keys `bull:<P>-tasks-<T>:*`. Queue names never contain `:` (routing tokens are sanitised); the
 * two plain Redis keys (worker heartbeat and descriptor) use `:` as their separator.
 *
 * @since 0.1.0
 * @internal
 */
import * as Os from "node:os"
import { isDefaultScope } from "../../../protocol/NestDurableProtocol.js"

export { isDefaultScope, routingToken, sanitizeQueueToken, tenantGroup } from "../../../protocol/NestDurableProtocol.js"

/**
 * The default key prefix shared by the engine transport and its workers.
 *
 * @since 0.1.0
 */
export const DEFAULT_PREFIX = "durable"

/**
 * BullMQ's default Redis key prefix; no durable component overrides it.
 *
 * @since 0.1.0
 */
export const BULL_KEY_PREFIX = "bull"

/**
 * The default worker instance id, `ts-<hostname>-<pid>`, as the TS SDKs write it.
 *
 * @since 0.1.0
 */
export const defaultInstanceId = (): string => `ts-${Os.hostname()}-${process.pid}`

/**
 * The prefix every queue, channel and key uses: `<prefix>-<namespace>` when a non-default transport
 * namespace is set, else `prefix` unchanged.
 *
 * @since 0.1.0
 */
export const effectivePrefix = (prefix: string = DEFAULT_PREFIX, namespace?: string | undefined): string =>
  isDefaultScope(namespace) ? prefix : `${prefix}-${namespace}`

/**
 * `<P>-tasks-<T>`: the BullMQ queue carrying step tasks (`task` jobs) and workflow turns (`workflow`
 * jobs) for one routing token.
 *
 * @since 0.1.0
 */
export const tasksQueue = (prefix: string, token: string): string => `${prefix}-tasks-${token}`

/**
 * `<P>-results`: the BullMQ queue of step results (`result` jobs), worker → engine.
 *
 * @since 0.1.0
 */
export const resultsQueue = (prefix: string): string => `${prefix}-results`

/**
 * `<P>-decisions`: the BullMQ queue of workflow decisions (`decision` jobs), worker → engine.
 *
 * @since 0.1.0
 */
export const decisionsQueue = (prefix: string): string => `${prefix}-decisions`

/**
 * `<P>-step-events`: the BullMQ queue of live workflow step events (`stepEvent` jobs), worker → engine.
 *
 * @since 0.1.0
 */
export const stepEventsQueue = (prefix: string): string => `${prefix}-step-events`

/**
 * `<P>-start-run`: the BullMQ queue of start-run requests (`startRun` jobs), tenant → control plane.
 *
 * @since 0.1.0
 */
export const startRunQueue = (prefix: string): string => `${prefix}-start-run`

/**
 * `<P>-run-request`: the BullMQ queue of run requests (`runRequest` jobs), tenant → control plane.
 *
 * @since 0.1.0
 */
export const runRequestQueue = (prefix: string): string => `${prefix}-run-request`

/**
 * `<P>-control`: the Redis pub/sub channel for cancel / event / enqueued control messages.
 *
 * @since 0.1.0
 */
export const controlChannel = (prefix: string): string => `${prefix}-control`

/**
 * `<P>-heartbeat`: the Redis pub/sub channel for step / run liveness beats, worker → engine.
 *
 * @since 0.1.0
 */
export const heartbeatChannel = (prefix: string): string => `${prefix}-heartbeat`

/**
 * `<P>-run-reply`: the Redis pub/sub channel for run replies, control plane → tenant.
 *
 * @since 0.1.0
 */
export const runReplyChannel = (prefix: string): string => `${prefix}-run-reply`

/**
 * `<P>-tenant-events-<tenant>`: the Redis pub/sub channel of one tenant's events.
 *
 * @since 0.1.0
 */
export const tenantEventsChannel = (prefix: string, tenant: string): string => `${prefix}-tenant-events-${tenant}`

/**
 * `<P>-worker-heartbeat:<T>:<I>`: the worker-liveness string key (`SET … EX 35`), one per token.
 *
 * @since 0.1.0
 */
export const workerHeartbeatKey = (prefix: string, token: string, instanceId: string): string =>
  `${prefix}-worker-heartbeat:${token}:${instanceId}`

/**
 * `<P>-worker-descriptor:<T>:<I>`: the handshake-descriptor string key, written with the heartbeat.
 *
 * @since 0.1.0
 */
export const workerDescriptorKey = (prefix: string, token: string, instanceId: string): string =>
  `${prefix}-worker-descriptor:${token}:${instanceId}`

/**
 * Every queue, channel and key name under one effective prefix.
 *
 * @since 0.1.0
 */
export interface Names {
  /** The effective prefix (namespace already folded in). */
  readonly prefix: string
  readonly tasks: (token: string) => string
  readonly results: string
  readonly decisions: string
  readonly stepEvents: string
  readonly startRun: string
  readonly runRequest: string
  readonly control: string
  readonly heartbeat: string
  readonly runReply: string
  readonly tenantEvents: (tenant: string) => string
  readonly workerHeartbeat: (token: string, instanceId: string) => string
  readonly workerDescriptor: (token: string, instanceId: string) => string
}

/**
 * Bind every name to the effective prefix of `prefix` (default `durable`) and a transport `namespace`.
 *
 * @since 0.1.0
 */
export const names = (options: { readonly prefix?: string | undefined; readonly namespace?: string | undefined } = {}): Names => {
  const p = effectivePrefix(options.prefix ?? DEFAULT_PREFIX, options.namespace)
  return {
    prefix: p,
    tasks: (token) => tasksQueue(p, token),
    results: resultsQueue(p),
    decisions: decisionsQueue(p),
    stepEvents: stepEventsQueue(p),
    startRun: startRunQueue(p),
    runRequest: runRequestQueue(p),
    control: controlChannel(p),
    heartbeat: heartbeatChannel(p),
    runReply: runReplyChannel(p),
    tenantEvents: (tenant) => tenantEventsChannel(p, tenant),
    workerHeartbeat: (token, instanceId) => workerHeartbeatKey(p, token, instanceId),
    workerDescriptor: (token, instanceId) => workerDescriptorKey(p, token, instanceId)
  }
}

/**
 * BullMQ job names on the durable queues.
 *
 * @since 0.1.0
 */
export const JobName = {
  /** A step task on `<P>-tasks-<T>`. */
  task: "task",
  /** A workflow turn on `<P>-tasks-<T>`. */
  workflow: "workflow",
  /** A step result on `<P>-results`. */
  result: "result",
  /** A workflow decision on `<P>-decisions`. */
  decision: "decision",
  /** A live workflow step event on `<P>-step-events`. */
  stepEvent: "stepEvent"
} as const

/**
 * Engine priority baseline: BullMQ priority `1_048_576 − p`.
 *
 * @since 0.1.0
 */
export const BROKER_PRIORITY_BASELINE = 1_048_576

/**
 * The largest priority BullMQ accepts (2^21 − 1).
 *
 * @since 0.1.0
 */
export const BROKER_PRIORITY_MAX = 2_097_151

/**
 * Map an engine priority (higher runs first) onto a BullMQ priority (lower runs first):
 * `clamp(round(1_048_576 − p), 1, 2_097_151)`; `undefined` when no priority is set.
 *
 * @since 0.1.0
 */
export const toBrokerPriority = (priority?: number | null | undefined): number | undefined => {
  if (priority === undefined || priority === null) return undefined
  const mapped = Math.round(BROKER_PRIORITY_BASELINE - priority)
  return Math.min(BROKER_PRIORITY_MAX, Math.max(1, mapped))
}

/**
 * How long the engine keeps failed task jobs (seconds), so the terminal-failure bridge can read them.
 *
 * @since 0.1.0
 */
export const TASK_FAILED_RETENTION_SECONDS = 86_400

/**
 * The BullMQ options the engine adds a `task` / `workflow` job with:
 * `{ removeOnComplete: true, removeOnFail: { age: 86400 } }`, plus the mapped `priority` only when set.
 *
 * @since 0.1.0
 */
export const taskJobOptions = (priority?: number | undefined): {
  readonly removeOnComplete: true
  readonly removeOnFail: { readonly age: number }
  readonly priority?: number
} => {
  const mapped = toBrokerPriority(priority)
  return mapped === undefined
    ? { removeOnComplete: true, removeOnFail: { age: TASK_FAILED_RETENTION_SECONDS } }
    : { removeOnComplete: true, removeOnFail: { age: TASK_FAILED_RETENTION_SECONDS }, priority: mapped }
}

/**
 * The BullMQ options a worker adds a `result` (or `decision`) job with.
 *
 * @since 0.1.0
 */
export const resultJobOptions: { readonly removeOnComplete: true; readonly removeOnFail: true } = {
  removeOnComplete: true,
  removeOnFail: true
}
