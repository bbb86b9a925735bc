/**
 * The two BullMQ calls on a worker's task path, made through BullMQ's own scripts without a `Job`
 * object around each of them.
 *
 * `Queue.add` builds a `Job` (defaults, backoff, parent, deduplication), serialises it, validates it
 * and wraps the call in telemetry and three async functions; `Job.moveToCompleted` adds its own
 * telemetry wrapper and a readiness check; and every job BullMQ hands back with an acknowledgement
 * becomes a full `Job`. On a no-op step that is a sixth of the worker's main thread. Here:
 *
 * - a reply queue's jobs all share one name and one set of options, so the `Job` is built once, as a
 *   template, and each reply goes to `Scripts.addJob` with its own data and timestamp;
 * - the acknowledgement goes to `Scripts.moveToFinished` with the arguments BullMQ's
 *   `moveToCompletedArgs` builds, as `Job.moveToCompleted` does;
 * - the job that comes with it is read for its id, data and options only; a `Job` is made from the
 *   same fields when a rare call needs one (failing it, giving it back, extending its lock).
 *
 * Every step stays on BullMQ's public `Scripts` API, so the keys and arguments of its Lua scripts are
 * BullMQ's own; the transport's tests compare what lands in Redis with what `Queue.add` and
 * `Job.moveToCompleted` leave there.
 *
 * @internal
 */
import { Job, type JobJsonRaw, type JobsOptions, type MinimalJob, type Queue, type Worker } from "bullmq"

/** Adds one job of the writer's name and options, with `data` (JSON-serialised); resolves to its id. @internal */
export type JobWriter = (data: unknown) => Promise<string>

/**
 * A writer of `name` jobs with `options` on `queue`, stored as `Queue.add(name, data, options)`
 * stores them. `options` may not delay, prioritise, repeat, deduplicate or parent the job: those
 * take other scripts.
 *
 * @internal
 */
export const jobWriter = async (queue: Queue, name: string, options: JobsOptions): Promise<JobWriter> => {
  const merged = { ...queue.jobsOpts, ...options }
  if (
    merged.delay !== undefined || merged.priority !== undefined || merged.repeat !== undefined ||
    merged.deduplication !== undefined || merged.debounce !== undefined || merged.parent !== undefined ||
    merged.jobId !== undefined
  ) {
    throw new Error(`jobWriter: ${name} jobs on ${queue.name} need Queue.add (delayed, prioritised, repeated, deduplicated, parented or named)`)
  }
  const client = await queue.client
  const template = new Job(queue, name, undefined, merged).asJSON()
  return (data) =>
    queue.scripts.addJob(client, { ...template, data: JSON.stringify(data === undefined ? {} : data), timestamp: Date.now() }, template.opts, "")
}

/** The raw job fields BullMQ returns with an acknowledgement that moved the next job to active. @internal */
export interface NextJob {
  readonly id: string
  readonly fields: JobJsonRaw
}

/**
 * Acknowledges job `id` (with its decoded `options`) as completed, with no return value, its lock
 * held with `token`; with `fetchNext`, the same script call moves the next job to active under the
 * same token. Fails as `Job.moveToCompleted` does when the job is not this worker's any more.
 *
 * @internal
 */
export const completeJob = async (
  worker: Worker,
  id: string,
  options: JobsOptions,
  token: string,
  fetchNext: boolean
): Promise<NextJob | undefined> => {
  // BullMQ's argument builder reads only the job's id and options; a job without removeOnComplete
  // of its own takes the worker's, as with Job.moveToCompleted (hence undefined passed through)
  const job = { id, opts: options } as MinimalJob
  const args = worker.scripts.moveToCompletedArgs(job, undefined, options.removeOnComplete!, token, fetchNext)
  const [fields, next] = (await worker.scripts.moveToFinished(id, args)) ?? []
  return fields !== null && fields !== undefined && typeof next === "string" ? { id: next, fields: fields as JobJsonRaw } : undefined
}

/** The last encoded options decoded: every task of an engine's queue carries the same. */
let lastOptions: { readonly raw: string | undefined; readonly decoded: JobsOptions } | undefined

/**
 * Decodes a job's stored options as `Job.fromJSON` does, reusing the last result for the same text.
 * The decoded options are shared: read them, never change them.
 *
 * @internal
 */
export const decodeOptions = (raw: string | undefined): JobsOptions => {
  if (lastOptions === undefined || lastOptions.raw !== raw) lastOptions = { raw, decoded: Job.optsFromJSON(raw) }
  return lastOptions.decoded
}

/** The job's data as `Job.fromJSON` parses it. Throws on data that is not JSON. @internal */
export const decodeData = (fields: JobJsonRaw): unknown => JSON.parse(fields.data || "{}")
