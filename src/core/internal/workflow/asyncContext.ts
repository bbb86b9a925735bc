import type { SleepDuration } from "./duration.js"
import type { BodyOutcome, CallSpec, GatherOptions, LocalResult, LocalScope, LocalStep, Outcome, StepOptions, Turn } from "./replay.js"

/**
 * The body of a local op in an async workflow: a function of the {@link LocalStep} (its logger and
 * fail-fast signal) returning a value or a promise of one.
 *
 * @since 0.1.0
 * @category models
 */
export type AsyncLocalBody<A> = (step: LocalStep) => A | PromiseLike<A>

/**
 * The Promise twin of the Effect `WorkflowContext`, for `async (ctx, input) => ...` bodies. Same ops,
 * same seqs, same commands. A blocking op whose result is not in history records its command and
 * returns a promise that never settles, so the body stays suspended there (a `try`/`catch` cannot
 * swallow a suspension). A failure recorded in history rejects with {@link StepFailed}.
 *
 * @since 0.1.0
 * @category models
 */
export interface AsyncWorkflowContext {
  /** The run this turn replays. */
  readonly runId: string
  /** Dispatches the step `name` with `input` to a step worker (the `call` command) and waits for it. */
  readonly step: <A = unknown>(name: string, input?: unknown, options?: StepOptions) => Promise<A>
  /** Epoch milliseconds, read once and recorded (`recordStep` `"now"`), replayed afterwards. */
  readonly now: () => Promise<number>
  /** Runs `fn` once and records its value (`recordStep` `"sideEffect"`); replays it without running it. */
  readonly sideEffect: <A>(fn: AsyncLocalBody<A>) => Promise<A>
  /** A durable timer: milliseconds, a `Duration`, or a string such as `"30s"` or `"5 minutes"`. */
  readonly sleep: (duration: SleepDuration) => Promise<void>
  /** Waits for the signal `name` and returns its payload. A bounded wait (`timeoutMs`) is unsupported. */
  readonly waitForSignal: <A = unknown>(name: string, options?: { readonly timeoutMs?: number | undefined }) => Promise<A>
  /** Starts the child run `<runId>.child.<seq>` of `workflow` and waits for its output. */
  readonly child: <A = unknown>(workflow: string, input?: unknown) => Promise<A>
  /** Runs named local bodies concurrently (one parallel group); values in input order or a `GatherFailed`. */
  readonly gather: <A>(
    items: ReadonlyArray<readonly [name: string, fn: AsyncLocalBody<A>]>,
    options?: GatherOptions
  ) => Promise<Array<A>>
  /** Dispatches several steps at once (one parallel group) and waits for all of them. */
  readonly gatherCalls: <A = unknown>(calls: ReadonlyArray<CallSpec>, options?: GatherOptions) => Promise<Array<A>>
  /** Starts one child run of `workflow` per input (one parallel group) and waits for all of them. */
  readonly all: <A = unknown>(workflow: string, inputs: ReadonlyArray<unknown>, options?: GatherOptions) => Promise<Array<A>>
  /** Unsupported in a remote workflow (no absolute-deadline timer on the wire); fails the turn. */
  readonly sleepUntil: (when: Date | number) => Promise<never>
  /** Unsupported in a remote workflow (continue-as-new is an engine lifecycle op); fails the turn. */
  readonly continueAsNew: (input?: unknown) => Promise<never>
  /** Unsupported in a remote workflow (no patch markers; versioning is pinning); fails the turn. */
  readonly patched: (id: string) => Promise<never>
  /** Unsupported in a remote workflow (no fire-and-forget child command); fails the turn. */
  readonly startChild: (workflow: string, input?: unknown) => Promise<never>
  /** Unsupported in a remote workflow (events are an engine store feature); fails the turn. */
  readonly waitForEvent: (name: string, options?: unknown) => Promise<never>
  /** Unsupported in a remote workflow (queryable values live in the engine store); fails the turn. */
  readonly setEvent: (key: string, value: unknown) => Promise<never>
  /** Unsupported in a remote workflow (updates are delivered by the engine); fails the turn. */
  readonly onUpdate: (name: string, options?: unknown) => Promise<never>
  /** Unsupported in a remote workflow (needs the engine's transactional store); fails the turn. */
  readonly transaction: (name: string, body: unknown) => Promise<never>
  /** Unsupported in a remote workflow (entities run on the engine); fails the turn. */
  readonly callEntity: (name: string, key: string, op: string, arg?: unknown) => Promise<never>
  /** Unsupported in a remote workflow (entities run on the engine); fails the turn. */
  readonly signalEntity: (name: string, key: string, op: string, arg?: unknown) => Promise<never>
  /** Unsupported in a remote workflow (async-completion tasks are engine-driven); fails the turn. */
  readonly task: (name: string, dispatch: unknown) => Promise<never>
  /** Unsupported in a remote workflow (breakpoints are engine checkpoints); fails the turn. */
  readonly breakpoint: (label?: string) => Promise<never>
  /** Unsupported in a remote workflow (webhooks are minted by the engine); fails the turn. */
  readonly webhook: () => Promise<never>
  /** Unsupported in a remote workflow (search attributes live on the engine's run record); fails the turn. */
  readonly upsertSearchAttributes: (attributes: unknown) => Promise<never>
}

