import type * as Clock from "effect/Clock"
import * as Either from "effect/Either"
import * as Effect from "effect/Effect"
import * as Runtime from "effect/Runtime"
import type { StepEvent } from "../../../wire/StepProtocol.js"
import type {
  HistoryEvent,
  HistoryEventKind,
  PendingSignal,
  WorkflowCommand,
  WorkflowDecision,
  WorkflowStepError,
  WorkflowStepEvent,
  WorkflowTask
} from "../../../wire/WorkflowProtocol.js"
import { encodableEvents, makeStepLogger, type StepLogger } from "../stepLogger.js"
import { unencodable, unserializableError } from "../../../wire/internal/json.js"
import { type SleepDuration, toSleepMillis } from "./duration.js"
import {
  type FatalReplayError,
  GatherFailed,
  type GatherItemFailure,
  InvalidWorkflowCall,
  NondeterminismError,
  StepFailed,
  UnsupportedInRemoteWorkflow
} from "./errors.js"
import { toWorkflowStepError } from "./failure.js"

/**
 * What a local op's body (a `sideEffect`, a gather item) is handed: where it runs in the run, a
 * logger whose lines and sub-process outcomes are recorded with the step, and an `AbortSignal` that a
 * fail-fast gather aborts when a sibling fails (cooperative: nothing is interrupted).
 *
 * @since 0.1.0
 * @category models
 */
export interface LocalStep {
  readonly runId: string
  readonly seq: number
  readonly name: string
  readonly log: StepLogger
  readonly signal: AbortSignal
}

/**
 * Options of a dispatched step. Only `group` travels on the wire: the partition the step is routed
 * to (the engine sends it to `tenantGroup(sanitizeQueueToken(name), group)`, so `"pipeline"` reaches the
 * step workers started with that partition); without it the worker's partition is used. The other
 * keys are engine-side settings the wire has no room for: setting one fails the turn with
 * `UnsupportedInRemoteWorkflow`, so code written for the in-process engine does not silently lose a
 * retry policy or a compensation.
 *
 * @since 0.1.0
 * @category models
 */
export interface StepOptions {
  readonly group?: string | undefined
  readonly retries?: unknown
  readonly backoff?: unknown
  readonly timeoutMs?: unknown
  readonly compensate?: unknown
  readonly priority?: unknown
}

/**
 * One dispatched step of a `gatherCalls`: `{ name, input?, group? }`, `[name, input]` or
 * `[name, input, group]`.
 *
 * @since 0.1.0
 * @category models
 */
export type CallSpec =
  | { readonly name: string; readonly input?: unknown; readonly group?: string | undefined }
  | readonly [name: string, input: unknown]
  | readonly [name: string, input: unknown, group: string | undefined]

/**
 * How a gather treats failures: `waitAll` (default) waits for every item and reports every failure;
 * `failFast` reports the first failure seen (a local gather still runs and records every item, and
 * aborts the siblings' `signal`).
 *
 * @since 0.1.0
 * @category models
 */
export interface GatherOptions {
  readonly mode?: "waitAll" | "failFast" | undefined
}

/**
 * The result of one durable op as the replay sees it, before an adapter turns it into an `Effect`
 * or a `Promise`.
 *
 * @internal
 */
export type Outcome<A> =
  | { readonly _tag: "Value"; readonly value: A }
  | { readonly _tag: "Failed"; readonly error: StepFailed }
  | { readonly _tag: "Blocked" }
  | { readonly _tag: "Cancelled" }
  | { readonly _tag: "Fatal"; readonly error: FatalReplayError }
  | { readonly _tag: "Closed" }

/** A local op that is not in history and must run now. @internal */
export interface LocalRun {
  readonly _tag: "Run"
  readonly seq: number
  readonly name: string
}

/** The items of a local gather that must run now (history does not hold all of them). @internal */
export interface GatherRun {
  readonly _tag: "Run"
  readonly items: ReadonlyArray<{ readonly seq: number; readonly name: string }>
  readonly parallelGroup: string
}

/** How one local body ended. @internal */
export type LocalResult =
  | { readonly _tag: "Success"; readonly value: unknown }
  | { readonly _tag: "Failure"; readonly error: WorkflowStepError }

/** A running local step: its logger scope and the events it has logged so far. @internal */
export interface LocalScope {
  readonly step: LocalStep
  readonly events: Array<StepEvent>
  readonly startedAt: number
}

