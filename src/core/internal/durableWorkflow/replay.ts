import type * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Predicate from "effect/Predicate"
import * as Codec from "../../../wire/DurableWorkflowCodec.js"
import { emptySpecs, fitArguments, type ReceiverSpecs } from "./contract.js"
import { ActivityFailed, ChildWorkflowFailed, NonDeterministicReplayError } from "./errors.js"

/** Options of a scheduled activity (whole seconds on the wire). @internal */
export interface ActivityOptions {
  readonly queue?: string
  readonly retryPolicy?: {
    readonly maxAttempts?: number
    readonly backoffSeconds?: ReadonlyArray<number>
    readonly nonRetryableErrorTypes?: ReadonlyArray<string>
  }
  readonly startToCloseTimeout?: number
  readonly scheduleToStartTimeout?: number
  readonly scheduleToCloseTimeout?: number
  readonly heartbeatTimeout?: number
}

/** Options of a child workflow. @internal */
export interface ChildOptions {
  readonly queue?: string
  readonly parentClosePolicy?: string
  readonly retryPolicy?: ActivityOptions["retryPolicy"]
  readonly executionTimeoutSeconds?: number
  readonly runTimeoutSeconds?: number
}

/** A durable operation a workflow asks for. @internal */
export type Op =
  | { readonly _tag: "Activity"; readonly activityType: string; readonly args: ReadonlyArray<unknown>; readonly options: ActivityOptions }
  | { readonly _tag: "Timer"; readonly seconds: number }
  | { readonly _tag: "Child"; readonly workflowType: string; readonly args: ReadonlyArray<unknown>; readonly options: ChildOptions }
  | { readonly _tag: "SideEffect"; readonly compute: () => unknown }
  | { readonly _tag: "Version"; readonly changeId: string; readonly minSupported: number; readonly maxSupported: number }
  | { readonly _tag: "Condition"; readonly predicate: () => boolean; readonly key?: string; readonly timeoutSeconds?: number }
  | { readonly _tag: "Upsert"; readonly attributes: Record<string, unknown> }

/** A wire command (§3.4). @internal */
export type Command = Record<string, unknown> & { readonly type: string }

const shapeOf = (op: Op): string => {
  switch (op._tag) {
    case "Activity":
      return "activity"
    case "Timer":
      return "timer"
    case "Child":
      return "child workflow"
    case "SideEffect":
      return "side effect"
    case "Version":
      return "version marker"
    case "Condition":
      return "condition wait"
    case "Upsert":
      return "search attributes upsert"
  }
}

/** A resolution recorded in history (a result the workflow consumes, in history order). @internal */
export interface Resolution {
  readonly shape: string
  readonly eventType: string
  readonly payload: Record<string, unknown>
  readonly groupIndex: number | undefined
  /** The codec its payloads decode with (rule 4). */
  readonly codec: unknown
}

/**
 * A signal (`SignalReceived`) or an applied update (`UpdateApplied`) recorded in history, applied
 * to the workflow once it has consumed `position` resolutions. @internal
 */
export interface RecordedReceiver {
  readonly kind: "signal" | "update"
  readonly name: string
  readonly args: ReadonlyArray<unknown>
  readonly position: number
  /** `update_id` of an applied update. */
  readonly updateId?: string
  /**
   * The `condition_wait_id` of the `ConditionWaitOpened` this receiver is pinned to: it is applied
   * when the code reaches that wait, not by `position`.
   */
  readonly waitId?: string
}

/** A `ConditionWaitOpened` event (with a `condition_wait_id`), in history order. @internal */
export interface OpenedWait {
  readonly waitId: string
  readonly key: string | undefined
  /** Its workflow sequence, when the server recorded one. */
  readonly sequence?: number | undefined
}

/** An `UpdateAccepted` event: the update an accepted-update task applies. @internal */
export interface AcceptedUpdate {
  readonly updateId: string
  readonly name: string
  /** The recorded arguments, still encoded (decoded when the update is applied). */
  readonly arguments: unknown
  /** The codec they decode with (rule 4). */
  readonly codec: unknown
}

const resolutionShapes: Record<string, string> = {
  ActivityCompleted: "activity",
  ActivityFailed: "activity",
  ActivityTimedOut: "activity",
  TimerFired: "timer",
  SideEffectRecorded: "side effect",
  ChildRunCompleted: "child workflow",
  ChildRunFailed: "child workflow",
  ChildRunCancelled: "child workflow",
  ChildRunTerminated: "child workflow",
  VersionMarkerRecorded: "version marker",
  SearchAttributesUpserted: "search attributes upsert"
}

/** Events recording that a blocking step was scheduled, in the order the code asked for them. */
const schedulingShapes: Record<string, string> = {
  ActivityScheduled: "activity",
  ChildWorkflowScheduled: "child workflow"
}

/** Decodes a payload carried in history or a task: envelope or bare blob (tagged by the task codec). @internal */
export const decodeValue = (raw: unknown, codec: unknown): unknown => {
  if (raw === undefined || raw === null) return null
  const decoded = typeof raw === "string"
    ? Codec.decodePayload(raw, codec)
    : Predicate.isRecord(raw) && typeof raw["blob"] === "string"
    ? Codec.decodeEnvelope({ codec: String(raw["codec"]), blob: raw["blob"] })
    : Either.left(new Codec.PayloadDecodeError({ code: "invalid_payload_framing", message: "invalid_payload_framing: the payload is neither a blob nor an envelope" }))
  if (Either.isLeft(decoded)) throw decoded.left
  return decoded.right
}

/**
 * The codec a history event's payloads decode with (rule 4): its own `payload_codec` when it has
 * the key (even as `null`), else `fallback` (the task's codec). An explicit codec, or any codec in
 * force that is not null, must be `"avro"`: otherwise `unsupported_payload_codec` is thrown.
 *
 * @internal
 */
export const payloadCodecOf = (payload: Record<string, unknown>, fallback: unknown): unknown => {
  const explicit = "payload_codec" in payload
  const codec = explicit ? payload["payload_codec"] : fallback
  if ((explicit || (codec !== null && codec !== undefined)) && codec !== Codec.codec) {
    const refused = Codec.requireAvroCodec(codec, "history event payload")
    if (Either.isLeft(refused)) throw refused.left
  }
  return codec
}

