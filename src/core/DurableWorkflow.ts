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
 * Signals, queries and updates are handled from inside the body (`ctx.onSignal`, `ctx.onQuery`,
 * `ctx.onUpdate`, `ctx.onUpdateValidator`), where the workflow's state lives. Declare them with the
 * definition ({@link Declarations}: parameters via {@link param} / {@link rest}, optionally with an
 * Effect `Schema` each) to type the handlers, decode their arguments and advertise them to the
 * server as the workflow's command contract; update validators run before the server accepts an
 * update.
 *
 * Activities are {@link Step.Step}s registered with the worker's `steps`: build them with
 * {@link activity} (Effect, context from {@link ActivityContext}) or {@link activityFromPromise}
 * (async, context from {@link activityContext}).
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import * as EffectRuntime from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Runtime from "effect/Runtime"
import * as Schema from "effect/Schema"
import { AsyncLocalStorage } from "node:async_hooks"
import type * as Codec from "../wire/DurableWorkflowCodec.js"
import type * as Step from "./Step.js"
import {
  type CommandContract,
  commandContract,
  type ContractType,
  type ParameterSpec,
  type ReceiverSpecs
} from "./internal/durableWorkflow/contract.js"
import {
  ActivityCancelled,
  ActivityFailed,
  ChildWorkflowFailed,
  InvalidWorkflowDeclaration,
  NonDeterministicReplayError,
  type QueryFailed,
  type ReplayError,
  UpdateRejected,
  WorkflowDefinitionChanged
} from "./internal/durableWorkflow/errors.js"
import { queryOffline, replayOffline, type ReplayOptions, updateOffline } from "./internal/durableWorkflow/offline.js"
import { type Abortable, runHandler } from "./internal/interruption.js"
import type { ActivityOptions, ChildOptions, Command, Op } from "./internal/durableWorkflow/replay.js"
import { type BaseContext as AnyBaseContext, type ConditionOptions, ContinueAsNew, type Definition, fingerprintOf, op } from "./internal/durableWorkflow/run.js"

export * from "./internal/durableWorkflow/errors.js"
export { ContinueAsNew }
export type { ActivityOptions, ChildOptions, Command, CommandContract, ConditionOptions, ContractType, Op }

// ---- receiver declarations ---------------------------------------------------------------------

/**
 * A declared positional parameter of a signal, query or update handler: its name, optionally an
 * Effect `Schema` (types the handler argument, decodes it, and gives the contract type), a default
 * (makes it optional). See {@link param}.
 *
 * @since 0.1.0
 * @category declarations
 */
export interface Parameter<out A = unknown> extends ParameterSpec {
  readonly variadic: false
  /** @internal phantom: the handler argument's type */
  readonly "~type"?: (_: never) => A
}

/**
 * A declared variadic (rest) parameter: every remaining argument. See {@link rest}.
 *
 * @since 0.1.0
 * @category declarations
 */
export interface RestParameter<out A = unknown> extends ParameterSpec {
  readonly variadic: true
  /** @internal phantom: the type of each remaining argument */
  readonly "~type"?: (_: never) => A
}

/**
 * The parameters of one handler, in position order (a {@link RestParameter} only last).
 *
 * @since 0.1.0
 * @category declarations
 */
export type ParameterList = ReadonlyArray<Parameter<any> | RestParameter<any>>

/**
 * The handler arguments a parameter list declares.
 *
 * @since 0.1.0
 * @category declarations
 */
export type ArgumentsOf<Ps> = Ps extends readonly [] ? []
  : Ps extends readonly [RestParameter<infer A>] ? Array<A>
  : Ps extends readonly [Parameter<infer A>, ...infer Rest] ? [A, ...ArgumentsOf<Rest>]
  : Array<any>

