import * as Cause from "effect/Cause"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberId from "effect/FiberId"
import * as FiberRef from "effect/FiberRef"
import * as Option from "effect/Option"
import * as Runtime from "effect/Runtime"
import { AsyncLocalStorage } from "node:async_hooks"
import { createHash } from "node:crypto"
import * as Codec from "../../../wire/DurableWorkflowCodec.js"
import { isNonRetryable, messageOf } from "../errors.js"
import { type ArgumentsMismatch, emptySpecs, fitArguments, type ReceiverSpecs } from "./contract.js"
import { ActivityFailed, type ChildWorkflowFailed, QueryFailed, UpdateRejected, UpdateValidationFailed } from "./errors.js"
import {
  type AcceptedUpdate,
  type ActivityOptions,
  type Attempt,
  type ChildOptions,
  type Command,
  decodeArgs,
  type Op,
  readHistory,
  type Settle,
  Turn
} from "./replay.js"

/** What a workflow returns to continue as a new run. @internal */
export class ContinueAsNew {
  readonly _tag = "ContinueAsNew"
  constructor(readonly args: ReadonlyArray<unknown>, readonly workflowType: string | undefined, readonly queue: string | undefined) {}
}

/** Options of a condition wait. @internal */
export interface ConditionOptions {
  /** Stable key of the wait (`condition_key`). */
  readonly key?: string
  /** Gives up after this many seconds: the wait then yields `false`. */
  readonly timeoutSeconds?: number
}

/** Constructors of ops, shared by every authoring style (for `all` and generator `yield`). @internal */
export const op = {
  activity: (activityType: string, args: ReadonlyArray<unknown> = [], options: ActivityOptions = {}): Op => ({
    _tag: "Activity",
    activityType,
    args,
    options
  }),
  timer: (seconds: number): Op => ({ _tag: "Timer", seconds }),
  child: (workflowType: string, args: ReadonlyArray<unknown> = [], options: ChildOptions = {}): Op => ({
    _tag: "Child",
    workflowType,
    args,
    options
  }),
  sideEffect: (compute: () => unknown): Op => ({ _tag: "SideEffect", compute }),
  version: (changeId: string, minSupported: number, maxSupported: number): Op => ({ _tag: "Version", changeId, minSupported, maxSupported }),
  condition: (predicate: () => boolean, options: ConditionOptions = {}): Op => ({
    _tag: "Condition",
    predicate,
    ...(options.key === undefined ? {} : { key: options.key }),
    ...(options.timeoutSeconds === undefined ? {} : { timeoutSeconds: options.timeoutSeconds })
  }),
  upsert: (attributes: Record<string, unknown>): Op => ({ _tag: "Upsert", attributes })
}

/** Deterministic helpers every workflow context has. @internal */
export interface BaseContext {
  readonly workflowId: string
  readonly runId: string
  readonly taskQueue: string
  /** Whether recorded results remain to be replayed (log only when false). */
  readonly isReplaying: () => boolean
  /** The run's start time (`WorkflowStarted.timestamp`), else the task's pick-up time. */
  readonly now: () => Date
  /** A number in [0, 1) from a generator seeded by the run id. */
  readonly random: () => number
  /** A UUID v4 from the seeded generator. */
  readonly uuid4: () => string
  /** Handles the signal `name` (recorded signals are applied in history order during replay). */
  readonly onSignal: (name: string, handler: (...args: Array<any>) => void) => void
  /** Answers the query `name` from the replayed state. */
  readonly onQuery: (name: string, handler: (...args: Array<any>) => unknown) => void
  /**
   * Applies the update `name`: mutates the workflow state and returns its result (a value, a
   * promise or an Effect). Recorded applications (`UpdateApplied`) are replayed in history order.
   */
  readonly onUpdate: (name: string, handler: (...args: Array<any>) => unknown) => void
  /**
   * Validates the update `name` before the server accepts it: return `false`, throw or fail
   * (with {@link UpdateRejected} for per-field errors) to reject; anything else approves.
   */
  readonly onUpdateValidator: (name: string, validator: (...args: Array<any>) => unknown) => void
  /** Returned from the workflow: ends this run and starts a new one with `args`. */
  readonly continueAsNew: (args?: ReadonlyArray<unknown>, options?: { readonly workflowType?: string; readonly queue?: string }) => ContinueAsNew
}

/** The task a replay runs for. @internal */
export interface ReplayInput {
  readonly workflowId: string
  readonly runId: string
  readonly workflowType: string
  readonly taskQueue: string
  readonly codec: unknown
  readonly args: ReadonlyArray<unknown>
  readonly history: ReadonlyArray<unknown>
  readonly now: number
  /** Encodes an outbound payload as an envelope (external storage may apply). */
  readonly encode: (value: unknown) => unknown
  /** The update an accepted-update task applies (its recorded application is not replayed). */
  readonly applyingUpdateId?: string
}

/** A workflow body, by authoring style. @internal */
export type Body<R> =
  | { readonly style: "effect"; readonly run: (ctx: any, ...args: Array<any>) => Effect.Effect<unknown, unknown, R> }
  | { readonly style: "generator"; readonly run: (ctx: any, ...args: Array<any>) => Generator<unknown, unknown, any> }
  | { readonly style: "async"; readonly run: (ctx: any, ...args: Array<any>) => Promise<unknown> }

/** A workflow definition. @internal */
export interface Definition<R> {
  readonly name: string
  readonly body: Body<R>
  /** Declared signals, queries, updates and update validators (command contracts). */
  readonly specs?: ReceiverSpecs
}

/** `"sha256:<hex>"` over the definition's name and source. @internal */
export const fingerprintOf = (name: string, source: string): string =>
  "sha256:" + createHash("sha256").update("effect-durable-worker.workflow-definition.v1\0").update(name).update("\0").update(source).digest("hex")