/** Decodes an argument list (scalar → `[x]`, null → `[]`). @internal */
export const decodeArgs = (raw: unknown, codec: unknown): ReadonlyArray<unknown> => {
  const value = decodeValue(raw, codec)
  return value === null ? [] : Array.isArray(value) ? value : [value]
}

/** `sequence`, else `workflow_sequence` (a positive integer or a string of digits). */
const sequenceOf = (payload: Record<string, unknown>): number | undefined => {
  const raw = payload["sequence"] || payload["workflow_sequence"]
  if (typeof raw === "number" && Number.isInteger(raw)) return raw
  if (typeof raw === "string" && /^[0-9]+$/.test(raw)) return Number(raw)
  return undefined
}

const nonEmpty = (value: unknown): string | undefined => typeof value === "string" && value.length > 0 ? value : undefined

const waitIdOf = (payload: Record<string, unknown>): string | undefined => nonEmpty(payload["condition_wait_id"])

/** The kind of an internal wait timer. */
type InternalTimer = "condition_timeout" | "signal_timeout"

/**
 * Whether a timer event belongs to a wait rather than to a user `sleep` (rule 1), in this order:
 * its `timer_kind`; a `condition_wait_id` or `signal_wait_id` on its payload; its workflow sequence
 * being that of a recorded `ConditionWaitOpened` (or of an older server's aliased condition timer,
 * rule 2) in `waitsBySequence`.
 */
const internalTimerOf = (payload: Record<string, unknown>, waitsBySequence?: ReadonlyMap<number, string>): InternalTimer | undefined => {
  const kind = payload["timer_kind"]
  if (kind === "condition_timeout" || kind === "signal_timeout") return kind
  if (waitIdOf(payload) !== undefined) return "condition_timeout"
  if (nonEmpty(payload["signal_wait_id"]) !== undefined) return "signal_timeout"
  const sequence = sequenceOf(payload)
  return sequence !== undefined && waitsBySequence?.has(sequence) === true ? "condition_timeout" : undefined
}

/** The condition wait a condition-timeout timer belongs to. */
const timerWaitIdOf = (payload: Record<string, unknown>, waitsBySequence: ReadonlyMap<number, string>): string | undefined => {
  if (internalTimerOf(payload, waitsBySequence) !== "condition_timeout") return undefined
  const sequence = sequenceOf(payload)
  return waitIdOf(payload) ?? (sequence === undefined ? undefined : waitsBySequence.get(sequence))
}

const payloadOf = (event: Record<string, unknown>): Record<string, unknown> =>
  Predicate.isRecord(event["payload"]) ? event["payload"] : {}

/** A `ConditionWaitOpened` timeout usable by rule 2: a positive integer or a string of digits. */
const waitTimeoutOf = (raw: unknown): number | undefined => {
  if (typeof raw === "number" && Number.isInteger(raw) && raw > 0) return raw
  if (typeof raw === "string" && /^[0-9]+$/.test(raw) && Number(raw) > 0) return Number(raw)
  return undefined
}

/**
 * The workflow sequences of older servers' condition-wait timers (rule 2), which carry only a
 * `timer_id`: walking history in order, a `TimerScheduled` following a `ConditionWaitOpened` with a
 * timeout is that wait's timer when it has its own sequence (not the wait's), the wait's timeout
 * as `delay_seconds`, a `timer_id`, and no `timer_kind` nor `signal_wait_id`. Anything that ends
 * the wait (another timer, its timer firing or being cancelled, its outcome, a scheduled step, the
 * run's end) clears it.
 */
const legacyConditionTimers = (events: ReadonlyArray<unknown>, waitsBySequence: ReadonlyMap<number, string>): Map<number, string> => {
  const aliases = new Map<number, string>()
  let active: { readonly waitId: string; readonly sequence: number; readonly timeout: number } | undefined
  for (const event of events) {
    if (!Predicate.isRecord(event)) continue
    const type = event["event_type"]
    const payload = payloadOf(event)
    switch (type) {
      case "ConditionWaitOpened": {
        const waitId = waitIdOf(payload)
        const sequence = sequenceOf(payload)
        const timeout = payload["timeout_seconds"] === true || payload["timeout_seconds"] === false ? undefined : waitTimeoutOf(payload["timeout_seconds"])
        active = waitId !== undefined && sequence !== undefined && timeout !== undefined ? { waitId, sequence, timeout } : undefined
        break
      }
      case "TimerScheduled": {
        if (internalTimerOf(payload) === "condition_timeout") break
        const sequence = sequenceOf(payload)
        if (
          active !== undefined && sequence !== undefined && sequence !== active.sequence &&
          payload["delay_seconds"] === active.timeout && nonEmpty(payload["timer_id"]) !== undefined &&
          payload["timer_kind"] === undefined && nonEmpty(payload["signal_wait_id"]) === undefined
        ) {
          aliases.set(sequence, active.waitId)
          break
        }
        active = undefined
        break
      }
      case "TimerFired":
      case "TimerCancelled": {
        const sequence = sequenceOf(payload)
        if ((sequence !== undefined && aliases.has(sequence)) || internalTimerOf(payload, waitsBySequence) === "condition_timeout") active = undefined
        break
      }
      case "ConditionWaitSatisfied":
      case "ConditionWaitTimedOut": {
        const waitId = waitIdOf(payload)
        if (waitId === undefined || waitId === active?.waitId) active = undefined
        break
      }
      case "WorkflowCompleted":
      case "WorkflowFailed":
      case "WorkflowContinuedAsNew":
      case "ActivityScheduled":
      case "ChildWorkflowScheduled":
        active = undefined
        break
    }
  }
  return aliases
}

/**
 * The condition waits by workflow sequence: each recorded `ConditionWaitOpened` (with an id and a
 * sequence), and, when history has metadata-poor timers at all, older servers' condition timers
 * (rule 2). A timer event at one of these sequences is that wait's timer (rule 1).
 *
 * @internal
 */
