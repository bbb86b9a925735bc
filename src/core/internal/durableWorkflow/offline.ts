import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Predicate from "effect/Predicate"
import * as Codec from "../../../wire/DurableWorkflowCodec.js"
import { messageOf } from "../errors.js"
import { NonDeterministicReplayError, QueryFailed, ReplayError } from "./errors.js"
import { type Command, decodeArgs, payloadCodecOf } from "./replay.js"
import { applyUpdate, type Definition, encodeInline, query, replay, ReplayFailure, type ReplayInput, unserializable } from "./run.js"

/** A recorded history: its events, or an export document carrying them. @internal */
export type HistoryInput = ReadonlyArray<unknown> | { readonly events: ReadonlyArray<unknown> }

/**
 * Options of an offline replay; every one has a default read from the history.
 *
 * @since 0.3.0
 * @category replay
 */
export interface ReplayOptions {
  /** The workflow type to run. Default: the first `workflow_type` in the history, else the only definition given. */
  readonly workflowType?: string | undefined
  /** The start input (decoded arguments). Default: decoded from `WorkflowStarted` (`input_envelope`, `input` or `arguments`), `[]` when absent. */
  readonly input?: ReadonlyArray<unknown> | undefined
  /** `ctx.workflowId`. Default: the first `workflow_id` in the history, else `""`. */
  readonly workflowId?: string | undefined
  /** `ctx.runId` (it seeds `ctx.random`/`ctx.uuid4`). Default: the first `run_id` in the history, else `""`. */
  readonly runId?: string | undefined
  /** The queue new activities and children go to unless they name one. Default: the history's `task_queue`, else `"default"`. */
  readonly taskQueue?: string | undefined
  /**
   * The codec of event payloads that do not name their own `payload_codec` (a live task's root
   * codec). Default `"avro"`; anything else — `null` included — fails with `unsupported_payload_codec`.
   */
  readonly payloadCodec?: string | null | undefined
}

/** Every error an offline replay fails with. @internal */
export type OfflineError = NonDeterministicReplayError | Codec.PayloadDecodeError | ReplayError

const invalid = (message: string) => new ReplayError({ reason: "invalid_history", message })

/** The event list of a history given as a list or as an export document (`events`, `history_events` or `history`). */
export const eventsOf = (history: unknown): Either.Either<ReadonlyArray<Record<string, unknown>>, ReplayError> => {
  let raw: unknown = history
  if (!Array.isArray(history)) {
    if (!Predicate.isRecord(history)) return Either.left(invalid("the history is neither an event list nor an export document with `events`"))
    raw = history["events"] ?? history["history_events"] ?? history["history"]
    if (!Array.isArray(raw)) return Either.left(invalid("the history export has no `events` list (nor `history_events` or `history`)"))
  }
  const events = raw as ReadonlyArray<unknown>
  for (let i = 0; i < events.length; i++) {
    if (!Predicate.isRecord(events[i])) return Either.left(invalid(`history event ${i} is not an object`))
  }
  return Either.right(events as ReadonlyArray<Record<string, unknown>>)
}

const payloadOf = (event: Record<string, unknown>): Record<string, unknown> =>
  Predicate.isRecord(event["payload"]) ? event["payload"] : {}

const firstString = (events: ReadonlyArray<Record<string, unknown>>, key: string): string | undefined => {
  for (const event of events) {
    const value = payloadOf(event)[key] ?? event[key]
    if (typeof value === "string" && value.length > 0) return value
  }
  return undefined
}

