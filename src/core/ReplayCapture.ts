/**
 * Capturing the histories a worker replays, to grow a CI corpus for `verify` from production
 * without exporting runs by hand.
 *
 * Provide a capture layer to a worker's run and a sampled share of its workflow turns is recorded,
 * for both orchestrators: each record is the turn's task as it was delivered (payloads left encoded)
 * with the decision (nestjs-durable) or the commands (Durable Workflow) this worker answered, in the
 * history-file shapes `ReplayVerify` reads (`effect-durable-worker.nestjs-durable-history.v1`,
 * `effect-durable-worker.durable-workflow-history.v1`). {@link layerDirectory} writes one file per
 * run, overwritten by its later turns, so the directory keeps each run's latest captured turn and
 * `effect-durable-worker verify` reads it as it is; {@link layer} hands each record to a callback.
 *
 * Recording never delays or fails a task: records go through a bounded queue to a writer fiber of
 * the layer's scope (a full queue drops the record, logged), a failing write or callback is logged,
 * and the records still queued when the layer is released are written before it closes. Sampling
 * draws from Effect's `Random` (`Effect.withRandom(Random.fixed([...]))` pins it in tests). A Durable
 * Workflow accepted-update task is recorded with its `workflow_update_id`; a task whose answer failed
 * (no commands) is not recorded.
 *
 * @example
 * import { NodeContext } from "@effect/platform-node"
 * import { Effect, Layer } from "effect"
 * import { ReplayCapture, Worker } from "effect-durable-worker"
 *
 * const WorkerLive = Worker.layer({ workflows: [pipeline], steps }).pipe(
 *   Layer.provide(ReplayCapture.layerDirectory("./histories", { sampleRate: 0.05 })),
 *   Layer.provide(NodeContext.layer)
 * )
 *
 * @since 0.3.0
 */
import * as FileSystem from "@effect/platform/FileSystem"
import * as Path from "@effect/platform/Path"
import * as Context from "effect/Context"
import * as DateTime from "effect/DateTime"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Random from "effect/Random"
import * as Schema from "effect/Schema"
import { messageOf } from "./internal/errors.js"
import { showValue, unknownOption } from "./internal/options.js"
import type { DurableWorkflowHistory, NestDurableHistory } from "./internal/verify/files.js"
import * as NodeFiles from "../services/internal/nodeFiles.js"

/**
 * A captured turn, in the shape of its history file.
 *
 * @since 0.3.0
 * @category models
 */
export type CapturedHistory = NestDurableHistory | DurableWorkflowHistory

/**
 * A capture option that cannot be used: a `sampleRate` outside 0..1, a `queueCapacity` below 1, an
 * empty directory.
 *
 * @since 0.3.0
 * @category errors
 */
export class ReplayCaptureConfigError extends Schema.TaggedError<ReplayCaptureConfigError>()("ReplayCaptureConfigError", {
  option: Schema.String,
  message: Schema.String
}) {}

/**
 * Options of a capture layer.
 *
 * @since 0.3.0
 * @category models
 */
export interface CaptureOptions {
  /** The share of workflow turns recorded, from 0 (none) to 1 (every turn). Default 1. */
  readonly sampleRate?: number | undefined
  /** How many records may wait for the writer; one more is dropped (and logged). Default 1000. */
  readonly queueCapacity?: number | undefined
}

/**
 * What the protocols see of the capture in force: whether it is on, its sample rate, and where a
 * record goes. The default is off.
 *
 * @since 0.3.0
 * @category models
 */
export interface ReplayCaptureShape {
  readonly enabled: boolean
  readonly sampleRate: number
  readonly offer: (record: CapturedHistory) => Effect.Effect<void>
}

/**
 * The capture in force, a reference whose default captures nothing.
 *
 * @since 0.3.0
 * @category services
 */
export class ReplayCapture extends Context.Reference<ReplayCapture>()("effect-durable-worker/ReplayCapture", {
  defaultValue: (): ReplayCaptureShape => ({ enabled: false, sampleRate: 0, offer: () => Effect.void })
}) {}

/**
 * Records a turn when the capture in force samples it: `record` is built only then (it may fetch
 * what it needs, e.g. the rest of a paged history) and may give `undefined` for a turn that is not
 * to be recorded. Never fails; a failure building the record is logged. The protocols call it with
 * each answered workflow turn.
 *
 * @since 0.3.0
 * @category capturing
 */
