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
 *   no reply (so an answer retried never writes a second one). It is one command per task, not two;
 * - an answer applied leaves a record of itself (its token, the job it took, its reply), so that the
 *   same answer sent again, by the client after a lost connection or by a retry, is recognised as
 *   applied and returns what the first run did instead of failing as a job no longer held;
 * - in the common case (a plain job, neither queue paused, limited or holding prioritised or due
 *   delayed jobs) that script call is a fast path instead ({@link FAST_ANSWER_LUA}): the same writes,
 *   written out for that case. BullMQ's general scripts spend about as much Redis
 *   time on what the case does not need (flows, deduplication, rate limits, metrics, decoding their
 *   packed arguments) as on the writes, and Redis is what bounds a busy worker. It first reads
 *   whether the case holds and, where it does not, steps aside having written nothing, and the
 *   answer goes through BullMQ's scripts. It is taken only while the installed BullMQ's add and
 *   acknowledge scripts are those it was written from ({@link FAST_PATH_SCRIPTS}).
 *
 * The keys and arguments of BullMQ's scripts are always BullMQ's own; the transport's tests compare
 * what lands in Redis, on either path and in every queue state the fast path tells apart, with what
 * `Queue.add` and `Job.moveToCompleted` leave there.
 *
 * @internal
 */
import {
  type GetNextJobOptions,
  Job,
  type JobJson,
  type JobJsonRaw,
  type JobsOptions,
  type MinimalJob,
  type MinimalQueue,
  type Queue,
  raw2NextJobData,
  type RedisClient,
  type RedisJobOptions,
  UnrecoverableError,
  Worker
} from "bullmq"
import type { Redis } from "ioredis"
import { createHash } from "node:crypto"
import { createRequire } from "node:module"

/** A reply queue's jobs: one name, one set of options. @internal */
export interface JobWriter {
  readonly queue: Queue
  /** The queue's connection, ready: what its writes are sent on. */
  readonly client: RedisClient
  /** The jobs' name. */
  readonly name: string
  /** The job BullMQ's add script takes for `data` (JSON-serialised). */
  readonly job: (data: unknown) => JobJson
  /** The jobs' options, encoded as BullMQ's add script takes them. */
  readonly options: RedisJobOptions
  /** Adds one job with `data`; resolves to its id. */
  readonly write: (data: unknown) => Promise<string>
  /**
   * Adds one job with `data` under a claim, `key` on the same Redis, in one script call: while `key`
   * holds `token`, or holds nothing (the claim lapsed and no one took it). The claim then records the
   * job's id (`<token>:sent:<id>`) for `keptMillis`, however long it had left: a call the client
   * sends again, however late, finds it. Resolves to the id; to the recorded id, adding nothing, when
   * this claim's job was added already (the same call sent again after a lost connection); to
   * undefined, adding nothing, when another holds `key`.
   */
  readonly writeIfHeld: (data: unknown, key: string, token: string, keptMillis: number) => Promise<string | undefined>
  /**
   * {@link writeIfHeld} in two steps: `data` encoded at once (throws when it cannot be), the write
   * made by the call returned, as often as it is called.
   */
  readonly prepareIfHeld: (data: unknown) => (key: string, token: string, keptMillis: number) => Promise<string | undefined>
  /**
   * The jobs' options as BullMQ's add script stores them (its `opts` field), for the answer's fast
   * path; undefined when these jobs cannot take it (options that change where a job is added).
   */
  readonly storedOptions: string | undefined
}

/**
 * A writer of `name` jobs with `options` on `queue`, stored as `Queue.add(name, data, options)`
 * stores them. `options` may not delay, prioritise, repeat, deduplicate or parent the job: those
 * take other scripts.
 *
 * @internal
 */
export const jobWriter = async (queue: Queue, name: string, options: JobsOptions): Promise<JobWriter> => {
  const template = jobTemplate(queue, name, options)
  const client = await queue.client
  const job = (data: unknown): JobJson => ({ ...template, data: jobData(data), timestamp: Date.now() })
  // the options as BullMQ's add script stores them: its encoding, decoded and re-encoded by Redis
  let encoded: unknown
  const capture = {
    runCommand: (_name: string, args: ReadonlyArray<unknown>) => {
      encoded = args[args.length - 1]
      return Promise.resolve("0")
    }
  }
  await queue.scripts.addJob(capture as never, job(undefined), template.opts, "")
  const storedOptions = { ...queue.jobsOpts, ...options }.lifo === true
    ? undefined
    : String(await (client as unknown as Redis).eval("return cjson.encode(cmsgpack.unpack(ARGV[1]))", 0, encoded as Buffer))
  let addIfHeld: AddIfHeld | undefined
  const prepareIfHeld = (data: unknown) => {
    const added = job(data)
    return (key: string, token: string, keptMillis: number): Promise<string | undefined> => {
      // defined at the first use: most workers never need it, and a worker's start is short
      addIfHeld ??= addIfHeldCommand(client as unknown as Redis)
      const { command, keys, send } = addIfHeld
      // BullMQ's addJob builds the add script's keys and arguments, and reads its result: an error
      // code becomes BullMQ's error, and the nil of a key that does not hold the token is returned
      const collector = {
        runCommand: (name: string, args: ReadonlyArray<unknown>) => {
          if (name !== command) throw new Error(`a reply job would need BullMQ's ${name} script, not ${command}`)
          return send([...args.slice(0, keys), key, token, keptMillis, ...args.slice(keys)])
        }
      }
      return queue.scripts.addJob(collector as never, added, template.opts, "").then((id) =>
        id === null || id === undefined ? undefined : String(id)
      )
    }
  }
  return {
    queue,
    client,
    name,
    job,
    options: template.opts,
    write: (data) => queue.scripts.addJob(client, job(data), template.opts, ""),
    writeIfHeld: (data, key, token, keptMillis) => prepareIfHeld(data)(key, token, keptMillis),
    prepareIfHeld,
    storedOptions
  }
}

