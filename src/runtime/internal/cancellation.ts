import type * as Fiber from "effect/Fiber"
import * as Interruption from "../../core/internal/interruption.js"
import type { Delivery } from "../../seam/Transport.js"

/**
 * Watches a delivery's run for a cancel while it is processed: a cancel then interrupts the
 * serving fiber (the task is answered as cancelled afterwards). A cancel that comes after the
 * processing ended does nothing.
 *
 * @internal
 */
export interface CancelWatch {
  /** Ends the watch once the processing ended; whether a cancel came while it ran. */
  readonly end: () => boolean
}

/** @internal */
export const watchCancel = (delivery: Delivery, fiber: Fiber.RuntimeFiber<unknown, unknown>): CancelWatch => {
  let state = "processing" as "processing" | "cancelled" | "processed"
  const unwatch = delivery.onCancel(() => {
    if (state !== "processing") return
    state = "cancelled"
    fiber.unsafeInterruptAsFork(Interruption.byCancel)
  })
  return {
    end: () => {
      const cancelled = state === "cancelled"
      state = "processed"
      unwatch()
      return cancelled
    }
  }
}