/**
 * What a workflow declares about its receivers, by name: `signals`, `queries` and `updates` map a
 * handler name to its parameters; `updateValidators` names the updates that have a validator.
 * Declared receivers are sent to the server at registration as the workflow's command contract
 * (`workflow_command_contracts`), type the `ctx.on…` handlers of the same name and have their
 * arguments decoded by the parameter schemas. Receivers registered in the body without a
 * declaration still work but are not advertised (and an update needs `workflow_updates`
 * advertised, i.e. at least one declared update, for a server to route it to this worker).
 *
 * @example
 * const approval = DurableWorkflow.make("orders.approval", (ctx) => Effect.gen(function*() {
 *   let discount = 0
 *   ctx.onUpdate("setDiscount", (percent) => (discount = percent))
 *   ctx.onUpdateValidator("setDiscount", (percent) => percent <= 50)
 *   ctx.onQuery("discount", () => discount)
 *   yield* ctx.waitCondition(() => discount > 0)
 *   return discount
 * }), {
 *   updates: { setDiscount: [DurableWorkflow.param("percent", Schema.Int)] },
 *   updateValidators: ["setDiscount"],
 *   queries: { discount: [] }
 * })
 *
 * @since 0.1.0
 * @category declarations
 */
export interface Declarations {
  readonly signals?: Readonly<Record<string, ParameterList>>
  readonly queries?: Readonly<Record<string, ParameterList>>
  readonly updates?: Readonly<Record<string, ParameterList>>
  readonly updateValidators?: ReadonlyArray<string>
}

/**
 * Options of a declared parameter.
 *
 * @since 0.1.0
 * @category declarations
 */
export interface ParameterOptions<A> {
  /** Makes the parameter optional: a missing argument takes this value (sent as the contract `default`). */
  readonly default?: A
  /**
   * The contract type, when the schema cannot say it (or there is no schema): `bool`, `int`,
   * `float`, `string`, `array`, `callable`, `mixed`, `null`, an `a|b` union, or `null` for a
   * type the server cannot name.
   */
  readonly type?: ContractType | (string & {}) | null
  /** Whether the argument may be `null` (default: derived from the schema, the type or a `null` default). */
  readonly allowsNull?: boolean
}

const spec = (
  name: string,
  schemaOrOptions: Schema.Schema<any, any, never> | ParameterOptions<unknown> | undefined,
  maybeOptions: ParameterOptions<unknown> | undefined,
  variadic: boolean
): ParameterSpec => {
  const schema = Schema.isSchema(schemaOrOptions) ? schemaOrOptions as Schema.Schema<any, any, never> : undefined
  const options = (schema === undefined ? schemaOrOptions as ParameterOptions<unknown> | undefined : maybeOptions) ?? {}
  const defaultAvailable = !variadic && "default" in options
  return {
    name,
    schema,
    type: "type" in options ? options.type : undefined,
    variadic,
    defaultAvailable,
    default: defaultAvailable ? options.default : undefined,
    allowsNull: options.allowsNull
  }
}

/**
 * Declares a positional handler parameter, optionally with an Effect `Schema` that types and
 * decodes the argument. Its contract type comes from the schema's encoded side: `String` →
 * `string`, `Number` → `float`, `Int`/`BigIntFromSelf` → `int`, `Boolean` → `bool`, literals by
 * value, structs/records/arrays/tuples → `array`, `Unknown`/`Any` → `mixed`, `Null`/`Undefined` →
 * `null`, unions → `a|b` with `null` members setting `allows_null`, classes and other declarations →
 * `null` (unnamed). Without a schema (and without `type`) the parameter is `mixed`, nullable.
 *
 * @since 0.1.0
 * @category declarations
 */
export const param: {
  <S extends Schema.Schema<any, any, never>>(name: string, schema: S, options?: ParameterOptions<Schema.Schema.Type<S>>): Parameter<Schema.Schema.Type<S>>
  <A = any>(name: string, options?: ParameterOptions<A>): Parameter<A>
} = (name: string, schemaOrOptions?: any, options?: any) => spec(name, schemaOrOptions, options, false) as Parameter<any>

/**
 * Declares a variadic last parameter: every remaining argument, each decoded by `schema`.
 *
 * @since 0.1.0
 * @category declarations
 */