/** The job `Queue.add(name, undefined, options)` would build on `queue`, after the checks {@link jobWriter} states. */
const jobTemplate = (queue: Queue, name: string, options: JobsOptions): JobJson => {
  const merged = { ...queue.jobsOpts, ...options }
  if (
    merged.delay !== undefined || merged.priority !== undefined || merged.repeat !== undefined ||
    merged.deduplication !== undefined || merged.debounce !== undefined || merged.parent !== undefined ||
    merged.jobId !== undefined
  ) {
    throw new Error(`jobWriter: ${name} jobs on ${queue.name} need Queue.add (delayed, prioritised, repeated, deduplicated, parented or named)`)
  }
  return new Job(queue, name, undefined, merged).asJSON()
}

/**
 * Adds `name` jobs with `options` on `queue` as {@link jobWriter}'s `write` does, sent on the ready
 * connection of `via` (a writer on the same Redis), and made at once, without a round trip: for a
 * queue written now and then (a workflow turn's live step events) that is not worth preparing at the
 * worker's start. The add is sent synchronously, in the call, so what is written here reaches Redis
 * ahead of anything sent later on that connection (Redis runs one connection's commands in order).
 * Throws at once when `data` cannot be encoded.
 *
 * @internal
 */
export const sideWriter = (via: JobWriter, queue: Queue, name: string, options: JobsOptions): (data: unknown) => Promise<string> => {
  const template = jobTemplate(queue, name, options)
  const { client } = via
  return (data) => queue.scripts.addJob(client, { ...template, data: jobData(data), timestamp: Date.now() }, template.opts, "")
}

/** The add-while-held command defined on a client: BullMQ's name of the add script it wraps, its key count, and the call. */
interface AddIfHeld {
  readonly command: string
  readonly keys: number
  readonly send: (args: ReadonlyArray<unknown>) => Promise<unknown>
}

/**
 * BullMQ's add script under a claim, the key after its own (`KEYS[n + 1]`), on its keys and the
 * arguments after the token (`ARGV[1]`) and how long the record is kept (`ARGV[2]`, ms): run while
 * the claim holds the token, or holds nothing; the claim then records the added job's id for that
 * long. When the claim records a job of this token already, that id is returned, nothing written
 * (the same call sent again); when another token holds it, nil.
 */
const addIfHeldLua = (add: LuaScript) =>
  `${luaFunction("addStandardJob", add)}
local claimKey = KEYS[${add.keys + 1}]
local token = ARGV[1]
local sent = token .. ":sent:"
local holder = redis.call("GET", claimKey)
if holder ~= false and holder ~= token then
  if string.sub(holder, 1, #sent) == sent then return string.sub(holder, #sent + 1) end
  return false
end
local added = addStandardJob({unpack(KEYS, 1, ${add.keys})}, {unpack(ARGV, 3, #ARGV)})
if type(added) ~= "number" or added >= 0 then
  redis.call("SET", claimKey, sent .. added, "PX", ARGV[2])
end
return added
`

/** Defines the add-while-held command on `client` (once per client). Throws when the installed BullMQ's scripts cannot be read. */
const addIfHeldCommand = (client: Redis): AddIfHeld => {
  const { add, version } = bullmqScripts()
  const name = `durableWorkerAddIfHeld:${version}`
  const commands = client as unknown as Record<string, ((args: ReadonlyArray<unknown>) => Promise<unknown>) | undefined>
  if (commands[name] === undefined) client.defineCommand(name, { numberOfKeys: add.keys + 1, lua: addIfHeldLua(add) })
  const send = commands[name]!
  return { command: `addStandardJob:${version}`, keys: add.keys, send: (args) => send.call(client, args) }
}

/** A job's `data` field as `Queue.add` stores `data`. */
const jobData = (data: unknown) => JSON.stringify(data === undefined ? {} : data)

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

/** One of BullMQ's scripts as a local function of another script, called on keys and arguments of its own. */
const luaFunction = (name: string, script: LuaScript) => `local function ${name}(KEYS, ARGV)
${script.content}
end`

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
 * The Lua both answer scripts run when the job's lock no longer holds `token`: where `recordKey`
 * holds this token's record of an answer applied, they return what it recorded (the reply's id,
 * `reply`; the next job, read from `prefix` while its lock still holds the token), flagged as a
 * replay, writing nothing.
 */
