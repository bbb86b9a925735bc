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
  const watchers = new Map<string, Set<() => void>>()
  return {
    cancel: (runId) => {
      cancelled.add(runId)
      if (cancelled.size > remember) cancelled.delete(cancelled.values().next().value!)
      const waiting = watchers.get(runId)
      watchers.delete(runId)
      waiting?.forEach((callback) => callback())
    },
    watch: (runId) => (callback) => {
      if (runId === undefined) return ignore
      if (cancelled.has(runId)) {
        callback()
        return ignore
      }
      let set = watchers.get(runId)
      if (set === undefined) watchers.set(runId, set = new Set())
      set.add(callback)
      return () => {
        set.delete(callback)
        if (set.size === 0 && watchers.get(runId) === set) watchers.delete(runId)
      }
    }
  }
}