/**
 * How the workflow body ended, as the driver saw it: it returned, it failed, or it stopped without a
 * result (blocked on an op, or cancelled).
 *
 * @internal
 */
export type BodyOutcome =
  | { readonly _tag: "Completed"; readonly value: unknown }
  | { readonly _tag: "Failed"; readonly failure: unknown }
  | { readonly _tag: "Stopped" }

/** Options of one turn. @internal */
export interface TurnOptions {
  readonly partition: string
  readonly isCancelled: ((runId: string) => boolean) | undefined
  readonly onStepEvent: ((event: WorkflowStepEvent) => void) | undefined
  readonly yieldEvery: number
  readonly yieldAfterMs: number
  /** The Clock for `now` and local step windows; read from `runtime` when not given (once, on first use). */
  readonly clock?: Clock.Clock | undefined
  readonly runtime: Runtime.Runtime<never>
}

const UNSUPPORTED_STEP_OPTIONS = ["retries", "backoff", "timeoutMs", "compensate", "priority"] as const

const value = <A>(a: A): Outcome<A> => ({ _tag: "Value", value: a })

/**
 * History by seq. The engine sends history ordered by seq from 0 with no gap, so the task's own
 * array usually is the index (checked, not assumed); otherwise a sparse array, or a map when seqs are
 * too far apart for one. A duplicate seq resolves to its last entry, as in the engine's workers.
 */
const indexHistory = (
  history: ReadonlyArray<HistoryEvent>
): ReadonlyArray<HistoryEvent | undefined> | ReadonlyMap<number, HistoryEvent> => {
  let dense = true
  let max = -1
  for (let i = 0; i < history.length; i++) {
    const seq = history[i]!.seq
    if (seq !== i) dense = false
    if (seq > max) max = seq
  }
  if (dense) return history
  if (max < 2 * history.length + 64) {
    const bySeq = new Array<HistoryEvent | undefined>(max + 1)
    for (const event of history) {
      if (event.seq >= 0) bySeq[event.seq] = event
    }
    return bySeq
  }
  const bySeq = new Map<number, HistoryEvent>()
  for (const event of history) bySeq.set(event.seq, event)
  return bySeq
}

/** Ops read the clock for `yieldAfterMs` at most this many resolutions apart (see `takeYield`). */
const MAX_CLOCK_STRIDE = 16
const BLOCKED: Outcome<never> = { _tag: "Blocked" }
const CANCELLED: Outcome<never> = { _tag: "Cancelled" }
const CLOSED: Outcome<never> = { _tag: "Closed" }

/**
 * The first command (of `commands`, in order) carrying a value of the body's that JSON cannot carry:
 * a step's or a child's input, a local op's output. Its index and the error the turn fails with.
 */
const unencodableCommand = (
  commands: ReadonlyArray<WorkflowCommand>
): { readonly index: number; readonly error: WorkflowStepError } | undefined => {
  for (let index = 0; index < commands.length; index++) {
    const command = commands[index]!
    switch (command.kind) {
      case "call":
      case "startChild": {
        const bad = unencodable(command.input)
        if (bad === undefined) continue
        const what = command.kind === "call"
          ? `the input of step ${JSON.stringify(command.name)} (seq ${command.seq})`
          : `the input of child workflow ${JSON.stringify(command.workflow)} (seq ${command.seq})`
        return { index, error: unserializableError(what, bad, "unserializable_input") }
      }
      case "recordStep": {
        const bad = unencodable(command.output)
        if (bad === undefined) continue
        return { index, error: unserializableError(`the output of local step ${JSON.stringify(command.name)} (seq ${command.seq})`, bad) }
      }
    }
  }
  return undefined
}

const normalizeCall = (
  spec: CallSpec
): { readonly name: string; readonly input: unknown; readonly group: string | undefined } => {
  if (Array.isArray(spec)) {
    const tuple = spec as ReadonlyArray<unknown>
    return { name: tuple[0] as string, input: tuple[1], group: tuple[2] as string | undefined }
  }
  const object = spec as { readonly name: string; readonly input?: unknown; readonly group?: string | undefined }
  return { name: object.name, input: object.input, group: object.group }
}

/**
 * The state of one workflow turn: history indexed by seq, the seq counter, the commands produced so
 * far and how the turn stands (blocked, cancelled, poisoned by a fatal error, closed). Synchronous and
 * free of any I/O; the Effect and Promise contexts are thin adapters over it, so both replay the
 * same way. Every op costs O(1) amortised, so a turn is linear in history length.
 *
 * @internal
 */