export const capture = <E, R>(record: Effect.Effect<CapturedHistory | undefined, E, R>): Effect.Effect<void, never, R> =>
  Effect.flatMap(ReplayCapture, (capture) => {
    if (!capture.enabled || capture.sampleRate <= 0) return Effect.void
    return Effect.flatMap(capture.sampleRate >= 1 ? Effect.succeed(0) : Random.next, (draw) =>
      draw >= capture.sampleRate ? Effect.void : record.pipe(
        Effect.flatMap((built) => (built === undefined ? Effect.void : capture.offer(built))),
        Effect.catchAllCause((cause) => Effect.logWarning("replay capture: the turn could not be recorded", cause))
      ))
  })

/**
 * The capture time stamp of a record (ISO 8601, from the `Clock`).
 *
 * @since 0.3.0
 * @category capturing
 */
export const capturedAt: Effect.Effect<string> = Effect.map(DateTime.now, DateTime.formatIso)

/**
 * Checks a capture's sample rate and queue capacity, with their defaults: the layers here and the
 * worker's `captureHistories` option alike.
 *
 * @internal
 */
export const checkOptions = (
  options: CaptureOptions
): Either.Either<{ readonly sampleRate: number; readonly capacity: number }, ReplayCaptureConfigError> => {
  const sampleRate = options.sampleRate ?? 1
  const capacity = options.queueCapacity ?? 1000
  if (typeof sampleRate !== "number" || !Number.isFinite(sampleRate) || sampleRate < 0 || sampleRate > 1) {
    return Either.left(new ReplayCaptureConfigError({
      option: "sampleRate",
      message: `sampleRate must be a number from 0 to 1 (the share of workflow turns recorded), got ${showValue(sampleRate)}`
    }))
  }
  if (!Number.isInteger(capacity) || capacity < 1) {
    return Either.left(new ReplayCaptureConfigError({
      option: "queueCapacity",
      message: `queueCapacity must be an integer of at least 1, got ${showValue(capacity)}`
    }))
  }
  return Either.right({ sampleRate, capacity })
}

const CAPTURE_OPTION_KEYS: ReadonlyArray<keyof CaptureOptions> = ["sampleRate", "queueCapacity"]

/** A capture whose records a writer fiber of the layer's scope hands to `sink`, one at a time. */
const make = <R>(
  options: CaptureOptions,
  sink: (record: CapturedHistory) => Effect.Effect<void, unknown, R>
): Layer.Layer<ReplayCapture, ReplayCaptureConfigError, R> =>
  Layer.scoped(ReplayCapture, Effect.gen(function*() {
    // a mistyped sampleRate would otherwise record every turn, unnoticed
    const unknown = unknownOption(options, CAPTURE_OPTION_KEYS, "replay capture")
    if (unknown !== undefined) return yield* new ReplayCaptureConfigError({ option: unknown.key, message: unknown.message })
    const { capacity, sampleRate } = yield* checkOptions(options)
    const queue = yield* Queue.dropping<CapturedHistory>(capacity)
    const write = (record: CapturedHistory) =>
      sink(record).pipe(
        Effect.catchAllCause((cause) => Effect.logWarning(`replay capture: the turn of run ${record.run_id ?? "?"} was not recorded`, cause))
      )
    // each record is written whole: an interruption waits for the one being written
    const writer = yield* Effect.forkScoped(Effect.forever(Effect.flatMap(Queue.take(queue), (r) => Effect.uninterruptible(write(r)))))
    yield* Effect.addFinalizer(() =>
      Effect.zipRight(
        Fiber.interrupt(writer),
        Effect.flatMap(Queue.takeAll(queue), (rest) => Effect.forEach(rest, write, { discard: true }))
      ))
    const shape: ReplayCaptureShape = {
      enabled: true,
      sampleRate,
      offer: (record) =>
        Effect.flatMap(
          Queue.offer(queue, record),
          (accepted) => accepted ? Effect.void : Effect.logWarning(`replay capture: queue full, the turn of run ${record.run_id ?? "?"} was dropped`)
        )
    }
    return shape
  }))

/**
 * Captures into a callback: every sampled turn's record is handed to `onCapture` (a value, a
 * promise or an Effect; its failure is logged), one at a time, off the task's path. Records carry
 * their `run_id`: keep the latest per run to mirror {@link layerDirectory}.
 *
 * @since 0.3.0
 * @category layers
 */
