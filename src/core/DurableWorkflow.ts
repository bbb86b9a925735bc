/**
 * Durable Workflow (server protocol 1.1) workflows and activities.
 *
 * A workflow is replayed from its history on every workflow task: recorded results are handed back
 * in history order, new operations become the task's commands (`schedule_activity`, `start_timer`,
 * `start_child_workflow`, `record_side_effect`, `record_version_marker`, `open_condition_wait`,
 * `upsert_search_attributes`; `complete_workflow`, `fail_workflow` or `continue_as_new` when it
 * ends). Author one as an Effect ({@link make}), a generator function or an async function
 * ({@link fromGenerator}, {@link fromAsync}). Code that does not do what its history recorded fails the *task* with a
 * {@link NonDeterministicReplayError}; an error the workflow does not catch fails the *workflow*.
 *
 * Activities are {@link Step.Step}s registered with the worker's `steps`: build them with
 * {@link activity} (Effect, context from {@link ActivityContext}) or {@link activityFromPromise}
 * (async, context from {@link activityContext}).
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import * as EffectRuntime from "effect/Effect"
import { AsyncLocalStorage } from "node:async_hooks"
import type * as Step from "./Step.js"
import { ActivityCancelled, ActivityFailed, ChildWorkflowFailed, NonDeterministicReplayError, QueryFailed } from "./internal/durableWorkflow/errors.js"
import type { ActivityOptions, ChildOptions, Op } from "./internal/durableWorkflow/replay.js"
import { type BaseContext, type ConditionOptions, ContinueAsNew, type Definition, fingerprintOf, op } from "./internal/durableWorkflow/run.js"

export { ActivityCancelled, ActivityFailed, ChildWorkflowFailed, ContinueAsNew, NonDeterministicReplayError, QueryFailed }
export type { ActivityOptions, BaseContext, ChildOptions, ConditionOptions, Op }

/**
 * Op constructors, for parallel groups (`ctx.all([...])`, or `yield [...]` in a generator).
 *
 * @since 0.1.0
 * @category constructors
 */
export const Ops = op

/**
 * The context of an Effect workflow: every durable operation is an `Effect`.
 *
 * @since 0.1.0
 * @category models
 */
export interface EffectWorkflowContext extends BaseContext {
  readonly activity: <A = unknown>(type: string, args?: ReadonlyArray<unknown>, options?: ActivityOptions) => Effect.Effect<A, ActivityFailed>
  readonly child: <A = unknown>(type: string, args?: ReadonlyArray<unknown>, options?: ChildOptions) => Effect.Effect<A, ChildWorkflowFailed>
  /** A durable timer of whole seconds (rounded up). */
  readonly sleep: (seconds: number) => Effect.Effect<void>
  /** Runs `compute` once and records its value; replays the value afterwards. */
  readonly sideEffect: <A>(compute: () => A) => Effect.Effect<A>
  /** The recorded version of a change, `maxSupported` for new runs, -1 for runs older than the change. */
  readonly getVersion: (changeId: string, minSupported: number, maxSupported: number) => Effect.Effect<number>
  /** `true` for runs that took the new path of `changeId`. */
  readonly patched: (changeId: string) => Effect.Effect<boolean>
  /** Waits until `predicate` holds (signals change state); `false` when it timed out. */
  readonly waitCondition: (predicate: () => boolean, options?: ConditionOptions) => Effect.Effect<boolean>
  readonly upsertSearchAttributes: (attributes: Record<string, unknown>) => Effect.Effect<void>
  /** Runs activities, timers and child workflows as one parallel group; values in the order given. */
  readonly all: <A = unknown>(ops: ReadonlyArray<Op>) => Effect.Effect<Array<A>, ActivityFailed | ChildWorkflowFailed>
}

/**
 * The context of an async workflow: every durable operation is a `Promise`.
 *
 * @since 0.1.0
 * @category models
 */
