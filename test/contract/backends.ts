/**
 * The backends of the transport contract (`suite.ts`): for each broker, how a test gets a fresh one,
 * a transport layer for each of its workers, and the broker's side of the wire — step tasks put there
 * and replies read back the way the real nestjs-durable engine does (its own npm transports:
 * `dispatch`, `onResult`, `publishControl`) or the way the Durable Workflow test server does — plus
 * the faults each broker can be given cheaply.
 */
import { ChangeMessageVisibilityCommand, ReceiveMessageCommand, SQSClient } from "@aws-sdk/client-sqs"
import { BullMQTransport as EngineBullMQ } from "@dudousxd/nestjs-durable-transport-bullmq"
import { DbTransport } from "@dudousxd/nestjs-durable-transport-db"
import { SqsTransport as EngineSqs } from "@dudousxd/nestjs-durable-transport-sqs"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { Redis } from "ioredis"
import { DurableWorkflow, InMemoryTransport, Memory, Step } from "../../src/index.js"
import { BullMQTransport } from "../../src/bullmq.js"
import { DurableWorkflowTransport } from "../../src/durable-workflow.js"
import { SqlTransport } from "../../src/postgres.js"
import { SqsTransport } from "../../src/sqs.js"
import * as DurableWorkflowServer from "../support/durableWorkflowServer.js"
import { deletePrefixKeys, redisConnection, uniquePrefix } from "../support/engine.js"
import { fauxqs, sqsPrefix } from "../support/fauxqs.js"
import { freePort } from "../support/local.js"
import { databaseUrl, type DialectName, dropTables, executor, openDb, uniqueTablePrefix } from "../support/sqlEngine.js"
import { type Backend, type CancelHooks, idOfInput, type Instance, type Observed, type Reply } from "./suite.js"
import { SqlTransport as PostgresSql } from "../../src/postgres.js"
import { SqlTransport as MysqlSql } from "../../src/mysql.js"

// ---------------------------------------------------------------------------------------------
// nestjs-durable: shared by the in-memory, BullMQ, SQL and SQS backends
// ---------------------------------------------------------------------------------------------

/** A step result as the engine reads it. */
interface StepResultLike {
  readonly runId: string
  readonly status: "completed" | "failed"
  readonly output?: unknown
  readonly error?: { readonly message?: string; readonly code?: string | undefined } | undefined
}

/** Step tasks of one test: run ids of its own, and the way back from a run id to the test's task id. */
const nestTasks = (label: string) => {
  const ids = new Map<string, string>()
  return {
    /** A step task as the engine dispatches it (seq 0, attempt 1), in run `<label>-<id>`. */
    task: (id: string, step: string, input: Record<string, unknown>) => {
      const runId = `${label}-${id}`
      ids.set(runId, id)
      return { runId, seq: 0, name: step, stepId: `${runId}:0`, group: step, input, attempt: 1 }
    },
    idOf: (payload: unknown) => {
      const runId = (payload as { runId?: unknown } | null)?.runId
      return typeof runId === "string" ? ids.get(runId) : undefined
    },
    reply: (result: StepResultLike): Reply => ({
      id: ids.get(result.runId) ?? `unknown run ${result.runId}`,
      status: result.status,
      output: result.output,
      cancelled: result.error?.code === "cancelled",
      error: result.error?.message
    })
  }
}

/** The cancellable step of the nestjs-durable backends: it runs until its signal is aborted (a cancel interrupts it). */
const signalledStep = (name: string, hooks: CancelHooks): Step.Step =>
  Step.make(name, (input: unknown, ctx) =>
    Effect.suspend(() => {
      const id = idOfInput(input)
      hooks.started(id)
      ctx.signal.addEventListener("abort", () => hooks.seen(id))
      return Effect.never
    }))

/** Re-reads `check` every 20 ms (wall clock: broker I/O) until it holds, for up to 10 s. */
const pollUntil = (what: string, check: () => Promise<boolean> | boolean) =>
  Effect.promise(async () => {
    const deadline = Date.now() + 10_000
    while (!(await check())) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
  })

// ---------------------------------------------------------------------------------------------
// In-memory (TestClock)
// ---------------------------------------------------------------------------------------------

