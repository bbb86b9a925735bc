import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type { Redis } from "ioredis"
import { TransportError } from "../../../seam/TransportError.js"
import * as WorkerMetrics from "../../../seam/WorkerMetrics.js"

/**
 * The jobs waiting in a task queue: its wait list and its prioritized set, in one round trip (two
 * O(1) commands, no scan). Delayed jobs are not counted: they are not work yet.
 *
 * @internal
 */
export const waitingJobs = (
  client: Redis,
  keys: { readonly wait: string; readonly prioritized: string },
  transport: string
): Effect.Effect<Option.Option<number>, TransportError> =>
  Effect.tryPromise({
    try: async () => {
      const replies = await client.multi().llen(keys.wait).zcard(keys.prioritized).exec()
      let total = 0
      for (const [error, count] of replies ?? []) {
        if (error !== null) throw error
        total += Number(count)
      }
      return Option.some(total)
    },
    catch: (cause) =>
      new TransportError({
        transport,
        operation: "reading the backlog",
        message: `could not count the waiting jobs of ${keys.wait}: ${cause instanceof Error ? cause.message : String(cause)}`,
        fatal: false
      })
  })

/**
 * Counts a lost connection of a client once per loss (ioredis announces every reconnection
 * attempt; only the first after the client was ready is a loss).
 *
 * @internal
 */
export const countLostConnections = (client: Redis): void => {
  let ready = false
  client.on("ready", () => {
    ready = true
  })
  client.on("reconnecting", () => {
    if (ready) WorkerMetrics.connectionLost("bullmq")
    ready = false
  })
}
