/**
 * Steps: the handlers a worker serves, and `processStep`, the pure, broker-free function that turns
 * one step task into one step result.
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
import { Clock as ClockTag } from "effect/Clock"
import type * as Clock from "effect/Clock"
import * as EffectContext from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Runtime from "effect/Runtime"
import type * as RuntimeFlags from "effect/RuntimeFlags"
import * as Schema from "effect/Schema"
import { unencodable, unserializableError } from "../wire/internal/json.js"
import type { StepError, StepEvent, StepResult, StepTask } from "../wire/StepProtocol.js"
import { FatalError } from "./FatalError.js"
import { taskSpanWanted } from "./internal/fiberRefs.js"
import { type Abortable, abortReason, abortSignal, runHandler, type StepAborted } from "./internal/interruption.js"
import { captureTaskLogs, encodableEvents, makeStepLogger, type StepLogger } from "./internal/stepLogger.js"
import { toStepError } from "./internal/stepError.js"
import { externalParent } from "./internal/traceparent.js"
import { describeIssues } from "../wire/internal/issues.js"

export { FatalError } from "./FatalError.js"
export { StepAborted } from "./internal/interruption.js"
export type { StepLogger } from "./internal/stepLogger.js"

/**
 * What a step handler knows about the task it runs.
 *
 * @since 0.1.0
 * @category models
 */
export interface StepContext {
  readonly runId: string
  readonly seq: number
  /** `${runId}:${seq}`: stable across retries and redeliveries; dedupe side effects on it. */
  readonly stepId: string
  /** 1-based; goes up each time the engine re-dispatches the step. */
  readonly attempt: number
  readonly name: string
  /** The routing token the task arrived on (`name` sanitised, plus `@tenant` when partitioned). */
  readonly group: string
  readonly traceparent: string | undefined
  /** The engine's opaque context carrier (tenant/user/correlation ids), passed through untouched. */
  readonly context: Readonly<Record<string, unknown>> | undefined
  /** Records step events (returned to the engine with the result) and logs them. */
  readonly log: StepLogger
  /**
   * Aborted when the step is interrupted, with a {@link StepAborted} reason (an `AbortError` whose
   * `why` is `cancelled`, `shutdown`, `forced` or `interrupted`).
   */
  readonly signal: AbortSignal
}

/**
 * A registered step: a name and the handler that runs it. Build one with {@link make} (Effect
 * handlers) or {@link fromPromise} (async functions).
 *
 * @since 0.1.0
 * @category models
 */
export interface Step<out R = never> {
  readonly name: string
  /** Runs the handler on a raw input; input/output schemas, when given, are applied here. */
  readonly run: (input: unknown, ctx: StepContext) => Effect.Effect<unknown, unknown, R>
  /**
   * Whether the handler runs Effect code, whose `Effect.log*` lines then carry the task's log
   * annotations and are recorded as step events, and which the worker must watch for interruption
   * to fire `ctx.signal`. `false` for {@link fromPromise} handlers, which log through `ctx.log` and
   * fire `ctx.signal` themselves when interrupted while their promise is pending; absent counts as
   * `true`.
   */
  readonly effectful?: boolean
}

/**
 * Options of a step: optional `Schema`s for its input (decoded before the handler runs) and output
 * (encoded before it goes on the wire). A value that does not fit fails the step as non-retryable.
 *
 * @since 0.1.0
 * @category models
 */
export interface StepOptions<I, II, O, OI, R> {
  readonly input?: Schema.Schema<I, II, R>
  readonly output?: Schema.Schema<O, OI, R>
}

