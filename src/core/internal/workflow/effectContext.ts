import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Effectable from "effect/Effectable"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberRef from "effect/FiberRef"
import * as Option from "effect/Option"
import { SingleShotGen, YieldWrap } from "effect/Utils"
import { captureEffectLogs } from "../stepLogger.js"
import type { SleepDuration } from "./duration.js"
import type { GatherFailed, StepFailed } from "./errors.js"
import { failureOfCause } from "./failure.js"
import type { CallSpec, GatherOptions, LocalResult, LocalScope, LocalStep, Outcome, StepOptions, Turn } from "./replay.js"

/**
 * The body of a local op in an Effect workflow: an `Effect`, or a function of the {@link LocalStep}
 * (its logger and fail-fast signal) returning one.
 *
 * @since 0.1.0
 * @category models
 */
export type LocalBody<A, E, R> = Effect.Effect<A, E, R> | ((step: LocalStep) => Effect.Effect<A, E, R>)

/**
 * What an Effect workflow body gets to reach the outside world durably. Every op takes the next seq;
 * on replay an op whose result is in history returns it without doing anything, a new blocking op
 * (`step`, `sleep`, `waitForSignal`, `child`, `gatherCalls`, `all`) records its command and stops the
 * turn, a new local op (`now`, `sideEffect`, `gather`) runs once and records its result.
 *
 * Stopping the turn is an interruption of the body (so `catchAll` and `catchTag` never see it; a
 * finalizer still runs). `catchAllCause` and `Effect.exit` do see it, but the fiber that caught it
 * stops again at its next op, and a body that ends after catching it is still suspended there. A failure recorded in history fails the op with {@link StepFailed}, which
 * workflow code may catch to compensate. Non-determinism and unsupported ops are defects that fail
 * the turn even when caught.
 *
 * @since 0.1.0
 * @category models
 */
