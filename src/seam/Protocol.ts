/**
 * The protocol half of the seam: how an orchestrator's task payload is decoded, run against the
 * worker's handlers and answered. A protocol does no I/O of its own; what it needs of the broker
 * (the rest of a paged payload, a task heartbeat, a part stored elsewhere) it asks of the
 * {@link Delivery} it is given, and it returns the reply the delivery then sends.
 *
 * The nestjs-durable protocol (`NestDurableProtocol`) and the Durable Workflow protocol
 * (`DurableWorkflowProtocol`) are written against this contract; a transport for another broker
 * of either orchestrator takes one of them as it is.
 *
 * @since 0.2.0
 */
import type * as Effect from "effect/Effect"
import type * as Option from "effect/Option"
import type { DurableWorkflowRegistry } from "../core/DurableWorkflow.js"
import type { StepRegistry } from "../core/Step.js"
import type { WorkflowRegistry } from "../core/Workflow.js"
import type { TransportError } from "./TransportError.js"

/**
 * What a worker serves, as protocols look it up: its registered definitions by name. Each protocol
 * takes the kinds it runs (nestjs-durable: steps and coordinator workflows; Durable Workflow:
 * activities, which are steps, and its own workflow definitions).
 *
 * @since 0.2.0
 * @category models
 */
export interface Handlers<R = never> {
  readonly steps: StepRegistry<R>
  readonly workflows: WorkflowRegistry<R>
  readonly durableWorkflows: DurableWorkflowRegistry<R>
}

/**
 * A kind of handler: `steps` (nestjs-durable steps, Durable Workflow activities), `workflows`
 * (nestjs-durable coordinator workflows) or `durableWorkflows` (Durable Workflow definitions).
 *
 * @since 0.3.0
 * @category models
 */
export type HandlerKind = keyof Handlers

/**
 * How big a pool is: the worker's `concurrency` (fixed, or resized by the adaptive controller),
 * its `workflowConcurrency`, or a fixed number of slots.
 *
 * @since 0.2.0
 * @category models
 */
export type PoolSize = "concurrency" | "workflowConcurrency" | number

/**
 * A concurrency pool a protocol declares: its pollers take permits from it before they ask the
 * broker for work, so a task taken is a task started. Pools with the same name are one pool.
 *
 * @since 0.2.0
 * @category models
 */
export interface Pool {
  readonly name: string
  readonly size: PoolSize
}

/**
 * Declares a pool.
 *
 * @since 0.2.0
 * @category constructors
 */
export const pool = (name: string, size: PoolSize): Pool => ({ name, size })

/**
 * How the worker treats a task before it runs it. `step` tasks are admitted by name by the memory
 * gate and teach the controller their cost; `workflow` tasks (replays) are counted but never gated.
 *
 * @since 0.2.0
 * @category models
 */
export interface TaskLabel {
  readonly kind: "step" | "workflow"
  readonly name: string | undefined
}

/**
 * What a protocol made of a task: a reply to send (`ok` says whether it counts as a success for
 * the controller's latency and cost learning), or a rejection of a payload that cannot be answered
 * at all (no identity to answer to), acknowledged after it was logged.
 *
 * @since 0.2.0
 * @category models
 */
export type Outcome<Reply> =
  | { readonly _tag: "Reply"; readonly reply: Reply; readonly ok: boolean }
  | { readonly _tag: "Reject"; readonly reason: string }

/**
 * A reply outcome.
 *
 * @since 0.2.0
 * @category constructors
 */
export const reply = <Reply>(value: Reply, ok = true): Outcome<Reply> => ({ _tag: "Reply", reply: value, ok })

/**
 * A rejection outcome.
 *
 * @since 0.2.0
 * @category constructors
 */
export const reject = (reason: string): Outcome<never> => ({ _tag: "Reject", reason })

/**
 * What a protocol sees of a delivery: the payload as it came, and the calls about this task that
 * its broker offers. A transport's `Delivery` is one; `Delivery.make` fills in what a broker does
 * not offer (no pages, nothing stored elsewhere, heartbeats that never ask for a cancel).
 *
 * @since 0.2.0
 * @category models
 */