/**
 * What the driver watches while an async body runs: how many ctx-owned resolutions are still on
 * their way (local bodies running, deferred replays), and a wake-up whenever the turn's state
 * changes (an op blocked, a local body finished, the run was found cancelled, a fatal error).
 */
class Monitor {
  inFlight = 0
  /** The driver's wake-up (set once, by `runAsyncTurn`). */
  onChange: (() => void) | undefined = undefined

  notify(): void {
    this.onChange?.()
  }
}

/** A fresh promise that never settles; fresh so the reactions attached to it are collected with it. */
const suspended = <A>(): Promise<A> => new Promise<A>(() => {})

const STOPPED: BodyOutcome = { _tag: "Stopped" }

const settle = <A>(turn: Turn, monitor: Monitor, outcome: Outcome<A>): Promise<A> => {
  switch (outcome._tag) {
    case "Value": {
      // Read now: a replayed op's outcome object is reused by the next op.
      const value = outcome.value
      if (!turn.takeYield()) return Promise.resolve(value)
      monitor.inFlight++
      return new Promise<A>((resolve) =>
        setImmediate(() => {
          monitor.inFlight--
          monitor.notify()
          resolve(value)
        })
      )
    }
    case "Failed":
      return Promise.reject(outcome.error)
    case "Fatal":
      monitor.notify()
      return Promise.reject(outcome.error)
    case "Blocked":
    case "Cancelled":
      monitor.notify()
      return suspended()
    case "Closed":
      return suspended()
  }
}

const runBody = <A>(fn: AsyncLocalBody<A>, step: LocalStep): Promise<A> => {
  try {
    return Promise.resolve(fn(step))
  } catch (failure) {
    return Promise.reject(failure)
  }
}

const runLocal = (turn: Turn, monitor: Monitor, scope: LocalScope, fn: AsyncLocalBody<unknown>): Promise<LocalResult> => {
  monitor.inFlight++
  return runBody(fn, scope.step).then(
    (value): LocalResult => ({ _tag: "Success", value }),
    (failure): LocalResult => turn.localFailure(failure)
  ).finally(() => {
    monitor.inFlight--
    monitor.notify()
  })
}

