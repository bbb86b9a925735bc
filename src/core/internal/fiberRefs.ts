import * as Arr from "effect/Array"
import * as Effect from "effect/Effect"
import * as FiberRef from "effect/FiberRef"
import * as FiberRefs from "effect/FiberRefs"
import * as HashMap from "effect/HashMap"
import * as Tracer from "effect/Tracer"

/**
 * Runs `self` with several `FiberRef`s changed at once and puts their previous values back
 * afterwards (also on failure or interruption), like `Effect.locally` for each of them. Where
 * `locally` copies the fiber's refs twice per ref, this copies them once on the way in and once on
 * the way out: the task path sets a few refs per task, so this is most of their cost.
 *
 * @internal
 */
export const withFiberRefs = (
  entries: (refs: FiberRefs.FiberRefs) => Arr.NonEmptyReadonlyArray<readonly [FiberRef.FiberRef<any>, unknown]>
) =>
<A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.flatMap(Effect.getFiberRefs, (before) => {
    const changes = entries(before)
    return Effect.ensuring(
      Effect.zipRight(
        Effect.updateFiberRefs((fiberId, refs) =>
          FiberRefs.updateManyAs(refs, { entries: Arr.map(changes, ([ref, value]) => [ref, [[fiberId, value]]] as const) })
        ),
        self
      ),
      Effect.updateFiberRefs((fiberId, refs) =>
        FiberRefs.updateManyAs(refs, {
          entries: Arr.map(changes, ([ref]) => [ref, [[fiberId, FiberRefs.getOrDefault(before, ref)]]] as const)
        })
      )
    )
  })

/**
 * The `currentLogAnnotations` entry for {@link withFiberRefs} that adds `annotations`.
 *
 * @internal
 */
export const annotationsWith = (
  refs: FiberRefs.FiberRefs,
  annotations: Readonly<Record<string, unknown>>
): readonly [FiberRef.FiberRef<any>, unknown] => [
  FiberRef.currentLogAnnotations,
  HashMap.mutate(FiberRefs.getOrDefault(refs, FiberRef.currentLogAnnotations), (map) => {
    for (const key in annotations) HashMap.set(map, key, annotations[key])
  })
]

let nativeTracer: Tracer.Tracer | undefined

/**
 * Whether a task's span is worth making under `tracer`: with Effect's built-in tracer (nothing
 * exports its spans) and no trace context from the orchestrator (`traced` false), a span would be
 * made and dropped for every task, so the task paths skip it (and never build its name and options).
 *
 * @internal
 */
export const taskSpanWanted = (tracer: Tracer.Tracer, traced: boolean): boolean => {
  nativeTracer ??= Effect.runSync(Effect.tracer)
  return traced || tracer !== nativeTracer
}
