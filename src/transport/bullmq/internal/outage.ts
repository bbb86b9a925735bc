/**
 * How a broker's Redis outage reaches the log: once when it starts, once when it ends, the errors
 * in between as debug lines. ioredis reports every failed reconnection attempt, and BullMQ's
 * workers repeat each error of the connection they share and of their own blocking one, so an
 * outage of an hour would otherwise write a warning every second or two per task queue.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Runtime from "effect/Runtime"
import * as FailureRun from "../../../core/internal/failureRun.js"
import { messageOf, withReason } from "../../../core/internal/errors.js"

/** A connection as far as the outage log reads it (an ioredis client, or BullMQ's view of one). */
export interface Connection {
  readonly status: string
  on(event: "ready", listener: () => void): unknown
}

/** A broker's outage log. */
export interface Outage {
  /** Follows a connection of the broker: the outage ends once every connection followed is ready. */
  readonly follow: (connection: Connection) => void
  /**
   * Logs an error of one of the broker's connections or of a BullMQ worker on it: a connection
   * failure while a connection is down starts the outage (a warning) or is a debug line within it;
   * anything else is a warning under `label`, as before.
   */
  readonly error: (label: string, error: unknown) => void
}

/**
 * A connection that failed, as opposed to an error a command or a script answered: a Node socket
 * error (it names its system call), or ioredis' and BullMQ's "connection is closed".
 */
export const isConnectionFailure = (error: unknown): boolean => {
  if (typeof error !== "object" || error === null) return false
  if (typeof (error as { syscall?: unknown }).syscall === "string") return true
  if ((error as { name?: unknown }).name === "ConnectionClosedError") return true
  return /^Connection is closed\.?$|ECONNREFUSED|ECONNRESET|EPIPE|ETIMEDOUT/.test(messageOf(error))
}

/** The outage log of the broker at `where` (e.g. `redis://127.0.0.1:6379`), logging through `runtime`. */
export const make = (where: string, runtime: Runtime.Runtime<never>): Outage => {
  // called from the clients' event handlers: each log runs as a fiber of its own
  const log = Runtime.runFork(runtime)
  const outage = FailureRun.make()
  const connections: Array<Connection> = []
  const follow = (connection: Connection) => {
    connections.push(connection)
    connection.on("ready", () => {
      if (connections.every((c) => c.status === "ready")) log(outage.worked(() => `Redis at ${where} is back`))
    })
  }
  const error = (label: string, error: unknown) => {
    log(
      !isConnectionFailure(error)
        ? Effect.logWarning(withReason(label, error))
        // every connection still (or again) ready: a blip it has not noticed yet or is over; an
        // outage begun here would wait for a "ready" that may not come
        : connections.every((c) => c.status === "ready")
        ? Effect.logDebug(`Redis at ${where}: ${messageOf(error)} (${label})`)
        : outage.failed(
          `Redis at ${where} cannot be reached (${messageOf(error)}); reconnecting by itself ` +
            "(until it is back, further connection errors are debug lines)",
          () => `Redis at ${where} still cannot be reached (${label}): ${messageOf(error)}`
        )
    )
  }
  return { follow, error }
}
