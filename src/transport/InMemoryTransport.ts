/**
 * An in-process broker: a real queue with leases, a registration record and a journal of every
 * operation, with switches that make registration, deregistration or polling fail or hang. It backs
 * the unit tests and the demo; nothing leaves the process.
 *
 * @since 0.1.0
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import { checkDuration } from "../core/internal/options.js"
import type { DurationOption } from "../runtime/WorkerConfig.js"
import * as NestDurableProtocol from "../protocol/NestDurableProtocol.js"
import type { NestReply } from "../protocol/NestDurableProtocol.js"
import {
  Delivery,
  DeregistrationError,
  Poller,
  Registration,
  RegistrationError,
  Transport,
  TransportError,
  type WorkerDescription,
  type WorkerStatus
} from "../seam/Transport.js"
import { makeCancellations } from "./internal/cancellations.js"

export type { NestReply } from "../protocol/NestDurableProtocol.js"

/**
 * One line of the broker's journal, in the order things happened.
 *
 * @since 0.1.0
 * @category models
 */
export type JournalEntry =
  | { readonly op: "register"; readonly workerId: string }
  | { readonly op: "poll" }
  | { readonly op: "deliver" | "renew" | "complete" | "reject" | "abandon"; readonly id: string }
  | { readonly op: "heartbeat"; readonly status: WorkerStatus }
  | { readonly op: "deregister" }

/**
 * How a faulty operation behaves: fail with a message, never return (and ignore interruption), or
 * take effect only `after` a while (`Late`): the broker has the request, and acts on it then
 * whether or not its caller still waits, as a request in flight that an interruption of its caller
 * cannot recall (the caller's wait for the answer is interruptible).
 *
 * @since 0.1.0
 * @category models
 */
export type Fault =
  | { readonly _tag: "Fail"; readonly message: string; readonly fatal?: boolean }
  | { readonly _tag: "Hang" }
  | { readonly _tag: "Late"; readonly after: Duration.DurationInput }

/**
 * Options of the in-memory broker.
 *
 * @since 0.1.0
 * @category models
 */
export interface InMemoryOptions {
  /** Worker heartbeat interval. Default 10 seconds. */
  readonly heartbeatInterval?: DurationOption | undefined
  /** How often a running task's lease is renewed. Default 15 seconds. */
  readonly leaseRenewInterval?: DurationOption | undefined
}

/**
 * An option of the in-memory broker that it cannot take: an interval that is not a positive duration.
 *
 * @since 0.3.0
 * @category errors
 */
export class InMemoryConfigError extends Schema.TaggedError<InMemoryConfigError>()("InMemoryConfigError", {
  option: Schema.String,
  message: Schema.String
}) {}

/** An interval of the broker: a positive duration in any form the options take (a beat every 0 ms would never pause). */
const interval = (option: string, value: DurationOption | undefined, fallback: Duration.Duration) =>
  value === undefined
    ? Either.right(fallback)
    : Either.mapLeft(checkDuration(option, value, { positive: true, example: "10 seconds" }), (message) => new InMemoryConfigError({ option, message }))

/**
 * The broker and its controls.
 *
 * @since 0.1.0
 * @category models
 */