export interface WorkflowContext {
  /** The run this turn replays. */
  readonly runId: string
  /** Dispatches the step `name` with `input` to a step worker (the `call` command) and waits for it. */
  readonly step: <A = unknown>(name: string, input?: unknown, options?: StepOptions) => Effect.Effect<A, StepFailed>
  /** Epoch milliseconds, read from `Clock` once and recorded (`recordStep` `"now"`), replayed afterwards. */
  readonly now: () => Effect.Effect<number, StepFailed>
  /** Runs `body` once and records its value (`recordStep` `"sideEffect"`); replays it without running it. */
  readonly sideEffect: <A, E = never, R = never>(body: LocalBody<A, E, R>) => Effect.Effect<A, StepFailed, R>
  /** A durable timer: milliseconds, a `Duration`, or a string such as `"30s"` or `"5 minutes"`. */
  readonly sleep: (duration: SleepDuration) => Effect.Effect<void, StepFailed>
  /** Waits for the signal `name` and returns its payload. A bounded wait (`timeoutMs`) is unsupported. */
  readonly waitForSignal: <A = unknown>(
    name: string,
    options?: { readonly timeoutMs?: number | undefined }
  ) => Effect.Effect<A, StepFailed>
  /** Starts the child run `<runId>.child.<seq>` of `workflow` and waits for its output. */
  readonly child: <A = unknown>(workflow: string, input?: unknown) => Effect.Effect<A, StepFailed>
  /**
   * Runs named local bodies concurrently, each recorded as a `recordStep` of one parallel group;
   * returns their values in input order or fails with a {@link GatherFailed} naming every failed item.
   */
  readonly gather: <A = never, E = never, R = never>(
    items: ReadonlyArray<readonly [name: string, body: LocalBody<A, E, R>]>,
    options?: GatherOptions
  ) => Effect.Effect<Array<A>, GatherFailed, R>
  /** Dispatches several steps at once (one parallel group) and waits for all of them. */
  readonly gatherCalls: <A = unknown>(
    calls: ReadonlyArray<CallSpec>,
    options?: GatherOptions
  ) => Effect.Effect<Array<A>, GatherFailed>
  /** Starts one child run of `workflow` per input (one parallel group) and waits for all of them. */
  readonly all: <A = unknown>(
    workflow: string,
    inputs: ReadonlyArray<unknown>,
    options?: GatherOptions
  ) => Effect.Effect<Array<A>, GatherFailed>
  /** Unsupported in a remote workflow (no absolute-deadline timer on the wire); fails the turn. */
  readonly sleepUntil: (when: Date | number) => Effect.Effect<never>
  /** Unsupported in a remote workflow (continue-as-new is an engine lifecycle op); fails the turn. */
  readonly continueAsNew: (input?: unknown) => Effect.Effect<never>
  /** Unsupported in a remote workflow (no patch markers; versioning is pinning); fails the turn. */
  readonly patched: (id: string) => Effect.Effect<never>
  /** Unsupported in a remote workflow (no fire-and-forget child command); fails the turn. */
  readonly startChild: (workflow: string, input?: unknown) => Effect.Effect<never>
  /** Unsupported in a remote workflow (events are an engine store feature); fails the turn. */
  readonly waitForEvent: (name: string, options?: unknown) => Effect.Effect<never>
  /** Unsupported in a remote workflow (queryable values live in the engine store); fails the turn. */
  readonly setEvent: (key: string, value: unknown) => Effect.Effect<never>
  /** Unsupported in a remote workflow (updates are delivered by the engine); fails the turn. */
  readonly onUpdate: (name: string, options?: unknown) => Effect.Effect<never>
  /** Unsupported in a remote workflow (needs the engine's transactional store); fails the turn. */
  readonly transaction: (name: string, body: unknown) => Effect.Effect<never>
  /** Unsupported in a remote workflow (entities run on the engine); fails the turn. */
  readonly callEntity: (name: string, key: string, op: string, arg?: unknown) => Effect.Effect<never>
  /** Unsupported in a remote workflow (entities run on the engine); fails the turn. */
  readonly signalEntity: (name: string, key: string, op: string, arg?: unknown) => Effect.Effect<never>
  /** Unsupported in a remote workflow (async-completion tasks are engine-driven); fails the turn. */
  readonly task: (name: string, dispatch: unknown) => Effect.Effect<never>
  /** Unsupported in a remote workflow (breakpoints are engine checkpoints); fails the turn. */
  readonly breakpoint: (label?: string) => Effect.Effect<never>
  /** Unsupported in a remote workflow (webhooks are minted by the engine); fails the turn. */
  readonly webhook: () => Effect.Effect<never>
  /** Unsupported in a remote workflow (search attributes live on the engine's run record); fails the turn. */
  readonly upsertSearchAttributes: (attributes: unknown) => Effect.Effect<never>
}

/**
 * Lets the event loop run (timers and I/O: lock renewals, heartbeats, other tasks' sockets), not only
 * other fibers: `Effect.yieldNow` reschedules on the microtask queue, so a long Effect replay that only
 * used it would still hold the event loop for the whole turn. Not a `Clock` sleep, so it runs the same
 * under a `TestClock`.
 */
const yieldToEventLoop: Effect.Effect<void> = Effect.async<void>((resume) => {
  const handle = setImmediate(() => resume(Effect.void))
  return Effect.sync(() => clearImmediate(handle))
})

/**
 * The turn whose suspension a fiber took: set (to the turn's {@link Turn.stopToken}) on the fiber
 * whose op blocked or found the run cancelled. Inherited by the fibers it forks afterwards; a child's
 * value never joins back into its parent, so a race or a concurrent `Effect.all` whose child blocked
 * leaves the parent free to go on.
 */
const stoppedIn = FiberRef.unsafeMake<object | undefined>(undefined, { join: (parent) => parent })

/**
 * Whether the running fiber (or the fiber it was forked from) already took a suspension of `turn`.
 * A suspension is an interruption, which `catchAllCause` or `Effect.exit` can catch: the body then
 * runs on from a point the live run never passed. Only looked at once an op of the turn blocked or
 * was cancelled, so a replay pays nothing for it.
 */