const REPLAY_FROM_RECORD = (prefix: string, reply: string) => `  local recorded = redis.call("GET", recordKey)
  if recorded then
    local answered = cjson.decode(recorded)
    if answered[1] == token then
      local nextId = answered[2]
      if nextId ~= "" and redis.call("GET", ${prefix} .. nextId .. ":lock") == token then
        return {${reply}, {redis.call("HGETALL", ${prefix} .. nextId), nextId, 0, 0}, 1}
      end
      return {${reply}, 0, 1}
    end
  end`

/**
 * The Lua both answer scripts run to acknowledge a job whose lock holds `token`: BullMQ's
 * `moveToFinished`, then, unless it returned an error code, the answer's record at `recordKey` (the
 * token, the id of the job it moved to active or "", the reply's id `reply`) kept for `millis`.
 */
const FINISH_AND_RECORD = (reply: string, millis: string) => `local finished = moveToFinished(finishKeys, finishArgs)
if type(finished) ~= "number" or finished >= 0 then
  local nextId = ""
  if type(finished) == "table" and type(finished[2]) == "string" then nextId = finished[2] end
  redis.call("SET", recordKey, cjson.encode({token, nextId, ${reply}}), "PX", ${millis})
end`

/**
 * BullMQ's add script, then (unless the add returned an error code) its acknowledge script, each on
 * its own slice of the keys and arguments: `ARGV[1]` says how many arguments are the add's. A job
 * whose lock (the key after BullMQ's) does not hold this worker's token (`ARGV[2]`) gets no reply:
 * its acknowledgement alone runs, and fails as BullMQ fails it, changing nothing.
 *
 * An answer applied leaves a record (the last key, {@link answerRecordKey}, for `ARGV[3]`
 * milliseconds): the token, the id of the job it moved to active (or ""), the reply's id. The same
 * answer sent again once its job is no longer locked with the token (a command re-sent by the client
 * after a lost connection, or a retry of an answer whose outcome was not known) writes nothing and
 * returns what the first run did, flagged as a replay (a third element, 1): the next job is returned
 * only while its lock still holds the token. `ARGV[4]` is the task queue's key prefix.
 */
const answerLua = (add: LuaScript, finish: LuaScript) =>
  `${luaFunction("addStandardJob", add)}
${luaFunction("moveToFinished", finish)}
local addArgs = tonumber(ARGV[1])
local token = ARGV[2]
local recordKey = KEYS[${add.keys + finish.keys + 2}]
local finishKeys = {unpack(KEYS, ${add.keys + 1}, ${add.keys + finish.keys})}
local finishArgs = {unpack(ARGV, 5 + addArgs, #ARGV)}
if redis.call("GET", KEYS[${add.keys + finish.keys + 1}]) ~= token then
${REPLAY_FROM_RECORD("ARGV[4]", "answered[3]")}
  return {0, moveToFinished(finishKeys, finishArgs)}
end
local added = addStandardJob({unpack(KEYS, 1, ${add.keys})}, {unpack(ARGV, 5, 4 + addArgs)})
if type(added) == "number" and added < 0 then return {added, 0} end
${FINISH_AND_RECORD("tostring(added)", "ARGV[3]")}
return {added, finished}
`

/**
 * {@link answerLua} without the add, for a job whose reply was written on another Redis: BullMQ's
 * acknowledge script, run while the job's lock (the key after BullMQ's) holds the token (`ARGV[1]`),
 * leaving the same record (the last key, for `ARGV[2]` milliseconds; no reply id in it); sent again
 * once the job is no longer locked with the token, it finds the record and returns what the first run
 * did, flagged as a replay, as that script does. `ARGV[3]` is the task queue's key prefix.
 */
const acknowledgeLua = (finish: LuaScript) =>
  `${luaFunction("moveToFinished", finish)}
local token = ARGV[1]
local recordKey = KEYS[${finish.keys + 2}]
local finishKeys = {unpack(KEYS, 1, ${finish.keys})}
local finishArgs = {unpack(ARGV, 4, #ARGV)}
if redis.call("GET", KEYS[${finish.keys + 1}]) ~= token then
${REPLAY_FROM_RECORD("ARGV[3]", "0")}
  return {0, moveToFinished(finishKeys, finishArgs)}
end
${FINISH_AND_RECORD('""', "ARGV[2]")}
return {0, finished}
`