export interface InMemoryBroker {
  /** Puts a task payload (any JSON value, malformed ones included) on the queue. */
  readonly enqueue: (payload: unknown) => Effect.Effect<void>
  /** Waits for the next reply a worker delivered. */
  readonly takeReply: Effect.Effect<NestReply>
  /** Every reply delivered so far. */
  readonly replies: Effect.Effect<ReadonlyArray<NestReply>>
  /** Why each task rejected as unanswerable so far was rejected. */
  readonly rejected: Effect.Effect<ReadonlyArray<string>>
  /** Tasks waiting on the queue. */
  readonly pending: Effect.Effect<number>
  /** Everything that happened, in order. */
  readonly journal: Effect.Effect<ReadonlyArray<JournalEntry>>
  /** The registered worker while its registration is active. */
  readonly registered: Effect.Effect<Option.Option<WorkerDescription>>
  /** Announces that a run was cancelled: its running tasks are interrupted. */
  readonly cancel: (runId: string) => Effect.Effect<void>
  /** Makes registration fail or hang (`undefined` restores it). */
  readonly setRegisterFault: (fault: Fault | undefined) => Effect.Effect<void>
  /** Makes deregistration fail or hang. */
  readonly setDeregisterFault: (fault: Fault | undefined) => Effect.Effect<void>
  /**
   * Makes worker heartbeats fail, hang or land late (a late beat is journalled when it lands).
   *
   * @since 0.4.0
   */
  readonly setHeartbeatFault: (fault: Fault | undefined) => Effect.Effect<void>
  /** Makes polls fail or hang. */
  readonly setPollFault: (fault: Fault | undefined) => Effect.Effect<void>
  /** Makes replies fail to deliver (the task then stays un-acknowledged). */
  readonly setCompleteFault: (fault: Fault | undefined) => Effect.Effect<void>
  /**
   * Makes giving a task back fail or hang (a task whose give-back failed does not come back to the
   * queue: this broker has no lease to run out).
   *
   * @since 0.3.0
   */
  readonly setAbandonFault: (fault: Fault | undefined) => Effect.Effect<void>
  /** The transport service over this broker. */
  readonly layer: Layer.Layer<Transport>
}

interface Entry {
  readonly id: string
  readonly payload: unknown
}

const NAME = "in-memory"

/** Runs `effect` (what the operation does at the broker) as `fault` says, by default at once. */
const runFault = <E, A = void>(
  fault: Fault | undefined,
  fail: (message: string, fatal: boolean) => E,
  effect: Effect.Effect<A> = Effect.void as Effect.Effect<A>
): Effect.Effect<A, E> => {
  if (fault === undefined) return effect
  switch (fault._tag) {
    case "Hang":
      return Effect.uninterruptible(Effect.never)
    case "Fail":
      return Effect.fail(fail(fault.message, fault.fatal ?? false))
    case "Late":
      // the broker's side, which the caller's interruption does not reach; the caller waits for its answer
      return Effect.flatMap(Effect.forkDaemon(Effect.zipRight(Effect.sleep(fault.after), effect)), Fiber.join)
  }
}