const withSchemas = <I, O, E, R, RS>(
  name: string,
  handler: (input: I, ctx: StepContext) => Effect.Effect<O, E, R>,
  options: StepOptions<I, unknown, O, unknown, RS> | undefined
): Step<R | RS>["run"] => {
  const decode = options?.input ? Schema.decodeUnknown(options.input) : undefined
  const encode = options?.output ? Schema.encode(options.output) : undefined
  // without schemas the handler runs as it is: no effect added per task
  const decoded: Step<R | RS>["run"] = decode === undefined
    ? handler as Step<R | RS>["run"]
    : (input, ctx) =>
      Effect.flatMap(
        Effect.mapError(decode(input), (e) =>
          schemaFailure(`invalid input for step "${name}": ${describeIssues(e)}`, "invalid_input")),
        (value) => handler(value, ctx)
      )
  return encode === undefined ? decoded : (input, ctx) =>
    Effect.flatMap(decoded(input, ctx), (out) =>
      Effect.mapError(encode(out as O), (e) =>
        schemaFailure(`invalid output from step "${name}": ${describeIssues(e)}`, "invalid_output")))
}

/**
 * The failure of a value its schema refused. Its stack would be this library's and Effect's frames,
 * nothing of the handler's: left out, so the failure the engine stores is the message and the code.
 */
const schemaFailure = (message: string, code: string): FatalError => {
  const error = new FatalError(message, code)
  delete (error as { stack?: string }).stack
  return error
}

/**
 * A step whose handler is an Effect. Interruption (shutdown deadline, cancelled run) interrupts the
 * handler; a failure with {@link FatalError} is final, any other failure is retried by the engine.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = <I = unknown, O = unknown, E = never, R = never, RS = never>(
  name: string,
  handler: (input: I, ctx: StepContext) => Effect.Effect<O, E, R>,
  options?: StepOptions<I, any, O, any, RS>
): Step<R | RS> => ({ name, run: withSchemas(name, handler, options) })

/**
 * A step whose handler is an async function. On interruption `ctx.signal` is aborted, saying why.
 * A stop's interruption (the shutdown deadline, `forceStop`) then ends when the promise settles, its
 * result ignored: a handler that ignores its signal is still running, so the stop waits
 * `interruptTimeout` for it and then fails naming it (`ShutdownTimeoutError`), and its task is not
 * given back to the broker meanwhile. A cancel, or a timeout of the application's own, ends at once.
 *
 * @since 0.1.0
 * @category constructors
 */
export const fromPromise = <I = unknown, O = unknown, RS = never>(
  name: string,
  handler: (input: I, ctx: StepContext) => Promise<O> | O,
  options?: StepOptions<I, any, O, any, RS>
): Step<RS> => {
  const run = (input: I, ctx: StepContext) => runHandler(() => handler(input, ctx), ctx as Abortable)
  // no Effect code of the user's runs inside: no log context to set per task
  return { ...make(name, run, options), effectful: false }
}

/**
 * Steps by name, as the worker looks them up (`task.name`).
 *
 * @since 0.1.0
 * @category models
 */
export type StepRegistry<R = never> = ReadonlyMap<string, Step<R>>

/**
 * Two handlers were registered under one name: two steps (or activities), two workflows or two
 * durable workflows. Each name must have exactly one handler, or the worker could not tell which
 * one a task means.
 *
 * The name is `registeredName`, not `name`: an error's `name` is its class's (`DuplicateStepError`),
 * which loggers and `String(error)` print before the message.
 *
 * @since 0.1.0
 * @category errors
 */
export class DuplicateStepError extends Schema.TaggedError<DuplicateStepError>()("DuplicateStepError", {
  /** What was registered twice. */
  kind: Schema.Literal("step", "activity", "workflow", "durable workflow"),
  /** The name registered twice. */
  registeredName: Schema.String
}) {
  override get message(): string {
    const handler = this.kind.endsWith("workflow") ? "body" : "handler"
    return `${this.kind} "${this.registeredName}" is registered twice; each ${this.kind} name must have exactly one ${handler}`
  }
}

/**
 * Builds a registry by name (steps, and likewise workflow definitions), refusing duplicate names.
 *
 * @since 0.1.0
 * @category constructors
 */
export const registry = <D extends { readonly name: string }>(
  definitions: Iterable<D>,
  kind: DuplicateStepError["kind"] = "step"
): Effect.Effect<ReadonlyMap<string, D>, DuplicateStepError> =>
  Effect.suspend(() => {
    const map = new Map<string, D>()
    for (const definition of definitions) {
      if (map.has(definition.name)) return Effect.fail(new DuplicateStepError({ kind, registeredName: definition.name }))
      map.set(definition.name, definition)
    }
    return Effect.succeed(map)
  })