/**
 * The answer's fast path: the same Redis writes as {@link answerLua}, for the common case only,
 * written out rather than run through BullMQ's general scripts, whose flow,
 * deduplication, rate-limit and metrics handling (and the decoding of their packed arguments) cost
 * Redis about as much again as the writes themselves. It first reads whether the case is the common
 * one:
 *
 * - the task job exists, has no parent, children or deduplication id, and its lock holds the token;
 * - neither queue is paused or held to a global concurrency, the task queue has no rate limit and,
 *   when the next job is to be fetched, no prioritised job and no delayed job that is due.
 *
 * If any of that does not hold it returns nil having written nothing, and the caller runs BullMQ's
 * own scripts instead. Otherwise, as those scripts would: the reply is added (`addStandardJob`:
 * counter, job hash, `added`, the wait list and its marker, `waiting`), the task job is acknowledged
 * and removed (`moveToFinished`: out of the stalled set and the active list, its lock and keys
 * deleted, `completed` with the events trimmed) and, when asked, the next job moved to active under the
 * same token (`fetchNextJob`: to the active list, locked, `active`, `processedOn`, `ats`, marker),
 * or, with none, the next delayed time returned or `drained` emitted. One write is left out: the
 * attempt counter of the job being deleted in the same script. Where BullMQ makes several commands
 * that one can make (the checks for children, failed children, prioritised and delayed jobs; the
 * lock and the job's keys deleted; the events trimmed and `completed` added), this makes one: every
 * command a script makes costs Redis as much again as a small command itself. The reply's stored
 * options (`ARGV[8]`) are what BullMQ's add script would store for them (`JobWriter.storedOptions`). An
 * answer applied leaves the same record as {@link answerLua}'s ({@link answerRecordKey}), which
 * that script reads when the answer comes again (this one steps aside then: the job's lock is gone).
 *
 * KEYS: the task job. ARGV: token, task job id, timestamp, reply queue key prefix, task queue key
 * prefix, reply name, reply data, reply options, lock duration, fetch next (1 or 0), how long the
 * record is kept (ms), the highest delayed-set score that is due (BullMQ scores a delayed job
 * `timestamp * 0x1000 + counter`). Redis (7.0) formats every number a script passes to a command
 * with `%.17g`, a few thousand instructions each; so the script passes strings, and the one score
 * it would compute comes computed. The queues' keys are their prefix and BullMQ's key names, built
 * here rather than sent with every call: one command per task carries 13 arguments instead of 29
 * (ioredis encodes every argument of every command, and Redis parses them). Returns `{reply id,
 * what moveToFinished returns}` or nil.
 *
 * @internal
 */
export const FAST_ANSWER_LUA = `local rcall = redis.call
local jobKey = KEYS[1]
local lockKey, recordKey = jobKey .. ":lock", jobKey .. ":answered"
local r, q = ARGV[4], ARGV[5]
local rWait, rMeta, rId, rEvents, rMarker = r .. "wait", r .. "meta", r .. "id", r .. "events", r .. "marker"
local wait, active, prioritized, events, stalled = q .. "wait", q .. "active", q .. "prioritized", q .. "events", q .. "stalled"
local delayed, meta, marker = q .. "delayed", q .. "meta", q .. "marker"
local token, jobId, timestamp = ARGV[1], ARGV[2], ARGV[3]
local fetchNext = ARGV[10] == "1"
local replyId
local function answered(nextId, result)
  rcall("SET", recordKey, cjson.encode({token, nextId, replyId}), "PX", ARGV[11])
  return result
end
-- is this the common case? (reads only)
local job = rcall("HMGET", jobKey, "name", "parentKey", "parent", "deid")
if not job[1] or job[2] or job[3] or job[4] then return false end
if rcall("GET", lockKey) ~= token then return false end
local rQueue = rcall("HMGET", rMeta, "paused", "concurrency", "opts.maxLenEvents")
if rQueue[1] or rQueue[2] then return false end
local queue = rcall("HMGET", meta, "paused", "concurrency", "max", "opts.maxLenEvents")
if queue[1] or queue[2] or queue[3] then return false end
-- a set or sorted set exists only while it has members: one EXISTS for the job's children, its
-- failed children and, when the next job is to be fetched, the prioritised and the delayed jobs
local dependencies, unsuccessful = jobKey .. ":dependencies", jobKey .. ":unsuccessful"
local hasDelayed = false
if fetchNext then
  local found = rcall("EXISTS", dependencies, unsuccessful, prioritized, delayed)
  if found ~= 0 then
    -- of these, only delayed jobs leave the common case as it is, as long as none is due
    hasDelayed = rcall("EXISTS", delayed) == 1
    if found > (hasDelayed and 1 or 0) then return false end
    if #rcall("ZRANGEBYSCORE", delayed, "0", ARGV[12], "LIMIT", "0", "1") ~= 0 then return false end
  end
elseif rcall("EXISTS", dependencies, unsuccessful) ~= 0 then
  return false
end
-- the reply
replyId = rcall("INCR", rId) .. ""
local rMaxEvents = rQueue[3]
if not rMaxEvents then
  rMaxEvents = "10000"
  rcall("HSET", rMeta, "opts.maxLenEvents", rMaxEvents)
end
rcall("HSET", ARGV[4] .. replyId, "name", ARGV[6], "data", ARGV[7], "opts", ARGV[8], "timestamp", timestamp,
  "delay", "0", "priority", "0")
rcall("XADD", rEvents, "*", "event", "added", "jobId", replyId, "name", ARGV[6])
rcall("LPUSH", rWait, replyId)
rcall("ZADD", rMarker, "0", "0")
rcall("XADD", rEvents, "MAXLEN", "~", rMaxEvents, "*", "event", "waiting", "jobId", replyId)
-- the acknowledgement; the lock goes with the job's keys (one DEL), or alone when the job is not active
rcall("SREM", stalled, jobId)
if rcall("LREM", active, "-1", jobId) < 1 then
  rcall("DEL", lockKey)
  return {replyId, -3}
end
local maxEvents = queue[4]
if not maxEvents then
  maxEvents = "10000"
  rcall("HSET", meta, "opts.maxLenEvents", maxEvents)
end
-- (its children and failed children, found absent above, are not deleted again)
rcall("DEL", lockKey, jobKey, jobKey .. ":logs", jobKey .. ":processed", jobKey .. ":failed")
-- trimmed as it is added to, where BullMQ trims it just before
rcall("XADD", events, "MAXLEN", "~", maxEvents, "*", "event", "completed", "jobId", jobId, "returnvalue", "null", "prev", "active")
-- the next job
if fetchNext then
  local nextId = rcall("RPOPLPUSH", wait, active)
  if nextId and string.sub(nextId, 1, 2) == "0:" then
    -- a wait-list marker of BullMQ before 5 (none is written since): dropped, as BullMQ drops it
    rcall("LREM", active, "1", nextId)
    nextId = nil
  elseif not nextId then
    -- no prioritised job either (checked above)
    rcall("DEL", q .. "pc")
  end
  if nextId then
    local nextKey = ARGV[5] .. nextId
    rcall("SET", nextKey .. ":lock", token, "PX", ARGV[9])
    rcall("XADD", events, "*", "event", "active", "jobId", nextId, "prev", "waiting")
    rcall("HSET", nextKey, "processedOn", timestamp)
    rcall("HINCRBY", nextKey, "ats", "1")
    rcall("ZADD", marker, "0", "0")
    return answered(nextId, {replyId, {rcall("HGETALL", nextKey), nextId, 0, 0}})
  end
  if hasDelayed then
    local nextDelayed = tonumber(rcall("ZRANGE", delayed, "0", "0", "WITHSCORES")[2])
    return answered("", {replyId, {0, 0, 0, nextDelayed / 0x1000}})
  end
end
if rcall("LLEN", wait) == 0 and rcall("LLEN", active) == 0 and rcall("ZCARD", prioritized) == 0 then
  rcall("XADD", events, "*", "event", "drained")
end
return answered("", {replyId, 0})
`