export class Turn {
  readonly runId: string
  /** History by seq as an array (the usual case), else as a map: see {@link indexHistory}. */
  private readonly historyList: ReadonlyArray<HistoryEvent | undefined> | undefined
  private readonly historyMap: ReadonlyMap<number, HistoryEvent> | undefined
  private readonly signals: ReadonlyMap<number, PendingSignal> | undefined
  private readonly isCancelled: ((runId: string) => boolean) | undefined
  /**
   * The outcome of an op replayed to a value, reused (its adapters read it at once): a long replay
   * allocates nothing per op for it.
   */
  private readonly replayedValue: { readonly _tag: "Value"; value: unknown } = { _tag: "Value", value: undefined }
  private readonly commands: Array<WorkflowCommand> = []
  private seq = 0
  /** Ops resolved so far this turn: replayed from history, or run locally and recorded. */
  private resolvedOps = 0
  private resolvedAtLastYield = 0
  /** When the turn last let the event loop run (`performance.now()`: scheduling only, never decisions). */
  private lastYieldAt = performance.now()
  /** When `takeYield` last read the clock, how many resolutions until it reads it again, and that stride. */
  private lastClockAt = this.lastYieldAt
  private clockCountdown = 1
  private clockStride = 1
  private fatalError: { readonly error: FatalReplayError; readonly commandCount: number } | undefined
  /** Ops that recorded a command and wait for a result that is not in history. */
  blocked = 0
  /** The run was found cancelled at an op boundary. */
  cancelled = false
  /** The turn has been decided; later ops do nothing and never resolve. */
  closed = false

  constructor(readonly task: WorkflowTask, private readonly options: TurnOptions) {
    this.runId = task.runId
    this.isCancelled = options.isCancelled
    const index = indexHistory(task.history)
    this.historyList = Array.isArray(index) ? index : undefined
    this.historyMap = Array.isArray(index) ? undefined : index as ReadonlyMap<number, HistoryEvent>
    this.signals = task.pendingSignals === undefined || task.pendingSignals.length === 0
      ? undefined
      : new Map(task.pendingSignals.map((signal) => [signal.seq, signal]))
  }

  /** The first fatal error of the turn, if any. */
  get fatal(): FatalReplayError | undefined {
    return this.fatalError?.error
  }

  /**
   * Whether the op that just resolved should let the event loop run first: true once `yieldEvery` ops
   * resolved since the last yield (replayed from history, or run locally: a turn that runs thousands
   * of local ops is as long as one that replays them), or once the turn has held the event loop for
   * `yieldAfterMs` (workflow code that computes between ops makes each op slow). Yielding only delays a
   * resolution, so it never changes the decision.
   *
   * Reading the clock costs as much as replaying an op, so while ops come fast (the resolutions since
   * the last reading took under 1/64 of `yieldAfterMs`) the clock is read half as often, down to every
   * {@link MAX_CLOCK_STRIDE}th resolution; one slow stretch reads it at every op again.
   */
  takeYield(): boolean {
    const options = this.options
    if (options.yieldEvery <= 0) return false
    if (this.resolvedOps - this.resolvedAtLastYield >= options.yieldEvery) return this.yielded(performance.now())
    if (--this.clockCountdown > 0) return false
    const now = performance.now()
    this.clockStride = now - this.lastClockAt < options.yieldAfterMs / 64
      ? Math.min(this.clockStride * 2, MAX_CLOCK_STRIDE)
      : 1
    this.clockCountdown = this.clockStride
    this.lastClockAt = now
    return now - this.lastYieldAt >= options.yieldAfterMs && this.yielded(now)
  }

  private yielded(now: number): true {
    this.resolvedAtLastYield = this.resolvedOps
    this.lastYieldAt = now
    this.lastClockAt = now
    this.clockCountdown = 1
    this.clockStride = 1
    return true
  }

  private clockInstance: Clock.Clock | undefined

  /**
   * The turn's Clock. Looked up in the runtime only when a turn first needs it (a local op): most
   * turns only replay, and the lookup is a fixed cost of every turn otherwise.
   */
  private get clock(): Clock.Clock {
    return this.clockInstance ??= this.options.clock ?? Runtime.runSync(this.options.runtime)(Effect.clock)
  }