const isStopped = (turn: Turn): boolean => {
  if (turn.stopToken === undefined) return false
  const fiber = Fiber.getCurrentFiber()
  return Option.isSome(fiber) && fiber.value.getFiberRef(stoppedIn) === turn.stopToken
}

/**
 * Whether the body's own fiber took a suspension of `turn` and still ended with a value or a
 * failure: it caught the interruption, so its result is not the run's (the turn is `continue` or
 * `cancelled`, as if the suspension had not been caught). Call it on the fiber that ran the body.
 *
 * @internal
 */
export const bodyCaughtSuspension = (turn: Turn): boolean => isStopped(turn)

const stop: Effect.Effect<never> = Effect.interrupt

/** Turns a replay outcome into the op's Effect: blocked and cancelled ops interrupt the body. */
const fromOutcome = <A, E>(turn: Turn, outcome: Outcome<A>): Effect.Effect<A, E> => {
  switch (outcome._tag) {
    case "Value":
      return turn.takeYield() ? Effect.as(yieldToEventLoop, outcome.value) : Effect.succeed(outcome.value)
    case "Failed":
      return Effect.fail(outcome.error as E)
    case "Fatal":
      return Effect.die(outcome.error)
    case "Blocked":
    case "Cancelled":
      // marks the fiber, so an op it reaches after catching this interruption stops it again
      return Effect.zipRight(FiberRef.set(stoppedIn, turn.stopToken ??= {}), stop)
    case "Closed":
      return stop
  }
}

/**
 * A ctx op's Effect. It resolves when it runs, never when it is built (built once and run twice, it
 * takes two seqs, as an `Effect.suspend` would). Under `yield*` in `Effect.gen` it resolves as the
 * generator reaches it and hands the generator its result: a replayed op's result is an `Exit`, which
 * `Effect.gen` feeds straight back into the generator instead of taking a trip through the fiber's
 * run loop, so replaying an op costs about a function call. Run any other way (`pipe`, `flatMap`,
 * `Effect.all`) it is an ordinary suspended Effect.
 */
class Op<A, E, R> extends Effectable.Class<A, E, R> {
  constructor(private readonly turn: Turn, private readonly resolve: () => Effect.Effect<A, E, R>) {
    super()
  }

  /**
   * The op's Effect. A fiber that already took a suspension of this turn (it caught the interruption)
   * is stopped again without taking a seq, recording a command or running a body: the live run never
   * went past that suspension, so nothing after it may reach the decision.
   */
  private run(): Effect.Effect<A, E, R> {
    return isStopped(this.turn) ? stop : this.resolve()
  }

  commit(): Effect.Effect<A, E, R> {
    return this.run()
  }

  override [Symbol.iterator](): Effect.EffectGenerator<Effect.Effect<A, E, R>> {
    return new SingleShotGen<YieldWrap<Effect.Effect<A, E, R>>, A>(new YieldWrap(this.run()))
  }
}