export const rest: {
  <S extends Schema.Schema<any, any, never>>(name: string, schema: S, options?: Omit<ParameterOptions<never>, "default">): RestParameter<Schema.Schema.Type<S>>
  <A = any>(name: string, options?: Omit<ParameterOptions<never>, "default">): RestParameter<A>
} = (name: string, schemaOrOptions?: any, options?: any) => spec(name, schemaOrOptions, options, true) as RestParameter<any>

type ArgsFor<D, Kind extends "signals" | "queries" | "updates", K extends string> = D extends { readonly [k in Kind]?: infer M }
  ? M extends { readonly [k in K]: infer Ps } ? ArgumentsOf<Ps> : Array<any>
  : Array<any>

/**
 * What an update validator returns: `false` (or a failure / throw, {@link UpdateRejected} for
 * per-field errors) rejects; anything else approves.
 *
 * @since 0.1.0
 * @category models
 */
export type ValidatorResult = boolean | void | PromiseLike<boolean | void> | Effect.Effect<boolean | void, unknown>

/**
 * The receiver registrations of a workflow context, typed by the workflow's {@link Declarations}
 * (undeclared names take any arguments).
 *
 * @since 0.1.0
 * @category models
 */
export interface Receivers<D = {}> {
  /** Handles the signal `name` (recorded signals are applied in history order during replay). */
  readonly onSignal: <K extends string>(name: K, handler: (...args: ArgsFor<D, "signals", K>) => void) => void
  /**
   * Answers the query `name` from the replayed state (a value, a promise or an Effect). A query only
   * reads: one that asks for a workflow op fails with `query_rejected` and a message saying so.
   */
  readonly onQuery: <K extends string>(name: K, handler: (...args: ArgsFor<D, "queries", K>) => unknown) => void
  /**
   * Applies the update `name`: changes the workflow state and returns the update's result (a
   * value, a promise or an Effect); a failure fails the update (`fail_update`, non-retryable
   * unless the error has `retryable: true`). Recorded applications are replayed in history order:
   * the handler runs again, to its end (on the worker's runtime, with its services, logger and
   * Clock, as when it was applied; not cut short by the workflow's own races) before the workflow
   * goes on; its result and failure were answered when it was applied, so they are dropped. A
   * handler does not run workflow ops (`sleep`, an activity, `waitCondition`, …): one that asks for
   * one fails the workflow task with a `TypeError` saying so; do that work in the workflow body.
   */
  readonly onUpdate: <K extends string>(name: K, handler: (...args: ArgsFor<D, "updates", K>) => unknown) => void
  /**
   * Validates the update `name` before the server accepts it (declare it in `updateValidators`). A
   * validator only judges: one that asks for a workflow op fails the validation
   * (`UpdateValidationFailed`, a worker failure) with a message saying so.
   */
  readonly onUpdateValidator: <K extends string>(name: K, validator: (...args: ArgsFor<D, "updates", K>) => ValidatorResult) => void
}

/**
 * Deterministic helpers and receiver registrations every workflow context has.
 *
 * @since 0.1.0
 * @category models
 */