export const conditionWaitsBySequence = (events: ReadonlyArray<unknown>): ReadonlyMap<number, string> => {
  const waits = new Map<number, string>()
  let metadataPoor = false
  for (const event of events) {
    if (!Predicate.isRecord(event)) continue
    const payload = payloadOf(event)
    if (event["event_type"] === "ConditionWaitOpened") {
      const sequence = sequenceOf(payload)
      const waitId = waitIdOf(payload)
      if (sequence !== undefined && waitId !== undefined) waits.set(sequence, waitId)
    } else if (
      event["event_type"] === "TimerScheduled" && internalTimerOf(payload) === undefined &&
      nonEmpty(payload["timer_id"]) !== undefined && payload["timer_kind"] === undefined
    ) {
      metadataPoor = true
    }
  }
  if (!metadataPoor) return waits
  for (const [sequence, waitId] of legacyConditionTimers(events, waits)) waits.set(sequence, waitId)
  return waits
}

const resultEvents = new Set([
  "ActivityCompleted",
  "ActivityFailed",
  "ActivityTimedOut",
  "ChildRunCompleted",
  "ChildRunFailed",
  "ChildRunCancelled",
  "ChildRunTerminated",
  "SideEffectRecorded",
  "VersionMarkerRecorded",
  "SearchAttributesUpserted"
])

const stepEvents = new Set([
  "WorkflowCompleted",
  "WorkflowFailed",
  "WorkflowContinuedAsNew",
  "ActivityScheduled",
  "ActivityStarted",
  "ChildWorkflowScheduled",
  "ChildRunStarted"
])

/**
 * What ends the window in which receivers can be pinned to a condition wait: `"wait"` when the wait
 * itself ended (satisfied, timed out, its timeout timer fired or was cancelled), `"step"` when the
 * workflow moved on through some other step (scheduled or resolved), else nothing.
 */
const windowEnd = (type: string, payload: Record<string, unknown>, waitsBySequence: ReadonlyMap<number, string>): "wait" | "step" | undefined => {
  if (type === "ConditionWaitSatisfied" || type === "ConditionWaitTimedOut") return "wait"
  if (type === "TimerFired" || type === "TimerCancelled" || type === "TimerScheduled") {
    const internal = internalTimerOf(payload, waitsBySequence)
    if (internal === undefined) return type === "TimerCancelled" ? undefined : "step"
    return internal === "condition_timeout" && type !== "TimerScheduled" ? "wait" : undefined
  }
  if (stepEvents.has(type) || resultEvents.has(type)) return "step"
  return undefined
}

/**
 * Decides, for each receiver event (by index in `events`), the condition wait it is pinned to
 * (`null`: placed by result position). Receivers without a decision here fall back to the wait
 * opened at their recorded workflow sequence, if any.
 *
 * - A receiver recorded while a wait is open (after its `ConditionWaitOpened`, before anything
 *   ends the window) belongs to that wait; when the window is cut by the next `ConditionWaitOpened`
 *   instead, only the first such receiver stays with the earlier wait and the later ones move to
 *   the next one (the server records signals that arrive while the woken task is leased before
 *   that task's new wait).
 * - Receivers recorded while no wait is open belong to the next opened wait, provided no step
 *   (a scheduled or resolved step) comes between them and that wait and none did since the
 *   previous wait ended (or since the start); otherwise they are placed by result position. After
 *   such a step, a receiver that carries a workflow sequence is left undecided.
 *
 * @internal
 */
export const bindReceiversToWaits = (
  events: ReadonlyArray<unknown>,
  waitsBySequence: ReadonlyMap<number, string> = conditionWaitsBySequence(events)
): Map<number, string | null> => {
  const bound = new Map<number, string | null>()
  let unattached: Array<number> = []
  let unattachedMayBind = true
  let openWait: string | undefined
  let inWindow: Array<number> = []
  events.forEach((event, index) => {
    if (!Predicate.isRecord(event)) return
    const type = String(event["event_type"] ?? "")
    const payload = Predicate.isRecord(event["payload"]) ? event["payload"] : {}
    if (type === "ConditionWaitOpened") {
      const waitId = waitIdOf(payload)
      if (waitId === undefined) return
      if (openWait === undefined) {
        for (const i of unattached) bound.set(i, unattachedMayBind ? waitId : null)
      } else {
        for (const i of inWindow.slice(1)) bound.set(i, waitId)
      }
      unattached = []
      unattachedMayBind = true
      openWait = waitId
      inWindow = []
      return
    }
    if (type === "SignalReceived" || type === "UpdateApplied") {
      if (openWait === undefined) {
        if (unattachedMayBind || sequenceOf(payload) === undefined) unattached.push(index)
        return
      }
      if (inWindow.length === 0) bound.set(index, openWait)
      inWindow.push(index)
      return
    }
    const end = windowEnd(type, payload, waitsBySequence)
    if (end === undefined) return
    if (openWait === undefined) {
      if (end === "step") {
        for (const i of unattached) bound.set(i, null)
        unattached = []
        unattachedMayBind = false
      }
      return
    }
    for (const i of inWindow) if (!bound.has(i)) bound.set(i, openWait)
    openWait = undefined
    inWindow = []
    unattachedMayBind = end === "wait"
  })
  for (const i of unattached) bound.set(i, null)
  if (openWait !== undefined) for (const i of inWindow) if (!bound.has(i)) bound.set(i, openWait)
  return bound
}

/**
 * Splits a history into resolutions (the results the code consumes in order), scheduled steps,
 * receivers (signals, applied updates), accepted updates, opened condition waits and their
 * recorded outcomes. Internal wait timers (rules 1–2) never become resolutions or scheduled steps;
 * a condition timer that fired is its wait's `false` outcome (rule 3). Each event's payloads decode
 * with its own `payload_codec`, `codec` being the fallback (rule 4).
 *
 * @internal
 */