const seededRandom = (runId: string): (() => number) => {
  let state = BigInt("0x" + createHash("sha256").update(runId).digest("hex").slice(0, 16))
  return () => {
    // xorshift64*
    state ^= state >> 12n
    state ^= (state << 25n) & 0xffffffffffffffffn
    state ^= state >> 27n
    const out = (state * 0x2545f4914f6cdd1dn) & 0xffffffffffffffffn
    return Number(out >> 11n) / 2 ** 53
  }
}

/** Why a replay could not produce commands: a task failure, not a workflow failure. @internal */
export class ReplayFailure {
  readonly _tag = "ReplayFailure"
  constructor(readonly error: unknown) {}
}

const errorName = (error: unknown): string =>
  typeof error === "object" && error !== null && typeof (error as { _tag?: unknown })._tag === "string"
    ? (error as { _tag: string })._tag
    : error instanceof Error
    ? error.constructor.name || error.name
    : typeof error

/** A stable, language-neutral class string for an error. @internal */
export const errorClass = (error: unknown): string => `effect-durable-worker.${errorName(error)}`

/** The type name sent as `type`/`exception_type`. @internal */
export const typeOf = errorName

const failWorkflowCommand = (error: unknown): Command => {
  const nonRetryable = isNonRetryable(error)
  return {
    type: "fail_workflow",
    message: messageOf(error),
    exception_type: errorName(error),
    exception_class: errorClass(error),
    ...(error instanceof ActivityFailed
      ? {
        exception: {
          type: error.exceptionType ?? "ActivityFailed",
          class: error.exceptionClass ?? errorClass(error),
          message: error.message,
          ...(error.activityType === undefined ? {} : { activity_type: error.activityType }),
          ...(error.activityAttemptId === undefined ? {} : { activity_attempt_id: error.activityAttemptId })
        }
      }
      : {}),
    ...(nonRetryable ? { non_retryable: true } : {})
  }
}

/** The commands of one workflow task, or why replay failed. @internal */
export type ReplayResult = {
  readonly commands: ReadonlyArray<Command>
  readonly turn: Turn
  readonly guard: Guard
  readonly accepted: ReadonlyArray<AcceptedUpdate>
}

