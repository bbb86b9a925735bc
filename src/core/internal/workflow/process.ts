import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import type * as Runtime from "effect/Runtime"
import type { WorkflowDecision, WorkflowStepEvent, WorkflowTask } from "../../../wire/WorkflowProtocol.js"
import type { Workflow, WorkflowRegistry } from "../../Workflow.js"
import { taskSpanWanted } from "../fiberRefs.js"
import { externalParent } from "../traceparent.js"
import { runAsyncTurn } from "./asyncContext.js"
import { runEffectBody } from "./effectContext.js"
import { failureOfCause } from "./failure.js"
import type { FatalReplayError } from "./errors.js"
import { type BodyOutcome, Turn } from "./replay.js"
import { describeIssues } from "../../../wire/internal/issues.js"

/**
 * Options of {@link processWorkflowTask}. Everything impure the turn may touch comes in here.
 *
 * @since 0.1.0
 * @category models
 */
export interface ProcessWorkflowTaskOptions {
  /**
   * The partition a `call` without an explicit `group` is sent with (the worker's partition). The
   * engine routes a call to `tenantGroup(sanitizeQueueToken(name), group)`; `"default"` (the default)
   * and `""` both mean the bare step queue.
   */
  readonly partition?: string | undefined
  /** Checked at every op boundary; `true` ends the turn with a `cancelled` decision. */
  readonly isCancelled?: ((runId: string) => boolean) | undefined
  /**
   * Receives each local step's lifecycle while the turn runs (best-effort: a throwing sink is
   * ignored). It must not block; hand the event off, e.g. with `Queue.unsafeOffer`.
   */
  readonly onStepEvent?: ((event: WorkflowStepEvent) => void) | undefined
  /**
   * Lets the event loop run (a macrotask, for Effect and async bodies alike) once every this many ops
   * resolved in the turn (replayed from history or run locally), so a long turn does not starve
   * heartbeats, lock renewals and other tasks. Yielding never changes the decision. Default 500; `0`
   * disables yielding altogether (this bound and `yieldAfterMs`).
   */
  readonly yieldEvery?: number | undefined
  /**
   * Also yields once the turn has held the event loop this long (milliseconds, measured with
   * `performance.now()`, which only schedules the yield and never reaches the decision), so workflow
   * code that computes between ops cannot stretch a turn's slices past a lock renewal. Default 10.
   */
  readonly yieldAfterMs?: number | undefined
}

const DEFAULT_YIELD_EVERY = 500
const DEFAULT_YIELD_AFTER_MS = 10

const findWorkflow = <R>(registry: WorkflowRegistry<R>, name: string): Workflow<any, any, R> | undefined => {
  if ("get" in registry && typeof registry.get === "function") return (registry as ReadonlyMap<string, Workflow<any, any, R>>).get(name)
  for (const workflow of registry as ReadonlyArray<Workflow<any, any, R>>) {
    if (workflow.name === name) return workflow
  }
  return undefined
}

const registeredNames = <R>(registry: WorkflowRegistry<R>): Array<string> =>
  "get" in registry && typeof registry.get === "function"
    ? [...(registry as ReadonlyMap<string, Workflow<any, any, R>>).keys()]
    : (registry as ReadonlyArray<Workflow<any, any, R>>).map((workflow) => workflow.name)

const failedTurn = (task: WorkflowTask, error: { readonly message: string; readonly code?: string }): WorkflowDecision => ({
  taskId: task.taskId,
  runId: task.runId,
  status: "failed",
  commands: [],
  error
})

const STOPPED: BodyOutcome = { _tag: "Stopped" }

const outcomeOfExit = (exit: Exit.Exit<unknown, unknown>): BodyOutcome => {
  if (Exit.isSuccess(exit)) return { _tag: "Completed", value: exit.value }
  if (Cause.isInterruptedOnly(exit.cause)) return { _tag: "Stopped" }
  return { _tag: "Failed", failure: Option.getOrUndefined(failureOfCause(exit.cause)) }
}

/** A turn's decision and the error that poisoned it, if any (the offline replayer needs the latter typed). */
interface TurnResult {
  readonly decision: WorkflowDecision
  readonly fatal: FatalReplayError | undefined
  /** The turn, when the body ran (not for an unknown workflow or a refused input). */
  readonly turn: Turn | undefined
}

const failedResult = (task: WorkflowTask, error: { readonly message: string; readonly code?: string }): TurnResult => ({
  decision: failedTurn(task, error),
  fatal: undefined,
  turn: undefined
})