export const readHistory = (events: ReadonlyArray<unknown>, codec: unknown): {
  readonly resolutions: ReadonlyArray<Resolution>
  readonly scheduled: ReadonlyArray<Resolution>
  /** The scheduled steps history has no result for yet (see {@link unresolvedSteps}). */
  readonly unresolved: ReadonlyArray<Resolution>
  readonly receivers: ReadonlyArray<RecordedReceiver>
  readonly accepted: ReadonlyArray<AcceptedUpdate>
  readonly waits: ReadonlyArray<OpenedWait>
  readonly outcomes: ReadonlyMap<string, boolean>
  readonly startedAt: number | undefined
} => {
  const resolutions: Array<Resolution> = []
  const scheduled: Array<Resolution> = []
  const receivers: Array<RecordedReceiver> = []
  const accepted: Array<AcceptedUpdate> = []
  const waits: Array<OpenedWait> = []
  const outcomes = new Map<string, boolean>()
  const waitsBySequence = conditionWaitsBySequence(events)
  const bindings = bindReceiversToWaits(events, waitsBySequence)
  const pinned = (index: number, payload: Record<string, unknown>): { waitId?: string } => {
    const sequence = sequenceOf(payload)
    const waitId = bindings.has(index)
      ? bindings.get(index)
      : sequence === undefined
      ? undefined
      : waitsBySequence.get(sequence)
    return typeof waitId === "string" ? { waitId } : {}
  }
  let startedAt: number | undefined
  for (let at = 0; at < events.length; at++) {
    const event = events[at]
    if (!Predicate.isRecord(event)) continue
    const type = String(event["event_type"] ?? "")
    const payload = payloadOf(event)
    const eventCodec = payloadCodecOf(payload, codec)
    switch (type) {
      case "ConditionWaitOpened": {
        const waitId = waitIdOf(payload)
        const key = payload["condition_key"]
        const sequence = sequenceOf(payload)
        if (waitId !== undefined) waits.push({ waitId, key: typeof key === "string" ? key : undefined, ...(sequence === undefined ? {} : { sequence }) })
        continue
      }
      case "ConditionWaitSatisfied":
      case "ConditionWaitTimedOut": {
        const waitId = waitIdOf(payload)
        if (waitId !== undefined) outcomes.set(waitId, type === "ConditionWaitSatisfied")
        continue
      }
      case "WorkflowStarted": {
        if (typeof payload["timestamp"] === "string") {
          const parsed = Date.parse(payload["timestamp"])
          if (!Number.isNaN(parsed)) startedAt = parsed
        }
        continue
      }
      case "SignalReceived": {
        const raw = payload["value"] ?? payload["input"] ?? payload["arguments"]
        receivers.push({
          kind: "signal",
          name: String(payload["signal_name"] ?? ""),
          args: decodeArgs(raw, eventCodec),
          position: resolutions.length,
          ...pinned(at, payload)
        })
        continue
      }
      case "UpdateApplied": {
        const raw = payload["arguments"] ?? payload["input"] ?? payload["value"]
        receivers.push({
          kind: "update",
          name: String(payload["update_name"] ?? ""),
          args: decodeArgs(raw, eventCodec),
          position: resolutions.length,
          ...(typeof payload["update_id"] === "string" ? { updateId: payload["update_id"] } : {}),
          ...pinned(at, payload)
        })
        continue
      }
      case "UpdateAccepted": {
        accepted.push({
          updateId: String(payload["update_id"] ?? ""),
          name: String(payload["update_name"] ?? ""),
          arguments: payload["arguments"] ?? payload["input"] ?? null,
          codec: eventCodec
        })
        continue
      }
      case "TimerScheduled": {
        if (internalTimerOf(payload, waitsBySequence) === undefined) {
          scheduled.push({ shape: "timer", eventType: type, payload, groupIndex: undefined, codec: eventCodec })
        }
        continue
      }
      case "TimerFired": {
        const internal = internalTimerOf(payload, waitsBySequence)
        if (internal === "condition_timeout") {
          const waitId = timerWaitIdOf(payload, waitsBySequence)
          if (waitId !== undefined) outcomes.set(waitId, false)
          continue
        }
        if (internal === "signal_timeout") continue
        break
      }
    }
    const scheduling = schedulingShapes[type]
    if (scheduling !== undefined) scheduled.push({ shape: scheduling, eventType: type, payload, groupIndex: undefined, codec: eventCodec })
    const shape = resolutionShapes[type]
    if (shape === undefined) continue
    const index = payload["parallel_group_index"]
    resolutions.push({ shape, eventType: type, payload, groupIndex: typeof index === "number" ? index : undefined, codec: eventCodec })
  }
  return { resolutions, scheduled, unresolved: unresolvedSteps(events, resolutions, scheduled), receivers, accepted, waits, outcomes, startedAt }
}

/**
 * The steps history shows scheduled (an activity, a user timer, a child workflow) and still waiting
 * for their result, by workflow sequence: a scheduling event whose sequence no result (nor a timer's
 * cancellation) carries, once per sequence, in history order. Events without a sequence are left
 * out (nothing ties them to their result), and none is found when a result of a scheduled kind
 * carries no sequence (a server that writes none on results: the check is off, not guessed). The live run was blocked on each of them, so replay must
 * reach them before it asks for anything new or ends the workflow.
 */
const unresolvedSteps = (
  events: ReadonlyArray<unknown>,
  resolutions: ReadonlyArray<Resolution>,
  scheduled: ReadonlyArray<Resolution>
): ReadonlyArray<Resolution> => {
  if (scheduled.length === 0) return []
  const resolved = new Set<number>()
  const scheduledShapes = new Set(scheduled.map((step) => step.shape))
  for (const resolution of resolutions) {
    const sequence = sequenceOf(resolution.payload)
    // a result of a scheduled kind that carries no sequence may be any scheduled step's: nothing
    // tells which are still waiting, and guessing would fail a workflow that ends rightly
    if (sequence === undefined && scheduledShapes.has(resolution.shape)) return []
    if (sequence !== undefined) resolved.add(sequence)
  }
  for (const event of events) {
    if (Predicate.isRecord(event) && event["event_type"] === "TimerCancelled") {
      const sequence = sequenceOf(payloadOf(event))
      if (sequence !== undefined) resolved.add(sequence)
    }
  }
  const unresolved: Array<Resolution> = []
  for (const step of scheduled) {
    const sequence = sequenceOf(step.payload)
    if (sequence === undefined || resolved.has(sequence)) continue
    resolved.add(sequence)
    unresolved.push(step)
  }
  return unresolved
}

/**
 * What a replayed update handler returned that replay waits for before it goes on (its Effect or
 * promise, run to its end; its failure dropped). @internal
 */
export type Settle = Effect.Effect<void>

/**
 * The outcome of asking the turn for an op (or a parallel group). `Settle`: a recorded update
 * applied on the way returned an Effect or a promise; run `effect`, then ask for the same op again
 * (no other op in between: the turn resumes where it stopped). @internal
 */
export type Attempt =
  | { readonly _tag: "Resolved"; readonly value: unknown }
  | { readonly _tag: "Failed"; readonly error: ActivityFailed | ChildWorkflowFailed }
  | { readonly _tag: "Blocked" }
  | { readonly _tag: "Settle"; readonly effect: Settle }