/** The in-memory broker, on the TestClock; leases renewed every second. */
export const inMemory: Backend = {
  name: "in-memory",
  clock: "test",
  giveBack: "release",
  unsupported: {
    redeliveryAfterLostReply:
      "the in-memory broker's leases never run out: a task whose reply the worker gave up on stays on it, unacknowledged, never redelivered",
    leaseLoss: "the in-memory broker's leases never run out, and no other claimant can take one"
  },
  setup: (observed: Observed) =>
    Effect.gen(function*() {
      const broker = yield* Effect.orDie(InMemoryTransport.make({ leaseRenewInterval: "1 second" }))
      const tasks = nestTasks("mem")
      yield* broker.takeReply.pipe(
        Effect.tap((reply) =>
          Effect.sync(() => {
            if (reply._tag === "StepResult") observed.reply(tasks.reply(reply.result))
          })
        ),
        Effect.forever,
        Effect.forkScoped
      )
      const ops = (op: string) => Effect.map(broker.journal, (journal) => journal.filter((entry) => entry.op === op).length)
      const instance: Instance = {
        layer: () => broker.layer,
        // memory readings from a test double: no file-system reads under the TestClock
        extra: Memory.layerTest({ usage: 100 * 1024 * 1024, limit: 1024 * 1024 * 1024 }),
        failRegistration: Effect.as(broker.setRegisterFault({ _tag: "Fail", message: "401 unauthorized" }), broker.layer),
        put: (id, step, input) => {
          const task = tasks.task(id, step, input)
          return Effect.as(broker.enqueue(task), { id, step, runId: task.runId, taskId: task.stepId })
        },
        idOf: tasks.idOf,
        pending: () => broker.pending,
        registered: Effect.map(broker.registered, Option.isSome),
        deregistrations: ops("deregister"),
        renewals: ops("renew"),
        cancel: (task) => broker.cancel(task.runId),
        cancellableStep: signalledStep,
        replyFault: {
          arm: broker.setCompleteFault({ _tag: "Fail", message: "broker down" }),
          holdsUntilDisarmed: true,
          disarm: broker.setCompleteFault(undefined)
        },
        failDeregistration: broker.setDeregisterFault({ _tag: "Fail", message: "403 forbidden" })
      }
      return instance
    })
}

// ---------------------------------------------------------------------------------------------
// BullMQ on the local Redis
// ---------------------------------------------------------------------------------------------

/** BullMQ on the local Redis, with the engine's own BullMQ transport on the other side. */
export const bullmq: Backend = {
  name: "BullMQ",
  clock: "live",
  giveBack: "release",
  unsupported: {
    deregistrationFault: "the worker's descriptor keys cannot be made undeletable without also breaking BullMQ's own scripts"
  },
  setup: (observed: Observed) =>
    Effect.gen(function*() {
      const prefix = uniquePrefix("edwc")
      const connection = redisConnection()
      const url = `redis://${connection.host}:${connection.port}`
      const redis = yield* Effect.acquireRelease(
        Effect.sync(() => new Redis(connection)),
        (client) => Effect.promise(() => deletePrefixKeys(client, prefix).then(() => client.quit()))
      )
      const engineSide = yield* Effect.acquireRelease(
        Effect.sync(() => new EngineBullMQ({ connection, prefix })),
        (transport) => Effect.promise(() => transport.close())
      )
      const tasks = nestTasks(prefix)
      engineSide.onResult(async (result) => observed.reply(tasks.reply(result)))
      const resultsId = `bull:${prefix}-results:id`
      const instance: Instance = {
        layer: (tuning) =>
          Layer.orDie(BullMQTransport.layer({
            url,
            prefix,
            ...(tuning?.shortLease ? { lockDuration: "2 seconds", stalledInterval: "1 second" } : {})
          })),
        failRegistration: Effect.map(
          Effect.promise(freePort),
          (port) => Layer.orDie(BullMQTransport.layer({ url: `redis://127.0.0.1:${port}`, prefix, connectTimeout: "1 second" }))
        ),
        put: (id, step, input) => {
          const task = tasks.task(id, step, input)
          return Effect.as(Effect.promise(() => engineSide.dispatch(task)), { id, step, runId: task.runId, taskId: task.stepId })
        },
        idOf: tasks.idOf,
        pending: (step) =>
          Effect.promise(async () => {
            const queue = `bull:${prefix}-tasks-${step}`
            return (await redis.llen(`${queue}:wait`)) + (await redis.zcard(`${queue}:prioritized`))
          }),
        registered: Effect.promise(async () => (await engineSide.listWorkerGroups()).length > 0),
        cancel: (task) => Effect.promise(() => engineSide.publishControl({ kind: "cancel", runId: task.runId })),
        cancellableStep: signalledStep,
        // another worker's token in the job's lock, as when the lock expired and the stalled check
        // handed the job on
        loseLease: (task) =>
          Effect.promise(async () => {
            const locks = await redis.keys(`bull:${prefix}-tasks-${task.step}:*:lock`)
            if (locks.length !== 1) throw new Error(`expected one locked job of ${task.step}, found ${locks.length}`)
            await redis.set(locks[0]!, "another-worker", "PX", 30_000)
          }),
        replyFault: {
          // the results queue's id counter is not a number: adding a result fails inside Redis's script
          arm: Effect.promise(() => redis.set(resultsId, "not-a-number")),
          holdsUntilDisarmed: true,
          disarm: Effect.promise(() => redis.del(resultsId))
        }
      }
      return instance
    })
}