export interface Task {
  /** The broker's id for the task (job id, row key, receipt, task id), for logs. */
  readonly id: string
  /** The task as it came off the wire (parsed JSON); its protocol decodes it. */
  readonly payload: unknown
  /**
   * The rest of a payload the broker sends in pages (a long workflow history), fetched when asked
   * for. A page that cannot be fetched fails it: a protocol must not answer from part of a payload
   * (a replay of a truncated history produces wrong commands). A broker that never fails here
   * declares it without an error.
   */
  readonly rest: Effect.Effect<ReadonlyArray<unknown>, TransportError>
  /** Fetches a part of the payload that the broker keeps elsewhere (an external-storage reference). */
  readonly resolve: (part: unknown) => Effect.Effect<unknown, TransportError>
  /** Stores a part of the reply elsewhere where the broker does that for large values. */
  readonly store: (part: unknown) => Effect.Effect<unknown, TransportError>
  /** Reports a running task's progress; answers whether the task's cancellation was asked for. */
  readonly heartbeat: (details: unknown) => Effect.Effect<{ readonly cancelRequested: boolean }, TransportError>
  /**
   * Streams a progress event of the running task to its orchestrator, where the broker carries such
   * events (the nestjs-durable engine over BullMQ: a workflow turn's live local-step events). Called
   * as a method, synchronously, from inside the task's run: it hands the event off without waiting,
   * and the broker delivers what it was handed in order and ahead of the task's answer. Best-effort:
   * it never throws, and an event the broker fails to take is logged by the transport, never a failure
   * of the task.
   *
   * Absent where the broker carries no such events (`Delivery.make` leaves it out), so a protocol
   * builds no event for nothing.
   *
   * @since 0.4.0
   */
  readonly progress?: ((event: unknown) => void) | undefined
}

/**
 * An orchestrator's task protocol. A transport says which protocol each delivery speaks; the
 * runtime never looks inside payloads.
 *
 * @since 0.2.0
 * @category models
 */
export interface Protocol<Reply> {
  readonly name: string
  /**
   * The kinds of handler its tasks run. The worker warns of a kind it was given that the protocol
   * never runs (Durable Workflow definitions on a nestjs-durable broker): their tasks would never
   * come. Absent: every kind.
   */
  readonly serves?: ReadonlyArray<HandlerKind> | undefined
  /** The pools the protocol's task kinds run in, by name (a transport's pollers take one each). */
  readonly pools: { readonly [name: string]: Pool }
  readonly label: (payload: unknown) => TaskLabel
  /**
   * Decodes the task's payload, runs it against the handlers and returns what to answer. It
   * never fails: bad input is a failed reply or a rejection. Interrupting it interrupts the handler.
   */
  readonly process: <R>(handlers: Handlers<R>, task: Task) => Effect.Effect<Outcome<Reply>, never, R>
  /** The answer for a task whose run was cancelled while it ran (none: give the task back). */
  readonly cancelled: (payload: unknown) => Option.Option<Reply>
  /**
   * The answer for a task that died of a defect, in `process` or in the sending of its answer: a
   * bug of the worker, its transport or its protocol (a handler's throw or defect is a failed reply
   * of `process` already). A failure the orchestrator deals with by its own rules (a step's retries,
   * a failed turn), `message` saying what died. None, or absent: the task is given back, and a task
   * that dies the same way each time is taken and given back for as long as it is delivered.
   *
   * @since 0.4.0
   */
  readonly crashed?: ((payload: unknown, message: string) => Option.Option<Reply>) | undefined
}

/**
 * The sorted names of a registry (what registrations announce).
 *
 * @since 0.2.0
 * @category utils
 */
export const names = (
  registry: ReadonlyMap<string, unknown> | ReadonlyArray<{ readonly name: string }>
): ReadonlyArray<string> =>
  (isList(registry) ? registry.map((definition) => definition.name) : Array.from(registry.keys())).sort()

const isList = (
  registry: ReadonlyMap<string, unknown> | ReadonlyArray<{ readonly name: string }>
): registry is ReadonlyArray<{ readonly name: string }> => Array.isArray(registry)