/** What an answer did. @internal */
export interface Answered {
  /** The job the acknowledgement moved to active, locked with the same token, if one was. */
  readonly next: NextJob | undefined
  /**
   * True when this call found the answer already applied by an earlier send of it whose outcome the
   * worker never learnt (the connection was lost before Redis replied), and wrote nothing: `next` is
   * then the job that earlier send took, while its lock still holds the token.
   */
  readonly replayed: boolean
}

/** Answers a task job: adds the reply job and acknowledges the task job in one script call. @internal */
export type JobAnswerer = (
  replies: JobWriter,
  reply: unknown,
  tasks: Worker,
  job: { readonly id: string; readonly options: JobsOptions },
  token: string,
  fetchNext: boolean
) => Promise<Answered>

/**
 * The key of the record an applied answer of job `id` leaves (see {@link answerLua}): beside the
 * job's own keys, kept for {@link answerRecordMillis}.
 *
 * @internal
 */
export const answerRecordKey = (worker: Worker, id: string): string => `${worker.toKey(id)}:answered`

/**
 * How long an answer's record is kept: twice the lock duration, and at least a minute. A send whose
 * outcome was lost is re-sent once the connection is back, or retried within seconds; past the lock
 * duration the job it took has lost its lock anyway, and the stalled check hands it on.
 *
 * @internal
 */
export const answerRecordMillis = (tasks: Worker): number => Math.max(60_000, 2 * (tasks.opts.lockDuration ?? 30_000))

/**
 * How long the record of a reply written on another broker than its job's (see `Broker.replyOnce`)
 * is kept until the job is acknowledged: a day. That Redis cannot check the job's lock, which is on
 * the job's own, so the record is all that stops a send of the reply made again; and the client sends
 * a command whose outcome it lost again whenever that Redis is back, however long it was away (the
 * task's lease renews the job's lock meanwhile). Once the job is acknowledged it is kept
 * {@link answerRecordMillis} from then, as an answer's record is. One whose job never is (the worker
 * stopped before) is gone a day on.
 *
 * @internal
 */
export const PENDING_REPLY_RECORD_MILLIS = 24 * 60 * 60 * 1000

/**
 * Defines the answer command on `client` (the connection BullMQ's queues of both jobs use) and
 * returns how to call it. Resolves once the reply job is added and the task job acknowledged (with
 * the next job, when one was fetched). Fails, having changed nothing, when Redis refused the reply,
 * and as `Job.moveToCompleted` does (no reply written) when the job is not this worker's any more,
 * unless this very answer (same job, same token) was applied before: then it resolves as a replay,
 * writing nothing (see {@link Answered}). Sent again by the client after a lost connection, or
 * retried, an answer is therefore applied once and its outcome learnt. Throws when the installed BullMQ's scripts cannot be read. Takes the fast path where it applies
 * (a reply writer with `storedOptions`, a job removed on completion, a worker with no rate limit,
 * metrics or name), else BullMQ's scripts.
 *
 * @internal
 */