// ---------------------------------------------------------------------------------------------
// SQL on the local PostgreSQL and MariaDB
// ---------------------------------------------------------------------------------------------

/** The SQL transport on `dialect`, with the engine's own DB transport on the other side. */
export const sql = (dialect: DialectName): Backend => ({
  name: dialect === "postgres" ? "PostgreSQL" : "MySQL",
  clock: "live",
  giveBack: "release",
  unsupported: {
    cancel: "the engine's DB transport has no control channel: a cancelled run is never announced to workers",
    deregistrationFault: "the DB transport has no worker registry: deregistration sends nothing"
  },
  setup: (observed: Observed) =>
    Effect.gen(function*() {
      const prefix = uniqueTablePrefix("edwc")
      const db = yield* Effect.acquireRelease(
        Effect.sync(() => openDb(dialect, 4)),
        (db) => Effect.promise(() => dropTables(db, prefix).catch(() => undefined).finally(() => db.end()))
      )
      const engineSide = yield* Effect.acquireRelease(
        Effect.sync(() => new DbTransport({ executor: executor(db), prefix, pollMs: 20 })),
        (transport) => Effect.promise(() => transport.close())
      )
      const tasks = nestTasks(prefix)
      engineSide.onResult(async (result) => observed.reply(tasks.reply(result)))
      // the engine creates its tables in the background; a worker creating them at the same moment
      // could make the engine's (memoized) creation fail: wait for its last DDL, the index
      const indexQuery = dialect === "postgres"
        ? "SELECT 1 FROM pg_indexes WHERE indexname = $1"
        : "SELECT 1 FROM information_schema.statistics WHERE table_schema = DATABASE() AND index_name = ?"
      yield* pollUntil(
        "the engine's tables",
        async () => (await db.query(indexQuery, [`${prefix}_transport_tasks_grp_idx`])).length > 0
      )
      const tasksTable = db.id(`${prefix}_transport_tasks`)
      const url = databaseUrl(dialect)
      const layer = (options: SqlTransport.PostgresOptions) =>
        Layer.orDie(dialect === "postgres" ? PostgresSql.layerPostgres(options) : MysqlSql.layerMysql(options))

      // a reply fault: the task's row is locked from another connection, so the completion waits on
      // it, and the waiting connection is killed (a connection lost mid-write)
      let lock: { readonly commit: () => Promise<void> } | undefined
      const lockTasks = async () => {
        const holder = openDb(dialect, 1)
        let commit!: () => void
        const committed = new Promise<void>((resolve) => (commit = resolve))
        let locked!: () => void
        const lockedNow = new Promise<void>((resolve) => (locked = resolve))
        const done = holder.transaction(async (query) => {
          await query(`SELECT step_id FROM ${tasksTable} FOR UPDATE`)
          locked()
          await committed
        }).finally(() => holder.end())
        await lockedNow
        lock = { commit: () => (commit(), done) }
      }
      const killWaiting = async () => {
        if (dialect === "postgres") {
          const killed = await db.query(
            "SELECT pg_terminate_backend(pid) AS killed FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1",
            [`%${prefix}_transport_tasks%`]
          )
          return killed.length > 0
        }
        const waiting = await db.query<{ id: number }>(
          "SELECT id FROM information_schema.processlist WHERE info LIKE ? AND info NOT LIKE '%processlist%'",
          [`%DELETE FROM %${prefix}_transport_tasks%`]
        )
        for (const { id } of waiting) await db.query(`KILL ${Number(id)}`)
        return waiting.length > 0
      }
      yield* Effect.addFinalizer(() => Effect.promise(async () => lock?.commit()))

      // a refusal: a trigger that fails every insert into the results table
      const refuse = db.id(`${prefix}_refuse`)
      const resultsTable = db.id(`${prefix}_transport_results`)
      const refuseReplies = dialect === "postgres"
        ? [
          `CREATE OR REPLACE FUNCTION ${refuse}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN ` +
          `RAISE EXCEPTION 'injected: the results table refuses writes'; END $$`,
          `CREATE TRIGGER ${refuse} BEFORE INSERT ON ${resultsTable} FOR EACH ROW EXECUTE FUNCTION ${refuse}()`
        ]
        : [
          `CREATE TRIGGER ${refuse} BEFORE INSERT ON ${resultsTable} FOR EACH ROW ` +
          `SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'injected: the results table refuses writes'`
        ]
      const acceptReplies = dialect === "postgres"
        ? [`DROP TRIGGER IF EXISTS ${refuse} ON ${resultsTable}`, `DROP FUNCTION IF EXISTS ${refuse}()`]
        : [`DROP TRIGGER IF EXISTS ${refuse}`]
      const runAll = (statements: ReadonlyArray<string>) =>
        Effect.promise(async () => {
          for (const statement of statements) await db.query(statement)
        })
      yield* Effect.addFinalizer(() => Effect.ignore(runAll(acceptReplies)))

      const instance: Instance = {
        layer: (tuning) =>
          layer({ url, prefix, pollInterval: "200 millis", maxConnections: 4, ...(tuning?.shortLease ? { lease: "2 seconds" } : {}) }),
        failRegistration: Effect.map(Effect.promise(freePort), (port) =>
          layer({
            url: dialect === "postgres" ? `postgres://postgres@127.0.0.1:${port}/test` : `mysql://root@127.0.0.1:${port}/test`,
            prefix,
            connectTimeout: "1 second"
          })),
        put: (id, step, input) => {
          const task = tasks.task(id, step, input)
          return Effect.as(Effect.promise(() => engineSide.dispatch(task)), { id, step, runId: task.runId, taskId: task.stepId })
        },
        idOf: tasks.idOf,
        pending: (step) =>
          Effect.promise(async () => {
            const [row] = await db.query<{ n: number | string }>(
              `SELECT COUNT(*) AS n FROM ${tasksTable} WHERE grp = ${db.ph(1)} AND claimed_by IS NULL`,
              [step]
            )
            return Number(row?.n ?? 0)
          }),
        replyFault: {
          arm: Effect.promise(lockTasks),
          failed: pollUntil("a completion waiting on the lock, to kill its connection", killWaiting),
          holdsUntilDisarmed: true,
          disarm: Effect.promise(async () => {
            await lock?.commit()
            lock = undefined
          })
        },
        replyRefusal: { arm: runAll(refuseReplies), disarm: runAll(acceptReplies) },
        // another worker's claim on the row, as when the lease ran out and another worker claimed it
        loseLease: (task) =>
          Effect.promise(async () => {
            await db.query(`UPDATE ${tasksTable} SET claimed_by = ${db.ph(1)} WHERE step_id = ${db.ph(2)}`, ["another-worker", task.taskId])
          })
      }
      return instance
    })
})