/** What replay produced: the commands of this task. @internal */
export type TurnResult =
  | { readonly _tag: "Blocked"; readonly commands: ReadonlyArray<Command> }
  | { readonly _tag: "Terminal"; readonly commands: ReadonlyArray<Command> }

/**
 * The replay state of one workflow task: it hands recorded results to the workflow code in history
 * order, checks each op against the recorded shape, and collects the commands of new ops.
 *
 * @internal
 */
export class Turn {
  private cursor = 0
  private sequence = 0
  private receiversApplied = 0
  /** How many recorded `ConditionWaitOpened` the code's condition waits have reached. */
  private waitsReached = 0
  private blocking = 0
  private frozen = false
  /** The condition wait an op was reaching when a receiver pinned to it had to settle: resumed there. */
  private reaching: { readonly op: Op; readonly opened: OpenedWait } | undefined = undefined
  readonly pending: Array<Command> = []
  readonly signalHandlers = new Map<string, (...args: ReadonlyArray<any>) => unknown>()
  readonly queryHandlers = new Map<string, (...args: ReadonlyArray<any>) => unknown>()
  readonly updateHandlers = new Map<string, (...args: ReadonlyArray<any>) => unknown>()
  readonly updateValidators = new Map<string, (...args: ReadonlyArray<any>) => unknown>()

  constructor(
    readonly resolutions: ReadonlyArray<Resolution>,
    readonly scheduled: ReadonlyArray<Resolution>,
    readonly receivers: ReadonlyArray<RecordedReceiver>,
    readonly taskQueue: string,
    readonly encode: (value: unknown) => unknown,
    readonly specs: ReceiverSpecs = emptySpecs,
    /**
     * Runs a recorded update's handler (`call`, named `name`) and says what replay must wait for of
     * what it returned (its Effect or promise, run to its end with its failure dropped), `undefined`
     * when nothing (a plain value). A handler that throws throws out of it.
     */
    readonly runUpdate: (name: string, call: () => unknown) => Settle | undefined = (_, call) => void call(),
    /** The update an accepted-update task is applying: a recorded application of it is not replayed. */
    readonly applyingUpdateId: string | undefined = undefined,
    /** The recorded `ConditionWaitOpened` events, matched in order to the code's condition waits. */
    readonly waits: ReadonlyArray<OpenedWait> = [],
    /** The recorded outcome of each condition wait, by id: `true` satisfied, `false` timed out. */
    readonly outcomes: ReadonlyMap<string, boolean> = new Map(),
    /**
     * The steps history shows scheduled and still waiting for their result: the live run was blocked
     * on them, so the code must ask for them before anything new, and before it ends.
     */
    readonly unresolved: ReadonlyArray<Resolution> = []
  ) {}

  /**
   * The condition wait the code last reached: its key, and whether it went past a reopening of
   * itself (history opened the same wait again after a signal that did not satisfy it).
   */
  private lastWait: { readonly key: string | undefined; readonly reopened: boolean } | undefined = undefined

  /** Whether recorded results remain (the code is replaying). */
  get replaying(): boolean {
    return this.cursor < this.resolutions.length
  }

  /** Stops accepting ops (the turn ended); later ops block forever. */
  freeze(): void {
    this.frozen = true
  }

  /** Whether the turn ended (see {@link freeze}). */
  get ended(): boolean {
    return this.frozen
  }

  /**
   * Applies one recorded receiver. Unknown signals and signals whose arguments do not fit their
   * declaration are ignored; an applied update must have a handler (else a `TypeError`, a replay
   * failure); its result and failure were reported when it was first applied, so they are dropped.
   * An update handler that returned an Effect or a promise has not finished changing the state:
   * what to wait for is returned, and nothing more is applied until it has settled, as the live
   * update finished before the server recorded it.
   */
  private applyReceiver(receiver: RecordedReceiver): Settle | undefined {
    if (receiver.kind === "signal") {
      const handler = this.signalHandlers.get(receiver.name)
      if (handler === undefined) return undefined
      const args = fitArguments(`signal '${receiver.name}'`, this.specs.signals[receiver.name], receiver.args)
      if (Either.isRight(args)) handler(...args.right)
      return undefined
    }
    if (this.applyingUpdateId !== undefined && receiver.updateId === this.applyingUpdateId) return undefined
    const handler = this.updateHandlers.get(receiver.name)
    if (handler === undefined) throw new TypeError(`unknown update '${receiver.name}' recorded in history (UpdateApplied)`)
    const args = fitArguments(`update '${receiver.name}'`, this.specs.updates[receiver.name], receiver.args)
    if (Either.isLeft(args)) return undefined
    try {
      return this.runUpdate(receiver.name, () => handler(...args.right))
    } catch {
      // it failed when it was applied, too (fail_update)
      return undefined
    }
  }

  /**
   * Applies the receivers due at the current result position, in history order. A receiver pinned
   * to a condition wait holds back the ones after it until the code reaches that wait. Stops at an
   * update that has to settle (and returns it); called again, it goes on with the next receiver.
   */
  private applyReceivers(): Settle | undefined {
    for (;;) {
      const next = this.receivers[this.receiversApplied]
      if (next === undefined || next.waitId !== undefined || next.position > this.cursor) return undefined
      this.receiversApplied += 1
      const settle = this.applyReceiver(next)
      if (settle !== undefined) return settle
    }
  }

  /** Applies the receivers pinned to the wait `waitId` that are next in history order (see {@link applyReceivers}). */
  private applyWaitReceivers(waitId: string): Settle | undefined {
    for (;;) {
      const next = this.receivers[this.receiversApplied]
      if (next === undefined || next.waitId !== waitId) return undefined
      this.receiversApplied += 1
      const settle = this.applyReceiver(next)
      if (settle !== undefined) return settle
    }
  }