const baseContext = (input: ReplayInput, turn: Turn, startedAt: number | undefined): BaseContext => {
  const random = seededRandom(input.runId)
  return {
    workflowId: input.workflowId,
    runId: input.runId,
    taskQueue: input.taskQueue,
    isReplaying: () => turn.replaying,
    now: () => new Date(startedAt ?? input.now),
    random,
    uuid4: () => {
      const bytes = Array.from({ length: 16 }, () => Math.floor(random() * 256))
      bytes[6] = (bytes[6]! & 0x0f) | 0x40
      bytes[8] = (bytes[8]! & 0x3f) | 0x80
      const hex = bytes.map((b) => b.toString(16).padStart(2, "0")).join("")
      return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`
    },
    onSignal: (name, handler) => void turn.signalHandlers.set(name, handler),
    onQuery: (name, handler) => void turn.queryHandlers.set(name, handler),
    onUpdate: (name, handler) => void turn.updateHandlers.set(name, handler),
    onUpdateValidator: (name, validator) => void turn.updateValidators.set(name, validator),
    continueAsNew: (args = [], options = {}) => new ContinueAsNew(args, options.workflowType, options.queue)
  }
}

/**
 * A receiver running: an update handler (replayed from `UpdateApplied`, or applied by an
 * accepted-update task), a query handler or an update's validator, in the replay of `owner` (its
 * Turn). None of them may ask for a workflow op: `refusal` says so, naming the receiver and the op.
 * A mark is only ever read against its own replay's ops: it can reach code it does not belong to
 * (an `AsyncLocalStorage` store carried into a fiber another replay's handler woke up, in a worker
 * running several workflow tasks at once).
 */
interface InReceiver {
  readonly _tag: "Receiver"
  readonly owner: Turn
  readonly refusal: (op: string) => string
}

const updateHandler = (name: string, phase: "replayed" | "applied", owner: Turn): InReceiver => ({
  _tag: "Receiver",
  owner,
  refusal: (op) =>
    `update '${name}' asked for a workflow op (${op}) while it was ${phase}; ` +
    "this worker does not run workflow ops inside update handlers"
})

const queryHandler = (name: string, owner: Turn): InReceiver => ({
  _tag: "Receiver",
  owner,
  refusal: (op) => `query '${name}' asked for a workflow op (${op}); a query only reads the workflow's state and cannot run workflow ops`
})

const updateValidator = (name: string, owner: Turn): InReceiver => ({
  _tag: "Receiver",
  owner,
  refusal: (op) =>
    `the validator of update '${name}' asked for a workflow op (${op}); a validator only judges the update and cannot run workflow ops`
})

/**
 * Who runs in a fiber, for the ops it asks for: the workflow's code (the body's fiber and the fibers
 * it forks) or a receiver (its Effect, and the fibers it forks). A joined fiber does not hand its
 * value to the joiner.
 */
const asker = FiberRef.unsafeMake<InReceiver | { readonly _tag: "Workflow" } | undefined>(undefined, {
  join: (parent) => parent
})

const inWorkflow = { _tag: "Workflow" } as const

/** The receiver being called (synchronously). */
let calling: InReceiver | undefined = undefined

/**
 * The receiver an async workflow's promise code runs in: where its awaits resume, whatever
 * resolved them. Only async workflows have ops as promises; on Node before 24 an
 * `AsyncLocalStorage` turns on promise hooks, which other workflows need not pay for.
 */
const handlerStorage = new AsyncLocalStorage<InReceiver>()

/**
 * Calls a receiver marked as such: while it runs, and (`promises`: a receiver of an async workflow)
 * in its promise code. Its Effect is marked apart (the fiber it runs in).
 */
const callMarked = (receiver: InReceiver, call: () => unknown, promises: boolean): unknown => {
  const previous = calling
  calling = receiver
  try {
    return promises ? handlerStorage.run(receiver, call) : call()
  } finally {
    calling = previous
  }
}

/**
 * The receiver whose Effect runs for a replay (its Turn) now: a replayed update settling, or a
 * query, validator or live update after the replay. One at a time: a replay settles its updates one
 * after the other, and answers its one receiver after them.
 */
const runningEffect = new WeakMap<Turn, InReceiver>()

/** Runs a receiver's Effect as {@link runningEffect} for `receiver`'s replay. */
const asRunning = <A, E, R>(receiver: InReceiver, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.ensuring(
    Effect.zipRight(Effect.sync(() => runningEffect.set(receiver.owner, receiver)), effect),
    Effect.sync(() => runningEffect.delete(receiver.owner))
  )

/**
 * Whose code this is, where it runs: the fiber's mark, else (a fiber the workflow's code did not
 * fork, or no fiber) the receiver being called, or whose promise code this is; else nobody's known.
 */
const markAt = (fiber: Fiber.RuntimeFiber<unknown, unknown> | undefined): InReceiver | typeof inWorkflow | undefined =>
  fiber?.getFiberRef(asker) ?? calling ?? handlerStorage.getStore()

/** Only a receiver of `guard`'s replay: a mark of another replay is no receiver of this one. */
const ownReceiver = (mark: InReceiver | typeof inWorkflow | undefined, guard: Guard): InReceiver | undefined =>
  mark?._tag === "Receiver" && mark.owner === guard.turn ? mark : undefined

/**
 * The receiver of `guard`'s replay that asks for an op run as an Effect, if one does: where it runs
 * (a receiver's fiber, call or promise code), else, run by a fiber nobody marked (a fiber the
 * workflows share, an `Effect.runPromise`), who made it (`built`: called `ctx.activity(…)`). When
 * nobody's code is known for either (made in the promise code of an Effect workflow: a receiver's
 * `await Effect.runPromise(ctx.sleep(1))` after an await), once the turn has ended, the receiver
 * whose Effect runs for the replay: the workflow's code has ended, and the op, left unanswered,
 * would wait for ever. While the turn runs, such an op may be the workflow's own: it is answered.
 */
const askingReceiver = (
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  built: InReceiver | typeof inWorkflow | undefined,
  guard: Guard
): InReceiver | undefined => {
  const mark = markAt(fiber) ?? built
  return mark !== undefined ? ownReceiver(mark, guard) : guard.turn.ended ? runningEffect.get(guard.turn) : undefined
}

const opName = (ops: Op | ReadonlyArray<Op>): string => {
  if (Array.isArray(ops)) return "all"
  const o = ops as Op
  switch (o._tag) {
    case "Activity":
      return `activity '${o.activityType}'`
    case "Child":
      return `child '${o.workflowType}'`
    case "Timer":
      return "sleep"
    case "SideEffect":
      return "sideEffect"
    case "Version":
      return `getVersion '${o.changeId}'`
    case "Condition":
      return "waitCondition"
    case "Upsert":
      return "upsertSearchAttributes"
  }
}

/** An op waiting for the turn, and where its answer goes. */
interface Waiting {
  readonly ops: Op | ReadonlyArray<Op>
  readonly answer: (result: Attempt) => void
}

/**
 * Attempts an op, recording a non-determinism error on the turn (so workflow code cannot swallow
 * it). Ops are answered one at a time, in the order asked: an op whose attempt has to settle a
 * replayed update holds the turn; the guard runs the settle and asks again (the turn resumes where
 * it stopped), then answers the ops asked for meanwhile, then frees the turn. An op once asked is
 * attempted even when the code that asked has stopped waiting for it (the loser of a race), as an
 * op that settles nothing is: the turn never depends on the workflow's own interruptions.
 */
export class Guard {
  fatal: unknown = undefined
  blocked = false
  onBlocked: () => void = () => {}
  /** Done when a receiver asked for an op (see {@link refuse}). */
  readonly refused = Deferred.unsafeMake<void>(FiberId.none)
  /** Whether the turn is held (a replayed update is settling). */
  private busy = false
  private readonly waiting: Array<Waiting> = []
  private readonly idle: Array<() => void> = []
  constructor(
    readonly turn: Turn,
    /** Runs a settle: `undefined` when it ended at once, else when it ended (or the replay cut it). */
    private readonly runSettle: (settle: Settle) => Promise<void> | undefined
  ) {}

  attempt(ops: Op | ReadonlyArray<Op>): Attempt {
    if (this.fatal !== undefined || this.blocked) return { _tag: "Blocked" }
    try {
      const result = Array.isArray(ops) ? this.turn.attemptAll(ops) : this.turn.attempt(ops as Op)
      if (result._tag === "Blocked") this.block()
      return result
    } catch (error) {
      this.fatal = error
      this.block()
      return { _tag: "Blocked" }
    }
  }

  private block(): void {
    this.blocked = true
    this.onBlocked()
  }

  /**
   * Asks for `ops` (of the async and Effect styles): the answer, or a promise of it when the turn
   * is held or a replayed update has to settle first. Never `Settle`.
   */
  ask(ops: Op | ReadonlyArray<Op>): Attempt | Promise<Attempt> {
    if (this.busy) return new Promise((answer) => this.waiting.push({ ops, answer }))
    const result = this.attempt(ops)
    if (result._tag !== "Settle") return result
    this.busy = true
    let answered: Attempt | undefined
    let later: ((result: Attempt) => void) | undefined
    this.drain({ ops, answer: (r) => later === undefined ? (answered = r) : later(r) }, result.effect)
    return answered ?? new Promise((answer) => (later = answer))
  }

  /** Calls `f` once the turn is free (now if it is): ops asked for before have been answered. */
  whenIdle(f: () => void): void {
    if (this.busy) this.idle.push(f)
    else f()
  }

  /**
   * Holding the turn: runs `settle`, asks for `held` again (settling on the way), answers it, then
   * each op waiting, in order; frees the turn when none is left.
   */
  private drain(held: Waiting, settle: Settle | undefined): void {
    let next: Waiting | undefined = held
    try {
      for (; next !== undefined; next = this.waiting.shift()) {
        for (;;) {
          if (settle !== undefined) {
            const running = this.runSettle(settle)
            settle = undefined
            if (running !== undefined) {
              const waiting = next
              void running.then(() => this.drain(waiting, undefined))
              return
            }
          }
          const result = this.attempt(next.ops)
          if (result._tag !== "Settle") {
            next.answer(result)
            break
          }
          settle = result.effect
        }
      }
    } catch (error) {
      // nothing here is meant to throw (attempt catches); if something does, the turn must not stay
      // held: the replay fails with it, and every op waiting is answered as blocked
      this.fatal ??= error
      if (!this.blocked) this.block()
      for (const waiting of [next, ...this.waiting.splice(0)]) waiting?.answer({ _tag: "Blocked" })
    }
    this.busy = false
    for (const f of this.idle.splice(0)) f()
  }

  /**
   * A receiver asked for an op: the replay (or the query, validation or update) fails with a
   * `TypeError`, at once (the turn ends), and the op fails with it too, so that the receiver ends.
   */
  refuse(receiver: InReceiver, ops: Op | ReadonlyArray<Op>): TypeError {
    const error = new TypeError(receiver.refusal(opName(ops)))
    this.fatal ??= error
    if (!this.blocked) this.block()
    Deferred.unsafeDone(this.refused, Exit.void)
    return error
  }
}

/**
 * Runs a receiver's `effect` after the replay (a replayed update settling for a query's, a
 * validation's or an update's state; a query, a validator, the live update): an op it asks for ends
 * it at once, even when it goes on after the op failed. `None` then (`guard.fatal` says why).
 */
const unlessRefused = <A>(guard: Guard, effect: Effect.Effect<A>): Effect.Effect<Option.Option<A>> =>
  Effect.raceFirst(Effect.map(effect, Option.some), Effect.as(Deferred.await(guard.refused), Option.none<A>()))

/**
 * Calls a receiver after the replay (a query, a validator, the live update), marked as `receiver`
 * in its call, its Effect (and the fibers that one forks) and (an async workflow's, `style`) its
 * promise code: its outcome (its value, or its failure), or, when it asked for an op (whatever it
 * did with the op's failure), a {@link ReplayFailure} of the refusal. The receiver of a generator
 * workflow, whose context makes ops as values, asks for an op it returns as it is too (elsewhere an
 * object of that shape is an answer).
 */
const callAfterReplay = (
  guard: Guard,
  receiver: InReceiver,
  style: Body<unknown>["style"],
  call: () => unknown
): Effect.Effect<Either.Either<unknown, unknown>, ReplayFailure> => {
  const calledMarked = () => {
    const out = callMarked(receiver, call, style === "async")
    if (style === "generator" && (isOp(out) || (Array.isArray(out) && out.length > 0 && out.every(isOp)))) {
      throw guard.refuse(receiver, out as Op | ReadonlyArray<Op>)
    }
    return out
  }
  return Effect.flatMap(
    unlessRefused(guard, Effect.either(asRunning(receiver, Effect.locally(callReceiver(calledMarked), asker, receiver)))),
    (ran) => Option.isSome(ran) && guard.fatal === undefined ? Effect.succeed(ran.value) : Effect.fail(new ReplayFailure(guard.fatal))
  )
}

type Ending =
  | { readonly _tag: "Blocked" }
  | { readonly _tag: "Returned"; readonly value: unknown }
  | { readonly _tag: "Threw"; readonly error: unknown }

const finish = (input: ReplayInput, turn: Turn, guard: Guard, ending: Ending): ReadonlyArray<Command> => {
  if (guard.fatal !== undefined) throw new ReplayFailure(guard.fatal)
  turn.freeze()
  if (ending._tag === "Blocked") return turn.pending
  try {
    turn.assertConsumed()
  } catch (error) {
    throw new ReplayFailure(error)
  }
  if (ending._tag === "Threw") return [...turn.pending, failWorkflowCommand(ending.error)]
  const value = ending.value
  const workflow = `workflow ${JSON.stringify(input.workflowType)}`
  if (value instanceof ContinueAsNew) {
    const args = encodeOrRefuse(input, [...value.args], `the continue-as-new arguments of ${workflow}`)
    if (args._tag === "Refused") return [...turn.pending, args.command]
    return [...turn.pending, {
      type: "continue_as_new",
      queue: value.queue ?? input.taskQueue,
      ...(value.workflowType === undefined ? {} : { workflow_type: value.workflowType }),
      arguments: args.envelope
    }]
  }
  const result = encodeOrRefuse(input, value === undefined ? null : value, `the output of ${workflow}`)
  return [...turn.pending, result._tag === "Refused" ? result.command : { type: "complete_workflow", result: result.envelope }]
}

const segment = (name: string | number) =>
  typeof name === "number" ? `[${name}]` : /^[A-Za-z_$][\w$]*$/.test(name) ? `.${name}` : `[${JSON.stringify(name)}]`

/**
 * Why a value the Durable Workflow codec refuses cannot be answered, naming where the bad value
 * is (`$.items[2].amount`); final, since a retry produces the same value. @internal
 */
export const unserializable = (what: string, error: Codec.PayloadEncodeError): { readonly type: string; readonly message: string } => {
  // a cycle shows up as a path as deep as the codec's limit: name its start only
  const shown = error.path.length > 16 ? [...error.path.slice(0, 16).map(segment), "…"] : error.path.map(segment)
  const tail = error.path.length === 0 ? "" : ` at ${error.path.map((s) => `[${JSON.stringify(s)}]`).join("")}`
  const prefix = `${error.code}: `
  const reason = error.message.startsWith(prefix) && error.message.endsWith(tail)
    ? error.message.slice(prefix.length, error.message.length - tail.length)
    : error.message
  return {
    type: "unserializable_output",
    message: `${what} cannot be encoded by the Durable Workflow codec: ${reason} at $${shown.join("")} (${error.code})`
  }
}

/** The `fail_workflow` command of a workflow value the codec refuses: non-retryable. */
const unserializableWorkflow = (what: string, error: Codec.PayloadEncodeError): Command => {
  const refused = unserializable(what, error)
  return {
    type: "fail_workflow",
    message: refused.message,
    exception_type: refused.type,
    exception_class: `effect-durable-worker.${refused.type}`,
    non_retryable: true
  }
}

/** Encodes an outbound workflow value, or the final failure when the codec refuses it. */
const encodeOrRefuse = (
  input: ReplayInput,
  value: unknown,
  what: string
): { readonly _tag: "Encoded"; readonly envelope: unknown } | { readonly _tag: "Refused"; readonly command: Command } => {
  try {
    return { _tag: "Encoded", envelope: input.encode(value) }
  } catch (error) {
    if (error instanceof Codec.PayloadEncodeError) return { _tag: "Refused", command: unserializableWorkflow(what, error) }
    throw error
  }
}

const answer = (result: Attempt): Effect.Effect<any, ActivityFailed | ChildWorkflowFailed> =>
  result._tag === "Resolved"
    ? Effect.succeed(result.value)
    : result._tag === "Failed"
    ? Effect.fail(result.error)
    : Effect.never

/** An op as an Effect. Asked for by a receiver, it dies with the replay's error. */
const effectOp = (guard: Guard) => (ops: Op | ReadonlyArray<Op>): Effect.Effect<any, ActivityFailed | ChildWorkflowFailed> => {
  const built = markAt(Option.getOrUndefined(Fiber.getCurrentFiber()))
  return Effect.withFiberRuntime((fiber) => {
    const receiver = askingReceiver(fiber, built, guard)
    if (receiver !== undefined) return Effect.die(guard.refuse(receiver, ops))
    const result = guard.ask(ops)
    return result instanceof Promise ? Effect.flatMap(Effect.promise(() => result), answer) : answer(result)
  })
}

const answerAsync = (result: Attempt, map: ((value: any) => unknown) | undefined): Promise<any> =>
  result._tag === "Resolved"
    ? Promise.resolve(map === undefined ? result.value : map(result.value))
    : result._tag === "Failed"
    ? Promise.reject(result.error)
    : new Promise(() => {})

/** A rejected promise that is no unhandled rejection when the caller drops it. */
const rejected = (error: unknown): Promise<never> => {
  const promise = Promise.reject(error)
  promise.catch(() => {})
  return promise
}

/**
 * An op as a promise of its value (passed through `map`). Asked for by a receiver, it rejects with
 * the replay's error (a rejection the receiver may drop).
 */
const promiseOp = (guard: Guard) => (ops: Op | ReadonlyArray<Op>, map?: (value: any) => unknown): Promise<any> => {
  const receiver = ownReceiver(markAt(Option.getOrUndefined(Fiber.getCurrentFiber())), guard)
  if (receiver !== undefined) return rejected(guard.refuse(receiver, ops))
  const result = guard.ask(ops)
  return result instanceof Promise ? result.then((r) => answerAsync(r, map)) : answerAsync(result, map)
}

const seconds = (duration: number | { readonly seconds: number }) => typeof duration === "number" ? duration : duration.seconds

const contexts = (base: BaseContext, guard: Guard) => {
  const e = effectOp(guard)
  const p = promiseOp(guard)
  return {
    effect: {
      ...base,
      activity: (type: string, args?: ReadonlyArray<unknown>, options?: ActivityOptions) => e(op.activity(type, args, options)),
      child: (type: string, args?: ReadonlyArray<unknown>, options?: ChildOptions) => e(op.child(type, args, options)),
      sleep: (duration: number | { seconds: number }) => Effect.asVoid(e(op.timer(seconds(duration)))),
      sideEffect: (compute: () => unknown) => e(op.sideEffect(compute)),
      getVersion: (changeId: string, min: number, max: number) => e(op.version(changeId, min, max)),
      patched: (changeId: string) => Effect.map(e(op.version(changeId, -1, 1)), (v) => v === 1),
      waitCondition: (predicate: () => boolean, options?: ConditionOptions) => e(op.condition(predicate, options)),
      upsertSearchAttributes: (attributes: Record<string, unknown>) => Effect.asVoid(e(op.upsert(attributes))),
      all: (ops: ReadonlyArray<Op>) => e(ops)
    },
    async: {
      ...base,
      activity: (type: string, args?: ReadonlyArray<unknown>, options?: ActivityOptions) => p(op.activity(type, args, options)),
      child: (type: string, args?: ReadonlyArray<unknown>, options?: ChildOptions) => p(op.child(type, args, options)),
      sleep: (duration: number | { seconds: number }) => p(op.timer(seconds(duration)), () => undefined),
      sideEffect: (compute: () => unknown) => p(op.sideEffect(compute)),
      getVersion: (changeId: string, min: number, max: number) => p(op.version(changeId, min, max)),
      patched: (changeId: string) => p(op.version(changeId, -1, 1), (v) => v === 1),
      waitCondition: (predicate: () => boolean, options?: ConditionOptions) => p(op.condition(predicate, options)),
      upsertSearchAttributes: (attributes: Record<string, unknown>) => p(op.upsert(attributes), () => undefined),
      all: (ops: ReadonlyArray<Op>) => p(ops)
    },
    generator: {
      ...base,
      activity: op.activity,
      child: op.child,
      sleep: (duration: number | { seconds: number }) => op.timer(seconds(duration)),
      sideEffect: op.sideEffect,
      getVersion: op.version,
      patched: (changeId: string) => op.version(changeId, -1, 1),
      waitCondition: op.condition,
      upsertSearchAttributes: op.upsert
    }
  }
}

const isOp = (value: unknown): value is Op =>
  typeof value === "object" && value !== null && typeof (value as { _tag?: unknown })._tag === "string" &&
  ["Activity", "Timer", "Child", "SideEffect", "Version", "Condition", "Upsert"].includes((value as { _tag: string })._tag)

/** Drives a generator workflow; a replayed update to settle on the way runs in this fiber. */
const driveGenerator = (
  gen: Generator<unknown, unknown, any>,
  guard: Guard,
  patchedIds: Set<Op>
): Effect.Effect<Ending> =>
  Effect.gen(function*() {
    let next: { readonly send: unknown } | { readonly raise: unknown } = { send: undefined }
    for (;;) {
      let step: IteratorResult<unknown, unknown>
      try {
        step = "raise" in next ? gen.throw(next.raise) : gen.next(next.send)
      } catch (error) {
        return { _tag: "Threw", error } as const
      }
      if (step.done) return { _tag: "Returned", value: step.value } as const
      const yielded: unknown = step.value
      const ops = Array.isArray(yielded) ? yielded : [yielded]
      if (!ops.every(isOp)) {
        next = { raise: new TypeError("a workflow generator must yield ops from its context (or an array of them for a parallel group)") }
        continue
      }
      const asked = Array.isArray(yielded) ? (yielded as ReadonlyArray<Op>) : (yielded as Op)
      let result = guard.attempt(asked)
      while (result._tag === "Settle") {
        yield* result.effect
        result = guard.attempt(asked)
      }
      if (result._tag === "Blocked") return { _tag: "Blocked" } as const
      if (result._tag === "Failed") next = { raise: result.error }
      else next = { send: patchedIds.has(yielded as Op) ? result.value === 1 : result.value }
    }
  })

/**
 * Replays a workflow over a task's history and returns this task's commands. Fails with a
 * {@link ReplayFailure} (a task failure) on non-determinism or undecodable history.
 *
 * @internal
 */
export const replay = <R>(definition: Definition<R>, input: ReplayInput): Effect.Effect<ReplayResult, ReplayFailure, R> =>
  Effect.gen(function*() {
    const history = yield* Effect.try({ try: () => readHistory(input.history, input.codec), catch: (e) => new ReplayFailure(e) })
    const runtime = yield* Effect.runtime<R>()
    // the settles of replayed updates run on this fiber's runtime, out of the workflow's fibers (its
    // races cannot cut them); one still running when the replay ends (it failed, or was interrupted) is cut
    const settlesRunning = new Set<Fiber.RuntimeFiber<void>>()
    const runSettle = (settle: Settle): Promise<void> | undefined => {
      const fiber = Runtime.runFork(runtime)(settle)
      if (fiber.unsafePoll() !== null) return undefined
      settlesRunning.add(fiber)
      return new Promise<void>((resolve) =>
        fiber.addObserver(() => {
          settlesRunning.delete(fiber)
          resolve()
        })
      )
    }
    // the marks of this replay's update handlers name its turn (made just below; read only once a
    // handler runs, after it)
    const owner = (): Turn => turn
    const turn: Turn = new Turn(
      history.resolutions,
      history.scheduled,
      history.receivers,
      input.taskQueue,
      input.encode,
      definition.specs ?? emptySpecs,
      definition.body.style === "generator" ? runUpdate : runUpdateMarked(definition.body.style === "async", owner),
      input.applyingUpdateId,
      history.waits,
      history.outcomes,
      history.unresolved
    )
    const guard = new Guard(turn, runSettle)
    const ending = yield* play(definition, input, turn, guard, history.startedAt).pipe(
      Effect.ensuring(Effect.suspend(() => {
        turn.freeze()
        return settlesRunning.size === 0 ? Effect.void : Fiber.interruptAll(settlesRunning)
      }))
    )
    return yield* Effect.try({
      try: () => ({ commands: finish(input, turn, guard, ending), turn, guard, accepted: history.accepted }),
      catch: (e) => e as ReplayFailure
    })
  })

/**
 * Runs the workflow's code over the turn, to where it returned, threw or blocked. The workflow ends
 * once the ops it asked for have been answered (replayed updates settled on the way included); an
 * op that blocked meanwhile ends it as blocked, as when no update had to settle.
 */
const play = <R>(
  definition: Definition<R>,
  input: ReplayInput,
  turn: Turn,
  guard: Guard,
  startedAt: number | undefined
): Effect.Effect<Ending, never, R> =>
  Effect.gen(function*() {
    const ctx = contexts(baseContext(input, turn, startedAt), guard)
    const body = definition.body
    if (body.style === "generator") {
      const patchedIds = new Set<Op>()
      const genCtx = {
        ...ctx.generator,
        patched: (changeId: string) => {
          const o = op.version(changeId, -1, 1)
          patchedIds.add(o)
          return o
        }
      }
      let gen: Generator<unknown, unknown, any>
      try {
        gen = body.run(genCtx, ...input.args)
      } catch (error) {
        return { _tag: "Threw", error } as const
      }
      return yield* driveGenerator(gen, guard, patchedIds)
    }
    if (body.style === "async") {
      return yield* Effect.promise(() =>
        new Promise<Ending>((resolve) => {
          guard.onBlocked = () => resolve({ _tag: "Blocked" })
          // the body's promise code is no update handler's, whatever context this fiber runs in
          handlerStorage.exit(() =>
            Promise.resolve()
              .then(() => body.run(ctx.async, ...input.args))
              .then(
                (value) => guard.whenIdle(() => resolve({ _tag: "Returned", value })),
                (error) => guard.whenIdle(() => resolve({ _tag: "Threw", error }))
              )
          )
        })
      )
    }
    const blocked = yield* Deferred.make<void>()
    guard.onBlocked = () => Deferred.unsafeDone(blocked, Exit.void)
    const fiber = yield* Effect.fork(Effect.locally(Effect.suspend(() => body.run(ctx.effect, ...input.args)), asker, inWorkflow))
    const first = yield* Effect.raceFirst(
      Effect.map(Fiber.await(fiber), (exit) => Option.some(exit)).pipe(
        Effect.zipLeft(Effect.async<void>((resume) => guard.whenIdle(() => resume(Effect.void))))
      ),
      Effect.as(Deferred.await(blocked), Option.none<Exit.Exit<unknown, unknown>>())
    )
    const ending: Ending = guard.blocked ? { _tag: "Blocked" } : Option.match(first, {
      onNone: (): Ending => ({ _tag: "Blocked" }),
      onSome: (exit): Ending =>
        Exit.isSuccess(exit)
          ? { _tag: "Returned", value: exit.value }
          : {
            _tag: "Threw",
            error: Option.getOrElse(
              Cause.failureOption(exit.cause),
              () => Option.getOrElse(Cause.dieOption(exit.cause), () => new Error("the workflow was interrupted"))
            )
          }
    })
    turn.freeze()
    yield* Fiber.interrupt(fiber)
    return ending
  })

/**
 * What replay waits for of what a recorded update's handler returned while its `UpdateApplied` is
 * replayed: its Effect or promise, run to its end where the turn asks (on the replaying fiber's
 * runtime, with the worker's services, logger, tracer and Clock, as the live update ran), so that
 * the state it leaves is the state the live update left before the code goes on. Its failure is
 * dropped: it was reported when the update was applied (`fail_update`).
 */
const settleOf = (value: unknown): Settle | undefined =>
  Effect.isEffect(value)
    ? Effect.asVoid(Effect.exit(value as Effect.Effect<unknown, unknown>))
    : isPromiseLike(value)
    ? Effect.promise(() => Promise.resolve(value).then(() => undefined, () => undefined))
    : undefined

/** Runs a replayed update's handler (generator workflows: their context has no op to ask for). */
const runUpdate = (_name: string, call: () => unknown): Settle | undefined => settleOf(call())

/**
 * Runs a replayed update's handler marked as such (see {@link callMarked}; the fiber its Effect runs
 * in, which must be the settle's own, and the fibers that one forks): an op it asks for fails the
 * replay. `promises`: the handler of an async workflow.
 */
const runUpdateMarked = (promises: boolean, owner: () => Turn) => (name: string, call: () => unknown): Settle | undefined => {
  const update = updateHandler(name, "replayed", owner())
  // running from its call on: its promise code may ask before its settle starts (a later tick)
  runningEffect.set(update.owner, update)
  let settle: Settle | undefined
  try {
    const value = callMarked(update, call, promises)
    settle = Effect.isEffect(value) ? Effect.zipRight(FiberRef.set(asker, update), settleOf(value)!) : settleOf(value)
  } finally {
    if (settle === undefined) runningEffect.delete(update.owner)
  }
  return settle === undefined ? undefined : asRunning(update, settle)
}


const isPromiseLike = (value: unknown): value is PromiseLike<unknown> =>
  typeof value === "object" && value !== null && typeof (value as { then?: unknown }).then === "function"

/** Calls a receiver and settles what it returned (a value, a promise or an Effect); its failure is the error. */
const callReceiver = (call: () => unknown): Effect.Effect<unknown, unknown> =>
  Effect.suspend(() => {
    let out: unknown
    try {
      out = call()
    } catch (error) {
      return Effect.fail(error)
    }
    if (Effect.isEffect(out)) {
      return (out as Effect.Effect<unknown, unknown>).pipe(
        Effect.catchAllCause((cause) => Cause.isInterruptedOnly(cause) ? Effect.failCause(cause) : Effect.fail(Cause.squash(cause)))
      )
    }
    if (isPromiseLike(out)) return Effect.tryPromise({ try: () => Promise.resolve(out), catch: (error) => error })
    return Effect.succeed(out)
  })

/** Applies every recorded receiver left, settling the updates on the way (in this fiber). */
const applyAllReceivers = (turn: Turn, guard: Guard): Effect.Effect<void, ReplayFailure> =>
  Effect.suspend(() => {
    let settle: Settle | undefined
    try {
      settle = turn.applyAllReceivers()
    } catch (error) {
      return Effect.fail(new ReplayFailure(error))
    }
    // an update handler asked for an op
    if (guard.fatal !== undefined) return Effect.fail(new ReplayFailure(guard.fatal))
    // in a fiber of its own (see runUpdateMarked)
    return settle === undefined ? Effect.void : Effect.zipRight(unlessRefused(guard, settle), applyAllReceivers(turn, guard))
  })

/** Replays, then applies every recorded receiver: the state a query, validator or update sees. */
const replayedState = <R>(definition: Definition<R>, input: ReplayInput) =>
  Effect.flatMap(replay(definition, input), (result) => Effect.as(applyAllReceivers(result.turn, result.guard), result))

/**
 * Replays a workflow, then answers a query from its state. Fails with {@link QueryFailed}.
 *
 * @internal
 */
export const query = <R>(
  definition: Definition<R>,
  input: ReplayInput,
  name: string,
  args: ReadonlyArray<unknown>
): Effect.Effect<unknown, QueryFailed, R> =>
  Effect.gen(function*() {
    const replayed = yield* Effect.either(replayedState(definition, input))
    if (Either.isLeft(replayed)) {
      return yield* new QueryFailed({
        reason: "query_workflow_state_unavailable",
        message: `workflow replay failed before query: ${messageOf(replayed.left.error)}`
      })
    }
    const { guard, turn } = replayed.right
    const handler = turn.queryHandlers.get(name)
    if (handler === undefined) {
      return yield* new QueryFailed({ reason: "rejected_unknown_query", message: `unknown query '${name}'` })
    }
    const fitted = fitArguments(`query '${name}'`, definition.specs?.queries[name], args)
    if (Either.isLeft(fitted)) return yield* new QueryFailed({ reason: "query_rejected", message: fitted.left.message })
    // a query that asked for an op fails with the refusal, as with its own failure
    const outcome = yield* callAfterReplay(guard, queryHandler(name, turn), definition.body.style, () => handler(...fitted.right)).pipe(
      Effect.catchAll((refused) => Effect.succeed(Either.left(refused.error)))
    )
    if (Either.isLeft(outcome)) return yield* new QueryFailed({ reason: "query_rejected", message: messageOf(outcome.left) })
    return outcome.right
  })

const failUpdate = (updateId: string, type: string, message: string, nonRetryable = true): Command => ({
  type: "fail_update",
  update_id: updateId,
  message,
  exception_type: type,
  exception_class: `effect-durable-worker.${type}`,
  ...(nonRetryable ? { non_retryable: true } : {})
})

/**
 * Applies an accepted update (an accepted-update task): replays, finds the `UpdateAccepted` of
 * `updateId`, decodes its arguments and runs the handler. The one command is `complete_update`
 * with the result, or `fail_update` (non-retryable unless the error says `retryable: true`) —
 * `UpdateNotFound`, `InvalidUpdate` or `UnknownUpdate` when the update itself cannot be applied.
 * Fails with a {@link ReplayFailure} (a task failure) when replay fails.
 *
 * @internal
 */
export const applyUpdate = <R>(
  definition: Definition<R>,
  input: ReplayInput,
  updateId: string
): Effect.Effect<Command, ReplayFailure, R> =>
  Effect.gen(function*() {
    const { accepted, guard, turn } = yield* replayedState(definition, { ...input, applyingUpdateId: updateId })
    const update = accepted.find((u) => u.updateId === updateId)
    if (update === undefined) {
      return failUpdate(updateId, "UpdateNotFound", `update '${updateId}' has no UpdateAccepted event in the history of this run`)
    }
    let args: ReadonlyArray<unknown>
    try {
      args = decodeArgs(update.arguments, update.codec)
    } catch (error) {
      return failUpdate(updateId, "InvalidUpdate", `cannot decode the arguments of update '${update.name}': ${messageOf(error)}`)
    }
    const handler = turn.updateHandlers.get(update.name)
    if (handler === undefined) {
      return failUpdate(updateId, "UnknownUpdate", `unknown update '${update.name}' for workflow type '${definition.name}'`)
    }
    const fitted = fitArguments(`update '${update.name}'`, definition.specs?.updates[update.name], args)
    if (Either.isLeft(fitted)) return failUpdate(updateId, "InvalidUpdate", fitted.left.message)
    // an op it asks for (the turn is over) fails the task, as in a replay
    const applying = updateHandler(update.name, "applied", turn)
    const outcome = yield* callAfterReplay(guard, applying, definition.body.style, () => handler(...fitted.right))
    if (Either.isLeft(outcome)) {
      const error = outcome.left
      const retryable = typeof error === "object" && error !== null && (error as { retryable?: unknown }).retryable === true
      return { ...failUpdate(updateId, errorName(error), messageOf(error), !retryable), exception_class: errorClass(error) }
    }
    const result = outcome.right === undefined ? null : outcome.right
    try {
      return { type: "complete_update", update_id: updateId, result: input.encode(result) }
    } catch (error) {
      if (!(error instanceof Codec.PayloadEncodeError)) return yield* Effect.fail(new ReplayFailure(error))
      const refused = unserializable(`the result of update ${JSON.stringify(update.name)}`, error)
      return failUpdate(updateId, refused.type, refused.message)
    }
  })

/**
 * Validates an update before the server accepts it (an update-validation task): replays and runs
 * only the validator. {@link UpdateRejected} when the validator returned `false` or failed (or the
 * arguments do not fit the declaration); {@link UpdateValidationFailed} when the update has no
 * declared validator, no handler, or replay failed.
 *
 * @internal
 */
export const validateUpdate = <R>(
  definition: Definition<R>,
  input: ReplayInput,
  name: string,
  args: ReadonlyArray<unknown>
): Effect.Effect<void, UpdateRejected | UpdateValidationFailed, R> =>
  Effect.gen(function*() {
    const specs = definition.specs ?? emptySpecs
    if (!specs.updateValidators.includes(name)) {
      return yield* new UpdateValidationFailed({
        message: `workflow type '${definition.name}' declares no validator for update '${name}'`
      })
    }
    const replayed = yield* Effect.either(replayedState(definition, input))
    if (Either.isLeft(replayed)) {
      return yield* new UpdateValidationFailed({ message: `workflow replay failed before update validation: ${messageOf(replayed.left.error)}` })
    }
    const { guard, turn } = replayed.right
    const validator = turn.updateValidators.get(name)
    if (validator === undefined || !turn.updateHandlers.has(name)) {
      return yield* new UpdateValidationFailed({
        message: `unknown update '${name}': the workflow registered no ${validator === undefined ? "validator" : "handler"} for it`
      })
    }
    const fitted = fitArguments(`update '${name}'`, specs.updates[name], args)
    if (Either.isLeft(fitted)) return yield* rejectedBy(fitted.left)
    // a validator that asked for an op is broken: no verdict
    const verdict = yield* callAfterReplay(guard, updateValidator(name, turn), definition.body.style, () => validator(...fitted.right)).pipe(
      Effect.mapError((refused) => new UpdateValidationFailed({ message: messageOf(refused.error) }))
    )
    if (Either.isLeft(verdict)) {
      const error = verdict.left
      if (error instanceof UpdateRejected) return yield* error
      const errors = (error as { errors?: unknown; validationErrors?: unknown } | null)?.validationErrors ??
        (error as { errors?: unknown } | null)?.errors
      return yield* new UpdateRejected({
        message: messageOf(error),
        ...(isErrorMap(errors) ? { validationErrors: errors } : {})
      })
    }
    if (verdict.right === false) return yield* new UpdateRejected({ message: `update '${name}' was rejected by its validator` })
  })

const rejectedBy = (mismatch: ArgumentsMismatch) =>
  new UpdateRejected({ message: mismatch.message, validationErrors: mismatch.errors })

const isErrorMap = (value: unknown): value is Record<string, ReadonlyArray<string>> =>
  typeof value === "object" && value !== null && !Array.isArray(value) &&
  Object.values(value).every((v) => Array.isArray(v) && v.every((m) => typeof m === "string"))

/** Encodes a value as an inline Avro envelope, throwing the codec's error. @internal */
export const encodeInline = (value: unknown): Codec.AvroPayloadEnvelope =>
  Either.getOrThrowWith(Codec.encodeEnvelope(value), (error) => error)
