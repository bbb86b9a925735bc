/**
 * Why the runtime interrupted a task, told to the task's abort signal. The runtime interrupts a
 * serving fiber with one of the ids below (as `@effect/platform`'s server marks a client's abort), so
 * the handler's `ctx.signal.reason` can say why without anything on the task path: the reason is read
 * from the fiber's interruptors only when it is interrupted.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as FiberId from "effect/FiberId"
import * as HashSet from "effect/HashSet"
import * as Predicate from "effect/Predicate"

/** The run the task belongs to was cancelled. @internal */
export const byCancel: FiberId.FiberId = FiberId.make(-4101, 0)
/** The worker's shutdown deadline passed with the task still running. @internal */
export const byDeadline: FiberId.FiberId = FiberId.make(-4102, 0)
/** The worker was stopped at once (`forceStop`, a second signal). @internal */
export const byForcedStop: FiberId.FiberId = FiberId.make(-4103, 0)

/**
 * The reason a step's (or an activity's) `ctx.signal` is aborted with. It is a `DOMException` named
 * `AbortError`, as a signal aborted without a reason gives, so code that checks for an `AbortError`
 * (or that passes the signal to `fetch`) works as before; `why` and the message say what happened.
 *
 * - `cancelled`: the run was cancelled; the task is answered as cancelled.
 * - `shutdown`: the worker's shutdown deadline passed; the task is given back to the broker.
 * - `forced`: the worker was stopped at once (`forceStop`, a second signal); the task is given back.
 * - `interrupted`: the worker's fiber was interrupted otherwise (by the application's own code).
 *
 * @since 0.3.0
 * @category errors
 */
export class StepAborted extends DOMException {
  constructor(readonly why: "cancelled" | "shutdown" | "forced" | "interrupted") {
    super(messages[why], "AbortError")
  }
}

const messages: Record<StepAborted["why"], string> = {
  cancelled: "the run was cancelled while this task ran",
  shutdown: "the worker's shutdown deadline passed while this task ran; the task goes back to the broker",
  forced: "the worker was stopped at once (forceStop, or a second signal) while this task ran; the task goes back to the broker",
  interrupted: "the worker interrupted this task"
}

/** Why a fiber interrupted by `interruptors` was: the reason its task's signal is aborted with. @internal */
export const abortReason = (interruptors: HashSet.HashSet<FiberId.FiberId>): StepAborted =>
  new StepAborted(
    HashSet.has(interruptors, byCancel)
      ? "cancelled"
      : HashSet.has(interruptors, byForcedStop)
      ? "forced"
      : HashSet.has(interruptors, byDeadline)
      ? "shutdown"
      : "interrupted"
  )

/**
 * Where a handler's context keeps the abort of its signal: the step context and the Durable
 * Workflow activity context each set it, so one way of waiting for a promise serves both.
 *
 * @internal
 */
export const abortSignal: unique symbol = Symbol.for("effect-durable-worker/abortSignal")

/** A context whose signal the runtime can abort. @internal */
export interface Abortable {
  readonly [abortSignal]?: ((reason: StepAborted) => void) | undefined
}

/**
 * Waits for an async handler's promise. Interrupted, it aborts the handler's signal with why. A
 * stop's interruption (the deadline, a stop made at once) then waits for the promise to settle,
 * ignoring its result: the stop gives the task back to the broker, where another worker may take
 * it, so a handler still running has not been stopped, and a stop names one that ignores its signal
 * as stuck after `interruptTimeout` (L6). Any other interruption ends at once, as before: a cancel
 * answers the task as cancelled (nobody runs it again), and a timeout or race of the application's
 * own keeps its time.
 *
 * @internal
 */
const untilSettled = <A>(pending: PromiseLike<A>, ctx: Abortable): Effect.Effect<A, unknown> =>
  Effect.async<A, unknown>((resume) => {
    const settled = Promise.resolve(pending).then(
      (value) => resume(Effect.succeed(value)),
      (error) => resume(Effect.fail(error))
    )
    return Effect.descriptorWith((fiber) => {
      const reason = abortReason(fiber.interruptors)
      ctx[abortSignal]?.(reason)
      return reason.why === "shutdown" || reason.why === "forced" ? Effect.promise(() => settled) : Effect.void
    })
  })

/**
 * Runs an async handler (a step's or an activity's) as an effect: what it throws synchronously is
 * its failure, a value it answers synchronously its result (no promise, no asynchronous resumption,
 * nothing of it can be interrupted), and a promise is waited for as {@link untilSettled} says.
 *
 * @internal
 */
export const runHandler = <A>(call: () => PromiseLike<A> | A, ctx: Abortable): Effect.Effect<A, unknown> =>
  Effect.suspend(() => {
    let output: PromiseLike<A> | A
    try {
      output = call()
    } catch (error) {
      return Effect.fail(error)
    }
    return Predicate.isPromiseLike(output) ? untilSettled(output, ctx) : Effect.succeed(output)
  })

/**
 * Runs `effect` to its end whatever its caller does: for a request that cannot be recalled once
 * sent (one cut on the client's side may still reach the server). It runs in a fiber of its own, a
 * daemon (an interrupted fiber interrupts its children at once), interruptible by its own means only
 * (its timeouts), and the caller waits for it uninterruptibly: inside an uninterruptible region
 * alone, a timeout would wait for what it times out, and bound nothing.
 *
 * @internal
 */
export const unrecallable = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.uninterruptible(Effect.flatMap(Effect.forkDaemon(Effect.interruptible(effect)), Fiber.join))