/** One turn of `registry` over `task`; see {@link processWorkflowTask}. @internal */
export const runWorkflowTurn = <R = never>(
  registry: WorkflowRegistry<R>,
  task: WorkflowTask,
  options?: ProcessWorkflowTaskOptions
): Effect.Effect<TurnResult, never, R> =>
  // Plain combinators rather than Effect.gen, and as few as can be: this wrapper is a fixed cost of
  // every turn, as large as replaying dozens of ops.
  Effect.flatMap(Effect.runtime<never>(), (runtime) => {
    const workflow = findWorkflow(registry, task.workflow)
    if (workflow === undefined) {
      const names = registeredNames(registry)
      return Effect.succeed(failedResult(task, {
        message: `no workflow registered for ${JSON.stringify(task.workflow)}` +
          (names.length === 0 ? " (this worker registers no workflows)" : ` (this worker runs: ${names.join(", ")})`),
        code: "no_workflow"
      }))
    }
    const input = workflow.decodeInput(task.input)
    if (Either.isLeft(input)) {
      return Effect.succeed(failedResult(task, {
        message: `workflow ${JSON.stringify(task.workflow)}: the run input does not match the workflow's input schema: ` +
          describeIssues(input.left)
      }))
    }
    const turn = new Turn(task, {
      partition: options?.partition ?? "default",
      isCancelled: options?.isCancelled,
      onStepEvent: options?.onStepEvent,
      yieldEvery: options?.yieldEvery ?? DEFAULT_YIELD_EVERY,
      yieldAfterMs: options?.yieldAfterMs ?? DEFAULT_YIELD_AFTER_MS,
      runtime
    })
    const body = workflow.body
    const decided = (outcome: BodyOutcome | undefined): TurnResult => ({
      decision: turn.decide(outcome ?? { _tag: "Stopped" }),
      fatal: turn.fatal,
      turn
    })
    if (body._tag === "Effect") {
      // `undefined`: the body is parked on an op that is not in history (see `runEffectBody`)
      return Effect.map(runEffectBody(turn, runtime as Runtime.Runtime<R>, (ctx) => body.run(input.right, ctx)), (exit) =>
        decided(exit === undefined ? STOPPED : outcomeOfExit(exit)))
    }
    return Effect.async<TurnResult>((resume) => {
      const abort = runAsyncTurn(turn, body.run, input.right, (outcome) => {
        let result: TurnResult
        try {
          result = decided(outcome)
        } catch (defect) {
          return resume(Effect.die(defect))
        }
        resume(Effect.succeed(result))
      })
      // A canceler rather than an AbortSignal (an AbortController per turn costs more than a short
      // replay). An interrupted turn is closed, so ops the abandoned body still reaches do nothing.
      return Effect.sync(() => {
        abort()
        turn.close()
      })
    })
  })

/**
 * Replays one workflow turn and returns its decision. Pure: no broker, no store; the only time it
 * reads is the `Clock` (for `now` and local step windows). It never fails: an unknown workflow, an
 * input that does not match the workflow's schema, a failing or throwing body, non-determinism and
 * unsupported ops all become `failed` decisions. Interrupting it abandons the turn (no decision).
 *
 * How a turn ends:
 * - Effect body: a blocking op that is not in history records its command and never resumes, so
 *   the fiber that reached it (and whatever waits on that fiber) stays there; once the body's fibers
 *   are all parked with an op blocked, the turn is `continue` (or `cancelled`) and the body is
 *   interrupted. A body that interrupts itself with an op blocked is `continue` too.
 * - Async body: that op returns a promise that never settles. The turn is decided once the body is
 *   provably parked: a macrotask barrier (`setImmediate`) has drained every microtask it queued, no
 *   ctx-owned work (a local op's body, a deferred replay) is in flight, and an op is blocked (or the
 *   run was cancelled, or a fatal error was raised). Until then the driver sleeps on the body's
 *   promise and on a change signal raised by every op. The rule this imposes: an async body may only
 *   await ctx ops and promise chains built on them; anything else it awaits (timers, I/O) is not
 *   tracked, so put it in `ctx.sideEffect`.
 *
 * Cost is linear in history length (history is indexed by seq once). Every `yieldEvery` resolved ops,
 * or sooner once it has run `yieldAfterMs`, the turn yields a macrotask (for Effect and async bodies
 * alike) so heartbeats, lock renewals and other tasks keep running during long turns; yielding only
 * delays, so the decision is unchanged.
 *
 * The turn runs in a span `durable.workflow <name>` (attributes `durable.run_id`, `durable.task_id`,
 * `durable.attempt` when sent) continuing the task's W3C `traceparent`; it ends with status error
 * when the decision is `failed`. Without a `traceparent` and with Effect's built-in tracer, whose
 * spans go nowhere, no span is made.
 *
 * @since 0.1.0
 * @category processing
 */
export const processWorkflowTask = <R = never>(
  registry: WorkflowRegistry<R>,
  task: WorkflowTask,
  options?: ProcessWorkflowTaskOptions
): Effect.Effect<WorkflowDecision, never, R> =>
  Effect.tracerWith((tracer) => {
    const run = runWorkflowTurn(registry, task, options)
    // without a span to make, the turn costs what it did before spans (replay is benchmarked)
    if (!taskSpanWanted(tracer, task.traceparent !== undefined)) return Effect.map(run, (result) => result.decision)
    return Effect.catchAll(
      Effect.withSpan(
        // a failed decision fails the span's effect, so the span ends with status error and the
        // error recorded; it is the turn's decision again right after
        Effect.flatMap(run, (result) =>
          result.decision.status === "failed" ? Effect.fail(new FailedTurn(result.decision)) : Effect.succeed(result.decision)),
        `durable.workflow ${task.workflow}`,
        {
          kind: "consumer",
          captureStackTrace: false,
          attributes: {
            "durable.run_id": task.runId,
            "durable.task_id": task.taskId,
            ...(task.attempt !== undefined ? { "durable.attempt": task.attempt } : {})
          },
          ...externalParent(task.traceparent)
        }
      ),
      (failed) => Effect.succeed(failed.decision)
    )
  })

/** A failed decision carried through the turn's span as its error (the span's recorded exception). */
class FailedTurn extends Error {
  constructor(readonly decision: WorkflowDecision) {
    super(decision.error?.message ?? "the workflow turn failed")
    this.name = decision.error?.code !== undefined ? `FailedTurn(${decision.error.code})` : "FailedTurn"
  }
}