export const jobAnswerer = (client: Redis): JobAnswerer & {
  /**
   * Acknowledges a task job whose reply was written on another Redis, as an answer acknowledges it
   * and with the same record: sent again after it was applied (its outcome lost with the connection),
   * it resolves as a replay, writing nothing (see {@link Answered}).
   */
  readonly acknowledge: (
    tasks: Worker,
    job: { readonly id: string; readonly options: JobsOptions },
    token: string,
    fetchNext: boolean
  ) => Promise<Answered>
  /** Whether the fast path can be taken: false when the installed BullMQ's scripts are not those it was written from. */
  readonly fastPath: boolean
  /** The installed BullMQ's version. */
  readonly version: string
} => {
  const { add, finish, version } = bullmqScripts()
  const command = `durableWorkerAnswer:${version}`
  client.defineCommand(command, { numberOfKeys: add.keys + finish.keys + 2, lua: answerLua(add, finish) })
  const send = (client as unknown as Record<string, (args: ReadonlyArray<unknown>) => Promise<[unknown, unknown, unknown?]>>)[command]!
  const fastCommand = "durableWorkerAnswerFast"
  client.defineCommand(fastCommand, { numberOfKeys: 1, lua: FAST_ANSWER_LUA })
  const sendFast = (client as unknown as Record<string, (args: ReadonlyArray<unknown>) => Promise<[string, unknown] | null>>)[
    fastCommand
  ]!
  const fastPathHolds = FAST_PATH_SCRIPTS === scriptsDigest(add, finish)
  const addScript = `addStandardJob:${version}`

  /** The answer through BullMQ's own scripts ({@link answerLua}). */
  const viaBullMQ: JobAnswerer = (replies, reply, tasks, job, token, fetchNext) => {
    const finishArgs = completionArgs(tasks, job.id, job.options, token, fetchNext)
    let both: Promise<[unknown, unknown, unknown?]> | undefined
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
          answerRecordKey(tasks, job.id),
          addArgs.length - add.keys,
          token,
          answerRecordMillis(tasks),
          tasks.keys[""],
          ...addArgs.slice(add.keys),
          ...finishArgs.slice(finish.keys)
        ])
        return both.then(([added]) => added)
      }
    }
    // the acknowledgement's outcome is read only once the add's is known, so a refused call is
    // handled (and reported) once, through addJob
    return replies.queue.scripts.addJob(collector as never, replies.job(reply), replies.options, "").then(() =>
      both!.then(([, finished, replayed]) => ({ next: acknowledged(tasks, job.id, finished), replayed: replayed === 1 }))
    )
  }

  const answer: JobAnswerer = (replies, reply, tasks, job, token, fetchNext) => {
    const stored = replies.storedOptions
    if (!fastPathHolds || stored === undefined || job.options.removeOnComplete !== true || !plainWorker(tasks) || token === "0") {
      return viaBullMQ(replies, reply, tasks, job, token, fetchNext)
    }
    const now = Date.now()
    return sendFast.call(client, [
      tasks.toKey(job.id),
      token,
      job.id,
      now,
      replies.queue.keys[""],
      tasks.keys[""],
      replies.name,
      jobData(reply),
      stored,
      tasks.opts.lockDuration,
      fetchNext && !tasks.closing ? 1 : 0,
      answerRecordMillis(tasks),
      (now + 1) * 0x1000 - 1
    ]).then((answered) =>
      answered === null
        ? viaBullMQ(replies, reply, tasks, job, token, fetchNext)
        : { next: acknowledged(tasks, job.id, answered[1]), replayed: false }
    )
  }
  // defined at the first use: only a task whose reply goes to another broker needs it
  let sendAcknowledge: ((args: ReadonlyArray<unknown>) => Promise<[unknown, unknown, unknown?]>) | undefined
  const acknowledge = (
    tasks: Worker,
    job: { readonly id: string; readonly options: JobsOptions },
    token: string,
    fetchNext: boolean
  ): Promise<Answered> => {
    if (sendAcknowledge === undefined) {
      const name = `durableWorkerAcknowledge:${version}`
      client.defineCommand(name, { numberOfKeys: finish.keys + 2, lua: acknowledgeLua(finish) })
      sendAcknowledge = (client as unknown as Record<string, (args: ReadonlyArray<unknown>) => Promise<[unknown, unknown, unknown?]>>)[name]!
    }
    const finishArgs = completionArgs(tasks, job.id, job.options, token, fetchNext)
    return sendAcknowledge.call(client, [
      ...finishArgs.slice(0, finish.keys),
      lockKey(tasks, job.id),
      answerRecordKey(tasks, job.id),
      token,
      answerRecordMillis(tasks),
      tasks.keys[""],
      ...finishArgs.slice(finish.keys)
    ]).then(([, finished, replayed]) => ({ next: acknowledged(tasks, job.id, finished), replayed: replayed === 1 }))
  }
  return Object.assign(answer, { acknowledge, fastPath: fastPathHolds, version })
}