/** The definitions by type: at least one, no type twice. */
export const registryOf = <R>(
  definitions: Definition<R> | Iterable<Definition<R>> | ReadonlyMap<string, Definition<R>>
): Either.Either<ReadonlyMap<string, Definition<R>>, ReplayError> => {
  const list: Array<Definition<R>> = definitions instanceof Map
    ? [...(definitions as ReadonlyMap<string, Definition<R>>).values()]
    : Symbol.iterator in (definitions as object)
    ? [...(definitions as Iterable<Definition<R>>)]
    : [definitions as Definition<R>]
  const registry = new Map<string, Definition<R>>()
  for (const definition of list) {
    if (registry.has(definition.name)) {
      return Either.left(new ReplayError({
        reason: "duplicate_workflow_type",
        message: `the workflow type '${definition.name}' is given twice; pass each definition once`
      }))
    }
    registry.set(definition.name, definition)
  }
  if (registry.size === 0) {
    return Either.left(new ReplayError({ reason: "no_workflows", message: "no workflow definitions were given to replay against" }))
  }
  return Either.right(registry)
}

const pick = <R>(
  registry: ReadonlyMap<string, Definition<R>>,
  events: ReadonlyArray<Record<string, unknown>>,
  workflowType: string | undefined
): Either.Either<Definition<R>, ReplayError> => {
  const registered = [...registry.keys()].sort().join(", ")
  const type = workflowType ?? firstString(events, "workflow_type")
  if (type === undefined) {
    if (registry.size === 1) return Either.right([...registry.values()][0]!)
    return Either.left(new ReplayError({
      reason: "unknown_workflow_type",
      message: `the history names no workflow type (no workflow_type on its events) and several workflows are given (${registered}); pass workflowType`
    }))
  }
  const definition = registry.get(type)
  if (definition === undefined) {
    return Either.left(new ReplayError({
      reason: "unknown_workflow_type",
      message: `the workflow type '${type}' is not among the given definitions; registered: ${registered}`
    }))
  }
  return Either.right(definition)
}

/** The start input recorded on `WorkflowStarted` (`input_envelope`, `input` or `arguments`), under its own codec. */
const startInputOf = (events: ReadonlyArray<Record<string, unknown>>, fallbackCodec: unknown): ReadonlyArray<unknown> => {
  const started = events.find((event) => event["event_type"] === "WorkflowStarted")
  if (started === undefined) return []
  const payload = payloadOf(started)
  const codec = payloadCodecOf(payload, fallbackCodec)
  for (const key of ["input_envelope", "input", "arguments"]) {
    const raw = payload[key]
    if (raw === undefined || raw === null) continue
    // already-decoded values (a list or scalar in the export) are taken as they are
    if (typeof raw !== "string" && !(Predicate.isRecord(raw) && "codec" in raw)) return Array.isArray(raw) ? raw : [raw]
    return decodeArgs(raw, codec)
  }
  return []
}

/** Maps what replay threw to the offline replayer's errors. */
const offlineError = (error: unknown): OfflineError => {
  const cause = error instanceof ReplayFailure ? error.error : error
  if (cause instanceof NonDeterministicReplayError || cause instanceof Codec.PayloadDecodeError || cause instanceof ReplayError) return cause
  return new ReplayError({ reason: "replay_failed", message: `replay failed: ${messageOf(cause)}` })
}

/** Builds the replay input of an offline replay (history read, type picked, start input decoded). */
export const prepare = <R>(
  definitions: Definition<R> | Iterable<Definition<R>> | ReadonlyMap<string, Definition<R>>,
  history: unknown,
  options: ReplayOptions
): Effect.Effect<{ readonly definition: Definition<R>; readonly input: ReplayInput }, OfflineError> =>
  Effect.gen(function*() {
    const registry = yield* registryOf(definitions)
    const events = yield* eventsOf(history)
    const definition = yield* pick(registry, events, options.workflowType)
    // the fallback codec of events without their own: the task codec of a live task, "avro" offline
    const codec = "payloadCodec" in options && options.payloadCodec !== undefined ? options.payloadCodec : Codec.codec
    yield* Codec.requireAvroCodec(codec, "replay payload")
    const args = options.input ?? (yield* Effect.try({ try: () => startInputOf(events, codec), catch: offlineError }))
    const now = yield* Clock.currentTimeMillis
    const input: ReplayInput = {
      workflowId: options.workflowId ?? firstString(events, "workflow_id") ?? "",
      runId: options.runId ?? firstString(events, "run_id") ?? "",
      workflowType: definition.name,
      taskQueue: options.taskQueue ?? firstString(events, "task_queue") ?? firstString(events, "queue") ?? "default",
      codec,
      args,
      history: events,
      now,
      encode: encodeInline
    }
    return { definition, input }
  })

