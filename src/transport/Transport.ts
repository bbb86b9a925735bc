/**
 * The one seam between the worker runtime and a broker. BullMQ (jobs with locks), SQL (claimed rows
 * with leases), SQS (messages with visibility) and HTTP long-poll (leased tasks) are each a `Layer`
 * providing {@link Transport}; the runtime never knows which one it talks to.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import type * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import type { DurableWorkflow } from "../core/DurableWorkflow.js"
import type { Protocol } from "../core/internal/protocol.js"

/**
 * A concurrency pool: step/activity tasks and workflow turns have separate limits where a transport
 * has both kinds on separate pollers. `query` is a pool of one for read-only tasks answered one at a
 * time (Durable Workflow query tasks), outside the step and workflow limits.
 *
 * @since 0.1.0
 * @category models
 */
export type TaskPool = "step" | "workflow" | "query"

/**
 * What the worker tells a transport about itself when it registers.
 *
 * @since 0.1.0
 * @category models
 */
export interface WorkerDescription {
  readonly workerId: string
  readonly buildId: string | undefined
  /** Registered step (activity) names. */
  readonly steps: ReadonlyArray<string>
  /** Registered workflow names. */
  readonly workflows: ReadonlyArray<string>
  /**
   * The Durable Workflow definitions the worker serves (their contracts and fingerprints are part
   * of a Durable Workflow registration).
   */
  readonly durableWorkflows: ReadonlyArray<DurableWorkflow<any>>
  /** Epoch ms at which the worker was created. */
  readonly startedAt: number
  /** How long one poll may wait for work before it returns empty. */
  readonly pollTimeout: Duration.Duration
  /** The worker's current status, for transports that publish it at registration. */
  readonly status: Effect.Effect<WorkerStatus>
}

/**
 * The worker's status as published in heartbeats.
 *
 * @since 0.1.0
 * @category models
 */
export interface WorkerStatus {
  readonly runtime: "node"
  readonly concurrency: {
    readonly mode: "fixed" | "adaptive"
    readonly limit: number
    readonly min?: number
    readonly max?: number
  }
  readonly inFlight: number
  readonly rssBytes?: number
  readonly rssLimitBytes?: number
  readonly rssPct?: number
  /**
   * Concurrency per pool: the limit, the permits taken (by running work and outstanding polls) and
   * the tasks running.
   */
  readonly slots?: { readonly [pool in TaskPool]: { readonly limit: number; readonly inUse: number; readonly running: number } }
  readonly [extra: string]: unknown
}

/**
 * How a delivery keeps its lock / lease / visibility while it runs or waits for admission.
 *
 * @since 0.1.0
 * @category models
 */
export interface KeepAlive {
  readonly interval: Duration.Duration
  /** Renews the lease. The runtime reads it each time the lease is due, so it may be built then. */
  readonly renew: Effect.Effect<void, TransportError>
}

/**
 * One task taken from the broker. A task taken is a task started: the runtime holds a concurrency
 * permit for it before it is polled. `Reply` is what the delivery's protocol answers with. The
 * runtime calls its functions as methods (`delivery.complete(reply)`), so a class may implement it.
 *
 * @since 0.1.0
 * @category models
 */
export interface Delivery<Reply = any> {
  /** The broker's id for the task (job id, row key, receipt, task id), for logs. */
  readonly id: string
  /** The task as it came off the wire (parsed JSON); its protocol decodes it. */
  readonly payload: unknown
  /** The orchestrator protocol the payload speaks (how it is decoded, run and answered). */
  readonly protocol: Protocol<Reply>
  readonly keepAlive: Option.Option<KeepAlive>
  /**
   * Calls `cancel` when the broker announces that this task's run was cancelled (at once if it
   * already was); returns the function that stops watching.
   */
  readonly onCancel: (cancel: () => void) => () => void
  /** Delivers the reply, then acknowledges the task. */
  readonly complete: (reply: Reply) => Effect.Effect<void, TransportError>
  /**
   * Where the broker allows it: `complete`, and take the next task of the same subscription in the
   * same round trip, under the permit this task held. The runtime uses it while it is not stopping.
   */
  readonly completeAndTakeNext?: (reply: Reply) => Effect.Effect<Option.Option<Delivery<Reply>>, TransportError>
  /** Acknowledges a task that cannot be answered (undecodable, no identity), after it was logged. */
  readonly reject: (reason: string) => Effect.Effect<void, TransportError>
  /** Gives un-finished work back to the broker (shutdown), where the broker allows it. */
  readonly abandon: Effect.Effect<void, TransportError>
}

