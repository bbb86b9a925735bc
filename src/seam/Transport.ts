/**
 * The transport half of the seam: a broker delivers task payloads and sends replies. BullMQ (jobs
 * with locks), SQL (claimed rows with leases), SQS (messages with visibility) and HTTP long-poll
 * (leased tasks) are each a `Layer` providing {@link Transport}; the runtime never knows which one it
 * talks to, and every one answers a task only through its {@link Delivery}.
 *
 * A broker fills in what it has with the constructors here ({@link Delivery.make},
 * {@link Poller.make}, {@link Registration.make}), which supply the rest, so the runtime has one path
 * for every broker. A transport written outside this package needs only this module, `Protocol`
 * and a protocol such as `NestDurableProtocol`.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import { unrecallable } from "../core/internal/interruption.js"
import type { Handlers, Pool, Protocol, Task } from "./Protocol.js"
import type { DeregistrationError, RegistrationError, TransportError } from "./TransportError.js"

export {
  AuthenticationError,
  DeregistrationError,
  PermissionError,
  RegistrationError,
  TransportError
} from "./TransportError.js"

/**
 * What the worker tells a transport about itself when it registers.
 *
 * @since 0.1.0
 * @category models
 */
export interface WorkerDescription {
  readonly workerId: string
  readonly buildId: string | undefined
  /** What the worker serves; a transport announces the kinds its protocol runs. */
  readonly handlers: Handlers<any>
  /** Epoch ms at which the worker was created. */
  readonly startedAt: number
  /** How long one poll may wait for work before it returns empty. */
  readonly pollTimeout: Duration.Duration
  /**
   * The worker's one shutdown deadline, from the stop of its pollers: a transport that waits for
   * something of its own at stop (an SQS long poll still out) keeps within it. Optional, so a
   * description made by hand (a transport's own tests) need not name it; the worker always does.
   *
   * @since 0.3.0
   */
  readonly shutdownTimeout?: Duration.Duration
  /** The worker's current status, for transports that publish it at registration. */
  readonly status: Effect.Effect<WorkerStatus>
}

/**
 * One pool's concurrency: its limit, the permits held by tasks (a poll waiting for work is not
 * counted: an idle pool reports none in use) and the tasks running.
 *
 * @since 0.2.0
 * @category models
 */