/**
 * Creates an in-memory broker.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: InMemoryOptions = {}): Effect.Effect<InMemoryBroker, InMemoryConfigError> =>
  Effect.gen(function*() {
    const heartbeatInterval = yield* interval("heartbeatInterval", options.heartbeatInterval, Duration.seconds(10))
    const leaseRenewInterval = yield* interval("leaseRenewInterval", options.leaseRenewInterval, Duration.seconds(15))
    const queue = yield* Queue.unbounded<Entry>()
    const replyQueue = yield* Queue.unbounded<NestReply>()
    const replies: Array<NestReply> = []
    const rejected: Array<string> = []
    const protocol = NestDurableProtocol.make()
    const journal: Array<JournalEntry> = []
    const registered = yield* Ref.make(Option.none<WorkerDescription>())
    const cancellations = makeCancellations()
    const faults = {
      register: yield* Ref.make<Fault | undefined>(undefined),
      deregister: yield* Ref.make<Fault | undefined>(undefined),
      poll: yield* Ref.make<Fault | undefined>(undefined),
      complete: yield* Ref.make<Fault | undefined>(undefined),
      abandon: yield* Ref.make<Fault | undefined>(undefined),
      heartbeat: yield* Ref.make<Fault | undefined>(undefined)
    }
    let nextId = 0

    const log = (entry: JournalEntry) => Effect.sync(() => void journal.push(entry))

    const transportError = (operation: string) => (message: string, fatal: boolean) =>
      new TransportError({ transport: NAME, operation, message, fatal })

    const toDelivery = (entry: Entry): Delivery<NestReply> => {
      const runId = (entry.payload as { runId?: unknown } | null)?.runId
      return Delivery.make({
        id: entry.id,
        payload: entry.payload,
        protocol,
        keepAlive: Option.some({ interval: leaseRenewInterval, renew: log({ op: "renew", id: entry.id }) }),
        onCancel: cancellations.watch(typeof runId === "string" ? runId : undefined),
        complete: (reply) =>
          Effect.flatMap(Ref.get(faults.complete), (fault) => runFault(fault, transportError("complete"))).pipe(
            Effect.zipRight(Effect.sync(() => void replies.push(reply))),
            Effect.zipRight(Queue.offer(replyQueue, reply)),
            Effect.zipRight(log({ op: "complete", id: entry.id }))
          ),
        reject: (reason) =>
          Effect.sync(() => void rejected.push(reason)).pipe(Effect.zipRight(log({ op: "reject", id: entry.id }))),
        abandon: Effect.flatMap(Ref.get(faults.abandon), (fault) => runFault(fault, transportError("abandon"))).pipe(
          Effect.zipRight(Queue.offer(queue, entry)),
          Effect.zipRight(log({ op: "abandon", id: entry.id }))
        )
      })
    }

    const register = (worker: WorkerDescription) =>
      Effect.gen(function*() {
        yield* log({ op: "register", workerId: worker.workerId })
        const fault = yield* Ref.get(faults.register)
        const announce = runFault(fault, (message) => new RegistrationError({ transport: NAME, message }), Ref.set(registered, Option.some(worker)))
        return yield* Registration.commit(announce, () => Registration.make({
          pollers: [Poller.make({
            name: "in-memory queue",
            pool: protocol.pools.step,
            backlog: Effect.map(Queue.size(queue), (size) => Option.some(Math.max(0, size))),
            poll: (max) =>
              Effect.gen(function*() {
                yield* log({ op: "poll" })
                yield* Effect.flatMap(Ref.get(faults.poll), (fault) => runFault(fault, transportError("poll")))
                const first = yield* Queue.take(queue).pipe(Effect.timeoutOption(worker.pollTimeout), Effect.interruptible)
                if (Option.isNone(first)) return []
                const rest = max > 1 ? yield* Queue.takeUpTo(queue, max - 1) : []
                const entries = [first.value, ...rest]
                for (const entry of entries) yield* log({ op: "deliver", id: entry.id })
                return entries.map(toDelivery)
              })
          })],
          heartbeat: Option.some({
            interval: heartbeatInterval,
            beat: (status) =>
              Effect.flatMap(Ref.get(faults.heartbeat), (fault) =>
                runFault(fault, transportError("heartbeat"), log({ op: "heartbeat", status }))).pipe(Effect.as(Option.none()))
          }),
          deregister: Effect.gen(function*() {
            yield* log({ op: "deregister" })
            yield* Effect.flatMap(
              Ref.get(faults.deregister),
              (fault) => runFault(fault, (message) => new DeregistrationError({ transport: NAME, message }))
            )
            yield* Ref.set(registered, Option.none())
          })
        }))
      })

    return {
      enqueue: (payload) => Queue.offer(queue, { id: `m${++nextId}`, payload }),
      takeReply: Queue.take(replyQueue),
      replies: Effect.sync(() => replies.slice()),
      rejected: Effect.sync(() => rejected.slice()),
      pending: Effect.map(Queue.size(queue), (size) => Math.max(0, size)),
      journal: Effect.sync(() => journal.slice()),
      registered: Ref.get(registered),
      cancel: (runId) => Effect.sync(() => cancellations.cancel(runId)),
      setRegisterFault: (fault) => Ref.set(faults.register, fault),
      setDeregisterFault: (fault) => Ref.set(faults.deregister, fault),
      setPollFault: (fault) => Ref.set(faults.poll, fault),
      setCompleteFault: (fault) => Ref.set(faults.complete, fault),
      setAbandonFault: (fault) => Ref.set(faults.abandon, fault),
      setHeartbeatFault: (fault) => Ref.set(faults.heartbeat, fault),
      layer: Layer.succeed(Transport, { name: NAME, protocol, register })
    }
  })

/**
 * A transport layer over a fresh broker (use {@link make} to keep hold of the broker's controls).
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options?: InMemoryOptions): Layer.Layer<Transport, InMemoryConfigError> =>
  Layer.unwrapEffect(Effect.map(make(options), (broker) => broker.layer))
