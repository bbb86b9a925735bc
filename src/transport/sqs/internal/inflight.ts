/**
 * The messages this process holds, grouped by step (`stepId`), so a step whose message comes back
 * while its first copy still runs here never runs twice in this process.
 *
 * - The same message again (a visibility lapse: same `MessageId`, new receipt handle): the held copy
 *   adopts the newest receipt handle, the only one SQS honours for delete and visibility changes.
 * - Another message for the same step while it runs (the engine re-dispatching a pending step): it is
 *   held next to the running one, its visibility extended with it, deleted once the run's result has
 *   been sent (that result answers the step) and given back with it on shutdown.
 * - Another message for the step once its result is being sent: a new task (a retry the engine may
 *   already have dispatched on that result), run normally.
 *
 * @since 0.1.0
 * @internal
 */

/**
 * One received copy of a message.
 *
 * @since 0.1.0
 */
export interface Copy {
  readonly queueUrl: string
  readonly messageId: string
  receiptHandle: string
}

/**
 * The messages held for one running delivery: the delivered one first, then duplicates.
 *
 * @since 0.1.0
 */
export interface Held {
  readonly key: string | undefined
  copies: Array<Copy>
  /** Set when the result starts being sent: later messages for the step are new tasks. */
  answering: boolean
}

/**
 * What to do with a received message.
 *
 * @since 0.1.0
 */
export type Admission =
  | { readonly _tag: "Run"; readonly held: Held }
  | { readonly _tag: "Duplicate"; readonly held: Held; readonly sameMessage: boolean }

/**
 * The registry of held messages.
 *
 * @since 0.1.0
 */
export interface Inflight {
  /** Admits a received message; `key` is its `stepId`, when it has one. */
  readonly admit: (key: string | undefined, copy: Copy) => Admission
  /** Forgets a delivery once it was answered, rejected or given back. */
  readonly release: (held: Held) => void
  /** Steps running in this process. */
  readonly size: () => number
}

/**
 * Creates an empty registry.
 *
 * @since 0.1.0
 */
export const make = (): Inflight => {
  const running = new Map<string, Held>()
  return {
    admit: (key, copy) => {
      const existing = key === undefined ? undefined : running.get(key)
      if (existing !== undefined) {
        const same = existing.copies.find((c) => c.messageId === copy.messageId && c.queueUrl === copy.queueUrl)
        if (same !== undefined) {
          same.receiptHandle = copy.receiptHandle
          return { _tag: "Duplicate", held: existing, sameMessage: true }
        }
        if (!existing.answering) {
          existing.copies.push(copy)
          return { _tag: "Duplicate", held: existing, sameMessage: false }
        }
      }
      const held: Held = { key, copies: [copy], answering: false }
      if (key !== undefined) running.set(key, held)
      return { _tag: "Run", held }
    },
    release: (held) => {
      if (held.key !== undefined && running.get(held.key) === held) running.delete(held.key)
    },
    size: () => running.size
  }
}