/** Replays a history offline: the commands the code produces for it. @internal */
export const replayOffline = <R>(
  definitions: Definition<R> | Iterable<Definition<R>> | ReadonlyMap<string, Definition<R>>,
  history: unknown,
  options: ReplayOptions = {}
): Effect.Effect<{ readonly workflowType: string; readonly input: ReadonlyArray<unknown>; readonly commands: ReadonlyArray<Command> }, OfflineError, R> =>
  Effect.gen(function*() {
    const { definition, input } = yield* prepare(definitions, history, options)
    const result = yield* Effect.mapError(replay(definition, input), offlineError)
    return { workflowType: definition.name, input: input.args, commands: result.commands }
  })

/** Replays a history offline, then answers a query from the replayed state. @internal */
export const queryOffline = <R>(
  definitions: Definition<R> | Iterable<Definition<R>> | ReadonlyMap<string, Definition<R>>,
  history: unknown,
  name: string,
  args: ReadonlyArray<unknown>,
  options: ReplayOptions = {}
): Effect.Effect<unknown, OfflineError | QueryFailed, R> =>
  Effect.gen(function*() {
    const { definition, input } = yield* prepare(definitions, history, options)
    // a replay failure is the replay's error, not a query failure, when replaying offline
    const replayed = yield* Effect.either(replay(definition, input))
    if (Either.isLeft(replayed)) return yield* Effect.fail(offlineError(replayed.left))
    const result = yield* query(definition, input, name, args)
    // what a worker could not send back is no answer offline either
    const encoded = Codec.encodeEnvelope(result === undefined ? null : result)
    if (Either.isLeft(encoded)) {
      const refused = unserializable(`the result of query ${JSON.stringify(name)}`, encoded.left)
      return yield* new QueryFailed({ reason: "query_result_encode_failed", message: refused.message })
    }
    return result
  })

/** An update to apply offline: an accepted one in history (its id), or a new one. @internal */
export type OfflineUpdate = string | { readonly name: string; readonly args?: ReadonlyArray<unknown> | undefined; readonly updateId?: string | undefined }

/** Replays a history offline, then applies an update: its one command. @internal */
export const updateOffline = <R>(
  definitions: Definition<R> | Iterable<Definition<R>> | ReadonlyMap<string, Definition<R>>,
  history: unknown,
  update: OfflineUpdate,
  options: ReplayOptions = {}
): Effect.Effect<{ readonly workflowType: string; readonly updateId: string; readonly command: Command }, OfflineError, R> =>
  Effect.gen(function*() {
    const events = yield* eventsOf(history)
    const updateId = typeof update === "string" ? update : update.updateId ?? "offline-update"
    let withUpdate: ReadonlyArray<unknown> = events
    if (typeof update !== "string") {
      const args = yield* Effect.mapError(
        Effect.try({ try: () => encodeInline([...(update.args ?? [])]), catch: (e) => e }),
        (e) => new ReplayError({ reason: "invalid_update", message: `the arguments of update '${update.name}' cannot be encoded: ${messageOf(e)}` })
      )
      withUpdate = [...events, { event_type: "UpdateAccepted", payload: { update_id: updateId, update_name: update.name, arguments: args } }]
    }
    const { definition, input } = yield* prepare(definitions, withUpdate, options)
    const command = yield* Effect.mapError(applyUpdate(definition, input, updateId), offlineError)
    return { workflowType: definition.name, updateId, command }
  })
