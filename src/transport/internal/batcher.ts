/**
 * Groups single writes (result jobs, result rows, acknowledgements) into one write: a writer fiber
 * takes whatever queued up while its previous write was in flight, so an idle worker adds no
 * latency (a lone item is written at once) and a busy one shares round trips. Each item gets an
 * outcome of its own (a value or an error); a write that fails as a whole is run again one item at
 * a time, so one bad item never fails the others and every waiting caller learns what happened to
 * its own item.
 *
 * This sits on the task path of every transport, so it is built on `Effect.async` (one suspension
 * per item) and one writer fiber woken the same way, rather than on a `Queue` and a `Deferred` per
 * item, which measured about 35 µs more per task.
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
 * At most `maxItems` items go in one batch; batches run one after another. Items still queued when
 * the scope closes are answered with an interruption.
 *
 * @internal
 */
export const make = <A, B, E>(options: {
  readonly run: RunBatch<A, B, E>
  readonly maxItems: number
  readonly unclaimed?: Unclaimed<B>
}): Effect.Effect<(item: A) => Effect.Effect<B, E>, never, Scope.Scope> =>
  Effect.gen(function*() {
    let pending: Array<Entry<A, B, E>> = []
    let wake: ((go: Effect.Effect<void>) => void) | undefined
    const unclaimed = options.unclaimed

    const settle = (entry: Entry<A, B, E>, exit: Exit.Exit<B, E>): Effect.Effect<void> => {
      const resume = entry.resume
      entry.resume = undefined
      if (resume !== undefined) {
        resume(exit)
        return Effect.void
      }
      return unclaimed !== undefined && Exit.isSuccess(exit) ? unclaimed(exit.value) : Effect.void
    }
    const settleAll = (entries: ReadonlyArray<Entry<A, B, E>>, outcome: (i: number) => Exit.Exit<B, E>) =>
      Effect.forEach(entries, (entry, i) => settle(entry, outcome(i)), { discard: true })
    const missing = Exit.die(new Error("a batch write gave no outcome for an item"))

    const runBatch = (entries: ReadonlyArray<Entry<A, B, E>>): Effect.Effect<void> =>
      options.run(entries.map((entry) => entry.item)).pipe(
        Effect.exit,
        Effect.flatMap((exit) =>
          Exit.isSuccess(exit)
            ? settleAll(entries, (i) => exit.value[i] ?? missing)
            : entries.length === 1
            ? settle(entries[0]!, Exit.failCause(exit.cause))
            // the batch failed as a whole: each item alone, so each learns its own outcome
            : Effect.forEach(entries, (entry) => runBatch([entry]), { discard: true })
        )
      )

    const idle = Effect.async<void>((resume) => {
      wake = resume
      return Effect.sync(() => {
        wake = undefined
      })
    })
    yield* Effect.suspend(() => {
      if (pending.length === 0) return idle
      const batch = pending.length <= options.maxItems ? pending : pending.slice(0, options.maxItems)
      pending = pending.length <= options.maxItems ? [] : pending.slice(options.maxItems)
      return runBatch(batch)
    }).pipe(
      Effect.forever,
      Effect.onInterrupt(() =>
        Effect.suspend(() => {
          const left = pending
          pending = []
          return settleAll(left, () => Exit.interrupt(FiberId.none))
        })
      ),
      Effect.forkScoped
    )

    return (item: A) =>
      Effect.async<B, E>((resume) => {
        const entry: Entry<A, B, E> = { item, resume }
        pending.push(entry)
        const go = wake
        wake = undefined
        go?.(Effect.void)
        // a caller that stops waiting leaves its item to be written; its value goes to `unclaimed`
        return Effect.sync(() => {
          entry.resume = undefined
        })
      })
  })
