import type * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as FiberRef from "effect/FiberRef"
import * as FiberRefs from "effect/FiberRefs"
import * as HashSet from "effect/HashSet"
import * as Logger from "effect/Logger"
import type * as LogLevel from "effect/LogLevel"
import * as Runtime from "effect/Runtime"
import { unencodable } from "../../wire/internal/json.js"
import type { StepEvent } from "../../wire/StepProtocol.js"
import { annotationsWith, withFiberRefs } from "./fiberRefs.js"

/**
 * The logger a step handler gets as `ctx.log`. Every call records a step event (returned to the
 * engine with the result) and goes to Effect's `Logger` with the run and step annotations.
 *
 * @since 0.1.0
 * @category models
 */
export interface StepLogger {
  readonly debug: (message: string, data?: unknown) => void
  readonly info: (message: string, data?: unknown) => void
  readonly warn: (message: string, data?: unknown) => void
  readonly error: (message: string, data?: unknown) => void
  /** Records a sub-process outcome (`status` ok/failed/skipped sets the level to info/error/warn). */
  readonly sub: (
    subId: string,
    status: "ok" | "failed" | "skipped",
    message: string,
    extra?: { readonly name?: string; readonly phase?: string; readonly data?: unknown }
  ) => void
}

/**
 * The events as they can go on the wire: a field JSON cannot carry (data holding a BigInt or a cycle,
 * an `Error` logged as data, a message that is not a string) is replaced by a note saying what it was
 * and where. Events are what the handler logged: one that cannot be encoded must not cost the step
 * its answer (the transport's encoding would throw, and the task be given back and run again for
 * ever). The array itself is returned when every event can be carried, as nearly always.
 *
 * @internal
 */
export const encodableEvents = (events: ReadonlyArray<StepEvent>): ReadonlyArray<StepEvent> => {
  let fixed: Array<StepEvent> | undefined
  for (let i = 0; i < events.length; i++) {
    const event = events[i]!
    if (unencodable(event) === undefined) continue
    const copy: Record<string, unknown> = {}
    for (const [field, value] of Object.entries(event)) {
      const bad = unencodable(value)
      copy[field] = bad === undefined ? value : `(left out: ${bad.reason} at ${bad.path.replace("$", field)})`
    }
    fixed ??= events.slice()
    fixed[i] = copy as StepEvent
  }
  return fixed ?? events
}

const toEffectLevel = {
  debug: Effect.logDebug,
  info: Effect.logInfo,
  warn: Effect.logWarning,
  error: Effect.logError
} as const

/** @internal */
export const makeStepLogger = (
  events: Array<StepEvent>,
  clock: Clock.Clock,
  runtime: Runtime.Runtime<never>,
  annotations?: Readonly<Record<string, unknown>>
): StepLogger => {
  const record = (event: Omit<StepEvent, "at">) => {
    events.push({ at: clock.unsafeCurrentTimeMillis(), ...event })
    const log = toEffectLevel[event.level]
    // recorded above: the shared event logger must not record it again
    const line = Effect.locally(event.data === undefined ? log(event.message) : log(event.message, event.data), currentEvents, undefined)
    Runtime.runSync(runtime)(annotations === undefined ? line : Effect.annotateLogs(line, annotations))
  }
  const at = (level: StepEvent["level"]) => (message: string, data?: unknown) =>
    record({ level, message, ...(data === undefined ? {} : { data }) })
  return {
    debug: at("debug"),
    info: at("info"),
    warn: at("warn"),
    error: at("error"),
    sub: (subId, status, message, extra) =>
      record({
        level: status === "failed" ? "error" : status === "skipped" ? "warn" : "info",
        message,
        subId,
        status,
        ...(extra?.name === undefined ? {} : { name: extra.name }),
        ...(extra?.phase === undefined ? {} : { phase: extra.phase }),
        ...(extra?.data === undefined ? {} : { data: extra.data })
      })
  }
}

const levelOf = (level: LogLevel.LogLevel): StepEvent["level"] => {
  switch (level._tag) {
    case "Error":
    case "Fatal":
      return "error"
    case "Warning":
      return "warn"
    case "Info":
      return "info"
    default:
      return "debug"
  }
}

const render = (message: unknown): { readonly message: string; readonly data?: unknown } => {
  const parts = Array.isArray(message) ? message : [message]
  const text = parts.filter((part) => typeof part === "string").join(" ")
  const rest = parts.filter((part) => typeof part !== "string")
  return { message: text, ...(rest.length === 0 ? {} : { data: rest.length === 1 ? rest[0] : rest }) }
}

/** The events of the step a fiber runs, if any: where the shared logger below records. */
const currentEvents = FiberRef.unsafeMake<Array<StepEvent> | undefined>(undefined)

/** One logger for every step: it records into the running step's events (a no-op elsewhere). */
const eventLogger = Logger.make<unknown, void>(({ context, date, logLevel, message }) => {
  const events = FiberRefs.getOrDefault(context, currentEvents)
  if (events !== undefined) events.push({ at: date.getTime(), level: levelOf(logLevel), ...render(message) })
})

/** The last logger set looked at, and whether it holds the shared logger (it rarely changes). */
let seenLoggers: HashSet.HashSet<Logger.Logger<unknown, any>> | undefined
let seenHasEventLogger = false

/** The refs that make the shared logger record into `events`. */
const recordInto = (refs: FiberRefs.FiberRefs, events: Array<StepEvent>) => {
  const loggers = FiberRefs.getOrDefault(refs, FiberRef.currentLoggers)
  if (loggers !== seenLoggers) {
    seenLoggers = loggers
    seenHasEventLogger = HashSet.has(loggers, eventLogger)
  }
  return seenHasEventLogger
    ? [[currentEvents, events]] as const
    : [[currentEvents, events], [FiberRef.currentLoggers, HashSet.add(loggers, eventLogger)]] as const
}

/**
 * Installs the shared event logger for `self` and every fiber it starts, so that the tasks they run
 * do not add it one by one (it records nothing outside a task).
 *
 * @internal
 */
export const withEventLogger = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.locallyWith(self, FiberRef.currentLoggers, HashSet.add(eventLogger))

/**
 * Records what an Effect handler logs with `Effect.log*` as step events too.
 *
 * @internal
 */
export const captureEffectLogs = (events: Array<StepEvent>) => withFiberRefs((refs) => recordInto(refs, events))

/**
 * {@link captureEffectLogs}, and the task's log annotations, in one update of the fiber's refs.
 *
 * @internal
 */
export const captureTaskLogs = (annotations: Readonly<Record<string, unknown>>, events: Array<StepEvent>) =>
  withFiberRefs((refs) => [...recordInto(refs, events), annotationsWith(refs, annotations)])
