/**
 * The BullMQ calls on a worker's task path, made through BullMQ's own scripts without a `Job` object
 * around each of them, and a task's reply and acknowledgement made in one script call.
 *
 * `Queue.add` builds a `Job` (defaults, backoff, parent, deduplication), serialises it, validates it
 * and wraps the call in telemetry and three async functions; `Job.moveToCompleted` adds its own
 * telemetry wrapper and a readiness check; and every job BullMQ hands back with an acknowledgement
 * becomes a full `Job`. Here:
 *
 * - a reply queue's jobs all share one name and one set of options, so the `Job` is built once, as a
 *   template, and each reply goes to `Scripts.addJob` with its own data and timestamp;
 * - an acknowledgement goes to `Scripts.moveToFinished` with the arguments BullMQ's
 *   `moveToCompletedArgs` builds, as `Job.moveToCompleted` does;
 * - the job that comes with it is read for its id, data and options only; a `Job` is made from the
 *   same fields when a rare call needs one (failing it, giving it back, extending its lock);
 * - a reply and the acknowledgement of its job, on one Redis, are one call of one Lua script that
 *   runs BullMQ's own `addStandardJob` and `moveToFinished` scripts (as the installed BullMQ ships
 *   them) one after the other, each on its own keys and arguments as BullMQ builds them. Redis runs a
 *   script whole: a job is never acknowledged without its reply, a reply Redis refuses leaves its
 *   job unacknowledged, to be answered again, and a job whose lock the worker no longer holds gets
 *   no reply (so an answer retried never writes a second one). It is one command per task, not two.
 *
 * The keys and arguments of BullMQ's scripts are always BullMQ's own; the transport's tests compare
 * what lands in Redis with what `Queue.add` and `Job.moveToCompleted` leave there.
 *
 * @internal
 */
import {
  Job,
  type JobJson,
  type JobJsonRaw,
  type JobsOptions,
  type MinimalJob,
  type MinimalQueue,
  type Queue,
  raw2NextJobData,
  type RedisJobOptions,
  Worker
} from "bullmq"
import type { Redis } from "ioredis"
import { createRequire } from "node:module"

/** A reply queue's jobs: one name, one set of options. @internal */
export interface JobWriter {
  readonly queue: Queue
  /** The job BullMQ's add script takes for `data` (JSON-serialised). */
  readonly job: (data: unknown) => JobJson
  /** The jobs' options, encoded as BullMQ's add script takes them. */
  readonly options: RedisJobOptions
  /** Adds one job with `data`; resolves to its id. */
  readonly write: (data: unknown) => Promise<string>
}

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
  const job = (data: unknown): JobJson => ({
    ...template,
    data: JSON.stringify(data === undefined ? {} : data),
    timestamp: Date.now()
  })
  return { queue, job, options: template.opts, write: (data) => queue.scripts.addJob(client, job(data), template.opts, "") }
}

/** The raw job fields BullMQ returns with an acknowledgement that moved the next job to active. @internal */
export interface NextJob {
  readonly id: string
  readonly fields: JobJsonRaw
}

/** The job in an acknowledgement's result as BullMQ reads it (`raw2NextJobData`), if one came. */
const nextJobOf = ([fields, id]: ReadonlyArray<unknown> = []): NextJob | undefined =>
  fields !== null && fields !== undefined && typeof id === "string" ? { id, fields: fields as JobJsonRaw } : undefined

/**
 * The keys and arguments of BullMQ's acknowledge script for job `id` (with its decoded `options`),
 * completed with no return value, as `Job.moveToCompleted` has BullMQ build them.
 */
const completionArgs = (worker: Worker, id: string, options: JobsOptions, token: string, fetchNext: boolean) =>
  // BullMQ's builder reads only the job's id and options; a job without removeOnComplete of its own
  // takes the worker's, as with Job.moveToCompleted (hence undefined passed through)
  worker.scripts.moveToCompletedArgs({ id, opts: options } as MinimalJob, undefined, options.removeOnComplete!, token, fetchNext)

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
  return nextJobOf(await worker.scripts.moveToFinished(id, completionArgs(worker, id, options, token, fetchNext)))
}

/** The key of job `id`'s lock on `worker`'s queue (BullMQ's layout, as its scripts build it). */
const lockKey = (worker: Worker, id: string) => `${worker.toKey(id)}:lock`

/**
 * Whether job `id`'s lock still holds `token`: the answer script's check, for a reply that must be
 * written on another Redis before the job is acknowledged.
 *
 * @internal
 */
export const holdsLock = async (worker: Worker, id: string, token: string): Promise<boolean> =>
  (await (await worker.client).get(lockKey(worker, id))) === token

/** A Lua script as BullMQ ships it: its source and how many of its arguments are keys. */
interface LuaScript {
  readonly content: string
  readonly keys: number
}

/** The installed BullMQ's version and its add and acknowledge scripts; throws when they are not where expected. */
const bullmqScripts = () => {
  const require = createRequire(import.meta.url)
  const { version } = require("bullmq/package.json") as { readonly version: string }
  const scripts = require("bullmq/dist/cjs/scripts/index.js") as Record<string, LuaScript | undefined>
  const add = scripts.addStandardJob
  const finish = scripts.moveToFinished
  for (const [name, script] of [["addStandardJob", add], ["moveToFinished", finish]] as const) {
    if (typeof script?.content !== "string" || !Number.isInteger(script.keys)) {
      throw new Error(`BullMQ ${version} does not ship its ${name} script where this worker reads it (bullmq/dist/cjs/scripts)`)
    }
    // a script with flags must start with them, so it cannot be wrapped in a function
    if (script.content.startsWith("#!")) throw new Error(`BullMQ ${version}'s ${name} script declares flags; it cannot be combined`)
  }
  return { version, add: add!, finish: finish! }
}

