import * as Cause from "effect/Cause"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Runtime from "effect/Runtime"
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
 * Attempts an op, recording a non-determinism error on the turn (so workflow code cannot swallow
 * it). Ops are answered one at a time: an op whose attempt has to settle a replayed update holds
 * the turn until it is answered, and ops asked for meanwhile wait for it in the order they asked.
 */
class Guard {
  fatal: unknown = undefined
  blocked = false
  onBlocked: () => void = () => {}
  /** Whether an op holds the turn (it is settling a replayed update). */
  busy = false
  private readonly waiting: Array<() => void> = []
  constructor(readonly turn: Turn) {}
  /** Queues `resume`, called when the turn is handed to it; returns how to leave the queue. */
  queue(resume: () => void): () => void {
    this.waiting.push(resume)
    return () => {
      const at = this.waiting.indexOf(resume)
      if (at >= 0) this.waiting.splice(at, 1)
    }
  }
  /** Hands the turn to the next op waiting for it, else frees it. */
  release(): void {
    const next = this.waiting.shift()
    if (next === undefined) this.busy = false
    else next()
  }
  attempt(ops: Op | ReadonlyArray<Op>): Attempt {
    if (this.fatal !== undefined || this.blocked) return { _tag: "Blocked" }
    try {
      const result = Array.isArray(ops) ? this.turn.attemptAll(ops) : this.turn.attempt(ops as Op)
      if (result._tag === "Blocked") {
        this.blocked = true
        this.onBlocked()
      }
      return result
    } catch (error) {
      this.fatal = error
      this.blocked = true
      this.onBlocked()
      return { _tag: "Blocked" }
    }
  }
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

/** Asks for `ops` until the turn answers, running each settle it asks for first (in this fiber). */
const settling = (guard: Guard, ops: Op | ReadonlyArray<Op>): Effect.Effect<Attempt> =>
  Effect.suspend(() => {
    const result = guard.attempt(ops)
    return result._tag === "Settle" ? Effect.zipRight(result.effect, settling(guard, ops)) : Effect.succeed(result)
  })

/** Waits for the turn, then runs `effect` holding it. */
const inTurn = <A>(guard: Guard, effect: Effect.Effect<A>): Effect.Effect<A> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.zipRight(
      restore(Effect.async<void>((resume) => Effect.sync(guard.queue(() => resume(Effect.void))))),
      Effect.ensuring(restore(effect), Effect.sync(() => guard.release()))
    )
  )

const answer = (result: Attempt): Effect.Effect<any, ActivityFailed | ChildWorkflowFailed> =>
  result._tag === "Resolved"
    ? Effect.succeed(result.value)
    : result._tag === "Failed"
    ? Effect.fail(result.error)
    : Effect.never

/** An op as an Effect: a replayed update to settle on the way runs in the fiber that asked. */
const effectOp = (guard: Guard) => (ops: Op | ReadonlyArray<Op>): Effect.Effect<any, ActivityFailed | ChildWorkflowFailed> =>
  Effect.suspend(() => {
    if (guard.busy) return Effect.flatMap(inTurn(guard, settling(guard, ops)), answer)
    const result = guard.attempt(ops)
    if (result._tag !== "Settle") return answer(result)
    guard.busy = true
    return Effect.flatMap(Effect.ensuring(Effect.zipRight(result.effect, settling(guard, ops)), Effect.sync(() => guard.release())), answer)
  })

const answerAsync = (result: Attempt): Promise<any> =>
  result._tag === "Resolved"
    ? Promise.resolve(result.value)
    : result._tag === "Failed"
    ? Promise.reject(result.error)
    : new Promise(() => {})

/** {@link settling} for async workflows: `run` runs each settle. */
const settlingAsync = async (guard: Guard, ops: Op | ReadonlyArray<Op>, run: (settle: Settle) => Promise<void>): Promise<Attempt> => {
  for (;;) {
    const result = guard.attempt(ops)
    if (result._tag !== "Settle") return result
    await run(result.effect)
  }
}

/** An op as a promise: a replayed update to settle on the way is run by `run` (on the replaying fiber's runtime). */
const promiseOp = (guard: Guard, run: (settle: Settle) => Promise<void>) => (ops: Op | ReadonlyArray<Op>): Promise<any> => {
  let held: Promise<Attempt>
  if (guard.busy) {
    held = new Promise<void>((resolve) => guard.queue(resolve)).then(() => settlingAsync(guard, ops, run))
  } else {
    const result = guard.attempt(ops)
    if (result._tag !== "Settle") return answerAsync(result)
    guard.busy = true
    held = run(result.effect).then(() => settlingAsync(guard, ops, run))
  }
  return held.finally(() => guard.release()).then(answerAsync)
}

const seconds = (duration: number | { readonly seconds: number }) => typeof duration === "number" ? duration : duration.seconds