// ---------------------------------------------------------------------------------------------
// SQS on fauxqs
// ---------------------------------------------------------------------------------------------

/** The SQS transport on a fauxqs server of the test's own, with the engine's own SQS transport on the other side. */
export const sqs: Backend = {
  name: "SQS",
  clock: "live",
  giveBack: "release",
  unsupported: {
    cancel: "SQS has no control channel: a cancelled run's step runs to its end and the engine drops its result",
    deregistrationFault: "SQS has no worker registry: deregistration sends nothing"
  },
  setup: (observed: Observed) =>
    Effect.gen(function*() {
      const server = yield* fauxqs
      const prefix = sqsPrefix("edwc")
      const engineSide = yield* Effect.acquireRelease(
        Effect.sync(() => new EngineSqs({ clientConfig: server.clientConfig, prefix, autoCreate: true, waitTimeSeconds: 1 })),
        (transport) => Effect.promise(() => transport.close())
      )
      const tasks = nestTasks(prefix)
      engineSide.onResult(async (result) => observed.reply(tasks.reply(result)))
      const resultsQueue = `${prefix}-results`
      // a reply fault: the workers' clients fail sending to the results queue while it is armed
      const fault = { armed: false, failures: 0 }
      // the receipt of the copy each tasks queue last handed a worker, for the lease-loss rule
      const received = new Map<string, string>()
      const workerClient = () => {
        const client = new SQSClient(server.clientConfig)
        client.middlewareStack.add(
          (next, context) => async (args) => {
            const result = await next(args)
            if (context.commandName === "ReceiveMessageCommand") {
              const queueUrl = String((args.input as { QueueUrl?: unknown }).QueueUrl)
              const messages = (result.output as { Messages?: ReadonlyArray<{ ReceiptHandle?: string }> }).Messages ?? []
              for (const message of messages) if (message.ReceiptHandle !== undefined) received.set(queueUrl, message.ReceiptHandle)
            }
            return result
          },
          { step: "initialize", name: "contractReceipts" }
        )
        client.middlewareStack.add(
          (next, context) => async (args) => {
            const input = args.input as { QueueUrl?: unknown }
            const sending = context.commandName === "SendMessageBatchCommand" || context.commandName === "SendMessageCommand"
            if (fault.armed && sending && String(input.QueueUrl).endsWith(`/${resultsQueue}`)) {
              fault.failures++
              throw new Error("injected: the results queue is unreachable")
            }
            return next(args)
          },
          { step: "initialize", name: "contractReplyFault" }
        )
        return client
      }
      const instance: Instance = {
        layer: (tuning) =>
          Layer.unwrapScoped(
            Effect.map(
              Effect.acquireRelease(Effect.sync(workerClient), (client) => Effect.sync(() => client.destroy())),
              (client) =>
                Layer.orDie(SqsTransport.layer({
                  client,
                  prefix,
                  autoCreate: true,
                  waitTime: "1 second",
                  visibilityTimeout: tuning?.shortLease ? "2 seconds" : "30 seconds"
                }))
            )
          ),
        failRegistration: Effect.map(Effect.promise(freePort), (port) =>
          Layer.orDie(SqsTransport.layer({
            clientConfig: { ...server.clientConfig, endpoint: `http://127.0.0.1:${port}`, maxAttempts: 1 },
            prefix,
            connectTimeout: "2 seconds"
          }))),
        put: (id, step, input) => {
          const task = tasks.task(id, step, input)
          return Effect.as(Effect.promise(() => engineSide.dispatch(task)), { id, step, runId: task.runId, taskId: task.stepId })
        },
        idOf: tasks.idOf,
        pending: (step) => Effect.promise(async () => (await server.counts(`${prefix}-tasks-${step}`)).visible),
        // the copy made visible at once and received by another consumer, as when its visibility
        // lapsed and another worker took it. The worker's own poller cannot take it first: the rule
        // runs it at the suite's concurrency of 1, whose one permit the running task holds, so the
        // poller is waiting for a permit, not receiving
        loseLease: (task) =>
          Effect.acquireUseRelease(
            Effect.sync(() => new SQSClient(server.clientConfig)),
            (other) =>
              Effect.promise(async () => {
                const entry = [...received].find(([url]) => url.endsWith(`/${prefix}-tasks-${task.step}`))
                if (entry === undefined) throw new Error(`no copy of a ${task.step} task was received`)
                const [QueueUrl, ReceiptHandle] = entry
                await other.send(new ChangeMessageVisibilityCommand({ QueueUrl, ReceiptHandle, VisibilityTimeout: 0 }))
                const taken = await other.send(new ReceiveMessageCommand({ QueueUrl, VisibilityTimeout: 60, WaitTimeSeconds: 1 }))
                if ((taken.Messages ?? []).length !== 1) throw new Error("another consumer could not take the task")
              }),
            (other) => Effect.sync(() => other.destroy())
          ),
        replyFault: {
          arm: Effect.sync(() => {
            fault.armed = true
          }),
          failed: pollUntil("a failed send to the results queue", () => fault.failures > 0),
          holdsUntilDisarmed: true,
          disarm: Effect.sync(() => {
            fault.armed = false
          })
        }
      }
      return instance
    })
}