/**
 * The handler's context; the abort controller and the logger are made only when used, and so is the
 * runtime the logger writes through (taking a fiber's refs copies them, about 6 µs per task).
 */
class Context implements StepContext {
  readonly runId: string
  readonly seq: number
  readonly stepId: string
  readonly attempt: number
  readonly name: string
  readonly group: string
  readonly traceparent: string | undefined
  readonly context: Readonly<Record<string, unknown>> | undefined
  #controller: AbortController | undefined
  #log: StepLogger | undefined

  constructor(
    task: StepTask,
    readonly events: Array<StepEvent>,
    readonly clock: Clock.Clock,
    readonly fiber: Fiber.RuntimeFiber<unknown, unknown>,
    readonly runtimeFlags: RuntimeFlags.RuntimeFlags
  ) {
    this.runId = task.runId
    this.seq = task.seq
    this.stepId = task.stepId
    this.attempt = task.attempt
    this.name = task.name
    this.group = task.group
    this.traceparent = task.traceparent
    this.context = task.context
  }

  get signal(): AbortSignal {
    this.#controller ??= new AbortController()
    return this.#controller.signal
  }

  get log(): StepLogger {
    this.#log ??= makeStepLogger(this.events, this.clock, Runtime.make({
      context: this.fiber.currentContext,
      runtimeFlags: this.runtimeFlags,
      fiberRefs: this.fiber.getFiberRefs()
    }), {
      runId: this.runId,
      stepId: this.stepId,
      step: this.name,
      attempt: this.attempt
    })
    return this.#log
  }

  [abortSignal](reason: StepAborted): void {
    this.#controller?.abort(reason)
  }
}

interface ResultBase {
  readonly runId: string
  readonly seq: number
  readonly stepId: string
  readonly startedAt: number
}

const completed = (base: ResultBase, output: unknown, events: ReadonlyArray<StepEvent>): StepResult => {
  const result: { -readonly [K in keyof StepResult]: StepResult[K] } = {
    runId: base.runId,
    seq: base.seq,
    stepId: base.stepId,
    startedAt: base.startedAt,
    status: "completed"
  }
  if (output !== undefined) result.output = output
  if (events.length > 0) result.events = encodableEvents(events)
  return result
}

/** The cause rendered, or a note when rendering it throws (a hostile error's getters). */
const prettyOrElse = (cause: Cause.Cause<unknown>): string => {
  try {
    return Cause.pretty(cause)
  } catch {
    return "the step's failure cannot be rendered: reading it throws"
  }
}

const failed = (base: ResultBase, error: StepError, events: ReadonlyArray<StepEvent>): StepResult => ({
  ...base,
  status: "failed",
  error,
  ...(events.length > 0 ? { events: encodableEvents(events) } : {})
})

/**
 * Runs one step task and builds its result. Pure: no broker, time only from Effect's `Clock`.
 *
 * - no handler for `task.name` → failed, `{ message: "no handler for <name>", retryable: false }`;
 * - a {@link FatalError} → failed, `retryable: false` with its `code`;
 * - any other failure, thrown value or defect → failed and retryable; a string `code` and a boolean
 *   `retryable` on the thrown value are carried through;
 * - `startedAt` is the pickup time; events the handler logged are returned (omitted when none).
 *
 * The task runs in a span that continues its W3C `traceparent` (without a `traceparent` and with
 * Effect's built-in tracer, whose spans go nowhere, no span is made), with the run and step ids as log
 * annotations. Interrupting the returned effect interrupts the handler; no result is produced then.
 *
 * @since 0.1.0
 * @category processing
 */