export interface AsyncWorkflowContext extends BaseContext {
  readonly activity: <A = any>(type: string, args?: ReadonlyArray<unknown>, options?: ActivityOptions) => Promise<A>
  readonly child: <A = any>(type: string, args?: ReadonlyArray<unknown>, options?: ChildOptions) => Promise<A>
  readonly sleep: (seconds: number) => Promise<void>
  readonly sideEffect: <A>(compute: () => A) => Promise<A>
  readonly getVersion: (changeId: string, minSupported: number, maxSupported: number) => Promise<number>
  readonly patched: (changeId: string) => Promise<boolean>
  readonly waitCondition: (predicate: () => boolean, options?: ConditionOptions) => Promise<boolean>
  readonly upsertSearchAttributes: (attributes: Record<string, unknown>) => Promise<void>
  readonly all: <A = any>(ops: ReadonlyArray<Op>) => Promise<Array<A>>
}

/**
 * The context of a generator workflow: operations are ops to `yield` (an array of them is a parallel
 * group); the `yield` evaluates to the result, and a failure is thrown at the `yield`.
 *
 * @since 0.1.0
 * @category models
 */
export interface GeneratorWorkflowContext extends BaseContext {
  readonly activity: (type: string, args?: ReadonlyArray<unknown>, options?: ActivityOptions) => Op
  readonly child: (type: string, args?: ReadonlyArray<unknown>, options?: ChildOptions) => Op
  readonly sleep: (seconds: number) => Op
  readonly sideEffect: (compute: () => unknown) => Op
  readonly getVersion: (changeId: string, minSupported: number, maxSupported: number) => Op
  readonly patched: (changeId: string) => Op
  readonly waitCondition: (predicate: () => boolean, options?: ConditionOptions) => Op
  readonly upsertSearchAttributes: (attributes: Record<string, unknown>) => Op
}

/**
 * A Durable Workflow workflow definition.
 *
 * @since 0.1.0
 * @category models
 */
export interface DurableWorkflow<out R = never> extends Definition<R> {
  readonly _tag: "DurableWorkflow"
  /** `sha256:<hex>` over the name and the body's source, sent at registration. */
  readonly fingerprint: string
}

/**
 * Workflows by type name, as the worker looks them up.
 *
 * @since 0.1.0
 * @category models
 */
export type DurableWorkflowRegistry<R = never> = ReadonlyMap<string, DurableWorkflow<R>>

const fingerprints = new Map<string, string>()

/** The fingerprint of the last definition made under `name` in this process. @internal */
export const registeredFingerprint = (name: string): string | undefined => fingerprints.get(name)

const define = <R>(name: string, body: Definition<R>["body"]): DurableWorkflow<R> => {
  const fingerprint = fingerprintOf(name, `${body.style}:${body.run.toString()}`)
  fingerprints.set(name, fingerprint)
  return { _tag: "DurableWorkflow", name, body, fingerprint }
}

/**
 * A workflow whose body is an Effect.
 *
 * @example
 * const greet = DurableWorkflow.make("greet", (ctx, name: string) =>
 *   Effect.gen(function*() {
 *     const greeting = yield* ctx.activity<string>("greeting.compose", [name])
 *     return greeting
 *   }))
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = <Args extends Array<any>, A, E, R>(
  name: string,
  body: (ctx: EffectWorkflowContext, ...args: Args) => Effect.Effect<A, E, R>
): DurableWorkflow<R> => define(name, { style: "effect", run: body as any })

/**
 * A workflow whose body is a generator function: it `yield`s ops from its context (an array of them
 * is a parallel group) and gets each result back from the `yield`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const fromGenerator = <Args extends Array<any>>(
  name: string,
  body: (ctx: GeneratorWorkflowContext, ...args: Args) => Generator<Op | ReadonlyArray<Op>, unknown, any>
): DurableWorkflow => define(name, { style: "generator", run: body as any })

/**
 * A workflow whose body is an async function awaiting the operations of its context.
 *
 * @since 0.1.0
 * @category constructors
 */