export interface BaseContext<D = {}> extends Omit<AnyBaseContext, keyof Receivers>, Receivers<D> {}

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
export interface EffectWorkflowContext<D = {}> extends BaseContext<D> {
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
export interface AsyncWorkflowContext<D = {}> extends BaseContext<D> {
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
export interface GeneratorWorkflowContext<D = {}> extends BaseContext<D> {
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
  /** `sha256:<hex>` over the name, the body's source and the declarations, sent at registration. */
  readonly fingerprint: string
  /** The declared receivers (empty when none were declared). */
  readonly specs: ReceiverSpecs
  /** The command contract sent at registration (`workflow_command_contracts[name]`). */
  readonly contract: CommandContract
}

/**
 * Workflows by type name, as the worker looks them up.
 *
 * @since 0.1.0
 * @category models
 */
export type DurableWorkflowRegistry<R = never> = ReadonlyMap<string, DurableWorkflow<R>>

const specsOf = (name: string, declarations: Declarations | undefined): ReceiverSpecs => {
  const invalid = (message: string) => new InvalidWorkflowDeclaration({ workflowType: name, message: `workflow '${name}': ${message}` })
  const kinds = ["signals", "queries", "updates"] as const
  for (const kind of kinds) {
    for (const [handler, parameters] of Object.entries(declarations?.[kind] ?? {})) {
      const seen = new Set<string>()
      parameters.forEach((p, i) => {
        if (seen.has(p.name)) throw invalid(`${kind} '${handler}' declares the parameter '${p.name}' twice`)
        seen.add(p.name)
        if (p.variadic && i !== parameters.length - 1) throw invalid(`${kind} '${handler}': the rest parameter '${p.name}' must be the last one`)
      })
    }
  }
  const updates = declarations?.updates ?? {}
  const validators = [...new Set(declarations?.updateValidators ?? [])]
  for (const validator of validators) {
    if (!(validator in updates)) {
      throw invalid(`updateValidators names '${validator}', which is not a declared update; declare it in updates first`)
    }
  }
  return { signals: declarations?.signals ?? {}, queries: declarations?.queries ?? {}, updates, updateValidators: validators }
}

const define = <R>(name: string, body: Definition<R>["body"], declarations: Declarations | undefined): DurableWorkflow<R> => {
  const specs = specsOf(name, declarations)
  const contract = commandContract(specs)
  const fingerprint = fingerprintOf(name, `${body.style}:${body.run.toString()}\0${JSON.stringify(contract)}`)
  return { _tag: "DurableWorkflow", name, body, specs, contract, fingerprint }
}

const guarded = new Map<string, string>()

/**
 * The process-wide definition guard, keyed by (worker id, workflow type): the first definition a
 * worker id presents for a type is pinned; presenting a different one later under the same worker
 * id fails with {@link WorkflowDefinitionChanged} (restart the process to change a definition). The
 * Durable Workflow transport checks it before registering; the promise facade when a workflow is
 * added to a worker with an explicit `workerId`. Call it when building a worker to fail earlier.
 *
 * @since 0.1.0
 * @category guards
 */
export const guardDefinitions = (
  workerId: string,
  workflows: Iterable<{ readonly name: string; readonly fingerprint: string }>
): Either.Either<void, WorkflowDefinitionChanged> => {
  const list = [...workflows]
  for (const workflow of list) {
    const previous = guarded.get(`${workerId}\0${workflow.name}`)
    if (previous !== undefined && previous !== workflow.fingerprint) {
      return Either.left(new WorkflowDefinitionChanged({ workerId, workflowType: workflow.name, previous, current: workflow.fingerprint }))
    }
  }
  for (const workflow of list) guarded.set(`${workerId}\0${workflow.name}`, workflow.fingerprint)
  return Either.void
}

/**
 * A workflow whose body is an Effect. Signal, query and update handlers are registered on `ctx`;
 * `declarations` types them and advertises them to the server.
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
export const make = <Args extends Array<any>, A, E, R, const D extends Declarations = {}>(
  name: string,
  body: (ctx: EffectWorkflowContext<D>, ...args: Args) => Effect.Effect<A, E, R>,
  declarations?: D
): DurableWorkflow<R> => define(name, { style: "effect", run: body as any }, declarations)

/**
 * A workflow whose body is a generator function: it `yield`s ops from its context (an array of them
 * is a parallel group) and gets each result back from the `yield`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const fromGenerator = <Args extends Array<any>, const D extends Declarations = {}>(
  name: string,
  body: (ctx: GeneratorWorkflowContext<D>, ...args: Args) => Generator<Op | ReadonlyArray<Op>, unknown, any>,
  declarations?: D
): DurableWorkflow => define(name, { style: "generator", run: body as any }, declarations)

/**
 * A workflow whose body is an async function awaiting the operations of its context.
 *
 * @since 0.1.0
 * @category constructors
 */
export const fromAsync = <Args extends Array<any>, const D extends Declarations = {}>(
  name: string,
  body: (ctx: AsyncWorkflowContext<D>, ...args: Args) => Promise<unknown>,
  declarations?: D
): DurableWorkflow => define(name, { style: "async", run: body as any }, declarations)

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

/** What an async activity runs with: its context, and the runtime of the fiber that runs it. */
interface RunningActivity {
  readonly ctx: ActivityContextShape
  readonly runtime: Runtime.Runtime<never>
}

const storage = new AsyncLocalStorage<RunningActivity>()

/**
 * `heartbeat` as a promise, run by the activity's fiber's runtime (the worker's logger, tracer and
 * Clock) and stopped when the activity's signal aborts. It rejects with the error itself
 * ({@link ActivityCancelled}, an HTTP error), not a wrapper; stopped by the signal, with its reason
 * (the {@link ActivityCancelled} of a cancellation request, or why the worker stopped the activity).
 */
const heartbeatAsync = async ({ ctx, runtime }: RunningActivity, details: Record<string, unknown> | undefined): Promise<void> => {
  // as `fetch` does: an aborted signal sends nothing
  if (ctx.signal.aborted) throw ctx.signal.reason
  const exit = await Runtime.runPromiseExit(runtime)(ctx.heartbeat(details), { signal: ctx.signal })
  if (Exit.isSuccess(exit)) return
  throw Cause.isInterruptedOnly(exit.cause) && ctx.signal.aborted ? ctx.signal.reason : Cause.squash(exit.cause)
}

/**
 * The running activity's context, for async activities. Throws outside an activity.
 *
 * @since 0.1.0
 * @category accessors
 */
export const activityContext = (): ActivityContextShape & {
  /**
   * Like `heartbeat`, as a promise: rejects with {@link ActivityCancelled} on a cancellation request
   * (and once the activity was cancelled), with the error itself for any other failure. It runs in
   * the activity's context (the worker's logger, tracer and Clock) and stops when the activity's
   * signal aborts.
   */
  readonly heartbeatAsync: (details?: Record<string, unknown>) => Promise<void>
} => {
  const running = storage.getStore()
  if (running === undefined) throw new Error("activityContext() called outside an activity")
  return { ...running.ctx, heartbeatAsync: (details) => heartbeatAsync(running, details) }
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
  // interrupted, the activity's signal is aborted, and a stop waits for the handler
  run: (input, stepCtx) =>
    EffectRuntime.flatMap(EffectRuntime.runtime<never>(), (runtime) =>
      runHandler(
        () => storage.run({ ctx: contextOf(stepCtx), runtime }, async () => handler(...(argsOf(input) as Args))),
        stepCtx as Abortable
      ))
})

// ---- offline replay ------------------------------------------------------------------------------

/**
 * A recorded Durable Workflow history: its event list (`{ event_type, payload }` objects, as the
 * server sends them on a workflow task or exports them), or an export document carrying that list
 * under `events` (`history_events` and `history` are read too).
 *
 * @since 0.3.0
 * @category replay
 */
export type ReplayHistory = ReadonlyArray<unknown> | { readonly events: ReadonlyArray<unknown> }

/**
 * The definitions an offline replay picks from: one workflow, a list of them, or a
 * {@link DurableWorkflowRegistry}. A list must not name a type twice.
 *
 * @since 0.3.0
 * @category replay
 */
export type ReplayDefinitions<R = never> = DurableWorkflow<R> | Iterable<DurableWorkflow<R>> | DurableWorkflowRegistry<R>

export type { ReplayOptions } from "./internal/durableWorkflow/offline.js"

/**
 * What an offline replay produced: the commands the code answers the history with, exactly as a
 * worker would send them (payloads as Avro envelopes, see `DurableWorkflowCodec.decodeEnvelope`).
 * A history the code has not finished ends in the commands it blocks on (`schedule_activity`,
 * `start_timer`, `open_condition_wait`, …); a finished one in `complete_workflow`, `fail_workflow`
 * or `continue_as_new`.
 *
 * @since 0.3.0
 * @category replay
 */
export interface ReplayOutcome {
  readonly workflowType: string
  /** The start input the code ran with. */
  readonly input: ReadonlyArray<unknown>
  readonly commands: ReadonlyArray<Command>
}

/**
 * Why an offline replay failed: the code diverged from the history
 * ({@link NonDeterministicReplayError}), a payload could not be decoded (`PayloadDecodeError`, e.g.
 * `unsupported_payload_codec`), or the replay could not run ({@link ReplayError}).
 *
 * @since 0.3.0
 * @category replay
 */
export type ReplayFailure = NonDeterministicReplayError | Codec.PayloadDecodeError | ReplayError

/**
 * Replays a recorded history against the current workflow code, without a server: the commands
 * the code produces for it, or a {@link NonDeterministicReplayError} naming the workflow sequence,
 * what the code asked for and what history recorded. It follows the worker's replay exactly (the
 * same code runs a live workflow task), so a history that replays here replays on the worker.
 * Run it in CI over histories exported from production before deploying changed workflow code.
 *
 * @example
 * import { Effect } from "effect"
 * import { DurableWorkflow } from "effect-durable-worker"
 *
 * const outcome = yield* DurableWorkflow.replay([checkout, refund], JSON.parse(exported))
 * // outcome.commands: [{ type: "complete_workflow", result: { codec: "avro", blob: "…" } }]
 *
 * @since 0.3.0
 * @category replay
 */
export const replay = <R = never>(
  definitions: ReplayDefinitions<R>,
  history: ReplayHistory,
  options?: ReplayOptions
): Effect.Effect<ReplayOutcome, ReplayFailure, R> => replayOffline(definitions, history, options)

/**
 * Options of {@link replayQuery}: those of {@link replay} and the query's arguments.
 *
 * @since 0.3.0
 * @category replay
 */
export interface ReplayQueryOptions extends ReplayOptions {
  /** The query's arguments (decoded). Default `[]`. */
  readonly args?: ReadonlyArray<unknown> | undefined
}

/**
 * Replays a history, then answers the query `name` from the replayed state, as a query task
 * would: the handler's value, or {@link QueryFailed} (unknown query, arguments that do not fit its
 * declaration, the handler failed). A replay that fails fails with the replay's error.
 *
 * @since 0.3.0
 * @category replay
 */
export const replayQuery = <R = never>(
  definitions: ReplayDefinitions<R>,
  history: ReplayHistory,
  name: string,
  options?: ReplayQueryOptions
): Effect.Effect<unknown, ReplayFailure | QueryFailed, R> =>
  queryOffline(definitions, history, name, options?.args ?? [], options)

/**
 * The update {@link replayUpdate} applies: the `update_id` of an `UpdateAccepted` in the history
 * (as an accepted-update task does), or a new update by name and arguments, applied to the state
 * the history leaves (`updateId` default `"offline-update"`).
 *
 * @since 0.3.0
 * @category replay
 */
export type ReplayUpdate = string | {
  readonly name: string
  readonly args?: ReadonlyArray<unknown> | undefined
  readonly updateId?: string | undefined
}

/**
 * What {@link replayUpdate} produced: the one command an accepted-update task answers,
 * `complete_update` (its `result` an Avro envelope) or `fail_update` (`UpdateNotFound`,
 * `UnknownUpdate`, `InvalidUpdate`, or the handler's failure).
 *
 * @since 0.3.0
 * @category replay
 */
export interface ReplayUpdateOutcome {
  readonly workflowType: string
  readonly updateId: string
  readonly command: Command
}

/**
 * Replays a history, then applies an update, as an accepted-update task does: the
 * `complete_update` / `fail_update` command the code answers with.
 *
 * @since 0.3.0
 * @category replay
 */
export const replayUpdate = <R = never>(
  definitions: ReplayDefinitions<R>,
  history: ReplayHistory,
  update: ReplayUpdate,
  options?: ReplayOptions
): Effect.Effect<ReplayUpdateOutcome, ReplayFailure, R> => updateOffline(definitions, history, update, options)

// ---- verification ------------------------------------------------------------------------------

export {
  type DurableWorkflowCase,
  type GoldenExpectation,
  verify,
  type VerifyOptions
} from "./internal/verify/durableWorkflow.js"