const op = <A, E = never, R = never>(turn: Turn, resolve: () => Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  new Op(turn, resolve)

const bodyOf = <A, E, R>(body: LocalBody<A, E, R>, step: LocalStep): Effect.Effect<A, E, R> =>
  Effect.suspend(() => (typeof body === "function" ? body(step) : body))

/**
 * Runs one local body and captures how it ended; `None` when it was interrupted (the turn is being
 * interrupted, or the body interrupted itself), in which case nothing is recorded.
 */
const runLocal = <A, E, R>(
  turn: Turn,
  scope: LocalScope,
  body: LocalBody<A, E, R>
): Effect.Effect<Option.Option<LocalResult>, never, R> =>
  Effect.suspend(() =>
    bodyOf(body, scope.step).pipe(
      captureEffectLogs(scope.events),
      Effect.exit,
      Effect.map((exit): Option.Option<LocalResult> => {
        if (Exit.isSuccess(exit)) return Option.some({ _tag: "Success", value: exit.value })
        if (Cause.isInterruptedOnly(exit.cause)) return Option.none()
        return Option.some(turn.localFailure(Option.getOrUndefined(failureOfCause(exit.cause))))
      })
    )
  )

const localOp = <A, E, R>(
  turn: Turn,
  name: string,
  seqAlias: boolean,
  body: LocalBody<A, E, R>
): Effect.Effect<A, StepFailed, R> =>
  op(turn, () => {
    const begin = turn.beginLocal<A>(name, seqAlias)
    if (begin._tag !== "Run") return fromOutcome<A, StepFailed>(turn, begin)
    const scope = turn.startLocal(begin.seq, begin.name, turn.now(), undefined)
    return Effect.flatMap(runLocal(turn, scope, body), (result) =>
      Option.isNone(result)
        ? Effect.interrupt
        : fromOutcome<A, StepFailed>(turn, turn.finishLocal<A>(scope, result.value)))
  })

/** Builds the Effect context of one turn over its {@link Turn}. @internal */
export const makeEffectContext = (turn: Turn): WorkflowContext => {
  const unsupported = (name: string): Effect.Effect<never> => op(turn, () => fromOutcome(turn, turn.unsupported(name)))
  return {
    runId: turn.runId,
    step: (name, input, options) => op(turn, () => fromOutcome(turn, turn.step(name, input, options))),
    now: () => localOp(turn, "now", true, Effect.sync(() => turn.now())),
    sideEffect: (body) => localOp(turn, "sideEffect", false, body),
    sleep: (duration) => op(turn, () => fromOutcome(turn, turn.sleep(duration))),
    waitForSignal: (name, options) => op(turn, () => fromOutcome(turn, turn.waitForSignal(name, options))),
    child: (workflow, input) => op(turn, () => fromOutcome(turn, turn.child(workflow, input))),
    gather: <A, E, R>(
      items: ReadonlyArray<readonly [name: string, body: LocalBody<A, E, R>]>,
      options?: GatherOptions
    ): Effect.Effect<Array<A>, GatherFailed, R> =>
      op(turn, () => {
        const begin = turn.beginGather<A>(items.map(([name]) => name))
        if (begin._tag !== "Run") return fromOutcome<Array<A>, GatherFailed>(turn, begin)
        const startedAt = turn.now()
        const abort = new AbortController()
        const scopes = begin.items.map((item) => turn.startLocal(item.seq, item.name, startedAt, begin.parallelGroup, abort))
        const failFast = options?.mode === "failFast"
        return Effect.forEach(
          scopes,
          (scope, i) =>
            Effect.tap(runLocal(turn, scope, items[i]![1]), (result) =>
              Effect.sync(() => {
                if (failFast && Option.isSome(result) && result.value._tag === "Failure") abort.abort()
              })),
          { concurrency: "unbounded" }
        ).pipe(Effect.flatMap((results) => {
          const finished: Array<LocalResult> = []
          for (const result of results) {
            if (Option.isNone(result)) return Effect.interrupt
            finished.push(result.value)
          }
          return fromOutcome<Array<A>, GatherFailed>(turn, turn.finishGather<A>(scopes, finished, begin.parallelGroup))
        }))
      }),
    gatherCalls: (calls, options) => op(turn, () => fromOutcome(turn, turn.gatherCalls(calls, options))),
    all: (workflow, inputs, options) => op(turn, () => fromOutcome(turn, turn.all(workflow, inputs, options))),
    // Written out (not spread from a generated object): the context keeps one fast shape.
    sleepUntil: () => unsupported("sleepUntil"),
    continueAsNew: () => unsupported("continueAsNew"),
    patched: () => unsupported("patched"),
    startChild: () => unsupported("startChild"),
    waitForEvent: () => unsupported("waitForEvent"),
    setEvent: () => unsupported("setEvent"),
    onUpdate: () => unsupported("onUpdate"),
    transaction: () => unsupported("transaction"),
    callEntity: () => unsupported("callEntity"),
    signalEntity: () => unsupported("signalEntity"),
    task: () => unsupported("task"),
    breakpoint: () => unsupported("breakpoint"),
    webhook: () => unsupported("webhook"),
    upsertSearchAttributes: () => unsupported("upsertSearchAttributes")
  }
}