export const fromAsync = <Args extends Array<any>>(
  name: string,
  body: (ctx: AsyncWorkflowContext, ...args: Args) => Promise<unknown>
): DurableWorkflow => define(name, { style: "async", run: body as any })

/**
 * What an activity knows about the attempt it runs.
 *
 * @since 0.1.0
 * @category models
 */
export interface ActivityInfo {
  readonly taskId: string
  readonly activityType: string
  readonly activityAttemptId: string
  readonly attemptNumber: number
  readonly taskQueue: string
  readonly workerId: string
  readonly workflowId: string | undefined
  readonly runId: string | undefined
}

/**
 * The context of a running activity.
 *
 * @since 0.1.0
 * @category models
 */
export interface ActivityContextShape {
  readonly info: ActivityInfo
  /**
   * Reports progress (and extends the lease). Fails with {@link ActivityCancelled} when the server
   * asks the activity to stop; HTTP errors propagate.
   */
  readonly heartbeat: (details?: Record<string, unknown>) => Effect.Effect<void, ActivityCancelled | Error>
  /** Whether a heartbeat has seen a cancellation request. */
  readonly isCancelled: () => boolean
  /** Aborted when the activity is interrupted (shutdown deadline) or cancelled. */
  readonly signal: AbortSignal
}

/**
 * The running activity's context, for Effect activities.
 *
 * @since 0.1.0
 * @category services
 */
export class ActivityContext extends Context.Tag("effect-durable-worker/DurableWorkflow/ActivityContext")<
  ActivityContext,
  ActivityContextShape
>() {}

/** Where the protocol puts the context it built for an activity, on the step context. @internal */
export const activityContextKey = "durableWorkflowActivity"

const storage = new AsyncLocalStorage<ActivityContextShape>()

/**
 * The running activity's context, for async activities. Throws outside an activity.
 *
 * @since 0.1.0
 * @category accessors
 */
export const activityContext = (): ActivityContextShape & {
  /** Like `heartbeat`, as a promise: rejects with {@link ActivityCancelled} on a cancellation request. */
  readonly heartbeatAsync: (details?: Record<string, unknown>) => Promise<void>
} => {
  const ctx = storage.getStore()
  if (ctx === undefined) throw new Error("activityContext() called outside an activity")
  return { ...ctx, heartbeatAsync: (details) => EffectRuntime.runPromise(ctx.heartbeat(details)) }
}

const contextOf = (stepCtx: Step.StepContext): ActivityContextShape => {
  const ctx = (stepCtx as unknown as Record<string, unknown>)[activityContextKey] as ActivityContextShape | undefined
  if (ctx === undefined) throw new Error("this activity runs only on the Durable Workflow transport")
  return ctx
}

const argsOf = (input: unknown): Array<unknown> => (Array.isArray(input) ? input : input === undefined || input === null ? [] : [input])

/**
 * An activity whose handler is an Effect taking the activity's positional arguments. Fail with
 * {@link FatalError} for a non-retryable failure.
 *
 * @since 0.1.0
 * @category constructors
 */
export const activity = <Args extends Array<any>, A, E, R>(
  name: string,
  handler: (...args: Args) => Effect.Effect<A, E, R>
): Step.Step<Exclude<R, ActivityContext>> => ({
  name,
  run: (input, stepCtx) =>
    EffectRuntime.suspend(() =>
      EffectRuntime.provideService(handler(...(argsOf(input) as Args)), ActivityContext, contextOf(stepCtx))
    ) as Effect.Effect<A, E, Exclude<R, ActivityContext>>
})

/**
 * An activity whose handler is an async function of the activity's positional arguments; its
 * context is {@link activityContext}`()`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const activityFromPromise = <Args extends Array<any>, A>(
  name: string,
  handler: (...args: Args) => Promise<A> | A
): Step.Step => ({
  name,
  run: (input, stepCtx) =>
    EffectRuntime.tryPromise({
      try: () => storage.run(contextOf(stepCtx), async () => handler(...(argsOf(input) as Args))),
      catch: (error) => error
    })
})