  now(): number {
    return this.clock.unsafeCurrentTimeMillis()
  }

  private poison(error: FatalReplayError): Outcome<never> {
    if (this.fatalError === undefined) this.fatalError = { error, commandCount: this.commands.length }
    return { _tag: "Fatal", error }
  }

  /** Fails the turn because `op` has no command on the wire. */
  unsupported(op: string): Outcome<never> {
    if (this.closed) return CLOSED
    return this.poison(new UnsupportedInRemoteWorkflow({ op }))
  }

  private invalid(op: string, reason: string): Outcome<never> {
    return this.poison(new InvalidWorkflowCall({ op, reason }))
  }

  /** The next seq, or why the op must stop: the single cancellation check point. */
  private next(): number | Outcome<never> {
    if (this.closed) return CLOSED
    if (this.isCancelled !== undefined && this.isCancelled(this.runId) === true) {
      this.cancelled = true
      return CANCELLED
    }
    return this.seq++
  }

  private eventAt(seq: number): HistoryEvent | undefined {
    return this.historyList !== undefined ? this.historyList[seq] : this.historyMap!.get(seq)
  }

  /**
   * The history entry at `seq`, `undefined` when the op is new, or a fatal outcome when history holds
   * another kind or another name there (a missing name in history matches any name). `name`
   * `undefined` skips the name check; `seqAlias` also accepts `<name>#<seq>` (how the Python worker
   * names its `now` records).
   */
  private lookup(
    seq: number,
    kind: HistoryEventKind,
    name: string | undefined,
    seqAlias = false
  ): HistoryEvent | undefined | Outcome<never> {
    const event = this.eventAt(seq)
    if (event === undefined) return undefined
    if (
      event.kind !== kind ||
      (name !== undefined && event.name !== undefined && event.name !== name &&
        !(seqAlias && event.name === `${name}#${seq}`))
    ) {
      return this.poison(
        new NondeterminismError({
          runId: this.runId,
          seq,
          recordedKind: event.kind,
          ...(event.name === undefined ? {} : { recordedName: event.name }),
          reachedKind: kind,
          ...(name === undefined ? {} : { reachedName: name })
        })
      )
    }
    this.resolvedOps++
    return event
  }

  private resolved<A>(event: HistoryEvent): Outcome<A> {
    if (event.error !== undefined) return { _tag: "Failed", error: new StepFailed({ error: event.error }) }
    this.replayedValue.value = event.output
    return this.replayedValue as Outcome<A>
  }

  private block(command: WorkflowCommand): Outcome<never> {
    this.commands.push(command)
    this.blocked++
    return BLOCKED
  }

  // -- blocking ops -----------------------------------------------------------------------------

  step<A>(name: string, input: unknown, options: StepOptions | undefined): Outcome<A> {
    if (this.closed) return CLOSED
    if (typeof name !== "string" || name.length === 0) return this.invalid("step", "the step name must be a non-empty string")
    if (options !== undefined) {
      for (const key of UNSUPPORTED_STEP_OPTIONS) {
        if (options[key] != null) return this.unsupported(`step(..., { ${key} })`)
      }
    }
    const seq = this.next()
    if (typeof seq !== "number") return seq
    const event = this.lookup(seq, "call", name)
    if (event !== undefined) return "_tag" in event ? event : this.resolved(event)
    return this.block({ kind: "call", seq, name, group: options?.group ?? this.options.partition, input })
  }

  sleep(duration: SleepDuration): Outcome<void> {
    if (this.closed) return CLOSED
    const ms = toSleepMillis(duration)
    if (Either.isLeft(ms)) return this.invalid("sleep", ms.left)
    const seq = this.next()
    if (typeof seq !== "number") return seq
    const event = this.lookup(seq, "timer", undefined)
    if (event !== undefined) return "_tag" in event ? event : this.resolved(event)
    return this.block({ kind: "sleep", seq, ms: ms.right })
  }

  waitForSignal<A>(name: string, options: { readonly timeoutMs?: number | undefined } | undefined): Outcome<A> {
    if (this.closed) return CLOSED
    if (options?.timeoutMs != null) return this.unsupported("waitForSignal(..., { timeoutMs })")
    if (typeof name !== "string" || name.length === 0) {
      return this.invalid("waitForSignal", "the signal name must be a non-empty string")
    }
    const seq = this.next()
    if (typeof seq !== "number") return seq
    const event = this.lookup(seq, "signal", name)
    if (event !== undefined) return "_tag" in event ? event : this.resolved(event)
    const pending = this.signals?.get(seq)
    if (pending !== undefined) return value(pending.payload as A)
    return this.block({ kind: "waitSignal", seq, signal: name })
  }