  /**
   * The code reached a condition wait: it is the next recorded `ConditionWaitOpened` (n-th wait of
   * the code, n-th opened in history), whose pinned receivers are applied. A recorded outcome wins
   * over the predicate (rule 3): a timed-out wait is `false` whatever the state says now. While the
   * wait is unsatisfied and history shows the same wait (same `condition_key`) opened again right
   * after, the code is at that reopened wait too. `undefined`: the wait blocks. A pinned update
   * that has to settle is returned; asked again for the same op, the turn goes on from that wait.
   */
  private reachWait(op: Extract<Op, { readonly _tag: "Condition" }>): boolean | undefined | { readonly settle: Settle } {
    let reopenedPast = false
    for (;;) {
      let opened: OpenedWait | undefined
      if (this.reaching === undefined) {
        opened = this.waits[this.waitsReached]
        this.waitsReached += 1
        if (opened !== undefined && opened.key !== undefined && opened.key !== (op.key ?? "")) this.keyChanged(op, opened)
      } else {
        opened = this.reaching.opened
        this.reaching = undefined
      }
      if (opened !== undefined) {
        const settle = this.applyWaitReceivers(opened.waitId)
        if (settle !== undefined) {
          this.reaching = { op, opened }
          return { settle }
        }
      }
      const outcome = opened === undefined ? undefined : this.outcomes.get(opened.waitId)
      if (outcome === false) {
        this.lastWait = { key: op.key, reopened: false }
        return false
      }
      const again = opened === undefined ? undefined : this.waits[this.waitsReached]
      const reopened = again !== undefined && op.key !== undefined && op.key.length > 0 && again.key === op.key
      const holds = op.predicate()
      if (reopened && !holds) {
        reopenedPast = true
        continue
      }
      this.lastWait = { key: op.key, reopened: reopenedPast }
      if (outcome === true || holds) return true
      return undefined
    }
  }

  /**
   * Applies every recorded receiver (before answering a query, validating or applying an update).
   * Stops at an update that has to settle and returns it: settle it, then call this again.
   */
  applyAllReceivers(): Settle | undefined {
    while (this.receiversApplied < this.receivers.length) {
      const settle = this.applyReceiver(this.receivers[this.receiversApplied++]!)
      if (settle !== undefined) return settle
    }
    return undefined
  }

  /** The code waits on another condition (by `condition_key`) than the one history shows opened here. */
  private keyChanged(op: Extract<Op, { readonly _tag: "Condition" }>, opened: OpenedWait): never {
    const sequence = this.sequence
    throw new NonDeterministicReplayError({
      workflowSequence: sequence,
      expected: "condition wait",
      recorded: "ConditionWaitOpened",
      message: `non-deterministic replay at workflow sequence ${sequence}: the code waits on the condition ` +
        `${JSON.stringify(op.key ?? "")}, but history opened the condition wait ${JSON.stringify(opened.key)} (${opened.waitId}) here`
    })
  }

  private mismatch(op: Op, recorded: Resolution): never {
    const sequence = this.sequence
    throw new NonDeterministicReplayError({
      workflowSequence: sequence,
      expected: shapeOf(op),
      recorded: recorded.eventType,
      message: `non-deterministic replay at workflow sequence ${sequence}: the code asked for a ${describe(op)}, ` +
        `but history recorded ${recorded.eventType}${detailOf(recorded)}`
    })
  }

  private check(op: Op, recorded: Resolution): void {
    if (recorded.shape !== shapeOf(op)) this.mismatch(op, recorded)
    const p = recorded.payload
    if (op._tag === "Activity" && typeof p["activity_type"] === "string" && p["activity_type"] !== op.activityType) {
      this.mismatch(op, recorded)
    }
    if (op._tag === "Child" && typeof p["workflow_type"] === "string" && p["workflow_type"] !== op.workflowType) {
      this.mismatch(op, recorded)
    }
    if (op._tag === "Version" && typeof p["change_id"] === "string" && p["change_id"] !== op.changeId) {
      this.mismatch(op, recorded)
    }
  }

  private valueOf(op: Op, recorded: Resolution): Attempt {
    const p = recorded.payload
    switch (recorded.eventType) {
      case "ActivityCompleted":
      case "ChildRunCompleted":
      case "SideEffectRecorded":
        return { _tag: "Resolved", value: decodeValue(p["result"] ?? p["output"], recorded.codec) }
      case "ActivityFailed":
      case "ActivityTimedOut": {
        const exception = Predicate.isRecord(p["exception"]) ? p["exception"] : Predicate.isRecord(p["failure"]) ? p["failure"] : {}
        const message = String(p["message"] ?? exception["message"] ?? (recorded.eventType === "ActivityTimedOut" ? "activity timed out" : "activity failed"))
        const type = p["exception_type"] ?? exception["type"]
        const cls = p["exception_class"] ?? exception["class"]
        return {
          _tag: "Failed",
          error: new ActivityFailed({
            message,
            ...(op._tag === "Activity" ? { activityType: op.activityType } : {}),
            ...(typeof p["activity_attempt_id"] === "string" ? { activityAttemptId: p["activity_attempt_id"] } : {}),
            ...(typeof type === "string" ? { exceptionType: type } : {}),
            ...(typeof cls === "string" ? { exceptionClass: cls } : {}),
            timedOut: recorded.eventType === "ActivityTimedOut"
          })
        }
      }
      case "ChildRunFailed":
      case "ChildRunCancelled":
      case "ChildRunTerminated": {
        const status = recorded.eventType === "ChildRunFailed" ? "failed" : recorded.eventType === "ChildRunCancelled" ? "cancelled" : "terminated"
        return {
          _tag: "Failed",
          error: new ChildWorkflowFailed({
            message: String(p["message"] ?? `child workflow ${status}`),
            status,
            ...(op._tag === "Child" ? { workflowType: op.workflowType } : {})
          })
        }
      }
      case "VersionMarkerRecorded":
        return { _tag: "Resolved", value: typeof p["version"] === "number" ? p["version"] : Number(p["version"]) }
      default:
        return { _tag: "Resolved", value: null }
    }
  }