const contexts = (base: BaseContext, guard: Guard, run: (settle: Settle) => Promise<void>) => {
  const e = effectOp(guard)
  const p = promiseOp(guard, run)
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
      sleep: (duration: number | { seconds: number }) => p(op.timer(seconds(duration))).then(() => undefined),
      sideEffect: (compute: () => unknown) => p(op.sideEffect(compute)),
      getVersion: (changeId: string, min: number, max: number) => p(op.version(changeId, min, max)),
      patched: (changeId: string) => p(op.version(changeId, -1, 1)).then((v) => v === 1),
      waitCondition: (predicate: () => boolean, options?: ConditionOptions) => p(op.condition(predicate, options)),
      upsertSearchAttributes: (attributes: Record<string, unknown>) => p(op.upsert(attributes)).then(() => undefined),
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
    const turn = new Turn(
      history.resolutions,
      history.scheduled,
      history.receivers,
      input.taskQueue,
      input.encode,
      definition.specs ?? emptySpecs,
      settleDuringReplay,
      input.applyingUpdateId,
      history.waits,
      history.outcomes
    )
    const accepted = history.accepted
    const guard = new Guard(turn)
    const base = baseContext(input, turn, history.startedAt)
    // async workflows run outside this fiber: their settles run on its runtime, and end with the replay
    const settlesRunning = new Set<Fiber.RuntimeFiber<void>>()
    const runSettle = (settle: Settle) =>
      new Promise<void>((resolve) => {
        const fiber = Runtime.runFork(runtime)(settle)
        settlesRunning.add(fiber)
        fiber.addObserver(() => {
          settlesRunning.delete(fiber)
          resolve()
        })
      })
    const ctx = contexts(base, guard, runSettle)
    const body = definition.body
    let ending: Ending
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
        return yield* Effect.try({
          try: () => ({ commands: finish(input, turn, guard, { _tag: "Threw", error }), turn, accepted }),
          catch: (e) => e as ReplayFailure
        })
      }
      ending = yield* driveGenerator(gen, guard, patchedIds)
    } else if (body.style === "async") {
      ending = yield* Effect.promise(() =>
        new Promise<Ending>((resolve) => {
          guard.onBlocked = () => resolve({ _tag: "Blocked" })
          Promise.resolve()
            .then(() => body.run(ctx.async, ...input.args))
            .then((value) => resolve({ _tag: "Returned", value }), (error) => resolve({ _tag: "Threw", error }))
        })
      ).pipe(Effect.ensuring(Effect.suspend(() => {
        turn.freeze()
        return Fiber.interruptAll(settlesRunning)
      })))
    } else {
      const blocked = yield* Deferred.make<void>()
      guard.onBlocked = () => Deferred.unsafeDone(blocked, Exit.void)
      const fiber = yield* Effect.fork(Effect.suspend(() => body.run(ctx.effect, ...input.args)))
      const first = yield* Effect.raceFirst(
        Effect.map(Fiber.await(fiber), (exit) => Option.some(exit)),
        Effect.as(Deferred.await(blocked), Option.none<Exit.Exit<unknown, unknown>>())
      )
      turn.freeze()
      yield* Fiber.interrupt(fiber)
      ending = Option.match(first, {
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
    }
    return yield* Effect.try({ try: () => ({ commands: finish(input, turn, guard, ending), turn, accepted }), catch: (e) => e as ReplayFailure })
  })

/**
 * What replay waits for of what an update handler returned while an `UpdateApplied` is replayed:
 * its Effect or promise, run to its end where the turn asks (the replaying fiber, with the worker's
 * services, logger, tracer and Clock, as the live update ran), so that the state it leaves is the
 * state the live update left before the code goes on. Its failure is dropped: it was reported when
 * the update was applied (`fail_update`).
 */
const settleDuringReplay = (value: unknown): Settle | undefined =>
  Effect.isEffect(value)
    ? Effect.asVoid(Effect.exit(value as Effect.Effect<unknown, unknown>))
    : isPromiseLike(value)
    ? Effect.promise(() => Promise.resolve(value).then(() => undefined, () => undefined))
    : undefined

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
const applyAllReceivers = (turn: Turn): Effect.Effect<void, ReplayFailure> =>
  Effect.suspend(() => {
    let settle: Settle | undefined
    try {
      settle = turn.applyAllReceivers()
    } catch (error) {
      return Effect.fail(new ReplayFailure(error))
    }
    return settle === undefined ? Effect.void : Effect.zipRight(settle, applyAllReceivers(turn))
  })

/** Replays, then applies every recorded receiver: the state a query, validator or update sees. */
const replayedState = <R>(definition: Definition<R>, input: ReplayInput) =>
  Effect.flatMap(replay(definition, input), (result) => Effect.as(applyAllReceivers(result.turn), result))

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
    const turn = replayed.right.turn
    const handler = turn.queryHandlers.get(name)
    if (handler === undefined) {
      return yield* new QueryFailed({ reason: "rejected_unknown_query", message: `unknown query '${name}'` })
    }
    const fitted = fitArguments(`query '${name}'`, definition.specs?.queries[name], args)
    if (Either.isLeft(fitted)) return yield* new QueryFailed({ reason: "query_rejected", message: fitted.left.message })
    return yield* callReceiver(() => handler(...fitted.right)).pipe(
      Effect.mapError((error) => new QueryFailed({ reason: "query_rejected", message: messageOf(error) }))
    )
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
    const { accepted, turn } = yield* replayedState(definition, { ...input, applyingUpdateId: updateId })
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
    const outcome = yield* Effect.either(callReceiver(() => handler(...fitted.right)))
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
    const { turn } = replayed.right
    const validator = turn.updateValidators.get(name)
    if (validator === undefined || !turn.updateHandlers.has(name)) {
      return yield* new UpdateValidationFailed({
        message: `unknown update '${name}': the workflow registered no ${validator === undefined ? "validator" : "handler"} for it`
      })
    }
    const fitted = fitArguments(`update '${name}'`, specs.updates[name], args)
    if (Either.isLeft(fitted)) return yield* rejectedBy(fitted.left)
    const verdict = yield* Effect.either(callReceiver(() => validator(...fitted.right)))
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