export interface PoolSlots {
  readonly limit: number
  readonly inUse: number
  readonly running: number
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
  /** Where the worker is in its life; `failure` says why when it failed. */
  readonly state?: "starting" | "registering" | "running" | "draining" | "stopped" | "failed"
  readonly failure?: string
  readonly rssBytes?: number
  readonly rssLimitBytes?: number
  readonly rssPct?: number
  /** Concurrency per pool, by the pool's name, for the pools the registration polls. */
  readonly slots?: { readonly [pool: string]: PoolSlots }
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
  /**
   * Renews the lease. The runtime reads it each time the lease is due, so it may be built then; one
   * renewal of a task is out at a time. A lease that is gone for good (its lock expired or taken by
   * another worker) fails with a `fatal` error: the runtime says so once and renews it no more. Any
   * other failure is tried again at the next interval.
   */
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
export interface Delivery<Reply = any> extends Task {
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
   * `complete`, and where the broker allows it take the next task of the same subscription in the
   * same round trip, under the permit this task held. The runtime uses it while it is not stopping.
   */
  readonly completeAndTakeNext: (reply: Reply) => Effect.Effect<Option.Option<Delivery<Reply>>, TransportError>
  /** Acknowledges a task that cannot be answered (undecodable, no identity), after it was logged. */
  readonly reject: (reason: string) => Effect.Effect<void, TransportError>
  /** Gives un-finished work back to the broker (shutdown), where the broker allows it. */
  readonly abandon: Effect.Effect<void, TransportError>
}

/**
 * What a broker must say of a delivery; {@link Delivery.make} fills in the rest.
 *
 * @since 0.2.0
 * @category models
 */
export type DeliveryFields<Reply> =
  & Pick<Delivery<Reply>, "id" | "payload" | "protocol" | "complete">
  & Partial<Omit<Delivery<Reply>, "id" | "payload" | "protocol" | "complete">>

const noCancel = () => () => {}
const notCancelled = Effect.succeed({ cancelRequested: false })
const noPages: Effect.Effect<ReadonlyArray<unknown>> = Effect.succeed([])
const noBacklog: Effect.Effect<Option.Option<number>> = Effect.succeedNone

/**
 * Building deliveries.
 *
 * @since 0.2.0
 * @category constructors
 */
export const Delivery = {
  /**
   * A delivery from what the broker offers. The defaults: no lease to keep, no cancellation, no
   * next task taken with an answer, `reject` and `abandon` do nothing (the broker redelivers), no
   * pages, nothing stored elsewhere, heartbeats that never ask for a cancel.
   */
  make: <Reply>(fields: DeliveryFields<Reply>): Delivery<Reply> => {
    const complete = fields.complete
    return {
      keepAlive: Option.none(),
      onCancel: noCancel,
      completeAndTakeNext: (reply) => Effect.as(complete(reply), Option.none()),
      reject: () => Effect.void,
      abandon: Effect.void,
      rest: noPages,
      resolve: Effect.succeed,
      store: Effect.succeed,
      heartbeat: () => notCancelled,
      ...fields
    }
  }
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
  /** The pool (declared by the protocol of what it polls) whose permits its polls take. */
  readonly pool: Pool
  /**
   * Waits, without holding any permit, until the subscription probably has work (a broker's
   * wake-up signal, a notification, or a bounded wait). The runtime calls it before it takes permits
   * for `poll`, so an idle subscription never holds capacity another one could use.
   */
  readonly ready: Effect.Effect<void, TransportError>
  /**
   * Takes up to `max` tasks, waiting at most the worker's poll timeout; an empty array when none
   * came. It runs uninterruptibly, so the tasks it took are always handed to the runtime; it must mark
   * the part that waits with `Effect.interruptible` (a wait that has taken nothing yet), because
   * stopping the worker interrupts an outstanding poll.
   *
   * `after.failure` is true when this poller's previous poll failed (the runtime always tells; a
   * call without `after` is as after a poll that worked). The worker reads as unreachable
   * (`/readyz`) until a poll works, so a transport whose broker holds an empty poll (a long poll)
   * should then not wait for work, and answer as soon as the broker does.
   */
  readonly poll: (max: number, after?: PollAfter) => Effect.Effect<ReadonlyArray<Delivery>, TransportError>
  /**
   * How many tasks wait in the broker for this subscription, where the broker says so cheaply (one
   * command, no scan); none where it cannot. The runtime samples it for the backlog and saturation
   * metrics, never on the task path.
   *
   * @since 0.3.0
   */
  readonly backlog: Effect.Effect<Option.Option<number>, TransportError>
}

/**
 * What the runtime tells a poll of the poller's previous one.
 *
 * @since 0.3.0
 * @category models
 */
export interface PollAfter {
  /** The previous poll failed (the broker may just be back). */
  readonly failure: boolean
}

/**
 * Building pollers.
 *
 * @since 0.2.0
 * @category constructors
 */
export const Poller = {
  /**
   * A poller; by default it is always ready (its `poll` does the waiting) and has no backlog to
   * tell.
   */
  make: (fields: Pick<Poller, "name" | "pool" | "poll"> & Partial<Pick<Poller, "ready" | "backlog">>): Poller => ({
    ready: Effect.void,
    backlog: noBacklog,
    ...fields
  })
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
  /**
   * Why the broker cannot be reached just now, as the transport knows it between calls; none while
   * it can. The runtime reads it for readiness (`/readyz`), beside what its own polls see: a poller
   * whose last poll failed makes the worker unready until one works. A transport whose calls fail
   * while the broker is away need not tell it; one whose calls wait instead (a Redis client that
   * holds its commands while it reconnects) must, or it looks ready throughout an outage.
   *
   * @since 0.3.0
   */
  readonly unreachable?: Effect.Effect<Option.Option<string>>
}

/**
 * Building registrations.
 *
 * @since 0.2.0
 * @category constructors
 */
export const Registration = {
  /** A registration; by default it has no heartbeat and nothing to deregister. */
  make: (fields: Pick<Registration, "pollers"> & Partial<Omit<Registration, "pollers">>): Registration => ({
    heartbeat: Option.none(),
    deregister: Effect.void,
    ...fields
  }),
  /**
   * Sends what registers the worker at the orchestrator (`announce`: the request that writes its
   * record), and makes the registration from its answer: what a transport's `register` ends with.
   * It runs uninterruptibly, since a request sent cannot be recalled (a stop that came meanwhile
   * would otherwise leave a registration nobody withdraws, until it expires), and it hands the
   * registration to the runtime ({@link RegistrationLanded}) before anything can interrupt it again:
   * a stop that came while it was in flight waits for its answer (within `interruptTimeout`) and
   * deregisters it, once. Bound `announce` (a client timeout): a stop waits no longer than that.
   * `announce` runs in a fiber of its own, interruptible by its own timeouts only (the caller waits
   * for it uninterruptibly): inside an uninterruptible region a timeout would wait for what it times
   * out, and bound nothing.
   *
   * @since 0.4.0
   */
  commit: <A, E, R>(announce: Effect.Effect<A, E, R>, make: (answer: A) => Registration): Effect.Effect<Registration, E, R> =>
    Effect.uninterruptible(
      Effect.flatMap(unrecallable(announce), (answer) => {
        const registration = make(answer)
        return Effect.flatMap(RegistrationLanded, (landed) => Effect.as(landed(registration), registration))
      })
    )
}

/**
 * Where {@link Registration.commit} hands over a registration the moment the orchestrator made it.
 * The runtime provides one to `register`: a registration that ends interrupted (a stop came while
 * it was in flight) may still have been made, and what was handed over here is then deregistered.
 * Outside a worker's registration it goes nowhere.
 *
 * @since 0.4.0
 * @category services
 */
export class RegistrationLanded extends Context.Reference<RegistrationLanded>()("effect-durable-worker/Transport/RegistrationLanded", {
  defaultValue: (): (registration: Registration) => Effect.Effect<void> => () => Effect.void
}) {}

/**
 * Where a transport's `register` tells what it is waiting for: its broker to answer, a queue or a
 * table to be created. Each wait has a key of its own (a `Symbol()`), so waits that run at once are
 * told apart: `waiting` when it begins and again each time what it waits for or why changes, `done`
 * when it ends, however it ends. The runtime provides one to `register` and shows the waits in
 * readiness: `/readyz` answers `registering; waiting for Redis at … to answer (connect ECONNREFUSED
 * …)` while a worker started with `waitForBroker` waits for its broker. Outside a worker's
 * registration it goes nowhere.
 *
 * @since 0.3.0
 * @category services
 */
export class RegistrationWaits extends Context.Reference<RegistrationWaits>()("effect-durable-worker/Transport/RegistrationWaits", {
  defaultValue: (): {
    /** The wait `wait` is for `what` (`Redis at redis://127.0.0.1:6379 to answer`), because of `why` (the last error). */
    readonly waiting: (wait: symbol, what: string, why: string | undefined) => Effect.Effect<void>
    /** The wait `wait` is over. */
    readonly done: (wait: symbol) => Effect.Effect<void>
  } => ({ waiting: () => Effect.void, done: () => Effect.void })
}) {}

/**
 * A broker.
 *
 * @since 0.1.0
 * @category services
 */
export class Transport extends Context.Tag("effect-durable-worker/Transport")<Transport, {
  /** A short name for logs and errors, e.g. `bullmq redis://127.0.0.1:6379 prefix durable`. */
  readonly name: string
  /**
   * The protocol its deliveries speak. The runtime sets up the protocol's pools before it
   * registers, so the registration can announce their sizes.
   */
  readonly protocol: Protocol<any>
  /**
   * Registers the worker. Connections and subscriptions it opens live in the given scope, which the
   * runtime closes after deregistration.
   */
  readonly register: (worker: WorkerDescription) => Effect.Effect<Registration, RegistrationError, Scope.Scope>
}>() {}