/**
 * BullMQ's add script, then (unless the add returned an error code) its acknowledge script, each on
 * its own slice of the keys and arguments: `ARGV[1]` says how many arguments are the add's. A job
 * whose lock (the last key) does not hold this worker's token (`ARGV[2]`) gets no reply: its
 * acknowledgement alone runs, and fails as BullMQ fails it, changing nothing.
 */
const answerLua = (add: LuaScript, finish: LuaScript) =>
  `local function addStandardJob(KEYS, ARGV)
${add.content}
end
local function moveToFinished(KEYS, ARGV)
${finish.content}
end
local addArgs = tonumber(ARGV[1])
local finishKeys = {unpack(KEYS, ${add.keys + 1}, ${add.keys + finish.keys})}
local finishArgs = {unpack(ARGV, 3 + addArgs, #ARGV)}
if redis.call("GET", KEYS[${add.keys + finish.keys + 1}]) ~= ARGV[2] then return {0, moveToFinished(finishKeys, finishArgs)} end
local added = addStandardJob({unpack(KEYS, 1, ${add.keys})}, {unpack(ARGV, 3, 2 + addArgs)})
if type(added) == "number" and added < 0 then return {added, 0} end
return {added, moveToFinished(finishKeys, finishArgs)}
`

/** Answers a task job: adds the reply job and acknowledges the task job in one script call. @internal */
export type JobAnswerer = (
  replies: JobWriter,
  reply: unknown,
  tasks: Worker,
  job: { readonly id: string; readonly options: JobsOptions },
  token: string,
  fetchNext: boolean
) => Promise<NextJob | undefined>

/**
 * Defines the answer command on `client` (the connection BullMQ's queues of both jobs use) and
 * returns how to call it. Resolves once the reply job is added and the task job acknowledged (with
 * the next job, when one was fetched). Fails, having changed nothing, when Redis refused the reply,
 * and as `Job.moveToCompleted` does (no reply written) when the job is not this worker's any more.
 * Throws when the installed BullMQ's scripts cannot be read.
 *
 * @internal
 */
export const jobAnswerer = (client: Redis): JobAnswerer => {
  const { add, finish, version } = bullmqScripts()
  const command = `durableWorkerAnswer:${version}`
  client.defineCommand(command, { numberOfKeys: add.keys + finish.keys + 1, lua: answerLua(add, finish) })
  const send = (client as unknown as Record<string, (args: ReadonlyArray<unknown>) => Promise<[unknown, unknown]>>)[command]!
  const addScript = `addStandardJob:${version}`
  return (replies, reply, tasks, job, token, fetchNext) => {
    const finishArgs = completionArgs(tasks, job.id, job.options, token, fetchNext)
    let both: Promise<[unknown, unknown]> | undefined
    // BullMQ's addJob builds the add script's keys and arguments and hands them to its client's
    // runCommand; this client sends them with the acknowledgement's, and gives addJob the add's result
    // (addJob then turns an error code into BullMQ's error)
    const collector = {
      runCommand: (name: string, addArgs: ReadonlyArray<unknown>) => {
        if (name !== addScript) throw new Error(`a reply job would need BullMQ's ${name} script, not ${addScript}`)
        both = send.call(client, [
          ...addArgs.slice(0, add.keys),
          ...finishArgs.slice(0, finish.keys),
          lockKey(tasks, job.id),
          addArgs.length - add.keys,
          token,
          ...addArgs.slice(add.keys),
          ...finishArgs.slice(finish.keys)
        ])
        return both.then(([added]) => added)
      }
    }
    // the acknowledgement's outcome is read only once the add's is known, so a refused call is
    // handled (and reported) once, through addJob
    return replies.queue.scripts.addJob(collector as never, replies.job(reply), replies.options, "").then(() =>
      both!.then(([, finished]) => {
        if (typeof finished === "number" && finished < 0) {
          throw tasks.scripts.finishedErrors({ code: finished, jobId: job.id, command: "moveToFinished", state: "active" })
        }
        return nextJobOf(raw2NextJobData(finished as Array<unknown>))
      })
    )
  }
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

/**
 * BullMQ's `Job`, read so that a job whose data is not JSON does not throw: it is read with empty
 * data and, as its deferred failure, the reason. BullMQ's worker fails a job with a deferred failure
 * as unrecoverable as soon as it takes it (`getNextJob`), and takes the next one, so such a job
 * neither stalls under its lock nor stops the queue.
 *
 * @internal
 */
export class TaskJob<DataType = any, ReturnType = any, NameType extends string = string> extends Job<DataType, ReturnType, NameType> {
  static override fromJSON<T = any, R = any, N extends string = string>(
    queue: MinimalQueue,
    json: JobJsonRaw,
    jobId?: string
  ): Job<T, R, N> {
    try {
      return super.fromJSON<T, R, N>(queue, json, jobId)
    } catch (cause) {
      if (!(cause instanceof SyntaxError) || !isUnreadable(json)) throw cause
      const job = super.fromJSON<T, R, N>(queue, { ...json, data: "{}" }, jobId)
      job.deferredFailure = `job ${json.id || jobId} on ${queue.name} cannot be read, its data is not JSON (${cause.message})`
      return job
    }
  }
}

const isUnreadable = (json: JobJsonRaw) => {
  try {
    decodeData(json)
    return false
  } catch {
    return true
  }
}

/** BullMQ's `Worker`, reading its jobs as {@link TaskJob}s. @internal */
export class TaskWorker extends Worker {
  protected override get Job(): typeof Job {
    return TaskJob
  }
}
