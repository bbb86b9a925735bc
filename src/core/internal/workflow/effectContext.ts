import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Effectable from "effect/Effectable"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberId from "effect/FiberId"
import * as FiberRef from "effect/FiberRef"
import * as FiberRefs from "effect/FiberRefs"
import * as Option from "effect/Option"
import * as Runtime from "effect/Runtime"
import * as Scheduler from "effect/Scheduler"
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
 * (`step`, `sleep`, `waitForSignal`, `child`, `gatherCalls`, `all`) records its command and waits there
 * for the rest of the turn, a new local op (`now`, `sideEffect`, `gather`) runs once and records its result.
 *
 * A blocked op never resumes in this turn: the fiber that reached it waits there, as does whatever
 * waits on that fiber (a concurrent `Effect.all` or `forEach`, a race whose branches all blocked),
 * so no handler (`catchAll`, `catchAllCause`, `Effect.exit`) sees a suspension. A race whose other
 * branch resolved from history goes on with that winner. Once every fiber of the body waits, the turn
 * is decided (`continue`, or `cancelled`) and the body is interrupted (its finalizers run; an op they
 * reach does nothing). A failure recorded in history fails the op with {@link StepFailed}, which
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
 * What the driver of an Effect body watches (see {@link runEffectBody}): the body's fibers run their
 * tasks through it, so it knows when none of them can run any more, and how much ctx-owned work (a
 * local op's body, a deferred replay) is still on its way. It is the `Scheduler` of every fiber of the
 * body: each task goes on to the scheduler the turn started with, counted while it waits.
 */
class FiberMonitor implements Scheduler.Scheduler {
  /** Tasks of the body's fibers scheduled and not yet run. */
  pending = 0
  /** Ctx-owned work on its way: local bodies running, replayed results held back by a yield. */
  inFlight = 0
  /** The body's fiber, once started. */
  fiber: Fiber.RuntimeFiber<unknown, unknown> | undefined = undefined
  /** Whether the body was found parked (the turn is then closed and the body interrupted). */
  parked = false
  /** The driver's wake-up once the body is parked, while the driver waits. */
  onParked: (() => void) | undefined = undefined
  /**
   * The body's fibers waiting at a blocked op (see {@link FiberMonitor.suspended}), once one blocked.
   * Interrupted with the body: the fiber that waits on them may be in an uninterruptible region (an
   * `acquireRelease`'s acquire over a concurrent `Effect.all`), where the body's interruption would
   * never reach them, and the body would never end.
   */
  waiting: Set<Fiber.RuntimeFiber<unknown, unknown>> | undefined = undefined
  private blocked: Effect.Effect<never> | undefined = undefined

  constructor(readonly turn: Turn, private readonly scheduler: Scheduler.Scheduler) {}

  /**
   * A blocked op's Effect: it never resumes this turn. The fiber that reached it waits there like the
   * live run would, so no handler (`catchAllCause`, `Effect.exit`, a race, a concurrent `Effect.all`)
   * can run on from a point the live run never passed; the driver ends the turn once the body is
   * parked (see {@link runEffectBody}). Interruptible even inside an uninterruptible region: a race
   * whose other branch won interrupts it, and so does the driver (see {@link interruptBody}).
   */
  get suspended(): Effect.Effect<never> {
    return this.blocked ??= suspendedIn(this.waiting ??= new Set())
  }

  /**
   * Interrupts the body once its turn is closed: its fiber, and every fiber of it waiting at a
   * blocked op, which the body's interruption does not reach from inside an uninterruptible region.
   */
  interruptBody(): void {
    const body = this.fiber
    body?.unsafeInterruptAsFork(FiberId.none)
    if (this.waiting === undefined) return
    for (const fiber of this.waiting) if (fiber !== body) fiber.unsafeInterruptAsFork(FiberId.none)
  }

  /**
   * Lets the event loop run (timers and I/O: lock renewals, heartbeats, other tasks' sockets), not
   * only other fibers: `Effect.yieldNow` reschedules on the microtask queue, so a long Effect replay
   * that only used it would still hold the event loop for the whole turn. Not a `Clock` sleep, so it
   * runs the same under a `TestClock`. In flight while it waits.
   */
  readonly yieldToEventLoop: Effect.Effect<void> = Effect.async<void>((resume) => {
    let waiting = true
    this.inFlight++
    const handle = setImmediate(() => {
      waiting = false
      this.inFlight--
      resume(Effect.void)
    })
    return Effect.sync(() => {
      if (!waiting) return
      waiting = false
      clearImmediate(handle)
      this.inFlight--
    })
  })

  scheduleTask(task: Scheduler.Task, priority: number, fiber?: Fiber.RuntimeFiber<unknown, unknown>): void {
    this.pending++
    this.scheduler.scheduleTask(() => {
      this.pending--
      task()
      if (this.pending === 0) this.check()
    }, priority, fiber)
  }

  shouldYield(fiber: Fiber.RuntimeFiber<unknown, unknown>): number | false {
    return this.scheduler.shouldYield(fiber)
  }

  /**
   * Run once no fiber of the body has a task waiting (the last one just ran, or the body's first
   * stretch returned): the body is parked when, in addition, no ctx-owned work is in flight and an op
   * blocked (or the run was found cancelled, or a fatal error was raised). Nothing the body could do
   * from there on is the live run's: the turn is closed at once (an op the body still reaches does
   * nothing) and the body is interrupted, its unwinding left to run after the decision.
   */
  check(): void {
    const fiber = this.fiber
    if (fiber === undefined || this.parked || this.inFlight > 0) return
    const turn = this.turn
    if (turn.blocked === 0 && !turn.cancelled && turn.fatal === undefined) return
    if (fiber.unsafePoll() !== null) return
    this.parked = true
    turn.close()
    this.interruptBody()
    const onParked = this.onParked
    this.onParked = undefined
    onParked?.()
  }
}

/**
 * What a blocked op waits on: nothing resumes it. One parameter: a register of any other arity is
 * handed an AbortSignal, whose abort on every interruption (a DOMException with its stack) would cost
 * more than the whole turn; and no canceler, whose `onInterrupt` would too.
 */
const neverResumed: Effect.Effect<never> = Effect.async<never>((_resume) => {})

/**
 * {@link FiberMonitor.suspended}: each fiber waiting there is added to `waiting` (and left there
 * once interrupted: the set lives as long as its turn, and interrupting an ended fiber does nothing).
 */
const suspendedIn = (waiting: Set<Fiber.RuntimeFiber<unknown, unknown>>): Effect.Effect<never> =>
  Effect.interruptible(
    Effect.withFiberRuntime<never>((fiber) => {
      waiting.add(fiber)
      return neverResumed
    })
  )

const stop: Effect.Effect<never> = Effect.interrupt

/** Turns a replay outcome into the op's Effect: blocked and cancelled ops never resume. */
const fromOutcome = <A, E>(monitor: FiberMonitor, outcome: Outcome<A>): Effect.Effect<A, E> => {
  switch (outcome._tag) {
    case "Value":
      return monitor.turn.takeYield() ? Effect.as(monitor.yieldToEventLoop, outcome.value) : Effect.succeed(outcome.value)
    case "Failed":
      return Effect.fail(outcome.error as E)
    case "Fatal":
      return Effect.die(outcome.error)
    case "Blocked":
    case "Cancelled":
      return monitor.suspended
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
  constructor(private readonly resolve: () => Effect.Effect<A, E, R>) {
    super()
  }

  commit(): Effect.Effect<A, E, R> {
    return this.resolve()
  }

  override [Symbol.iterator](): Effect.EffectGenerator<Effect.Effect<A, E, R>> {
    return new SingleShotGen<YieldWrap<Effect.Effect<A, E, R>>, A>(new YieldWrap(this.resolve()))
  }
}

const op = <A, E = never, R = never>(resolve: () => Effect.Effect<A, E, R>): Effect.Effect<A, E, R> => new Op(resolve)

const bodyOf = <A, E, R>(body: LocalBody<A, E, R>, step: LocalStep): Effect.Effect<A, E, R> =>
  Effect.suspend(() => (typeof body === "function" ? body(step) : body))

/**
 * Runs one local body and captures how it ended; `None` when it was interrupted (the turn is being
 * interrupted, or the body interrupted itself), in which case nothing is recorded. In flight (the
 * body is not parked while it runs) until it ends.
 */
const runLocal = <A, E, R>(
  monitor: FiberMonitor,
  scope: LocalScope,
  body: LocalBody<A, E, R>
): Effect.Effect<Option.Option<LocalResult>, never, R> =>
  Effect.suspend(() => {
    monitor.inFlight++
    return bodyOf(body, scope.step).pipe(
      captureEffectLogs(scope.events),
      Effect.exit,
      Effect.map((exit): Option.Option<LocalResult> => {
        if (Exit.isSuccess(exit)) return Option.some({ _tag: "Success", value: exit.value })
        if (Cause.isInterruptedOnly(exit.cause)) return Option.none()
        return Option.some(monitor.turn.localFailure(Option.getOrUndefined(failureOfCause(exit.cause))))
      }),
      Effect.ensuring(Effect.sync(() => {
        monitor.inFlight--
      }))
    )
  })

const localOp = <A, E, R>(
  monitor: FiberMonitor,
  name: string,
  seqAlias: boolean,
  body: LocalBody<A, E, R>
): Effect.Effect<A, StepFailed, R> =>
  op(() => {
    const turn = monitor.turn
    const begin = turn.beginLocal<A>(name, seqAlias)
    if (begin._tag !== "Run") return fromOutcome<A, StepFailed>(monitor, begin)
    const scope = turn.startLocal(begin.seq, begin.name, turn.now(), undefined)
    return Effect.flatMap(runLocal(monitor, scope, body), (result) =>
      Option.isNone(result)
        ? Effect.interrupt
        : fromOutcome<A, StepFailed>(monitor, turn.finishLocal<A>(scope, result.value)))
  })

/** Builds the Effect context of one turn over its {@link Turn}. */
const makeEffectContext = (monitor: FiberMonitor): WorkflowContext => {
  const turn = monitor.turn
  const unsupported = (name: string): Effect.Effect<never> => op(() => fromOutcome(monitor, turn.unsupported(name)))
  return {
    runId: turn.runId,
    step: (name, input, options) => op(() => fromOutcome(monitor, turn.step(name, input, options))),
    now: () => localOp(monitor, "now", true, Effect.sync(() => turn.now())),
    sideEffect: (body) => localOp(monitor, "sideEffect", false, body),
    sleep: (duration) => op(() => fromOutcome(monitor, turn.sleep(duration))),
    waitForSignal: (name, options) => op(() => fromOutcome(monitor, turn.waitForSignal(name, options))),
    child: (workflow, input) => op(() => fromOutcome(monitor, turn.child(workflow, input))),
    gather: <A, E, R>(
      items: ReadonlyArray<readonly [name: string, body: LocalBody<A, E, R>]>,
      options?: GatherOptions
    ): Effect.Effect<Array<A>, GatherFailed, R> =>
      op(() => {
        const begin = turn.beginGather<A>(items.map(([name]) => name))
        if (begin._tag !== "Run") return fromOutcome<Array<A>, GatherFailed>(monitor, begin)
        const startedAt = turn.now()
        const abort = new AbortController()
        const scopes = begin.items.map((item) => turn.startLocal(item.seq, item.name, startedAt, begin.parallelGroup, abort))
        const failFast = options?.mode === "failFast"
        return Effect.forEach(
          scopes,
          (scope, i) =>
            Effect.tap(runLocal(monitor, scope, items[i]![1]), (result) =>
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
          return fromOutcome<Array<A>, GatherFailed>(monitor, turn.finishGather<A>(scopes, finished, begin.parallelGroup))
        }))
      }),
    gatherCalls: (calls, options) => op(() => fromOutcome(monitor, turn.gatherCalls(calls, options))),
    all: (workflow, inputs, options) => op(() => fromOutcome(monitor, turn.all(workflow, inputs, options))),
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

/**
 * Runs an Effect workflow body for one turn: its `Exit` once it ends, or `undefined` once it is
 * parked on an op that is not in history (the turn then suspends: `continue`, or `cancelled`).
 *
 * Suspension detection. A blocked op never resumes (see {@link FiberMonitor.suspended}), so the
 * fiber that reached it waits there, and so does whatever waits on that fiber: a concurrent
 * `Effect.all` or `forEach` with a branch blocked, a race whose branches all blocked, an `Effect.exit` or a
 * `catchAllCause` around any of them. A race whose other branch resolved from history interrupts the
 * blocked branch and goes on with the winner, as the live run would. The body runs in a fiber of its
 * own, started at once on the caller's stack, whose fibers (and those they fork) schedule their tasks
 * through a {@link FiberMonitor}; the body is parked when its first stretch has returned or the last
 * task waiting has run, no ctx-owned work is in flight (a local op's body, a replayed result held
 * back by a yield) and an op blocked (or the run was found cancelled, or a fatal error was raised).
 * The turn is then closed and decided; the body is interrupted (its finalizers run after the
 * decision, and an op they reach does nothing). A body that replays and blocks in one stretch (the
 * common turn) is decided without a trip through the scheduler.
 *
 * The determinism rule this imposes, as for async bodies: a body waits only on ctx ops and on its own
 * fibers. Anything else it waits on (a `Clock` sleep, a promise) is not tracked: with an op blocked the
 * turn is decided without it; with none it is waited for. Put such work in `ctx.sideEffect`. A
 * local op's body is waited for however long it runs: one that waits on the body's own fibers (a
 * `Deferred` that a branch blocked at an op would complete) never ends, and neither does the turn.
 *
 * Interrupting it closes the turn (ops the body's fibers still reach do nothing) and interrupts the
 * body, waiting for its finalizers.
 *
 * @internal
 */
export const runEffectBody = <A, E, R>(
  turn: Turn,
  runtime: Runtime.Runtime<R>,
  body: (ctx: WorkflowContext) => Effect.Effect<A, E, R>
): Effect.Effect<Exit.Exit<A, E> | undefined> => {
  const monitor = new FiberMonitor(turn, FiberRefs.getOrDefault(runtime.fiberRefs, FiberRef.currentScheduler))
  const ctx = makeEffectContext(monitor)
  const fiber = Runtime.runFork(runtime)(Effect.suspend(() => body(ctx)), { scheduler: monitor })
  monitor.fiber = fiber
  if (monitor.pending === 0) monitor.check()
  if (monitor.parked) return Effect.succeed(undefined)
  const exit = fiber.unsafePoll()
  if (exit !== null) return Effect.succeed(exit)
  return Effect.async<Exit.Exit<A, E> | undefined>((resume) => {
    monitor.onParked = () => resume(Effect.succeed(undefined))
    fiber.addObserver((exit) => {
      if (monitor.parked) return
      monitor.onParked = undefined
      resume(Effect.succeed(exit))
    })
    return Effect.suspend(() => {
      monitor.onParked = undefined
      turn.close()
      monitor.interruptBody()
      return Fiber.await(fiber)
    })
  })
}