  child<A>(workflow: string, input: unknown): Outcome<A> {
    if (this.closed) return CLOSED
    if (typeof workflow !== "string" || workflow.length === 0) {
      return this.invalid("child", "the child workflow name must be a non-empty string")
    }
    const seq = this.next()
    if (typeof seq !== "number") return seq
    const event = this.lookup(seq, "child", workflow)
    if (event !== undefined) return "_tag" in event ? event : this.resolved(event)
    return this.block({ kind: "startChild", seq, workflow, input })
  }

  /** A fan of dispatched steps (`call`) or child runs (`startChild`) sharing one `parallelGroup`. */
  private fan<A>(
    kind: "call" | "child",
    items: ReadonlyArray<{ readonly name: string; readonly command: (seq: number, parallelGroup: string) => WorkflowCommand }>,
    mode: GatherOptions["mode"]
  ): Outcome<Array<A>> {
    if (this.closed) return CLOSED
    if (items.length === 0) return value([])
    const seqs: Array<number> = []
    for (let i = 0; i < items.length; i++) {
      const seq = this.next()
      if (typeof seq !== "number") return seq
      seqs.push(seq)
    }
    const parallelGroup = `gather:${seqs[0]!}`
    const events: Array<HistoryEvent | undefined> = []
    for (let i = 0; i < items.length; i++) {
      const event = this.lookup(seqs[i]!, kind, items[i]!.name)
      if (event !== undefined && "_tag" in event) return event
      events.push(event)
    }
    const labelOf = (i: number) => kind === "call" ? events[i]?.name ?? items[i]!.name : items[i]!.name
    if (mode === "failFast") {
      const failed = events.findIndex((event) => event?.error !== undefined)
      if (failed >= 0) return { _tag: "Failed", error: new GatherFailed([{ name: labelOf(failed), error: events[failed]!.error! }]) }
    }
    let missing = false
    for (let i = 0; i < items.length; i++) {
      if (events[i] === undefined) {
        this.commands.push(items[i]!.command(seqs[i]!, parallelGroup))
        missing = true
      }
    }
    if (missing) {
      this.blocked++
      return BLOCKED
    }
    const failures: Array<GatherItemFailure> = []
    const outputs = events.map((event, i) => {
      if (event!.error !== undefined) failures.push({ name: labelOf(i), error: event!.error })
      return event!.output as A
    })
    return failures.length > 0 ? { _tag: "Failed", error: new GatherFailed(failures) } : value(outputs)
  }

  gatherCalls<A>(calls: ReadonlyArray<CallSpec>, options: GatherOptions | undefined): Outcome<Array<A>> {
    if (this.closed) return CLOSED
    const normalized = calls.map(normalizeCall)
    if (normalized.some((call) => typeof call.name !== "string" || call.name.length === 0)) {
      return this.invalid("gatherCalls", "every call needs a non-empty step name")
    }
    return this.fan<A>(
      "call",
      normalized.map((call) => ({
        name: call.name,
        command: (seq, parallelGroup) => ({
          kind: "call",
          seq,
          name: call.name,
          group: call.group ?? this.options.partition,
          input: call.input,
          parallelGroup
        })
      })),
      options?.mode
    )
  }

  all<A>(workflow: string, inputs: ReadonlyArray<unknown>, options: GatherOptions | undefined): Outcome<Array<A>> {
    if (this.closed) return CLOSED
    if (typeof workflow !== "string" || workflow.length === 0) {
      return this.invalid("all", "the child workflow name must be a non-empty string")
    }
    return this.fan<A>(
      "child",
      inputs.map((input) => ({
        name: workflow,
        command: (seq, parallelGroup) => ({ kind: "startChild", seq, workflow, input, parallelGroup })
      })),
      options?.mode
    )
  }

  // -- local ops --------------------------------------------------------------------------------

