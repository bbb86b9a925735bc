/**
 * The errors a worker's `run`, `runUntil` and `stop` can fail with.
 *
 * @since 0.1.0
 */
import * as Schema from "effect/Schema"
import { messageOf } from "../core/internal/errors.js"
import { installCommand, isNotFound } from "../core/internal/packages.js"
import type { DeregistrationError, RegistrationError } from "../seam/TransportError.js"

/**
 * A worker instance runs once: a second `run`, or a `run` after `stop`, fails with this.
 *
 * @since 0.1.0
 * @category errors
 */
export class WorkerStateError extends Schema.TaggedError<WorkerStateError>()("WorkerStateError", {
  reason: Schema.Literal("already-running", "stopped")
}) {
  override get message(): string {
    return this.reason === "stopped"
      ? "worker cannot run after stop() has been called; create a new worker"
      : "worker is already running or has already run; a worker instance runs once, create a new one"
  }
}

/**
 * Shutdown could not stop something within its bound (an uninterruptible region, a client call that
 * ignores its abort). The registration is deliberately left in place: no deregistration was sent.
 *
 * @since 0.1.0
 * @category errors
 */
export class ShutdownTimeoutError extends Schema.TaggedError<ShutdownTimeoutError>()("ShutdownTimeoutError", {
  stuckPollers: Schema.Array(Schema.String),
  stuckTasks: Schema.Array(Schema.String)
}) {
  override get message(): string {
    const parts = [
      ...(this.stuckPollers.length > 0
        ? [`${this.stuckPollers.length} poller(s) (${this.stuckPollers.join(", ")})`]
        : []),
      ...(this.stuckTasks.length > 0 ? [`${this.stuckTasks.length} in-flight task(s) (${this.stuckTasks.join(", ")})`] : [])
    ]
    return `worker shutdown timed out while stopping ${parts.join(" and ")}; ` +
      "the worker registration remains active and needs operator attention"
  }
}

/**
 * A worker loop (a poller) failed with an error it cannot recover from. When the shutdown that
 * followed failed too, that error is attached as `cause`.
 *
 * @since 0.1.0
 * @category errors
 */
export class WorkerLoopError extends Schema.TaggedError<WorkerLoopError>()("WorkerLoopError", {
  poller: Schema.String,
  reason: Schema.Defect,
  cause: Schema.optional(Schema.Defect)
}) {
  override get message(): string {
    return `worker loop ${this.poller} failed: ${messageOf(this.reason)}`
  }
}

/**
 * `runUntil`'s condition did not hold within its timeout; the worker was stopped.
 *
 * @since 0.1.0
 * @category errors
 */
export class RunUntilTimeoutError extends Schema.TaggedError<RunUntilTimeoutError>()("RunUntilTimeoutError", {
  timeoutMillis: Schema.Number,
  cause: Schema.optional(Schema.Defect)
}) {
  override get message(): string {
    return `runUntil: the condition did not hold within ${this.timeoutMillis} ms; the worker was stopped`
  }
}

/**
 * A payload given to `processTask` is not a task of the protocol (no run or step to answer).
 *
 * @since 0.1.0
 * @category errors
 */
export class TaskRejected extends Schema.TaggedError<TaskRejected>()("TaskRejected", {
  reason: Schema.String
}) {
  override get message(): string {
    return this.reason
  }
}

/**
 * The probe server (`health` option) could not start: the port is taken, the address is not
 * this machine's, or the server module could not be loaded.
 *
 * @since 0.3.0
 * @category errors
 */
export class HealthServerError extends Schema.TaggedError<HealthServerError>()("HealthServerError", {
  host: Schema.String,
  port: Schema.Number,
  cause: Schema.Defect
}) {
  override get message(): string {
    if (isNotFound(this.cause)) {
      return `the health probe server needs @effect/platform-node (an optional peer dependency of effect-durable-worker); ` +
        `install it: ${installCommand(["@effect/platform-node"])} (${messageOf(this.cause)})`
    }
    return `the health probe server could not listen on ${this.host}:${this.port}: ${messageOf(this.cause)}; ` +
      "check that the port is free (another worker of this pod?) and that the host is an address of this machine"
  }
}

/**
 * Why `stop` failed: the deregistration failed, or something could not be stopped.
 *
 * @since 0.1.0
 * @category errors
 */
export type ShutdownError = DeregistrationError | ShutdownTimeoutError

/**
 * Why `run` failed.
 *
 * @since 0.1.0
 * @category errors
 */
export type RunError = RegistrationError | WorkerStateError | WorkerLoopError | ShutdownError | HealthServerError
