/**
 * Groups single SQS writes (send a result, delete a message) into the batch calls SQS has for them
 * (up to 10 entries): whatever accumulated while the previous call was in flight goes in the next
 * one, so an idle worker adds no latency and a busy one makes a tenth of the calls. Each caller
 * learns the outcome of its own entry.
 *
 * @since 0.1.0
 * @internal
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Queue from "effect/Queue"
import type * as Scope from "effect/Scope"
import type { TransportError } from "../../Transport.js"

/**
 * Runs one batch: returns, for each item in order, `undefined` when it succeeded or the error of its
 * entry; fails as a whole when the call itself failed.
 *
 * @since 0.1.0
 */
export type RunBatch<A> = (
  items: ReadonlyArray<A>
) => Effect.Effect<ReadonlyArray<TransportError | undefined>, TransportError>

/**
 * Starts a batcher in the scope; the returned function submits one item and waits for its outcome.
 * Items are cut into batches of at most `maxItems` and, by `size`, at most `maxSize` (an item larger
 * than that goes alone); up to `parallelism` batch calls run at once.
 *
 * @since 0.1.0
 */
export const make = <A>(options: {
  readonly run: RunBatch<A>
  readonly maxItems: number
  readonly size?: (item: A) => number
  readonly maxSize?: number
  /** Batch calls in flight at once. Default 4. */
  readonly parallelism?: number
}): Effect.Effect<(item: A) => Effect.Effect<void, TransportError>, never, Scope.Scope> =>
  Effect.gen(function*() {
    const pending = yield* Queue.unbounded<readonly [A, Deferred.Deferred<void, TransportError>]>()
    const size = options.size ?? (() => 0)
    const maxSize = options.maxSize ?? Number.POSITIVE_INFINITY

    const runChunk = (chunk: ReadonlyArray<readonly [A, Deferred.Deferred<void, TransportError>]>) =>
      options.run(chunk.map(([item]) => item)).pipe(
        Effect.matchEffect({
          onFailure: (error) => Effect.forEach(chunk, ([, done]) => Deferred.fail(done, error), { discard: true }),
          onSuccess: (outcomes) =>
            Effect.forEach(chunk, ([, done], i) => {
              const error = outcomes[i]
              return error === undefined ? Deferred.succeed(done, undefined) : Deferred.fail(done, error)
            }, { discard: true })
        })
      )

    yield* Queue.takeBetween(pending, 1, options.maxItems).pipe(
      Effect.flatMap((taken) => {
        const chunks: Array<Array<readonly [A, Deferred.Deferred<void, TransportError>]>> = []
        let current: Array<readonly [A, Deferred.Deferred<void, TransportError>]> = []
        let currentSize = 0
        for (const entry of taken) {
          const entrySize = size(entry[0])
          if (current.length > 0 && currentSize + entrySize > maxSize) {
            chunks.push(current)
            current = []
            currentSize = 0
          }
          current.push(entry)
          currentSize += entrySize
        }
        if (current.length > 0) chunks.push(current)
        return Effect.forEach(chunks, runChunk, { concurrency: "unbounded", discard: true })
      }),
      Effect.forever,
      Effect.interruptible, // stopped with the scope, whatever the region it was started from
      Effect.forkScoped,
      Effect.replicateEffect(options.parallelism ?? 4)
    )

    return (item: A) =>
      Effect.flatMap(Deferred.make<void, TransportError>(), (done) =>
        Effect.zipRight(Queue.offer(pending, [item, done] as const), Deferred.await(done)))
  })