export const processStep = <R>(steps: StepRegistry<R>, task: StepTask): Effect.Effect<StepResult, never, R> =>
  // one look at the fiber gives the clock, the tracer and what the handler's context holds
  Effect.withFiberRuntime((fiber, status) => {
    const clock = EffectContext.get(fiber.currentDefaultServices, ClockTag)
    const annotations = () => ({ runId: task.runId, stepId: task.stepId, step: task.name, attempt: task.attempt })
    const step = steps.get(task.name)
    const events: Array<StepEvent> = []
    const startedAt = clock.unsafeCurrentTimeMillis()
    const base: ResultBase = { runId: task.runId, seq: task.seq, stepId: task.stepId, startedAt }
    const traced = taskSpanWanted(fiber.currentTracer, task.traceparent !== undefined)
    /** The result of the handler's exit (`undefined`: there is no handler). */
    const settle = (exit: Exit.Exit<unknown, unknown> | undefined): Effect.Effect<StepResult> => {
      if (exit === undefined) {
        return Effect.as(
          Effect.annotateLogs(Effect.logWarning(`no handler for step "${task.name}"`), annotations()),
          failed(base, { message: `no handler for ${task.name}`, retryable: false }, [])
        )
      }
      if (Exit.isSuccess(exit)) {
        const bad = unencodable(exit.value)
        if (bad === undefined) return Effect.succeed(completed(base, exit.value, events))
        const error = unserializableError(`the output of step "${task.name}"`, bad)
        return Effect.as(Effect.annotateLogs(Effect.logError(error.message), annotations()), failed(base, error, events))
      }
      const failure = Option.getOrElse(
        Cause.failureOption(exit.cause),
        () => Option.getOrElse(Cause.dieOption(exit.cause), () => new Error("step handler was interrupted"))
      )
      const error = toStepError(failure)
      return Effect.logWarning(`step failed: ${error.message}`).pipe(
        // whether the engine retries it, and its code: what an alert on final failures filters on
        Effect.annotateLogs(error.code === undefined ? { retryable: error.retryable !== false } : {
          retryable: error.retryable !== false,
          code: error.code
        }),
        // rendered only when asked for, and a cause whose error throws when read is not the task's problem
        Effect.zipRight(Effect.suspend(() => Effect.logDebug(prettyOrElse(exit.cause)))),
        Effect.annotateLogs(annotations()),
        Effect.as(failed(base, error, events))
      )
    }
    // the handler runs with the task's log annotations and its event sink set (one update of the
    // fiber's refs); the worker's own logs about the outcome come after, annotated on their own
    let handled: Effect.Effect<Exit.Exit<unknown, unknown> | undefined, never, R>
    if (step === undefined) {
      handled = captureTaskLogs(annotations(), events)(Effect.succeed(undefined))
    } else {
      const ctx = new Context(task, events, clock, fiber, status.runtimeFlags)
      let running: Effect.Effect<unknown, unknown, R>
      try {
        running = step.run(task.input, ctx)
      } catch (defect) {
        // a handler that throws instead of returning an effect
        running = Effect.die(defect)
      }
      if (step.effectful === false) {
        // no Effect code of the user's inside: no log context to set; with no span either, the
        // handler's exit is settled in one step
        if (!traced) {
          return Effect.matchCauseEffect(running, {
            onFailure: (cause) => settle(Exit.failCause(cause)),
            onSuccess: (value) => settle(Exit.succeed(value))
          })
        }
        handled = Effect.exit(running)
      } else {
        handled = captureTaskLogs(annotations(), events)(
          Effect.exit(Effect.onInterrupt(running, (interruptors) => Effect.sync(() => ctx[abortSignal](abortReason(interruptors)))))
        )
      }
    }
    if (!traced) return Effect.flatMap(handled, settle)
    // the span sees the handler's failure (a FatalError included), so it ends with status error
    return handled.pipe(
      Effect.flatMap((exit) => exit !== undefined && Exit.isFailure(exit) ? Effect.failCause(exit.cause) : Effect.succeed(exit)),
      Effect.withSpan(`durable.step ${task.name}`, {
        kind: "consumer",
        captureStackTrace: false,
        attributes: { "durable.run_id": task.runId, "durable.step_id": task.stepId, "durable.attempt": task.attempt },
        ...externalParent(task.traceparent)
      }),
      Effect.catchAllCause((cause) => Effect.succeed(Exit.failCause(cause))),
      Effect.flatMap(settle)
    )
  })