  /**
   * A local op (`now`, `sideEffect`): its recorded result, or a {@link LocalRun} when it is new and
   * its body must run now. History may name it `name`, or `<name>#<seq>` too when `seqAlias` is set.
   */
  beginLocal<A>(name: string, seqAlias: boolean): Outcome<A> | LocalRun {
    const seq = this.next()
    if (typeof seq !== "number") return seq
    const event = this.lookup(seq, "step", name, seqAlias)
    if (event !== undefined) return "_tag" in event ? event : this.resolved(event)
    return { _tag: "Run", seq, name }
  }

  /**
   * A local gather: the outputs recorded in history (when every item is there), or a
   * {@link GatherRun} of every item to run now. Stops looking at the first item history lacks.
   */
  beginGather<A>(names: ReadonlyArray<string>): Outcome<Array<A>> | GatherRun {
    if (this.closed) return CLOSED
    if (names.length === 0) return value([])
    if (names.some((name) => typeof name !== "string" || name.length === 0)) {
      return this.invalid("gather", "every item needs a non-empty name")
    }
    const items: Array<{ readonly seq: number; readonly name: string }> = []
    for (const name of names) {
      const seq = this.next()
      if (typeof seq !== "number") return seq
      items.push({ seq, name })
    }
    const events: Array<HistoryEvent> = []
    for (const item of items) {
      const event = this.lookup(item.seq, "step", item.name)
      if (event === undefined) return { _tag: "Run", items, parallelGroup: `gather:${items[0]!.seq}` }
      if ("_tag" in event) return event
      events.push(event)
    }
    const failures: Array<GatherItemFailure> = []
    const outputs = events.map((event, i) => {
      if (event.error !== undefined) failures.push({ name: items[i]!.name, error: event.error })
      return event.output as A
    })
    return failures.length > 0 ? { _tag: "Failed", error: new GatherFailed(failures) } : value(outputs)
  }

  private emit(event: WorkflowStepEvent): void {
    if (this.options.onStepEvent === undefined) return
    try {
      this.options.onStepEvent(event)
    } catch {
      // best-effort observability: a broken sink never fails the workflow
    }
  }

  /** Starts a local body: its logger scope, and the `running` event. */
  startLocal(
    seq: number,
    name: string,
    startedAt: number,
    parallelGroup: string | undefined,
    abort: AbortController = new AbortController()
  ): LocalScope {
    const events: Array<StepEvent> = []
    const log = makeStepLogger(events, this.clock, this.options.runtime)
    // without a sink (a broker that carries no live events) no event is built
    if (this.options.onStepEvent !== undefined) {
      this.emit({
        runId: this.runId,
        seq,
        name,
        phase: "running",
        startedAt,
        ...(parallelGroup === undefined ? {} : { parallelGroup })
      })
    }
    return { step: { runId: this.runId, seq, name, log, signal: abort.signal }, events, startedAt }
  }

  /** Records a finished local body as a `recordStep` and streams its `completed`/`failed` event. */
  private record(
    scope: LocalScope,
    result: LocalResult,
    finishedAt: number,
    parallelGroup: string | undefined
  ): void {
    const { startedAt, step } = scope
    const outcome = result._tag === "Success" ? { output: result.value } : { error: result.error }
    // the events as the wire can carry them, for the command and the streamed event alike (a sink
    // that sends the event must not be handed what its encoding would throw on)
    const events = scope.events.length > 0 ? encodableEvents(scope.events.slice()) : undefined
    this.commands.push({
      kind: "recordStep",
      seq: step.seq,
      name: step.name,
      ...outcome,
      startedAt,
      finishedAt,
      ...(events !== undefined ? { events } : {}),
      ...(parallelGroup === undefined ? {} : { parallelGroup })
    })
    if (this.options.onStepEvent === undefined) return
    this.emit({
      runId: this.runId,
      seq: step.seq,
      name: step.name,
      phase: result._tag === "Success" ? "completed" : "failed",
      startedAt,
      finishedAt,
      ...outcome,
      events: events ?? [],
      ...(parallelGroup === undefined ? {} : { parallelGroup })
    })
  }

  /** Finishes a local op: records it, and returns its value or a {@link StepFailed}. */
  finishLocal<A>(scope: LocalScope, result: LocalResult): Outcome<A> {
    if (this.closed) return CLOSED
    this.resolvedOps++
    this.record(scope, result, this.now(), undefined)
    return result._tag === "Success"
      ? value(result.value as A)
      : { _tag: "Failed", error: new StepFailed({ error: result.error }) }
  }

