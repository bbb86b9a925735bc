/**
 * Groups single writes (result rows, result messages, acknowledgements) into one write: a writer fiber
 * takes whatever queued up while its previous write was in flight, so an idle worker adds no
 * latency (a lone item is written at once) and a busy one shares round trips. Each item gets an
 * outcome of its own (a value or an error); a write that fails as a whole is run again one item at
 * a time, so one bad item never fails the others and every waiting caller learns what happened to
 * its own item.
 *
 * This sits on the task path of the SQL and SQS transports, so it is built on `Effect.async` (one
 * suspension per item) and one writer fiber woken the same way, rather than on a `Queue` and a
 * `Deferred` per item, which measured about 35 µs more per task.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as FiberId from "effect/FiberId"
import type * as Scope from "effect/Scope"

/**
 * Writes one batch: returns one outcome per item, in order, or fails as a whole (nothing was
 * written, or it is not known what was).
 *
 * @internal
 */
export type RunBatch<A, B, E> = (items: ReadonlyArray<A>) => Effect.Effect<ReadonlyArray<Exit.Exit<B, E>>, E>

/**
 * Called with an item's value when its caller no longer waits for it (it was interrupted), so that
 * whatever the value holds (a claimed row) can be given back.
 *
 * @internal
 */
export type Unclaimed<B> = (value: B) => Effect.Effect<void>

interface Entry<A, B, E> {
  readonly item: A
  /** The waiting caller; cleared once it was answered or stopped waiting. */
  resume: ((outcome: Exit.Exit<B, E>) => void) | undefined
}

/**
 * Starts a batcher in the scope; the returned function submits one item and waits for its outcome.
 * A batch holds at most `maxItems` items and, by `size`, at most `maxSize` (an item larger than
 * that goes alone); up to `parallelism` batches are written at once (default 1: one after another).
 * Items still queued or being written when the scope closes are answered with an interruption.
 *
 * @internal
 */
export const make = <A, B, E>(options: {
  readonly run: RunBatch<A, B, E>
  readonly maxItems: number
  readonly size?: ((item: A) => number) | undefined
  readonly maxSize?: number | undefined
  readonly parallelism?: number | undefined
  readonly unclaimed?: Unclaimed<B> | undefined
}): Effect.Effect<(item: A) => Effect.Effect<B, E>, never, Scope.Scope> =>
  Effect.gen(function*() {
    let pending: Array<Entry<A, B, E>> = []
    /** Writers waiting for work. */
    const idle: Array<(go: Effect.Effect<void>) => void> = []
    const unclaimed = options.unclaimed
    const size = options.size
    const maxSize = options.maxSize ?? Number.POSITIVE_INFINITY

    const settle = (entry: Entry<A, B, E>, exit: Exit.Exit<B, E>): Effect.Effect<void> => {
      const resume = entry.resume
      entry.resume = undefined
      if (resume !== undefined) {
        resume(exit)
        return Effect.void
      }
      return unclaimed !== undefined && Exit.isSuccess(exit) ? unclaimed(exit.value) : Effect.void
    }
    const missing = Exit.die(new Error("a batch write gave no outcome for an item"))

    const runBatch = (entries: ReadonlyArray<Entry<A, B, E>>): Effect.Effect<void> =>
      options.run(entries.map((entry) => entry.item)).pipe(
        Effect.exit,
        Effect.flatMap((exit) =>
          Exit.isSuccess(exit)
            ? Effect.forEach(entries, (entry, i) => settle(entry, exit.value[i] ?? missing), { discard: true })
            : entries.length === 1
            ? settle(entries[0]!, Exit.failCause(exit.cause))
            // the batch failed as a whole: each item alone, so each learns its own outcome
            : Effect.forEach(entries, (entry) => runBatch([entry]), { discard: true })
        )
      )

    /** The next batch off the front of the queue, within the item and size bounds. */
    const takeBatch = (): Array<Entry<A, B, E>> => {
      let count = Math.min(pending.length, options.maxItems)
      if (size !== undefined) {
        let total = 0
        for (let i = 0; i < count; i++) {
          total += size(pending[i]!.item)
          if (i > 0 && total > maxSize) {
            count = i
            break
          }
        }
      }
      const batch = count === pending.length ? pending : pending.slice(0, count)
      pending = count === pending.length ? [] : pending.slice(count)
      return batch
    }

    const park = Effect.async<void>((resume) => {
      idle.push(resume)
      return Effect.sync(() => {
        const i = idle.indexOf(resume)
        if (i >= 0) idle.splice(i, 1)
      })
    })
    /** Batches being written; one stopped mid-write (the scope closed) is answered by the finalizer. */
    const writing = new Set<ReadonlyArray<Entry<A, B, E>>>()
    const writer = Effect.suspend(() => {
      if (pending.length === 0) return park
      const batch = takeBatch()
      writing.add(batch)
      return Effect.zipLeft(runBatch(batch), Effect.sync(() => writing.delete(batch)))
    }).pipe(Effect.forever)
    // runs once the writers are stopped (they were forked after it, so their finalizers run first):
    // callers of what is still queued or was being written hear an interruption rather than nothing
    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        const left = [...Array.from(writing).flat(), ...pending]
        writing.clear()
        pending = []
        return Effect.forEach(left, (entry) => settle(entry, Exit.interrupt(FiberId.none)), { discard: true })
      })
    )
    for (let i = 0; i < Math.max(1, options.parallelism ?? 1); i++) {
      // stopped with the scope, whatever the region it was started from
      yield* Effect.forkScoped(Effect.interruptible(writer))
    }

    const enqueue = (item: A, resume: (outcome: Effect.Effect<B, E>) => void): Entry<A, B, E> => {
      const entry: Entry<A, B, E> = { item, resume }
      pending.push(entry)
      idle.pop()?.(Effect.void)
      return entry
    }
    // a caller that stops waiting leaves its item to be written; its value goes to `unclaimed`
    const waitInterruptibly = (item: A) =>
      Effect.async<B, E>((resume) => {
        const entry = enqueue(item, resume)
        return Effect.sync(() => {
          entry.resume = undefined
        })
      })
    // the common case on the task path (answers are sent uninterruptibly): a wait that cannot be
    // interrupted needs no canceler, which spares Effect wrapping it in an interruption handler
    const wait = (item: A) =>
      Effect.async<B, E>((resume) => {
        enqueue(item, resume)
      })

    /**
     * A lone item with a writer free: the caller writes it itself, holding that writer's place (it
     * stays parked), so no fiber is woken and nothing is handed over. Whatever queues up meanwhile
     * waits for the writer, woken when this write ends, exactly as if the writer had written it.
     */
    const writeHere = (item: A, writer: (go: Effect.Effect<void>) => void) =>
      Effect.suspend(() => {
        let outcome: Exit.Exit<B, E> | undefined
        const batch = [{ item, resume: (exit: Exit.Exit<B, E>) => void (outcome = exit) }]
        writing.add(batch)
        return Effect.flatMap(runBatch(batch), () => {
          writing.delete(batch)
          if (pending.length > 0) writer(Effect.void)
          else idle.push(writer)
          return outcome ?? missing
        })
      })

    return (item: A) =>
      Effect.checkInterruptible((interruptible) => {
        if (interruptible) return waitInterruptibly(item)
        const writer = pending.length === 0 ? idle.pop() : undefined
        return writer === undefined ? wait(item) : writeHere(item, writer)
      })
  })