/** What an acknowledgement returned: the next job, if one came; throws BullMQ's error for a failure code. */
const acknowledged = (tasks: Worker, id: string, finished: unknown): NextJob | undefined => {
  if (typeof finished === "number" && finished < 0) {
    throw tasks.scripts.finishedErrors({ code: finished, jobId: id, command: "moveToFinished", state: "active" })
  }
  return nextJobOf(raw2NextJobData(finished as Array<unknown>))
}

/** A worker whose acknowledgements BullMQ builds with no rate limit, metrics or worker name. */
const plainWorker = (tasks: Worker) =>
  tasks.opts.limiter === undefined && tasks.opts.metrics === undefined && tasks.opts.name === undefined

/**
 * A digest of BullMQ's add and acknowledge scripts. The fast path repeats what those scripts do in
 * its case; it is taken only with the scripts it was written from ({@link FAST_PATH_SCRIPTS}), so a
 * BullMQ release that changed them, whatever it changed, is answered through its own scripts.
 */
const scriptsDigest = (add: LuaScript, finish: LuaScript) =>
  createHash("sha256").update(add.content).update("\0").update(finish.content).digest("hex")

/** The BullMQ release the fast path was written from. @internal */
export const FAST_PATH_BULLMQ = "5.81.5"

/** {@link scriptsDigest} of {@link FAST_PATH_BULLMQ}'s scripts. @internal */
export const FAST_PATH_SCRIPTS = "a353dd4f6ce811dcfed9cb51565f833fef9f1e11e8327eb590bcfebc46b2de90"

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
 * The fields of a stored job that BullMQ's `Job.fromJSON` parses as JSON and throws on, with what
 * each is read as when it cannot be parsed.
 */
const JSON_FIELDS = [["data", "{}"], ["opts", "{}"], ["progress", "0"], ["parent", undefined]] as const

/**
 * A job's parent reference (BullMQ flows: its `parent` and `parentKey` fields) that BullMQ's finishing
 * script cannot follow, and what it was, removed from the job.
 *
 * BullMQ's `moveToFinished` (completing or failing a job) follows the reference of a job that has one,
 * after it has already deleted the job's lock (and, failing it, taken it off the active list); Redis
 * does not undo a script's writes when it stops with an error. A reference it cannot follow (a
 * `parent` that is not JSON, or not an object with an `id` and a `queueKey`; a `parentKey` that is not
 * a job key), written by hand or by another tool since BullMQ writes none such, stops it there: the
 * job is left active without a lock (stalled, taken again and failed again, forever), or in no list
 * at all (failed: reported by no one), its reply written without its acknowledgement (taken again
 * and answered twice). A reference to a parent that is gone is followed (it finds nothing), so it
 * is kept.
 *
 * @internal
 */
export interface UnfollowableParent {
  /** The job's `parent` field as it was stored, if it had one. */
  readonly parent: string | undefined
  /** The job's `parentKey` field as it was stored, if it had one. */
  readonly parentKey: string | undefined
}

/**
 * Removes the parent reference of job `KEYS[1]` when BullMQ's `moveToFinished` could not follow it
 * (see {@link UnfollowableParent}), while its lock holds the token `ARGV[1]`: returns `{parent,
 * parentKey}` as they were, else nil, writing nothing. What it accepts is what that script follows
 * without an error: a `parent` decoding to an object whose `id` and `queueKey` are strings (not
 * empty) or numbers, a `parentKey` with a `:` (the separator of a job key).
 */
const DROP_UNFOLLOWABLE_PARENT = `local jobKey = KEYS[1]
if redis.call("GET", jobKey .. ":lock") ~= ARGV[1] then return false end
local fields = redis.call("HMGET", jobKey, "parent", "parentKey")
local parent, parentKey = fields[1], fields[2]
local function part(value)
  return (type(value) == "string" and value ~= "") or type(value) == "number"
end
local followable = true
if parent then
  local decoded, value = pcall(cjson.decode, parent)
  followable = decoded and type(value) == "table" and part(value["id"]) and part(value["queueKey"])
end
if followable and parentKey and not string.find(parentKey, ":", 1, true) then followable = false end
if followable then return false end
redis.call("HDEL", jobKey, "parent", "parentKey")
return {parent, parentKey}`

/**
 * Removes job `id`'s parent reference (on `queue`, the job locked with `token`) when BullMQ could not
 * follow it as it completes or fails the job (see {@link UnfollowableParent}), so that it can be: what
 * was removed, or undefined when the reference is sound (or the lock is not `token`'s), nothing
 * written. One round trip; made only for a job stored with a parent reference, which the engine's
 * tasks never are.
 *
 * @internal
 */
export const dropUnfollowableParent = async (
  queue: Pick<MinimalQueue, "client" | "toKey">,
  id: string,
  token: string
): Promise<UnfollowableParent | undefined> => {
  const client = (await queue.client) as unknown as Redis
  const dropped = (await client.eval(DROP_UNFOLLOWABLE_PARENT, 1, queue.toKey(id), token)) as
    | [string | null, (string | null)?]
    | null
  return dropped === null ? undefined : { parent: dropped[0] ?? undefined, parentKey: dropped[1] ?? undefined }
}

/**
 * What the log and the job's failure reason say of a parent reference removed from job `id` on
 * `queueName`: what it was, why, and where to look.
 *
 * @internal
 */