  /**
   * Finishes a local gather: records every item in seq order with the fan's shared time window, and
   * returns the outputs in input order or a {@link GatherFailed} naming every failed item.
   */
  finishGather<A>(scopes: ReadonlyArray<LocalScope>, results: ReadonlyArray<LocalResult>, parallelGroup: string): Outcome<Array<A>> {
    if (this.closed) return CLOSED
    this.resolvedOps += scopes.length
    const finishedAt = this.now()
    const failures: Array<GatherItemFailure> = []
    const outputs = scopes.map((scope, i) => {
      const result = results[i]!
      this.record(scope, result, finishedAt, parallelGroup)
      if (result._tag === "Failure") failures.push({ name: scope.step.name, error: result.error })
      return (result._tag === "Success" ? result.value : undefined) as A
    })
    return failures.length > 0 ? { _tag: "Failed", error: new GatherFailed(failures) } : value(outputs)
  }

  /** The wire error of a failed local body. */
  localFailure(failure: unknown): LocalResult {
    return { _tag: "Failure", error: toWorkflowStepError(failure, "local step") }
  }

  /** Ends the turn without a decision: later ops do nothing and never resolve. */
  close(): void {
    this.closed = true
  }

  /**
   * The first history entry at a seq this turn never took (the code ended before reaching it), as a
   * {@link NondeterminismError}; `undefined` when the code reached every recorded seq. A turn that
   * stopped on a fatal error is left alone (that error already explains it). The live worker
   * tolerates such entries, as the engine and upstream workers do; the offline replayer reports them.
   */
  unreached(status: WorkflowDecision["status"]): NondeterminismError | undefined {
    if (this.fatalError !== undefined || this.cancelled) return undefined
    let first: HistoryEvent | undefined
    for (const event of this.task.history) {
      if (event.seq >= this.seq && (first === undefined || event.seq < first.seq)) first = event
    }
    if (first === undefined) return undefined
    return new NondeterminismError({
      runId: this.runId,
      seq: first.seq,
      recordedKind: first.kind,
      ...(first.name === undefined ? {} : { recordedName: first.name }),
      reachedKind: "end",
      reachedName: status
    })
  }

  // -- the decision -----------------------------------------------------------------------------

  /**
   * Closes the turn and builds its decision. A fatal error wins (the commands made before it are
   * kept); then the body's own result; a body that stopped without a result is `cancelled` when the
   * run was cancelled, else `continue` when an op is blocked.
   */
  decide(outcome: BodyOutcome): WorkflowDecision {
    this.closed = true
    // Built field by field: object spread is a measurable share of a short turn.
    const { runId, taskId } = this.task
    const made = this.fatalError === undefined ? this.commands : this.commands.slice(0, this.fatalError.commandCount)
    const commands = made.length > 1 ? [...made].sort((a, b) => a.seq - b.seq) : made
    const refused = unencodableCommand(commands)
    if (refused !== undefined) {
      // the same values come back on every replay: the run fails, with the commands before the one
      // that cannot go on the wire (a decision the transport cannot encode would never be answered)
      return { taskId, runId, status: "failed", commands: commands.slice(0, refused.index), error: refused.error }
    }
    if (this.fatalError !== undefined) {
      return { taskId, runId, status: "failed", commands, error: toWorkflowStepError(this.fatalError.error, "workflow") }
    }
    switch (outcome._tag) {
      case "Completed": {
        const bad = unencodable(outcome.value)
        return bad === undefined
          ? { taskId, runId, status: "completed", commands, output: outcome.value }
          : {
            taskId,
            runId,
            status: "failed",
            commands,
            error: unserializableError(`the output of workflow ${JSON.stringify(this.task.workflow)}`, bad)
          }
      }
      case "Failed":
        return {
          taskId,
          runId,
          status: "failed",
          commands,
          error: outcome.failure instanceof StepFailed
            ? outcome.failure.error
            : toWorkflowStepError(outcome.failure, `workflow ${JSON.stringify(this.task.workflow)}`)
        }
      case "Stopped":
        if (this.cancelled) return { taskId, runId, status: "cancelled", commands }
        if (this.blocked > 0) return { taskId, runId, status: "continue", commands }
        return {
          taskId,
          runId,
          status: "failed",
          commands,
          error: {
            message: `workflow ${JSON.stringify(this.task.workflow)} was interrupted without waiting on a durable op; ` +
              `a workflow body must not interrupt itself`
          }
        }
    }
  }
}