// ---------------------------------------------------------------------------------------------
// Durable Workflow on the protocol-faithful test server
// ---------------------------------------------------------------------------------------------

const QUEUE = "contract"
// short enough that a completion refused throughout is given up within the contract's 10 s waits
// (the transport retries one for half the lease left, at most 30 s)
const ACTIVITY_LEASE_SECONDS = 12

/** The Durable Workflow transport on the test server (activity tasks are its step tasks). */
export const durableWorkflow: Backend = {
  name: "Durable Workflow",
  clock: "live",
  giveBack: "lease expiry",
  unsupported: {
    leaseLoss: "the worker renews no lease of an activity task: the server's lease is kept by the activity's own heartbeats",
    leaseRenewal:
      "the worker protocol has no worker-side lease renewal: an activity's lease is extended only by the handler's own heartbeats"
  },
  setup: (observed: Observed) =>
    Effect.gen(function*() {
      const server = yield* DurableWorkflowServer.scoped({ maxPollHoldMs: 500, activityTaskLeaseSeconds: ACTIVITY_LEASE_SECONDS })
      const ids = new Map<string, string>()
      const reply = (taskId: string, fields: Omit<Reply, "id">) => observed.reply({ id: ids.get(taskId) ?? `unknown task ${taskId}`, ...fields })
      const unsubscribe = server.onEvent((event) => {
        if (event._tag === "ActivityTaskCompleted") {
          const { decodedResult, taskId } = event.completion
          reply(taskId, {
            status: "completed",
            output: decodedResult === undefined ? undefined : Either.getOrUndefined(decodedResult),
            cancelled: false
          })
        } else if (event._tag === "ActivityTaskFailed") {
          const { failure, taskId } = event.failure
          reply(taskId, {
            status: "failed",
            cancelled: failure["type"] === "ActivityCancelled",
            error: String(failure["message"])
          })
        }
      })
      yield* Effect.addFinalizer(() => Effect.sync(unsubscribe))
      const layer = () =>
        Layer.orDie(DurableWorkflowTransport.layer({ baseUrl: server.url, token: server.tokens.worker, taskQueue: QUEUE }))
      const instance: Instance = {
        layer,
        failRegistration: Effect.sync(() => {
          server.failNext("register", 403)
          return layer()
        }),
        put: (id, step, input) =>
          Effect.sync(() => {
            const { runId, taskId } = server.enqueueActivityTask({ activityType: step, taskQueue: QUEUE, input: [input] })
            ids.set(taskId, id)
            return { id, step, runId, taskId }
          }),
        idOf: (payload) => {
          const taskId = (payload as { task?: { task_id?: unknown } } | null)?.task?.task_id
          return typeof taskId === "string" ? ids.get(taskId) : undefined
        },
        registered: Effect.sync(() => server.registrations.size > 0),
        deregistrations: Effect.sync(() => server.deregistrations.length),
        cancel: (task) => Effect.sync(() => server.requestActivityCancellation(task.taskId)),
        // an activity hears of a cancel through its heartbeat
        cancellableStep: (name, hooks) =>
          DurableWorkflow.activity(name, (input: { id: string }) =>
            Effect.gen(function*() {
              const ctx = yield* DurableWorkflow.ActivityContext
              hooks.started(input.id)
              ctx.signal.addEventListener("abort", () => hooks.seen(input.id))
              for (;;) {
                yield* ctx.heartbeat({ alive: true })
                yield* Effect.sleep("50 millis")
              }
            })),
        replyFault: {
          // one 503: the transport's client retries the completion itself
          arm: Effect.sync(() => server.failNext("activityTaskComplete", 503)),
          failed: pollUntil(
            "a refused activity completion",
            () => server.requestsTo("activityTaskComplete").some((request) => request.status === 503)
          ),
          holdsUntilDisarmed: false,
          disarm: Effect.sync(() => server.clearFaults())
        },
        replyRefusal: {
          arm: Effect.sync(() => server.failNext("activityTaskComplete", 503, undefined, 1_000)),
          // the transport retries a completion itself, then gives up (and its complete returns)
          gaveUp: pollUntil(
            "the transport to give up on the completion",
            () =>
              server.requestsTo("activityTaskComplete").some((request) => request.status === 503) &&
              observed.events.some((e) => e.op === "complete-ok" || e.op === "complete-failed")
          ),
          disarm: Effect.sync(() => server.clearFaults())
        },
        failDeregistration: Effect.sync(() => server.failNext("deregisterRegistration", 403)),
        // the protocol has no release call: a task left by an interrupted worker is leased again once
        // its lease ran out (the server's lease clock is moved past it)
        afterGiveBack: Effect.sync(() => server.advanceTime(ACTIVITY_LEASE_SECONDS * 1000 + 1000))
      }
      return instance
    })
}