export const unfollowableParentMessage = (queueName: string, id: string, { parent, parentKey }: UnfollowableParent): string =>
  `job ${id} on ${queueName} had a parent reference BullMQ cannot follow (${
    [parent === undefined ? [] : [`parent ${parent}`], parentKey === undefined ? [] : [`parentKey ${parentKey}`]].flat().join(", ")
  }); it was removed so that the job could be finished, and no parent job hears of it: ` +
  "check what added the job with it (BullMQ's FlowProducer writes no such reference)"

/** Whether a stored job (as a `Job` or its raw fields) has a parent reference. @internal */
export const hasParentReference = (job: Job | JobJsonRaw): boolean =>
  job instanceof TaskJob
    ? job.parentStored
    : job.parent !== undefined || job.parentKey !== undefined

/**
 * BullMQ's `Job`, read so that a job with a field that is not JSON (its data, its options, its
 * progress or its parent, written by hand or by another tool) does not throw: it is read with those
 * fields empty and, as its deferred failure, the reason. BullMQ's worker fails a job with a deferred
 * failure as unrecoverable as soon as it takes it (`getNextJob`), and takes the next one, so such a
 * job neither stalls under its lock nor stops the queue.
 *
 * Failed, a job stored with a parent reference BullMQ cannot follow has it removed first (see
 * {@link UnfollowableParent}), and the failure's reason says so.
 *
 * @internal
 */
export class TaskJob<DataType = any, ReturnType = any, NameType extends string = string> extends Job<DataType, ReturnType, NameType> {
  /** Whether the job was stored with a parent reference (a `parent` or `parentKey` field, readable or not). */
  parentStored = false
  /** The parent reference removed as the job was failed, if one was. */
  droppedParent: UnfollowableParent | undefined = undefined

  static override fromJSON<T = any, R = any, N extends string = string>(
    queue: MinimalQueue,
    json: JobJsonRaw,
    jobId?: string
  ): Job<T, R, N> {
    const job = TaskJob.read<T, R, N>(queue, json, jobId)
    if (hasParentReference(json)) (job as unknown as TaskJob).parentStored = true
    return job
  }

  override async moveToFailed<E extends Error>(err: E, token: string, fetchNext = false): Promise<void | Array<any>> {
    if (this.parentStored && this.droppedParent === undefined) {
      this.droppedParent = await dropUnfollowableParent(this.queue, this.id!, token)
      // what BullMQ stores as the failure's reason, and what the worker's `failed` event carries
      if (this.droppedParent !== undefined) {
        err.message = `${err.message}; ${unfollowableParentMessage(this.queueName, this.id!, this.droppedParent)}`
      }
    }
    return super.moveToFailed(err, token, fetchNext)
  }

  private static read<T, R, N extends string>(queue: MinimalQueue, json: JobJsonRaw, jobId?: string): Job<T, R, N> {
    try {
      return super.fromJSON<T, R, N>(queue, json, jobId)
    } catch (cause) {
      if (!(cause instanceof SyntaxError)) throw cause
      const unreadable = JSON_FIELDS.filter(([field]) => !isJson(json[field] as string | undefined))
      if (unreadable.length === 0) throw cause
      const readable: Record<string, unknown> = { ...json }
      for (const [field, empty] of unreadable) {
        if (empty === undefined) delete readable[field]
        else readable[field] = empty
      }
      const job = super.fromJSON<T, R, N>(queue, readable as unknown as JobJsonRaw, jobId)
      const fields = unreadable.map(([field]) => field)
      job.deferredFailure = `job ${json.id || jobId} on ${queue.name} cannot be read, its ${fields.join(" and ")} ${
        fields.length === 1 ? "is" : "are"
      } not JSON (${cause.message})`
      return job
    }
  }
}

/** Whether a stored field parses (an absent or empty one is read as its default). */
const isJson = (text: string | undefined) => {
  if (text === undefined || text === "") return true
  try {
    JSON.parse(text)
    return true
  } catch {
    return false
  }
}

/**
 * BullMQ's `Worker`, reading its jobs as {@link TaskJob}s, and taking a job without blocking on
 * the command connection alone.
 *
 * @internal
 */
export class TaskWorker extends Worker {
  protected override get Job(): typeof Job {
    return TaskJob
  }

  /**
   * A take that does not block is one `moveToActive` on the command connection, as in BullMQ; but
   * BullMQ first waits for its blocking connection to be ready, which such a take never uses: a
   * worker's first take would wait for a connection of its own to be opened, named and checked. A
   * job BullMQ would fail as it takes it (a deferred failure, such as data that is not JSON) is
   * failed here as there, and the next one taken.
   */
  override async getNextJob(token: string, options?: GetNextJobOptions): Promise<Job | undefined> {
    if (options?.block !== false) return super.getNextJob(token, options)
    const client = await this.client
    for (;;) {
      if (this.closing !== undefined || this.isPaused()) return undefined
      const job = await this.moveToActive(client, token, this.opts.name)
      if (job === undefined || job.deferredFailure === undefined) return job
      await this.handleFailed(new UnrecoverableError(job.deferredFailure), job, token, () => false)
    }
  }
}