  private commandOf(op: Op, value?: unknown): Command {
    switch (op._tag) {
      case "Activity": {
        const o = op.options
        return {
          type: "schedule_activity",
          activity_type: op.activityType,
          arguments: this.encode([...op.args]),
          queue: o.queue ?? this.taskQueue,
          ...(o.retryPolicy === undefined ? {} : { retry_policy: retryPolicyWire(o.retryPolicy) }),
          ...(o.startToCloseTimeout === undefined ? {} : { start_to_close_timeout: o.startToCloseTimeout }),
          ...(o.scheduleToStartTimeout === undefined ? {} : { schedule_to_start_timeout: o.scheduleToStartTimeout }),
          ...(o.scheduleToCloseTimeout === undefined ? {} : { schedule_to_close_timeout: o.scheduleToCloseTimeout }),
          ...(o.heartbeatTimeout === undefined ? {} : { heartbeat_timeout: o.heartbeatTimeout })
        }
      }
      case "Timer":
        return { type: "start_timer", delay_seconds: Math.max(0, Math.ceil(op.seconds)) }
      case "Child": {
        const o = op.options
        return {
          type: "start_child_workflow",
          workflow_type: op.workflowType,
          arguments: this.encode([...op.args]),
          queue: o.queue ?? this.taskQueue,
          ...(o.parentClosePolicy === undefined ? {} : { parent_close_policy: o.parentClosePolicy }),
          ...(o.retryPolicy === undefined ? {} : { retry_policy: retryPolicyWire(o.retryPolicy) }),
          ...(o.executionTimeoutSeconds === undefined ? {} : { execution_timeout_seconds: o.executionTimeoutSeconds }),
          ...(o.runTimeoutSeconds === undefined ? {} : { run_timeout_seconds: o.runTimeoutSeconds })
        }
      }
      case "SideEffect": {
        const envelope = this.encode(value) as Record<string, unknown>
        return { type: "record_side_effect", result: typeof envelope["blob"] === "string" ? envelope["blob"] : envelope }
      }
      case "Version":
        return {
          type: "record_version_marker",
          change_id: op.changeId,
          version: op.maxSupported,
          min_supported: op.minSupported,
          max_supported: op.maxSupported
        }
      case "Condition":
        return {
          type: "open_condition_wait",
          ...(op.key === undefined ? {} : { condition_key: op.key }),
          ...(op.timeoutSeconds === undefined ? {} : { timeout_seconds: Math.max(0, Math.ceil(op.timeoutSeconds)) })
        }
      case "Upsert":
        return { type: "upsert_search_attributes", attributes: op.attributes }
    }
  }

  /** A step the code waits on that history shows scheduled must be the same step. */
  private checkScheduled(op: Op): void {
    const recorded = this.scheduled[this.blocking - 1]
    if (recorded !== undefined) this.check(op, recorded)
  }

  /**
   * Asks for one op. Throws {@link NonDeterministicReplayError} on a mismatch. After a `Settle`,
   * the same op must be asked for again, before any other.
   */
  attempt(op: Op): Attempt {
    if (this.frozen) return { _tag: "Blocked" }
    if (this.reaching === undefined) {
      const settle = this.applyReceivers()
      if (settle !== undefined) return { _tag: "Settle", effect: settle }
      this.sequence += 1
    } else if (this.reaching.op !== op) {
      throw new Error("internal error: another op was asked for while a condition wait settled a replayed update")
    }
    const recorded = this.resolutions[this.cursor]
    switch (op._tag) {
      case "SideEffect": {
        if (recorded !== undefined && recorded.shape === "side effect") {
          this.cursor += 1
          return this.valueOf(op, recorded)
        }
        if (recorded !== undefined) this.check(op, recorded)
        this.checkNothingUnreached(op)
        const value = op.compute()
        this.pending.push(this.commandOf(op, value))
        return { _tag: "Resolved", value }
      }
      case "Version": {
        if (recorded !== undefined && recorded.shape === "version marker") {
          this.check(op, recorded)
          this.cursor += 1
          const version = this.valueOf(op, recorded)
          return version
        }
        // replaying history written before this change: the old path (history goes on past this
        // point with a result, or with a step or a condition wait the live run was blocked on)
        if (recorded !== undefined || this.unreached() !== undefined) return { _tag: "Resolved", value: -1 }
        this.pending.push(this.commandOf(op))
        return { _tag: "Resolved", value: op.maxSupported }
      }
      case "Upsert": {
        if (recorded !== undefined) {
          this.check(op, recorded)
          this.cursor += 1
          return { _tag: "Resolved", value: null }
        }
        this.checkNothingUnreached(op)
        this.pending.push(this.commandOf(op))
        return { _tag: "Resolved", value: null }
      }
      case "Condition": {
        // a wait history never opened, past every recorded result, is new
        const fresh = recorded === undefined && this.reaching === undefined && this.waitsReached >= this.waits.length
        const outcome = this.reachWait(op)
        if (typeof outcome === "object") return { _tag: "Settle", effect: outcome.settle }
        // a new wait satisfied at once records nothing (the live run went on past it just the same),
        // so only one that blocks is new history: that must not hold a step the live run was blocked on
        if (outcome === undefined && fresh) this.checkNothingUnreached(op)
        if (outcome !== undefined) return { _tag: "Resolved", value: outcome }
        // still waiting while history went on: the code took another path than the live run
        if (recorded !== undefined) this.check(op, recorded)
        this.pending.push(this.commandOf(op))
        return { _tag: "Blocked" }
      }
      default: {
        this.blocking += 1
        if (recorded === undefined) {
          this.checkScheduled(op)
          this.pending.push(this.commandOf(op))
          return { _tag: "Blocked" }
        }
        this.check(op, recorded)
        this.cursor += 1
        return this.valueOf(op, recorded)
      }
    }
  }