export const layer = (
  onCapture: (record: CapturedHistory) => unknown,
  options: CaptureOptions = {}
): Layer.Layer<ReplayCapture, ReplayCaptureConfigError> =>
  typeof onCapture !== "function"
    ? Layer.fail(
      new ReplayCaptureConfigError({
        option: "onCapture",
        message: `ReplayCapture.layer takes the function each record is handed to, got ${showValue(onCapture)}; ` +
          "for a directory, ReplayCapture.layerDirectory"
      })
    )
    : make(options, (record) =>
      Effect.flatMap(
        Effect.try({ try: () => onCapture(record), catch: (error) => error }),
        (out) =>
          Effect.isEffect(out)
            ? out as Effect.Effect<unknown, unknown>
            : typeof (out as PromiseLike<unknown> | null)?.then === "function"
            ? Effect.tryPromise({ try: () => Promise.resolve(out), catch: (error) => error })
            : Effect.void
      ))

/**
 * The file name a run's records are written under: its orchestrator and its run id, with every
 * character other than letters, digits, `.`, `-` and `_` replaced by `_`.
 *
 * @since 0.3.0
 * @category capturing
 */
export const fileName = (record: CapturedHistory): string => {
  const kind = record.schema === "effect-durable-worker.nestjs-durable-history.v1" ? "nestjs-durable" : "durable-workflow"
  const run = record.run_id ?? ("workflow_id" in record ? record.workflow_id : undefined) ?? "unknown"
  return `${kind}.${run.replace(/[^A-Za-z0-9._-]/g, "_")}.json`
}

/**
 * Captures into a directory (created when missing): one JSON file per run ({@link fileName}),
 * replaced atomically by each later captured turn of that run, so the directory always holds each
 * run's latest captured turn and `effect-durable-worker verify --workflows <module> <directory>` replays it.
 *
 * @since 0.3.0
 * @category layers
 */
export const layerDirectory = (
  directory: string,
  options: CaptureOptions = {}
): Layer.Layer<ReplayCapture, ReplayCaptureConfigError, FileSystem.FileSystem | Path.Path> =>
  Layer.unwrapEffect(Effect.gen(function*() {
    if (typeof directory !== "string" || directory.trim() === "") {
      return yield* new ReplayCaptureConfigError({ option: "directory", message: "the capture directory must be a non-empty path" })
    }
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    let created = false
    let written = 0
    return make(options, (record) =>
      Effect.gen(function*() {
        if (!created) {
          yield* fs.makeDirectory(directory, { recursive: true })
          created = true
        }
        const target = path.join(directory, fileName(record))
        // written beside the target, then renamed over it: a reader never sees half a file
        const temporary = path.join(directory, `.${fileName(record)}.${process.pid}-${++written}.tmp`)
        yield* fs.writeFileString(temporary, JSON.stringify(record, null, 2) + "\n")
        yield* fs.rename(temporary, target)
      }).pipe(Effect.mapError((error) => new Error(`cannot write to ${directory}: ${messageOf(error)}`))))
  }))

/**
 * The `captureHistories` option of a worker: a directory (one file per run, see
 * {@link layerDirectory}) or a callback receiving each record (see {@link layer}), with the share of
 * workflow turns recorded (`sampleRate`, 0..1, default 1).
 *
 * @since 0.3.0
 * @category models
 */
export type CaptureHistoriesOption =
  & CaptureOptions
  & (
    | { readonly directory: string; readonly onCapture?: undefined }
    | { readonly onCapture: (record: CapturedHistory) => unknown; readonly directory?: undefined }
  )

/**
 * The capture layer of a {@link CaptureHistoriesOption}; a directory is written through the
 * application's `FileSystem` when it provides one, else over `node:fs`.
 *
 * @since 0.3.0
 * @category layers
 */
export const layerOption = (option: CaptureHistoriesOption): Layer.Layer<ReplayCapture, ReplayCaptureConfigError> =>
  option.directory !== undefined
    ? Layer.unwrapEffect(
      Effect.map(
        Effect.serviceOption(FileSystem.FileSystem),
        (fs) =>
          layerDirectory(option.directory, sampling(option)).pipe(
            Layer.provide(
              Option.isSome(fs)
                ? Layer.merge(Layer.succeed(FileSystem.FileSystem, fs.value), Path.layer)
                : NodeFiles.layerWithPath
            )
          )
      )
    )
    : layer(option.onCapture, sampling(option))

/** The sample rate and queue capacity of a {@link CaptureHistoriesOption}, whose other keys say where records go. */
const sampling = ({ queueCapacity, sampleRate }: CaptureOptions): CaptureOptions => ({ queueCapacity, sampleRate })
