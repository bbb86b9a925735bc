/**
 * Coordinator-driven workflows for the nestjs-durable engine, worker side. The engine owns every bit
 * of durable state and sends one turn at a time (a `WorkflowTask` with the run's history); the worker
 * replays the workflow from the top against that history and answers with a `WorkflowDecision`: the
 * new durable ops the turn produced (`call`, `recordStep`, `sleep`, `waitSignal`, `startChild`) and
 * whether the run continues, completed, failed or was cancelled.
 *
 * Define a workflow with an Effect body ({@link make}) or an async body ({@link fromPromise}); both
 * replay identically. {@link processWorkflowTask} runs one turn; it is pure (no broker, no store) and
 * never fails. {@link replay} runs one turn offline against a recorded task and fails with a typed
 * `NondeterminismError` when the code no longer matches the history.
 *
 * @example
 * import { Effect } from "effect"
 * import { Workflow } from "effect-durable-worker"
 *
 * const pipeline = Workflow.make("pipeline", (baseId: string, ctx) =>
 *   Effect.gen(function*() {
 *     const startedAt = yield* ctx.now()
 *     const rows = yield* ctx.step("ingestion", { key: `/${baseId}/data.csv` }, { group: "pipeline" })
 *     yield* ctx.sleep("1 minute")
 *     return { rows, startedAt }
 *   }))
 *
 * @since 0.1.0
 */
import type * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import type { AsyncWorkflowContext } from "./internal/workflow/asyncContext.js"
import type { WorkflowContext } from "./internal/workflow/effectContext.js"

export type { AsyncLocalBody, AsyncWorkflowContext } from "./internal/workflow/asyncContext.js"
export type { SleepDuration } from "./internal/workflow/duration.js"
export type { LocalBody, WorkflowContext } from "./internal/workflow/effectContext.js"
export {
  GatherFailed,
  type GatherItemFailure,
  InvalidWorkflowCall,
  NondeterminismError,
  StepFailed,
  UnsupportedInRemoteWorkflow
} from "./internal/workflow/errors.js"
export { replay, type ReplayOptions } from "./internal/workflow/offline.js"
export { processWorkflowTask, type ProcessWorkflowTaskOptions } from "./internal/workflow/process.js"
export type { CallSpec, GatherOptions, LocalStep, StepOptions } from "./internal/workflow/replay.js"
export {
  RUN_HEARTBEAT_INTERVAL,
  type RunHeartbeat,
  runHeartbeat,
  runHeartbeatChannel,
  type RunHeartbeatOptions,
  withRunHeartbeat
} from "./internal/workflow/runHeartbeat.js"

/**
 * @since 0.1.0
 * @category type ids
 */
export const TypeId: unique symbol = Symbol.for("effect-durable-worker/Workflow")

/**
 * @since 0.1.0
 * @category type ids
 */
export type TypeId = typeof TypeId

/**
 * How a workflow's body is run: an Effect body gets `(input, ctx)`, an async body `(ctx, input)`.
 *
 * @since 0.1.0
 * @category models
 */
export type WorkflowBody<R> =
  | {
    readonly _tag: "Effect"
    readonly run: (input: any, ctx: WorkflowContext) => Effect.Effect<unknown, unknown, R>
  }
  | {
    readonly _tag: "Promise"
    readonly run: (ctx: AsyncWorkflowContext, input: any) => unknown
  }

/**
 * A workflow definition: its registered name, the version it announces (metadata for the worker
 * descriptor; replay ignores it, as the engine pins runs to the version they started on), how its
 * input is decoded, and its body. `I` and `O` are the input and output types.
 *
 * @since 0.1.0
 * @category models
 */
export interface Workflow<I = any, O = unknown, R = never> {
  readonly [TypeId]: {
    readonly _I: (_: I) => void
    readonly _O: () => O
  }
  readonly name: string
  readonly version: string | undefined
  readonly decodeInput: (input: unknown) => Either.Either<I, ParseResult.ParseError>
  readonly body: WorkflowBody<R>
}

/**
 * Any workflow definition, whatever its input, output and requirements.
 *
 * @since 0.3.0
 * @category models
 */
export type Any = Workflow<any, any, any>

/**
 * The workflows a worker runs, looked up by name: a list (the first definition of a name wins) or a
 * map from name to definition.
 *
 * @since 0.1.0
 * @category models
 */
export type WorkflowRegistry<R = never> =
  | ReadonlyArray<Workflow<any, any, R>>
  | ReadonlyMap<string, Workflow<any, any, R>>

/**
 * Options of a workflow definition.
 *
 * @since 0.1.0
 * @category models
 */
export interface WorkflowOptions<I> {
  /** Announced in the worker descriptor's registrations; not used for replay. */
  readonly version?: string | undefined
  /** Decodes the run input before the body sees it; a mismatch fails the run with the schema's explanation. */
  readonly input?: Schema.Schema<I, any, never> | undefined
}

const variance: Workflow<any, any, any>[TypeId] = { _I: (_: unknown) => {}, _O: () => undefined }

const inputDecoder = <I>(schema: Schema.Schema<I, any, never> | undefined) =>
  schema === undefined
    ? (input: unknown) => Either.right(input as I)
    : Schema.decodeUnknownEither(schema)

/**
 * Defines a workflow with an Effect body taking `(input, ctx)`. The body must reach the outside world
 * only through `ctx` and must not depend on anything else that can change between turns (the wall
 * clock, randomness, I/O): wrap such reads in `ctx.sideEffect`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = <I, O, E = never, R = never>(
  name: string,
  body: (input: I, ctx: WorkflowContext) => Effect.Effect<O, E, R>,
  options?: WorkflowOptions<I>
): Workflow<I, O, R> => ({
  [TypeId]: variance,
  name,
  version: options?.version,
  decodeInput: inputDecoder(options?.input),
  body: { _tag: "Effect", run: body }
})

/**
 * Defines a workflow with an async body taking `(ctx, input)`, the argument order of the promise
 * facade's `worker.workflow(name, async (ctx, input) => ...)`. It replays exactly like the Effect
 * form. A blocking op not yet in history leaves the body parked on its `await`; the turn is decided
 * once the body is provably blocked (see `processWorkflowTask`): the body must therefore only await
 * ctx ops (and promise chains built on them); put any other async work in `ctx.sideEffect`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const fromPromise = <I = unknown, O = unknown>(
  name: string,
  body: (ctx: AsyncWorkflowContext, input: I) => O | PromiseLike<O>,
  options?: WorkflowOptions<I>
): Workflow<I, Awaited<O>> => ({
  [TypeId]: variance,
  name,
  version: options?.version,
  decodeInput: inputDecoder(options?.input),
  body: { _tag: "Promise", run: body }
})

/**
 * Whether a value is a workflow definition.
 *
 * @since 0.1.0
 * @category guards
 */
export const isWorkflow = (u: unknown): u is Workflow<unknown, unknown, unknown> =>
  typeof u === "object" && u !== null && TypeId in u

export { verify, type VerifyOptions, type WorkflowCase } from "./internal/verify/workflow.js"