  /** Asks for a parallel group of blocking ops; resolves to their values in the order given. */
  attemptAll(ops: ReadonlyArray<Op>): Attempt {
    if (this.frozen) return { _tag: "Blocked" }
    if (this.reaching !== undefined) throw new Error("internal error: a parallel group was asked for while a condition wait settled a replayed update")
    if (ops.length === 0) return { _tag: "Resolved", value: [] }
    if (ops.length > 1000) throw new Error("a parallel group has at most 1000 members")
    const settle = this.applyReceivers()
    if (settle !== undefined) return { _tag: "Settle", effect: settle }
    const base = this.sequence + 1
    const available = this.resolutions.slice(this.cursor, this.cursor + ops.length)
    if (available.length < ops.length) {
      for (const op of ops) {
        this.blocking += 1
        this.checkScheduled(op)
      }
      const kinds = new Set(ops.map((op) => op._tag))
      const kind = kinds.size > 1 ? "mixed" : ops[0]!._tag === "Activity" ? "activity" : ops[0]!._tag === "Timer" ? "timer" : ops[0]!._tag === "Child" ? "child" : "mixed"
      const prefix = kind === "activity" ? "parallel-activities" : kind === "timer" ? "parallel-timers" : kind === "child" ? "parallel-children" : "parallel-calls"
      const groupId = `${prefix}:${base}:${ops.length}`
      ops.forEach((op, index) => {
        if (op._tag !== "Activity" && op._tag !== "Timer" && op._tag !== "Child") {
          throw new Error(`only activities, timers and child workflows can run in a parallel group, got ${describe(op)}`)
        }
        const meta = {
          parallel_group_id: groupId,
          parallel_group_kind: kind,
          parallel_group_base_sequence: base,
          parallel_group_size: ops.length,
          parallel_group_index: index
        }
        this.pending.push({ ...this.commandOf(op), ...meta, parallel_group_path: [meta] })
      })
      this.sequence += ops.length
      return { _tag: "Blocked" }
    }
    const ordered = available.every((r) => r.groupIndex !== undefined)
      ? [...available].sort((a, b) => a.groupIndex! - b.groupIndex!)
      : available
    const values: Array<unknown> = []
    let failure: Attempt | undefined
    ops.forEach((op, i) => {
      this.sequence += 1
      this.blocking += 1
      this.check(op, ordered[i]!)
      const outcome = this.valueOf(op, ordered[i]!)
      if (outcome._tag === "Failed") failure ??= outcome
      else if (outcome._tag === "Resolved") values.push(outcome.value)
    })
    this.cursor += ops.length
    return failure ?? { _tag: "Resolved", value: values }
  }

  /**
   * What history holds past the code's position that the live run was blocked on: a scheduled step
   * with no result yet (see {@link unresolved}), else a condition wait history opened that the code
   * has not reached. Both only count once every recorded result has been replayed (a new op, or the
   * workflow's end): no op has blocked by then, so the code never asked for them.
   */
  private unreached(): { readonly step: Resolution } | { readonly wait: OpenedWait } | undefined {
    const step = this.unresolved[0]
    if (step !== undefined) return { step }
    const wait = this.waits[this.waitsReached]
    return wait === undefined ? undefined : { wait }
  }

  /** A new op, while history shows the live run blocked on something the code has not asked for. */
  private checkNothingUnreached(op: Op): void {
    const unreached = this.unreached()
    if (unreached === undefined) return
    if ("step" in unreached) this.mismatch(op, unreached.step)
    const sequence = this.sequence
    throw new NonDeterministicReplayError({
      workflowSequence: sequence,
      expected: shapeOf(op),
      recorded: "ConditionWaitOpened",
      message: `non-deterministic replay at workflow sequence ${sequence}: the code asked for a ${describe(op)}, ` +
        `but history opened the condition wait ${JSON.stringify(unreached.wait.key ?? "")} (${unreached.wait.waitId}) here`
    })
  }

  /**
   * The workflow returned or failed: recorded results it never asked for are non-determinism, and
   * so are the steps history shows scheduled and unresolved, and the condition waits history opened
   * that the code never reached (the code now ends where the live run was still waiting). Reopenings
   * of the last wait the code reached, with no outcome and no receiver left for them, are not
   * counted: after the satisfying signal, the server may have opened that wait again before the
   * task that saw it ran.
   */
  assertConsumed(): void {
    const left = this.resolutions[this.cursor]
    if (left !== undefined) {
      throw new NonDeterministicReplayError({
        workflowSequence: this.sequence + 1,
        expected: "workflow end",
        recorded: left.eventType,
        message: `non-deterministic replay: the workflow ended at sequence ${this.sequence}, but history recorded ` +
          `${this.resolutions.length - this.cursor} more result(s), the next being ${left.eventType}${detailOf(left)}`
      })
    }
    this.skipTrailingReopens()
    const unreached = this.unreached()
    if (unreached === undefined) return
    if ("step" in unreached) {
      const step = unreached.step
      const sequence = sequenceOf(step.payload) ?? this.sequence + 1
      throw new NonDeterministicReplayError({
        workflowSequence: sequence,
        expected: "workflow end",
        recorded: step.eventType,
        message: `non-deterministic replay: the workflow ended at sequence ${this.sequence}, but history shows ` +
          `${step.eventType}${detailOf(step)} at workflow sequence ${sequence} still waiting for its result: ` +
          "the code no longer asks for a step the run was waiting on"
      })
    }
    const wait = unreached.wait
    throw new NonDeterministicReplayError({
      workflowSequence: wait.sequence ?? this.sequence + 1,
      expected: "workflow end",
      recorded: "ConditionWaitOpened",
      message: `non-deterministic replay: the workflow ended at sequence ${this.sequence}, but history opened the ` +
        `condition wait ${JSON.stringify(wait.key ?? "")} (${wait.waitId}) that the code never reached`
    })
  }

  /** See {@link assertConsumed}: the last wait's trailing reopenings. */
  private skipTrailingReopens(): void {
    const last = this.lastWait
    if (last === undefined || !last.reopened || last.key === undefined || last.key.length === 0) return
    for (;;) {
      const wait = this.waits[this.waitsReached]
      if (wait === undefined || wait.key !== last.key || this.outcomes.has(wait.waitId)) return
      if (this.receivers.slice(this.receiversApplied).some((r) => r.waitId === wait.waitId)) return
      this.waitsReached += 1
    }
  }
}

const retryPolicyWire = (policy: NonNullable<ActivityOptions["retryPolicy"]>) => ({
  ...(policy.maxAttempts === undefined ? {} : { max_attempts: policy.maxAttempts }),
  ...(policy.backoffSeconds === undefined ? {} : { backoff_seconds: policy.backoffSeconds.map((s) => Math.ceil(s)) }),
  ...(policy.nonRetryableErrorTypes === undefined ? {} : { non_retryable_error_types: policy.nonRetryableErrorTypes })
})

const describe = (op: Op): string => {
  switch (op._tag) {
    case "Activity":
      return `activity "${op.activityType}"`
    case "Child":
      return `child workflow "${op.workflowType}"`
    case "Version":
      return `version marker "${op.changeId}"`
    default:
      return shapeOf(op)
  }
}

const detailOf = (r: Resolution): string => {
  const p = r.payload
  const detail = p["activity_type"] ?? p["workflow_type"] ?? p["change_id"]
  return typeof detail === "string" ? ` ("${detail}")` : ""
}