/**
 * A source of tasks for one subscription (a queue, a table group, a task kind).
 *
 * @since 0.1.0
 * @category models
 */
export interface Poller {
  /** Names the subscription in logs and in shutdown errors, e.g. `queue durable-tasks-pay`. */
  readonly name: string
  readonly pool: TaskPool
  /**
   * Waits, without holding any permit, until the subscription probably has work (a broker's
   * wake-up signal, a notification, or a bounded wait). The runtime calls it before it takes permits
   * for `poll`, so an idle subscription never holds capacity another one could use.
   */
  readonly ready?: Effect.Effect<void, TransportError>
  /**
   * Takes up to `max` tasks, waiting at most the worker's poll timeout; an empty array when none
   * came. It runs uninterruptibly, so the tasks it took are always handed to the runtime; it must mark
   * the part that waits with `Effect.interruptible` (a wait that has taken nothing yet), because
   * stopping the worker interrupts an outstanding poll.
   */
  readonly poll: (max: number) => Effect.Effect<ReadonlyArray<Delivery>, TransportError>
}

/**
 * A live registration with the orchestrator.
 *
 * @since 0.1.0
 * @category models
 */
export interface Registration {
  readonly pollers: ReadonlyArray<Poller>
  /**
   * Worker heartbeats, when the transport has them: the first beat is sent one interval in. A beat
   * answers with the interval the orchestrator asks for from then on, if it asks for one (Durable
   * Workflow servers announce one in heartbeat replies); the runtime waits that long before the
   * following beats.
   */
  readonly heartbeat: Option.Option<{
    readonly interval: Duration.Duration
    readonly beat: (status: WorkerStatus) => Effect.Effect<Option.Option<Duration.Duration>, TransportError>
  }>
  /**
   * The worker-plane deregistration. The runtime calls it at most once, after a clean drain, and
   * reports its failure from `stop()` and `run()`.
   */
  readonly deregister: Effect.Effect<void, DeregistrationError>
}

/**
 * A broker.
 *
 * @since 0.1.0
 * @category services
 */
export class Transport extends Context.Tag("effect-durable-worker/Transport")<Transport, {
  /** A short name for logs and errors, e.g. `bullmq redis://127.0.0.1:6379 prefix durable`. */
  readonly name: string
  /** The worker id used when the worker's options give none (the runtime's own default otherwise). */
  readonly defaultWorkerId?: string
  /**
   * Registers the worker. Connections and subscriptions it opens live in the given scope, which the
   * runtime closes after deregistration.
   */
  readonly register: (worker: WorkerDescription) => Effect.Effect<Registration, RegistrationError, Scope.Scope>
}>() {}

/**
 * A broker operation failed. Transient ones (the default) are logged and retried by the runtime;
 * `fatal` ones end the worker loop.
 *
 * @since 0.1.0
 * @category errors
 */
export class TransportError extends Schema.TaggedError<TransportError>()("TransportError", {
  transport: Schema.String,
  operation: Schema.String,
  message: Schema.String,
  fatal: Schema.optionalWith(Schema.Boolean, { default: () => false }),
  cause: Schema.optional(Schema.Defect)
}) {}

/**
 * The worker could not register; no task was taken and no deregistration will be sent.
 *
 * @since 0.1.0
 * @category errors
 */
export class RegistrationError extends Schema.TaggedError<RegistrationError>()("RegistrationError", {
  transport: Schema.String,
  message: Schema.String,
  cause: Schema.optional(Schema.Defect)
}) {}

/**
 * The worker-plane deregistration failed (auth, protocol, connection). It is not retried.
 *
 * @since 0.1.0
 * @category errors
 */
export class DeregistrationError extends Schema.TaggedError<DeregistrationError>()("DeregistrationError", {
  transport: Schema.String,
  message: Schema.String,
  cause: Schema.optional(Schema.Defect)
}) {}