const makeAsyncContext = (turn: Turn, monitor: Monitor): AsyncWorkflowContext => {
  const unsupported = (op: string): Promise<never> => settle(turn, monitor, turn.unsupported(op))
  const localOp = <A>(name: string, seqAlias: boolean, fn: AsyncLocalBody<A>): Promise<A> => {
    const begin = turn.beginLocal<A>(name, seqAlias)
    if (begin._tag !== "Run") return settle(turn, monitor, begin)
    const scope = turn.startLocal(begin.seq, begin.name, turn.now(), undefined)
    return runLocal(turn, monitor, scope, fn).then((result) => settle(turn, monitor, turn.finishLocal<A>(scope, result)))
  }
  return {
    runId: turn.runId,
    step: (name, input, options) => settle(turn, monitor, turn.step(name, input, options)),
    now: () => localOp("now", true, () => turn.now()),
    sideEffect: (fn) => localOp("sideEffect", false, fn),
    sleep: (duration) => settle(turn, monitor, turn.sleep(duration)),
    waitForSignal: (name, options) => settle(turn, monitor, turn.waitForSignal(name, options)),
    child: (workflow, input) => settle(turn, monitor, turn.child(workflow, input)),
    gather: <A>(items: ReadonlyArray<readonly [name: string, fn: AsyncLocalBody<A>]>, options?: GatherOptions) => {
      const begin = turn.beginGather<A>(items.map(([name]) => name))
      if (begin._tag !== "Run") return settle(turn, monitor, begin)
      const startedAt = turn.now()
      const abort = new AbortController()
      const scopes = begin.items.map((item) => turn.startLocal(item.seq, item.name, startedAt, begin.parallelGroup, abort))
      const failFast = options?.mode === "failFast"
      return Promise.all(scopes.map((scope, i) =>
        runLocal(turn, monitor, scope, items[i]![1]).then((result) => {
          if (failFast && result._tag === "Failure") abort.abort()
          return result
        })
      )).then((results) => settle(turn, monitor, turn.finishGather<A>(scopes, results, begin.parallelGroup)))
    },
    gatherCalls: (calls, options) => settle(turn, monitor, turn.gatherCalls(calls, options)),
    all: (workflow, inputs, options) => settle(turn, monitor, turn.all(workflow, inputs, options)),
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
 * Runs an async workflow body for one turn; `onEnd` receives how it ended (once, unless the turn is
 * aborted first). Returns the abort: the turn then ends without a word.
 *
 * Suspension detection. A blocking op that is not in history records its command and returns a
 * promise that never settles, so the body cannot tell it apart from a slow op and simply stays
 * parked on its `await`. The driver decides the body is blocked when all of these hold at once:
 *
 * 1. a macrotask barrier (`setImmediate`) has passed since the last change, so every microtask the
 *    body queued — every `await` of an already-resolved ctx op, every `.then` chain, every
 *    `Promise.all` over ctx ops — has run to completion;
 * 2. no ctx-owned work is in flight (no `sideEffect`/`now`/`gather` body still running, no replayed
 *    result whose delivery was deferred to let the event loop breathe); a body that returns while a
 *    local op it did not await is still running is likewise decided only once that op is recorded;
 * 3. at least one op is blocked (or the run was found cancelled, or a fatal error was raised).
 *
 * Until then it sleeps until a change (every ctx op that blocks, fails the turn or finishes a local
 * body raises one, and so does the body settling), then checks again behind a fresh barrier, so
 * waiting costs nothing. The driver is callbacks rather than promises: it is a fixed cost of every
 * turn. The turn is then closed: ops the abandoned body might still reach do nothing and never
 * settle, so no command or side effect is added after the decision.
 *
 * Limits (the determinism rules for async bodies):
 * - A body must only await ctx ops and plain promise chains built on them. Anything else it awaits
 *   (a timer, I/O) is not tracked: if an op is blocked when that work is still pending, the turn is
 *   decided without it; if nothing is blocked the driver keeps waiting for the body. Put such work in
 *   `ctx.sideEffect`, where it is awaited, recorded once and replayed.
 * - Work a body schedules on its own macrotasks (`setImmediate`, `setTimeout`) is likewise not
 *   awaited by the barrier.
 * - Ops must not be called from inside a `sideEffect` or gather body.
 *
 * @internal
 */
export const runAsyncTurn = (
  turn: Turn,
  body: (ctx: AsyncWorkflowContext, input: unknown) => unknown,
  input: unknown,
  onEnd: (outcome: BodyOutcome) => void
): () => void => {
  const monitor = new Monitor()
  const ctx = makeAsyncContext(turn, monitor)
  let outcome: BodyOutcome | undefined
  let ended = false
  let scheduled = false
  const end = (result: BodyOutcome) => {
    ended = true
    monitor.onChange = undefined
    onEnd(result)
  }
  const check = () => {
    scheduled = false
    if (ended) return
    if (turn.fatal !== undefined) return end(outcome ?? STOPPED)
    // A local op is still running (even one the body did not await): record it before deciding.
    if (monitor.inFlight > 0) return
    if (outcome !== undefined) return end(outcome)
    if (turn.cancelled || turn.blocked > 0) return end(STOPPED)
  }
  // Every change is checked behind a macrotask barrier; changes before it runs share it.
  const wake = () => {
    if (scheduled || ended) return
    scheduled = true
    setImmediate(check)
  }
  monitor.onChange = wake
  const settled = (result: BodyOutcome) => {
    outcome = result
    wake()
  }
  const failed = (failure: unknown) => settled({ _tag: "Failed", failure })
  try {
    Promise.resolve(body(ctx, input)).then((value) => settled({ _tag: "Completed", value }), failed)
  } catch (failure) {
    failed(failure)
  }
  wake()
  return () => {
    ended = true
    monitor.onChange = undefined
  }
}
