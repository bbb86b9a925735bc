/**
 * Which runs a broker announced as cancelled, and who is waiting to hear it. Shared by the
 * transports whose brokers carry cancellations (a bounded memory of recent cancels, so a task that
 * arrives after its run's cancel is cancelled at once).
 *
 * @internal
 */
export interface Cancellations {
  readonly cancel: (runId: string) => void
  /** The `Delivery.onCancel` of a task of `runId` (a no-op watcher when the task names no run). */
  readonly watch: (runId: string | undefined) => (cancel: () => void) => () => void
}

const ignore = () => {}

/** @internal */
export const makeCancellations = (remember = 10_000): Cancellations => {
  const cancelled = new Set<string>()
  // a run's lone running task (the usual case) is kept as its callback, several in a set
  const watchers = new Map<string, (() => void) | Set<() => void>>()
  return {
    cancel: (runId) => {
      cancelled.add(runId)
      if (cancelled.size > remember) cancelled.delete(cancelled.values().next().value!)
      const waiting = watchers.get(runId)
      watchers.delete(runId)
      if (typeof waiting === "function") waiting()
      else waiting?.forEach((callback) => callback())
    },
    watch: (runId) => (callback) => {
      if (runId === undefined) return ignore
      if (cancelled.has(runId)) {
        callback()
        return ignore
      }
      const present = watchers.get(runId)
      if (present === undefined) watchers.set(runId, callback)
      else if (typeof present === "function") watchers.set(runId, new Set([present, callback]))
      else present.add(callback)
      return () => {
        const current = watchers.get(runId)
        if (current === callback) watchers.delete(runId)
        else if (typeof current === "object") {
          current.delete(callback)
          if (current.size === 0) watchers.delete(runId)
        }
      }
    }
  }
}
