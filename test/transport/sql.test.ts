/**
 * The SQL transport's own rules, on the real PostgreSQL and MariaDB but a `TestClock`-driven runtime:
 * the lease stamp and its expiry, lease renewal while a task runs, the poll-interval fallback, the
 * LISTEN/NOTIFY wake-up, the completion transaction (a lost claim writes nothing; an earlier unread
 * result delays the write instead of losing it), batched completions (grouped while a write is in
 * flight, each with its own outcome, nothing lost with a connection killed mid-batch), the next row
 * claimed with a completion, and the SQL text and row mapping.
 */
import { assert, describe, it } from "@effect/vitest"
import { DbTransport } from "@dudousxd/nestjs-durable-transport-db"
import { SqlError } from "@effect/sql/SqlError"
import * as MysqlClient from "@effect/sql-mysql2/MysqlClient"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Stream from "effect/Stream"
import * as Str from "effect/String"
import * as TestClock from "effect/TestClock"
import * as Step from "../../src/core/Step.js"
import { replyRetry } from "../../src/runtime/internal/replyRetry.js"
import * as Worker from "../../src/runtime/Worker.js"
import { byCreatedAt, mysqlWrittenSize, toPayload, toResultRow } from "../../src/transport/sql/internal/rows.js"
import { format as formatMysql } from "mysql2"
import * as Statements from "../../src/transport/sql/internal/statements.js"
import * as SqlTransport from "../../src/transport/SqlTransport.js"
import { type Delivery, type Poller, Transport } from "../../src/seam/Transport.js"
import { describedWorker, servingSteps } from "../support/handlers.js"
import { captureLogs } from "../support/local.js"
import { databaseUrl, type Db, type DialectName, dropTables, executor, openDb, uniqueTablePrefix } from "../support/sqlEngine.js"
import { SqlTransport as PostgresSql } from "../../src/postgres.js"
import { SqlTransport as MysqlSql } from "../../src/mysql.js"
import { mysql, postgres } from "../../src/promise.js"

/** Lets forked fibers run until they block. */
const settle = Effect.repeatN(Effect.yieldNow(), 50)

/** Waits on the wall clock for database I/O (not for a timing rule): re-checks every 10 ms, up to 10 s. */
const until = (what: string, check: Effect.Effect<boolean>) =>
  Effect.gen(function*() {
    for (let i = 0; i < 1_000; i++) {
      if (yield* check) return
      yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 10)))
    }
    return assert.fail(`timed out waiting for ${what}`)
  })

/** A database with a fresh prefix; the engine's own transport dispatches tasks into it; tables dropped at the end. */
const fixture = (dialect: DialectName) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const prefix = uniqueTablePrefix("edwu")
      const db = openDb(dialect, 4)
      const engineSide = new DbTransport({ executor: executor(db), prefix })
      let seq = 0
      const dispatch = (name: string, input: unknown = {}) => {
        const runId = `run-${prefix}`
        const task = { runId, seq: seq++, name, stepId: `${runId}:${seq - 1}`, group: name, input, attempt: 1 }
        return engineSide.dispatch(task).then(() => task.stepId)
      }
      const rows = () =>
        db.query<{ step_id: string; claimed_by: string | null; claimed_at: string | number | null }>(
          `SELECT step_id, claimed_by, claimed_at FROM ${db.id(`${prefix}_transport_tasks`)} ORDER BY step_id`
        )
      const results = () =>
        db.query<{ step_id: string; status: string; output: string | null }>(
          `SELECT step_id, status, output FROM ${db.id(`${prefix}_transport_results`)} ORDER BY step_id`
        )
      return { prefix, db, dispatch, rows, results, close: () => engineSide.close() }
    }),
    (f) => Effect.promise(() => f.close().then(() => dropTables(f.db, f.prefix)).finally(() => f.db.end()))
  )

const connect = (dialect: DialectName) =>
  dialect === "postgres"
    ? PostgresSql.connectPostgres({ url: databaseUrl("postgres") })
    : MysqlSql.connectMysql({ url: databaseUrl("mysql") })

const description = (workerId: string, steps: ReadonlyArray<string>) => describedWorker(workerId, servingSteps(steps))

/**
 * A fixture, `tasks` tasks dispatched for `work` (their step ids), and a transport over a connection
 * that records every statement, registered as `worker-a` for `work`.
 */
const spiedWorker = (dialect: DialectName, tasks = 0) =>
  Effect.gen(function*() {
    const f = yield* fixture(dialect)
    const statements: Array<{ readonly text: string; readonly params: ReadonlyArray<unknown> }> = []
    const transport = yield* SqlTransport.make({ prefix: f.prefix }, spiedConnect(dialect, statements), dialect)
    const poller = (yield* transport.register(description("worker-a", ["work"]))).pollers[0]!
    const ids: Array<string> = []
    for (let i = 0; i < tasks; i++) ids.push(yield* Effect.promise(() => f.dispatch("work")))
    return { f, ids, statements, poller }
  })

/** Registers a transport directly (no runtime) and returns its only poller. */
const registerPoller = (
  dialect: DialectName,
  prefix: string,
  workerId: string,
  options: SqlTransport.SqlTransportOptions = {}
) =>
  Effect.gen(function*() {
    const transport = yield* SqlTransport.make({ prefix, ...options }, connect(dialect), dialect)
    const registration = yield* transport.register(description(workerId, ["work"]))
    assert.strictEqual(registration.pollers.length, 1)
    return registration.pollers[0]!
  })

const stepReply = (delivery: Delivery, output: unknown) => {
  const payload = delivery.payload as { runId: string; seq: number; stepId: string }
  return {
    _tag: "StepResult" as const,
    result: { runId: payload.runId, seq: payload.seq, stepId: payload.stepId, status: "completed" as const, output }
  }
}

const poll = (poller: Poller, max: number) => poller.poll(max)

/** The poller's `ready` ends exactly `ms` after it starts waiting on the TestClock, not a millisecond sooner. */
const readyAfter = (poller: Poller, ms: number) =>
  Effect.gen(function*() {
    const waiting = yield* Effect.fork(poller.ready!)
    yield* settle
    yield* TestClock.adjust(ms - 1)
    yield* settle
    assert.isTrue(Option.isNone(yield* Fiber.poll(waiting)))
    yield* TestClock.adjust(1)
    yield* Fiber.join(waiting)
  })

/** A connection whose statements are recorded (text and parameters), to see how completions were grouped. */
const spiedConnect = (dialect: DialectName, statements: Array<{ readonly text: string; readonly params: ReadonlyArray<unknown> }>) =>
  Effect.map(connect(dialect), (connection): SqlTransport.Connection => ({
    ...connection,
    sql: new Proxy(connection.sql, {
      get(target, key, receiver) {
        const value = Reflect.get(target, key, target)
        // the transport drops the client's transforms first: the spy must stay in the way
        if (key === "withoutTransforms") return () => receiver
        if (key === "unsafe") {
          return (text: string, params?: ReadonlyArray<unknown>) => {
            statements.push({ text, params: params ?? [] })
            return (value as (text: string, params?: ReadonlyArray<unknown>) => unknown).call(target, text, params)
          }
        }
        // MySQL transactions run on a reserved connection, several statements per round trip
        if (key === "reserve") {
          return Effect.map(value as typeof target.reserve, (conn) => ({
            ...conn,
            executeUnprepared: (text: string, params: ReadonlyArray<unknown>, transform: undefined) => {
              statements.push({ text, params })
              return conn.executeUnprepared(text, params, transform)
            }
          }))
        }
        return typeof value === "function" ? value.bind(target) : value
      }
    })
  }))

/** The number of results each result-writing round trip carried, in order. */
const resultWrites = (statements: ReadonlyArray<{ readonly text: string; readonly params: ReadonlyArray<unknown> }>) =>
  statements.flatMap(({ params, text }) => {
    if (/^WITH input/.test(text)) return [(params[0] as ReadonlyArray<unknown>).length]
    // MySQL: the batch's guarded delete, one `?` per completion in its `step_id IN (…)` (counting its
    // `(?, ?)` pairs would count that list too when it is itself `(?, ?)`)
    const batchDelete = text.split(";\n").find((statement) => /^DELETE FROM .* IN \(/.test(statement))
    return batchDelete === undefined ? [] : [/ IN \(([?, ]*)\) AND /.exec(batchDelete)![1]!.split(",").length]
  })

/**
 * Locks task rows from another connection (an open transaction) until the returned `commit` (or the
 * end of the test): a completion of one of them waits for it.
 */
const lockRows = (f: { readonly db: { readonly dialect: DialectName }; readonly prefix: string }, stepIds: ReadonlyArray<string>) =>
  Effect.acquireRelease(Effect.promise(async () => {
    const db = openDb(f.db.dialect, 1)
    let commit!: () => void
    const committed = new Promise<void>((resolve) => (commit = resolve))
    let locked!: () => void
    const lockedNow = new Promise<void>((resolve) => (locked = resolve))
    const done = db.transaction(async (query) => {
      for (const stepId of stepIds) {
        await query(`SELECT step_id FROM ${db.id(`${f.prefix}_transport_tasks`)} WHERE step_id = ${db.ph(1)} FOR UPDATE`, [stepId])
      }
      locked()
      await committed
    }).finally(() => db.end())
    await lockedNow
    return { commit: Effect.promise(() => (commit(), done)) }
  }), (lock) => lock.commit)

/** Kills the connection whose statement waits on a lock of the prefix's tables (a lost connection mid-write). */
const killWaiting = (f: { readonly db: { readonly dialect: DialectName; readonly query: Db["query"] }; readonly prefix: string }) =>
  until(
    "a write waiting on the lock, to kill its connection",
    Effect.promise(async () => {
      const rows = f.db.dialect === "postgres"
        ? await f.db.query(
          "SELECT pg_terminate_backend(pid) AS killed FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1",
          [`%${f.prefix}_transport_tasks%`]
        )
        : await f.db.query<{ id: number }>(
          "SELECT id FROM information_schema.processlist WHERE info LIKE ? AND info NOT LIKE '%processlist%'",
          [`%DELETE FROM %${f.prefix}_transport_tasks%`]
        )
      if (f.db.dialect === "mysql") for (const { id } of rows as Array<{ id: number }>) await f.db.query(`KILL ${Number(id)}`)
      return rows.length > 0
    })
  )

describe.each(["postgres", "mysql"] as const)("SqlTransport on %s (TestClock)", (dialect) => {
  it.scoped("a claim stamps claimed_by and the clock's time; the lease expires for others exactly after `lease`", () =>
    Effect.gen(function*() {
      const f = yield* fixture(dialect)
      const stepId = yield* Effect.promise(() => f.dispatch("work"))
      const a = yield* registerPoller(dialect, f.prefix, "worker-a")
      const b = yield* registerPoller(dialect, f.prefix, "worker-b")
      yield* TestClock.adjust("1 second")
      const [taken, ...none] = yield* poll(a, 5)
      assert.strictEqual(taken?.id, `${f.prefix}_transport_tasks#${stepId}`)
      assert.strictEqual(none.length, 0)
      const [row] = yield* Effect.promise(f.rows)
      assert.match(row!.claimed_by!, /^worker-a#/)
      assert.strictEqual(Number(row!.claimed_at), 1_000)
      assert.strictEqual((yield* poll(b, 5)).length, 0)
      yield* TestClock.adjust("30 seconds") // claimed_at 1000 is not older than now - lease = 1000
      assert.strictEqual((yield* poll(b, 5)).length, 0)
      yield* TestClock.adjust("1 millis")
      const [retaken] = yield* poll(b, 5)
      assert.strictEqual((retaken?.payload as { stepId: string }).stepId, stepId)
      // the first claim is lost: its renewal fails and its completion writes nothing
      const renewed = yield* Effect.exit(Option.getOrThrow(taken!.keepAlive).renew)
      assert.isTrue(Exit.isFailure(renewed))
      yield* taken!.complete(stepReply(taken!, "late"))
      assert.deepStrictEqual(yield* Effect.promise(f.results), [])
      const [still] = yield* Effect.promise(f.rows)
      assert.match(still!.claimed_by!, /^worker-b#/)
      // the current claim completes: result written, task row gone, in one transaction
      yield* retaken!.complete(stepReply(retaken!, "on time"))
      assert.deepStrictEqual(yield* Effect.promise(f.rows), [])
      const [result] = yield* Effect.promise(f.results)
      assert.strictEqual(result?.status, "completed")
      assert.strictEqual(result?.output, "\"on time\"")
    }))

  it.scoped("a row of a claim released by itself frees that row only: the claim's other rows stay held", () =>
    Effect.gen(function*() {
      const f = yield* fixture(dialect)
      const first = yield* Effect.promise(() => f.dispatch("work"))
      const second = yield* Effect.promise(() => f.dispatch("work"))
      const a = yield* registerPoller(dialect, f.prefix, "worker-a")
      assert.strictEqual((yield* poll(a, 5)).length, 2)
      const claim = (yield* Effect.promise(f.rows))[0]!.claimed_by!
      const released = Statements.releaseClaims(dialect, Statements.names(f.prefix), [], [{ claim, stepId: first }])
      yield* Effect.promise(() => f.db.query(released.text, released.params))
      assert.deepStrictEqual((yield* Effect.promise(f.rows)).map((row) => [row.step_id, row.claimed_by]), [[first, null], [second, claim]])
    }))

  it.scoped("two registrations with one workerId (replicas sharing DURABLE_WORKER_ID) claim under different ids", () =>
    Effect.gen(function*() {
      const f = yield* fixture(dialect)
      yield* Effect.promise(() => f.dispatch("work"))
      yield* Effect.promise(() => f.dispatch("work"))
      const a = yield* registerPoller(dialect, f.prefix, "worker-a")
      const b = yield* registerPoller(dialect, f.prefix, "worker-a")
      assert.strictEqual((yield* poll(a, 1)).length, 1)
      assert.strictEqual((yield* poll(b, 1)).length, 1)
      const [first, second] = (yield* Effect.promise(f.rows)).map((row) => row.claimed_by!)
      assert.match(first!, /^worker-a#/)
      assert.match(second!, /^worker-a#/)
      assert.notStrictEqual(first, second)
    }))

  it.scoped("rejecting a task whose claim was lost deletes nothing and says so", () =>
    Effect.gen(function*() {
      const f = yield* fixture(dialect)
      const logs = captureLogs()
      const stepId = yield* Effect.promise(() => f.dispatch("work"))
      const a = yield* registerPoller(dialect, f.prefix, "worker-a")
      const [taken] = yield* poll(a, 5)
      const claim = (yield* Effect.promise(f.rows))[0]!.claimed_by
      // another worker took it over after the lease
      yield* Effect.promise(() =>
        f.db.query(`UPDATE ${f.db.id(`${f.prefix}_transport_tasks`)} SET claimed_by = 'worker-b#1' WHERE step_id = ${f.db.ph(1)}`, [stepId])
      )
      yield* taken!.reject("refused").pipe(Effect.provide(logs.layer))
      assert.deepStrictEqual((yield* Effect.promise(f.rows)).map((row) => row.claimed_by), ["worker-b#1"])
      assert.deepStrictEqual(logs.lines.filter((line) => line.includes(stepId)), [
        `WARN task ${stepId} could not be deleted: the claim ${claim} no longer ` +
        "holds it (its lease ran out and another worker took it over, or it is gone); whoever holds it answers it"
      ])
    }))

  it.scoped("a running task's lease is renewed every lease / 3 by the worker (and every renewInterval when set)", () =>
    Effect.gen(function*() {
      const f = yield* fixture(dialect)
      const release = yield* Deferred.make<void>()
      const started = yield* Deferred.make<void>()
      const worker = yield* Worker.make({
        steps: [Step.make("work", () => Effect.zipRight(Deferred.succeed(started, undefined), Deferred.await(release)))],
        concurrency: 2,
        shutdownTimeout: "1 minute"
      })
      const layer = dialect === "postgres"
        ? PostgresSql.layerPostgres({ url: databaseUrl(dialect), prefix: f.prefix, lease: "30 seconds" })
        : MysqlSql.layerMysql({ url: databaseUrl(dialect), prefix: f.prefix, lease: "30 seconds" })
      // dispatched first: the worker's first poll finds it (later polls would wait for the test clock)
      yield* Effect.promise(() => f.dispatch("work"))
      const running = yield* Effect.forkDaemon(Effect.provide(worker.run, layer))
      yield* until("the task to start", Deferred.isDone(started))
      const claimedAt = Effect.map(Effect.promise(f.rows), ([row]) => Number(row?.claimed_at))
      assert.strictEqual(yield* claimedAt, 0)
      yield* TestClock.adjust("10 seconds")
      yield* until("the first renewal", Effect.map(claimedAt, (at) => at === 10_000))
      yield* TestClock.adjust("5 seconds")
      yield* TestClock.adjust("5 seconds")
      yield* until("the second renewal", Effect.map(claimedAt, (at) => at === 20_000))
      yield* Deferred.succeed(release, undefined)
      yield* until("the result", Effect.map(Effect.promise(f.results), (rows) => rows.length === 1))
      yield* worker.stop
      yield* Fiber.join(running)
    }))

  it.scoped("an idle subscription looks again after pollInterval; after a full claim it looks again at once", () =>
    Effect.gen(function*() {
      const f = yield* fixture(dialect)
      const poller = yield* registerPoller(dialect, f.prefix, "worker-a", { pollInterval: "500 millis", notify: false })
      assert.deepStrictEqual(yield* poll(poller, 4), [])
      yield* readyAfter(poller, 500)
      // two tasks, a claim of at most two: full, so the next ready does not wait
      yield* Effect.promise(() => f.dispatch("work"))
      yield* Effect.promise(() => f.dispatch("work"))
      assert.strictEqual((yield* poll(poller, 2)).length, 2)
      const immediate = yield* Effect.fork(poller.ready!)
      yield* settle
      assert.isTrue(Option.isSome(yield* Fiber.poll(immediate)))
    }))

  it.scoped("a completion waits while an earlier result of the step is unread, then writes (nothing lost, nothing swallowed)", () =>
    Effect.gen(function*() {
      const f = yield* fixture(dialect)
      const stepId = yield* Effect.promise(() => f.dispatch("work"))
      const poller = yield* registerPoller(dialect, f.prefix, "worker-a")
      const [delivery] = yield* poll(poller, 1)
      const results = f.db.id(`${f.prefix}_transport_results`)
      const ph = f.db.ph
      yield* Effect.promise(() =>
        f.db.query(
          `INSERT INTO ${results} (step_id, run_id, seq, status, output, created_at) VALUES (${ph(1)}, ${ph(2)}, 0, 'failed', NULL, 1)`,
          [stepId, `run-${f.prefix}`]
        )
      )
      const completing = yield* Effect.fork(delivery!.complete(stepReply(delivery!, "second")))
      yield* until("the first attempt to roll back", Effect.map(Effect.promise(f.rows), (rows) => rows.length === 1))
      yield* settle
      assert.isTrue(Option.isNone(yield* Fiber.poll(completing)))
      // the engine reads the earlier result and deletes it
      yield* Effect.promise(() => f.db.query(`DELETE FROM ${results} WHERE step_id = ${ph(1)}`, [stepId]))
      yield* TestClock.adjust("100 millis")
      yield* Fiber.join(completing)
      assert.deepStrictEqual(yield* Effect.promise(f.rows), [])
      assert.deepStrictEqual((yield* Effect.promise(f.results)).map((r) => r.output), ["\"second\""])
    }))

  it.scoped("completions that queue up during a write go in one batch; written, lost and waiting ones each get their own outcome", () =>
    Effect.gen(function*() {
      const { f, ids, statements, poller } = yield* spiedWorker(dialect, 4)
      const [d0, d1, d2, d3] = yield* poll(poller, 4)
      // d2's claim is lost (another worker holds the row now); an earlier result of d3's step waits
      const tasks = f.db.id(`${f.prefix}_transport_tasks`)
      const results = f.db.id(`${f.prefix}_transport_results`)
      const ph = f.db.ph
      yield* Effect.promise(() => f.db.query(`UPDATE ${tasks} SET claimed_by = 'worker-b#1' WHERE step_id = ${ph(1)}`, [ids[2]]))
      yield* Effect.promise(() =>
        f.db.query(
          `INSERT INTO ${results} (step_id, run_id, seq, status, output, created_at) VALUES (${ph(1)}, ${ph(2)}, 3, 'failed', NULL, 1)`,
          [ids[3], `run-${f.prefix}`]
        )
      )
      // d0's write waits on a lock; d1, d2 and d3 queue up behind it
      const lock = yield* lockRows(f, [ids[0]!])
      const first = yield* Effect.fork(d0!.complete(stepReply(d0!, 0)))
      yield* until("d0's write to wait on the lock", Effect.sync(() => resultWrites(statements).length === 1))
      const rest = yield* Effect.fork(
        Effect.all([d1, d2, d3].map((d, i) => Effect.exit(d!.complete(stepReply(d!, i + 1)))), { concurrency: "unbounded" })
      )
      yield* settle
      yield* lock.commit
      yield* Fiber.join(first)
      // d1 and d2 are answered; d3 waits for the engine to read the earlier result
      yield* until("d1 and d2 answered", Effect.map(Effect.promise(f.rows), (rows) => rows.length === 2))
      assert.deepStrictEqual((yield* Effect.promise(f.rows)).map((r) => [r.step_id, r.claimed_by?.split("#")[0]]), [
        [ids[2], "worker-b"],
        [ids[3], "worker-a"]
      ])
      assert.deepStrictEqual((yield* Effect.promise(f.results)).map((r) => [r.step_id, r.output]), [
        [ids[0], "0"],
        [ids[1], "1"],
        [ids[3], null]
      ])
      // one write for d0, one for d1-d3 together; MySQL then writes each alone (a claim was lost), as one transaction each
      assert.deepStrictEqual(resultWrites(statements).slice(0, 2), [1, 3])
      assert.isTrue(Option.isNone(yield* Fiber.poll(rest)))
      yield* Effect.promise(() => f.db.query(`DELETE FROM ${results} WHERE step_id = ${ph(1)}`, [ids[3]]))
      yield* TestClock.adjust("100 millis")
      const [e1, e2, e3] = yield* Fiber.join(rest)
      assert.isTrue(Exit.isSuccess(e1) && Exit.isSuccess(e2) && Exit.isSuccess(e3))
      assert.deepStrictEqual((yield* Effect.promise(f.rows)).map((r) => r.step_id), [ids[2]])
      assert.deepStrictEqual((yield* Effect.promise(f.results)).map((r) => [r.step_id, r.output]), [
        [ids[0], "0"],
        [ids[1], "1"],
        [ids[3], "3"]
      ])
    }))

  it.scoped("a connection lost mid-batch loses nothing: each completion of the batch is written again, once", () =>
    Effect.gen(function*() {
      const { f, ids, statements, poller } = yield* spiedWorker(dialect, 4)
      const [blocker, d1, d2, d3] = yield* poll(poller, 4)
      const first = yield* lockRows(f, [ids[0]!])
      // d1-d3 all locked: the batch waits on them, and so does each write of them again, so nothing of
      // them can be written before the checks below (the batch is written again at once when it fails)
      const second = yield* lockRows(f, ids.slice(1))
      const blocked = yield* Effect.fork(blocker!.complete(stepReply(blocker!, 0)))
      yield* until("the first write to wait on its lock", Effect.sync(() => resultWrites(statements).length === 1))
      const batch = yield* Effect.fork(
        // a write that meets the dying connection fails, and is retried as the runtime retries a reply:
        // from 100 ms on the TestClock, so no retry lands while the killed batch is being checked
        Effect.all([d1, d2, d3].map((d, i) => Effect.retry(d!.complete(stepReply(d!, i + 1)), replyRetry)), {
          concurrency: "unbounded"
        })
      )
      yield* settle
      // the next write carries d1-d3 together and waits on their locks: its connection is killed there
      yield* first.commit
      yield* Fiber.join(blocked)
      yield* until("the batch of three", Effect.sync(() => resultWrites(statements).length === 2))
      assert.deepStrictEqual(resultWrites(statements), [1, 3])
      yield* killWaiting(f)
      // nothing of the killed batch was written: d1-d3 are still claimed, without results
      assert.deepStrictEqual((yield* Effect.promise(f.results)).map((r) => r.step_id), [ids[0]])
      assert.deepStrictEqual((yield* Effect.promise(f.rows)).map((r) => r.step_id), ids.slice(1))
      // each completion is written again on its own once the locks are gone; any failures reach the
      // retries in their own time, so the clock is moved on until every retry has run
      yield* second.commit
      yield* until(
        "the batch to be written again",
        Effect.zipRight(TestClock.adjust("100 millis"), Effect.map(Fiber.poll(batch), Option.isSome))
      )
      yield* Fiber.join(batch)
      assert.deepStrictEqual(yield* Effect.promise(f.rows), [])
      assert.deepStrictEqual((yield* Effect.promise(f.results)).map((r) => [r.step_id, r.output]), [
        [ids[0], "0"],
        [ids[1], "1"],
        [ids[2], "2"],
        [ids[3], "3"]
      ])
    }))

  it.scoped("completeAndTakeNext writes the result and claims the next row in the same round trip", () =>
    Effect.gen(function*() {
      const { f, statements, poller } = yield* spiedWorker(dialect)
      const first = yield* Effect.promise(() => f.dispatch("work"))
      const second = yield* Effect.promise(() => f.dispatch("work"))
      yield* TestClock.adjust("2 seconds")
      const [d0] = yield* poll(poller, 1)
      assert.strictEqual((d0!.payload as { stepId: string }).stepId, first)
      const before = statements.length
      const next = yield* d0!.completeAndTakeNext!(stepReply(d0!, "a"))
      assert.strictEqual((Option.getOrThrow(next).payload as { stepId: string }).stepId, second)
      // PostgreSQL: one statement; MySQL: one transaction in two round trips
      assert.strictEqual(statements.length - before, dialect === "postgres" ? 1 : 2)
      const [row] = yield* Effect.promise(f.rows)
      assert.strictEqual(row?.step_id, second)
      assert.match(row!.claimed_by!, /^worker-a#/)
      assert.strictEqual(Number(row!.claimed_at), 2_000)
      const none = yield* Option.getOrThrow(next).completeAndTakeNext!(stepReply(Option.getOrThrow(next), "b"))
      assert.isTrue(Option.isNone(none))
      assert.deepStrictEqual(yield* Effect.promise(f.rows), [])
      assert.deepStrictEqual((yield* Effect.promise(f.results)).map((r) => r.output), ["\"a\"", "\"b\""])
    }))
})

/**
 * A worker registered on a fresh PostgreSQL fixture whose `LISTEN` is `listen` instead of a real
 * subscription; counts the subscriptions started.
 */
const listenedWith = (listen: (channel: string) => Stream.Stream<string, SqlError>) =>
  Effect.gen(function*() {
    const f = yield* fixture("postgres")
    let subscriptions = 0
    const connection = Effect.map(connect("postgres"), (connected): SqlTransport.Connection => ({
      ...connected,
      listen: Option.some((channel) =>
        Stream.suspend(() => {
          subscriptions++
          return listen(channel)
        })
      )
    }))
    const transport = yield* SqlTransport.make({ prefix: f.prefix }, connection, "postgres")
    const registration = yield* transport.register(description("worker-a", ["work"]))
    return { poller: registration.pollers[0]!, subscriptions: () => subscriptions }
  })

/**
 * An idle poller (it has polled and found nothing) is woken by the insert of a task with no clock
 * adjustment (only a notification can end its wait), and then polls that one task.
 */
const wokenByDispatch = (f: { readonly dispatch: (name: string) => Promise<string> }, poller: Poller, what: string) =>
  Effect.gen(function*() {
    const woken = yield* Effect.fork(poller.ready!)
    yield* settle
    yield* Effect.promise(() => f.dispatch("work"))
    yield* until(what, Effect.map(Fiber.poll(woken), Option.isSome))
    assert.strictEqual((yield* poll(poller, 4)).length, 1)
  })

/**
 * A MySQL connection whose registration reads a `max_allowed_packet` `factor` times the server's: as
 * if the server's limit was lowered after the worker read it. Every other statement goes through as is.
 */
const overstatedPacketLimit = (factor: number) =>
  Effect.map(connect("mysql"), (connection): SqlTransport.Connection => ({
    ...connection,
    sql: new Proxy(connection.sql, {
      get(target, key, receiver) {
        const value = Reflect.get(target, key, target)
        if (key === "withoutTransforms") return () => receiver
        if (key === "unsafe") {
          return (text: string, params?: ReadonlyArray<unknown>) =>
            (value as (text: string, params?: ReadonlyArray<unknown>) => unknown).call(
              target,
              /@@max_allowed_packet/.test(text) ? `SELECT ${factor} * @@max_allowed_packet AS \`limit\`` : text,
              params
            )
        }
        return typeof value === "function" ? value.bind(target) : value
      }
    })
  }))

/** The server's `max_allowed_packet`, read on the fixture's own connection. */
const packetLimit = (f: { readonly db: Db }) =>
  Effect.map(
    Effect.promise(() => f.db.query<{ limit: number }>("SELECT @@max_allowed_packet AS `limit`")),
    (rows) => Number(rows[0]!.limit)
  )

/** The results table's rows of a MySQL fixture, their error parsed. */
const resultRows = (f: { readonly db: Db; readonly prefix: string }) =>
  Effect.map(
    Effect.promise(() =>
      f.db.query<{ step_id: string; status: string; output: string | null; error: string | null }>(
        `SELECT step_id, status, output, error FROM \`${f.prefix}_transport_results\` ORDER BY step_id`
      )
    ),
    (rows) =>
      rows.map((row) => ({
        ...row,
        output: row.output === null ? null : row.output.length,
        error: row.error === null ? null : JSON.parse(row.error) as { message: string; code: string; retryable: boolean }
      }))
  )

describe("SqlTransport on mysql: a result over max_allowed_packet", () => {
  it.scoped("is answered as a non-retryable failure naming its size, the limit and what to do, logged as an error; the task is done", () =>
    Effect.gen(function*() {
      const f = yield* fixture("mysql")
      const logs = captureLogs()
      const [{ limit }] = (yield* Effect.promise(() => f.db.query<{ limit: number }>("SELECT @@max_allowed_packet AS `limit`"))) as [
        { limit: number }
      ]
      const stepId = yield* Effect.promise(() => f.dispatch("work"))
      const poller = yield* registerPoller("mysql", f.prefix, "worker-a")
      const [delivery] = yield* poll(poller, 1)
      // just over the server's own limit, as written
      yield* delivery!.complete(stepReply(delivery!, "x".repeat(Number(limit)))).pipe(Effect.provide(logs.layer))
      assert.deepStrictEqual(yield* Effect.promise(f.rows), [])
      const [result] = yield* Effect.promise(() =>
        f.db.query<{ step_id: string; status: string; output: string | null; error: string }>(
          `SELECT step_id, status, output, error FROM \`${f.prefix}_transport_results\``
        )
      )
      assert.deepStrictEqual({ ...result!, error: undefined }, { step_id: stepId, status: "failed", output: null, error: undefined })
      const error = JSON.parse(result!.error) as { message: string; code: string; retryable: boolean }
      assert.strictEqual(error.code, "result_too_large")
      assert.strictEqual(error.retryable, false)
      assert.match(
        error.message,
        new RegExp(
          `^the result of task ${stepId} is too large for ${f.prefix}_transport_results: \\d+ bytes as written, over the ` +
            `database's max_allowed_packet \\(${limit} bytes, 16384 of them kept for the statement\\); keep large outputs ` +
            "elsewhere \\(object storage, a table of your own\\) and return a reference to them, or raise max_allowed_packet on the server$"
        )
      )
      assert.deepStrictEqual(logs.lines, [`ERROR ${error.message}`])
    }))

  it.scoped("refused all the same by the server (ER_NET_PACKET_TOO_LARGE: its limit lowered since it was read), is answered as too large, once", () =>
    Effect.gen(function*() {
      const f = yield* fixture("mysql")
      const logs = captureLogs()
      const limit = yield* packetLimit(f)
      const stepId = yield* Effect.promise(() => f.dispatch("work"))
      // the worker believes the limit is four times the server's: its own measure lets the row through
      const transport = yield* SqlTransport.make({ prefix: f.prefix }, overstatedPacketLimit(4), "mysql")
      const poller = (yield* transport.register(description("worker-a", ["work"]))).pollers[0]!
      const [delivery] = yield* poll(poller, 1)
      yield* delivery!.complete(stepReply(delivery!, "x".repeat(limit))).pipe(Effect.provide(logs.layer))
      assert.deepStrictEqual(yield* Effect.promise(f.rows), [])
      const [result, ...others] = yield* resultRows(f)
      assert.deepStrictEqual(others, [])
      assert.deepStrictEqual({ ...result!, error: undefined }, { step_id: stepId, status: "failed", output: null, error: undefined })
      assert.strictEqual(result!.error!.code, "result_too_large")
      assert.strictEqual(result!.error!.retryable, false)
      // the limit the worker read is out of date: named as what it read, not as the server's
      assert.match(
        result!.error!.message,
        new RegExp(
          `^the result of task ${stepId} is too large for ${f.prefix}_transport_results: MySQL refused it ` +
            `\\(ER_NET_PACKET_TOO_LARGE\\) at \\d+ bytes as written, under the max_allowed_packet of ${4 * limit} bytes this ` +
            "worker read when it registered: the server's limit was lowered since \\(a worker reads it again when it restarts\\); " +
            "keep large outputs elsewhere"
        )
      )
      assert.deepStrictEqual(logs.lines, [`ERROR ${result!.error!.message}`])
    }))

  it.scoped("completions that together exceed the packet are written in batches that fit it, none refused", () =>
    Effect.gen(function*() {
      const { f, ids, statements, poller } = yield* spiedWorker("mysql", 4)
      const limit = yield* packetLimit(f)
      const [d0, d1, d2, d3] = yield* poll(poller, 4)
      // each of d1-d3 about 0.4 of the packet as written: two fit in one statement, three do not
      const output = "x".repeat(Math.floor(limit * 0.4))
      const lock = yield* lockRows(f, [ids[0]!])
      const first = yield* Effect.fork(d0!.complete(stepReply(d0!, 0)))
      yield* until("d0's write to wait on the lock", Effect.sync(() => resultWrites(statements).length === 1))
      const rest = yield* Effect.fork(
        Effect.all([d1, d2, d3].map((d) => d!.complete(stepReply(d!, output))), { concurrency: "unbounded" })
      )
      yield* settle
      yield* lock.commit
      yield* Fiber.join(first)
      yield* Fiber.join(rest)
      // d1 and d2 together, then d3: no statement the server refused, nothing written alone after one
      assert.deepStrictEqual(resultWrites(statements), [1, 2, 1])
      assert.deepStrictEqual(yield* Effect.promise(f.rows), [])
      assert.deepStrictEqual((yield* resultRows(f)).map((r) => [r.step_id, r.status, r.output]), [
        [ids[0], "completed", 1],
        [ids[1], "completed", output.length + 2],
        [ids[2], "completed", output.length + 2],
        [ids[3], "completed", output.length + 2]
      ])
    }))
})

describe("SqlTransport on postgres: LISTEN/NOTIFY (TestClock)", () => {
  it.scoped("an insert wakes an idle subscription at once; without one it waits the 5 s fallback", () =>
    Effect.gen(function*() {
      const f = yield* fixture("postgres")
      const poller = yield* registerPoller("postgres", f.prefix, "worker-a")
      assert.deepStrictEqual(yield* poll(poller, 4), [])
      yield* readyAfter(poller, 5000)
      assert.deepStrictEqual(yield* poll(poller, 4), [])
      // no clock adjustment from here: only the trigger's notification can end this wait
      yield* wokenByDispatch(f, poller, "the notification")
    }))

  it.scoped("a lost LISTEN connection is listened again after 100 ms, wakes every poller, and notifications flow again", () =>
    Effect.gen(function*() {
      const f = yield* fixture("postgres")
      const poller = yield* registerPoller("postgres", f.prefix, "worker-a")
      assert.deepStrictEqual(yield* poll(poller, 4), [])
      const listeners = (kill: boolean) =>
        Effect.promise(() =>
          f.db.query<{ pid: number }>(
            `SELECT ${kill ? "pg_terminate_backend(pid) AS killed, " : ""}pid FROM pg_stat_activity WHERE query = $1`,
            [`LISTEN "${f.prefix}_transport_tasks"`]
          )
        )
      const [before] = yield* listeners(true)
      assert.isDefined(before)
      yield* until("the killed LISTEN connection to go", Effect.map(listeners(false), (rows) => rows.length === 0))
      const woken = yield* Effect.fork(poller.ready!)
      // on the wall clock the loss is seen at once; on the TestClock no retry is due yet
      yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 200)))
      yield* settle
      assert.deepStrictEqual(yield* listeners(false), [])
      assert.isTrue(Option.isNone(yield* Fiber.poll(woken)))
      yield* TestClock.adjust("100 millis")
      // listening again wakes the poller: its 5 s fallback is far from due
      yield* until("the poller to be woken by the new subscription", Effect.map(Fiber.poll(woken), Option.isSome))
      const [after] = yield* listeners(false)
      assert.notStrictEqual(after?.pid, before?.pid)
      assert.deepStrictEqual(yield* poll(poller, 4), [])
      yield* wokenByDispatch(f, poller, "the notification on the new connection")
    }))

  it.scoped("a LISTEN that keeps failing is tried again after 100, 200, 400 … ms, capped at 5 s", () =>
    Effect.gen(function*() {
      const { subscriptions } = yield* listenedWith(() => Stream.fail(new SqlError({ message: "connection refused" })))
      assert.strictEqual(subscriptions(), 1)
      const waits: Array<number> = []
      for (const expected of [100, 200, 400, 800, 1_600, 3_200, 5_000, 5_000]) {
        yield* settle
        yield* TestClock.adjust(expected - 1)
        yield* settle
        const before = subscriptions()
        yield* TestClock.adjust(1)
        yield* settle
        if (subscriptions() === before + 1) waits.push(expected)
      }
      assert.deepStrictEqual(waits, [100, 200, 400, 800, 1_600, 3_200, 5_000, 5_000])
    }))

  it.scoped("a LISTEN that is up but delivers no probe is not tried again; subscriptions poll every 5 s", () =>
    Effect.gen(function*() {
      const { poller, subscriptions } = yield* listenedWith(() => Stream.never)
      assert.strictEqual(subscriptions(), 1)
      assert.deepStrictEqual(yield* poll(poller, 4), [])
      yield* readyAfter(poller, 5000)
      yield* TestClock.adjust("1 minute")
      yield* settle
      assert.strictEqual(subscriptions(), 1)
    }))

  it.scoped("without autoCreate and without the trigger, an idle subscription polls every 500 ms like the engine", () =>
    Effect.gen(function*() {
      const f = yield* fixture("postgres")
      yield* Effect.promise(() => f.dispatch("other")) // the engine creates its tables (no trigger)
      const poller = yield* registerPoller("postgres", f.prefix, "worker-a", { autoCreate: false })
      assert.deepStrictEqual(yield* poll(poller, 4), [])
      yield* readyAfter(poller, 500)
      const triggers = yield* Effect.promise(() =>
        f.db.query("SELECT 1 FROM pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal", [`"${f.prefix}_transport_tasks"`])
      )
      assert.strictEqual(triggers.length, 0)
    }))

  it.scoped("autoCreate makes the trigger idempotently: a second registration keeps exactly one", () =>
    Effect.gen(function*() {
      const f = yield* fixture("postgres")
      yield* registerPoller("postgres", f.prefix, "worker-a")
      yield* registerPoller("postgres", f.prefix, "worker-b")
      const triggers = yield* Effect.promise(() =>
        f.db.query<{ tgname: string }>("SELECT tgname FROM pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal", [
          `"${f.prefix}_transport_tasks"`
        ])
      )
      assert.deepStrictEqual(triggers.map((t) => t.tgname), [`${f.prefix}_transport_tasks_notify`])
    }))
})

describe.each(["postgres", "mysql"] as const)("SqlTransport.layer over the application's own client on %s", (dialect) => {
  it.scoped("detects the dialect, listens with the client's settings (PostgreSQL), claims and completes", () =>
    Effect.gen(function*() {
      const f = yield* fixture(dialect)
      const client = dialect === "postgres"
        ? PgClient.layer({ url: Redacted.make(databaseUrl("postgres")) })
        : MysqlClient.layer({ url: Redacted.make(databaseUrl("mysql")) })
      const context = yield* Layer.build(SqlTransport.layer({ prefix: f.prefix }).pipe(Layer.provide(client)))
      const transport = Context.get(context, Transport)
      assert.strictEqual(transport.name, `sql ${dialect} prefix ${f.prefix}`)
      const registration = yield* transport.register(description("worker-a", ["work"]))
      // on PostgreSQL the client's own settings open the LISTEN connection
      const listening = yield* Effect.promise(() =>
        f.db.query("SELECT 1 FROM pg_stat_activity WHERE query = $1", [`LISTEN "${f.prefix}_transport_tasks"`])
      ).pipe(Effect.when(() => dialect === "postgres"))
      assert.deepStrictEqual(Option.map(listening, (rows) => rows.length), dialect === "postgres" ? Option.some(1) : Option.none())
      const stepId = yield* Effect.promise(() => f.dispatch("work", { n: 7 }))
      const [delivery] = yield* poll(registration.pollers[0]!, 2)
      assert.deepStrictEqual((delivery!.payload as { input: unknown }).input, { n: 7 })
      yield* delivery!.complete(stepReply(delivery!, 14))
      assert.deepStrictEqual(yield* Effect.promise(f.rows), [])
      assert.deepStrictEqual(yield* Effect.promise(f.results), [{ step_id: stepId, status: "completed", output: "14" }])
    }))
})

describe.each(["postgres", "mysql"] as const)("SqlTransport.layer over a client that renames columns on %s", (dialect) => {
  it.scoped("snake_case to camelCase transforms (results and queries) change nothing it reads or writes: it claims, completes, says what became of a lost claim, and deletes a rejected task", () =>
    Effect.gen(function*() {
      const f = yield* fixture(dialect)
      const logs = captureLogs()
      const transforms = { transformResultNames: Str.snakeToCamel, transformQueryNames: Str.camelToSnake }
      const client = dialect === "postgres"
        ? PgClient.layer({ url: Redacted.make(databaseUrl("postgres")), ...transforms })
        : MysqlClient.layer({ url: Redacted.make(databaseUrl("mysql")), ...transforms })
      const context = yield* Layer.build(SqlTransport.layer({ prefix: f.prefix, notify: false }).pipe(Layer.provide(client)))
      const registration = yield* Context.get(context, Transport).register(description("worker-a", ["work"]))
      const poller = registration.pollers[0]!
      // claimed and completed: the task is read by its own column names, the result reaches the engine
      const stepId = yield* Effect.promise(() => f.dispatch("work", { n: 7 }))
      const [delivery] = yield* poll(poller, 2)
      assert.deepStrictEqual(
        delivery!.payload,
        { runId: `run-${f.prefix}`, seq: 0, stepId, name: "work", group: "work", input: { n: 7 }, attempt: 1 }
      )
      yield* delivery!.complete(stepReply(delivery!, 14))
      assert.deepStrictEqual(yield* Effect.promise(f.rows), [])
      assert.deepStrictEqual(yield* Effect.promise(f.results), [{ step_id: stepId, status: "completed", output: "14" }])
      // a claim lost to a lease that ran out, the row unclaimed since: said as such (claimed_by read by its name)
      const second = yield* Effect.promise(() => f.dispatch("work"))
      const [lost] = yield* poll(poller, 2)
      yield* Effect.promise(() =>
        f.db.query(`UPDATE ${f.db.id(`${f.prefix}_transport_tasks`)} SET claimed_by = NULL, claimed_at = NULL WHERE step_id = ${f.db.ph(1)}`, [second])
      )
      yield* lost!.complete(stepReply(lost!, "late")).pipe(Effect.provide(logs.layer))
      assert.isTrue(
        logs.lines.some((line) => line.includes(`on task ${second} was lost`) && line.includes("it waits to be claimed again")),
        logs.lines.join("\n")
      )
      // a rejected task is deleted by its own step id
      const [again] = yield* poll(poller, 2)
      yield* again!.reject("refused")
      assert.deepStrictEqual(yield* Effect.promise(f.rows), [])
    }))
})

describe("SqlTransport.layerConfig", () => {
  it.effect("reads DATABASE_URL, picks the dialect from its scheme, and says what is wrong with a bad one", () =>
    Effect.gen(function*() {
      const withEnv = (env: Record<string, string>) =>
        Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))
      const bad = yield* Effect.exit(
        Effect.provide(Transport, SqlTransport.layerConfig()).pipe(withEnv({ DATABASE_URL: "sqlite:///tmp/x" }))
      )
      assert.isTrue(Exit.isFailure(bad))
      assert.match(String(Exit.isFailure(bad) ? bad.cause : ""), /DATABASE_URL must start with postgres:\/\/.*; it is a sqlite:\/\/ URL/)
      // as some env files keep it: said, without showing the URL (it may hold a password)
      for (
        const [url, shape] of [
          [" postgres://u:pw@h/db", "has blanks around it"],
          ['"postgres://u:pw@h/db"', "is in quotes"],
          ["postgres:/h/db", "has the scheme postgres: without //"]
        ] as const
      ) {
        const refused = String(
          yield* Effect.flip(Effect.provide(Transport, SqlTransport.layerConfig()).pipe(withEnv({ DATABASE_URL: url })))
        )
        assert.include(refused, `; it ${shape}`)
        assert.notInclude(refused, "pw")
      }
      const missing = yield* Effect.flip(Effect.provide(Transport, SqlTransport.layerConfig()).pipe(withEnv({})))
      assert.strictEqual(missing._tag, "SqlConfigError")
      assert.match(missing.message, /^DATABASE_URL is not set: set it to the engine's database \(postgres:\/\/user:password@host:5432\/db/)
      assert.notInclude(missing.message, "<redacted>")
      const pg = yield* Effect.provide(Transport, SqlTransport.layerConfig()).pipe(
        withEnv({ DATABASE_URL: "postgresql://u:secret@db.example:5433/app", DURABLE_PREFIX: "shop" })
      )
      assert.strictEqual(pg.name, "sql postgresql://u@db.example:5433/app prefix shop")
      const my = yield* Effect.provide(Transport, SqlTransport.layerConfig({ prefix: "explicit" })).pipe(
        withEnv({ DATABASE_URL: "mariadb://root@127.0.0.1:3306/test", DURABLE_PREFIX: "ignored" })
      )
      assert.strictEqual(my.name, "sql mariadb://root@127.0.0.1:3306/test prefix explicit")
      // the pool takes the URL over every field: a field given beside it was ignored, in silence
      const env = { DATABASE_URL: "postgresql://u:secret@db.example:5433/app" }
      const fields = yield* Effect.flip(
        Effect.provide(Transport, SqlTransport.layerConfig({ database: "orders", port: 6543 } as never)).pipe(withEnv(env))
      )
      assert.strictEqual(fields._tag, "SqlConfigError")
      assert.strictEqual(
        fields.message,
        "port, database given to layerConfig, which connects where DATABASE_URL says: put them in DATABASE_URL, or use " +
          "layerPostgres / layerMysql with the fields"
      )
    }))

  it.effect("the promise facade's postgres() and mysql() read DATABASE_URL when no field says where the database is, and name it when its dialect is the other one", () =>
    Effect.gen(function*() {
      const withDatabaseUrl = <A, E, R>(url: string, effect: Effect.Effect<A, E, R>) =>
        Effect.acquireUseRelease(
          Effect.sync(() => {
            const saved = process.env.DATABASE_URL
            process.env.DATABASE_URL = url
            return saved
          }),
          () => effect,
          (saved) => Effect.sync(() => saved === undefined ? delete process.env.DATABASE_URL : (process.env.DATABASE_URL = saved))
        )
      const nameOf = (handle: { readonly layer: Layer.Layer<Transport, unknown> }) =>
        Effect.map(Effect.provide(Transport, handle.layer), (transport) => transport.name)
      const pgUrl = "postgresql://u:secret@db.example:5433/app"
      assert.strictEqual(yield* withDatabaseUrl(pgUrl, nameOf(postgres())), "sql postgresql://u@db.example:5433/app prefix durable")
      // a field given says where the database is: DATABASE_URL, most likely the application's own
      // database, is not read (the pool would take it over the field)
      assert.strictEqual(
        yield* withDatabaseUrl(pgUrl, nameOf(postgres({ database: "orders" }))),
        "sql postgres://127.0.0.1:5432/orders prefix durable",
        "the database given, not DATABASE_URL's"
      )
      assert.strictEqual(
        yield* withDatabaseUrl(pgUrl, nameOf(postgres({ url: "postgres://x@127.0.0.1:1/y" }))),
        "sql postgres://x@127.0.0.1:1/y prefix durable"
      )
      const wrong = yield* Effect.flip(withDatabaseUrl(pgUrl, nameOf(mysql())))
      assert.strictEqual((wrong as { _tag?: string })._tag, "SqlConfigError")
      assert.strictEqual(
        (wrong as Error).message,
        "DATABASE_URL, which mysql() reads when given no url, host, port, database, username or password, is a postgresql:// URL, " +
          "and mysql() connects to " +
          "MySQL/MariaDB: set DATABASE_URL to a mysql:// URL, or pass url (or host, port, database, username, password)"
      )
      assert.notInclude((wrong as Error).message, "secret")
      // beside a field, DATABASE_URL is not read, whatever its dialect
      assert.strictEqual(
        yield* withDatabaseUrl(pgUrl, nameOf(mysql({ host: "127.0.0.1", username: "root" }))),
        "sql mysql://root@127.0.0.1:3306 prefix durable"
      )
    }))
})

describe("SQL text and row mapping", () => {
  const names = Statements.names("durable")

  it("uses the engine's table names and a SKIP LOCKED claim on both dialects", () => {
    assert.strictEqual(names.tasks, "durable_transport_tasks")
    assert.strictEqual(names.results, "durable_transport_results")
    assert.strictEqual(names.index, "durable_transport_tasks_grp_idx")
    const pg = Statements.claimPostgres(names, { grp: "pay", claim: "w#1", now: 50_000, staleBefore: 20_000, limit: 7 })
    assert.match(pg.text, /FOR UPDATE SKIP LOCKED/)
    assert.match(pg.text, /"claimed_at" IS NULL OR "claimed_at" < \$4/)
    assert.match(pg.text, /ORDER BY "created_at" ASC LIMIT 7/)
    assert.deepStrictEqual(pg.params, ["w#1", 50_000, "pay", 20_000])
    const my = Statements.claimSelectMysql(names, { grp: "pay", staleBefore: 20_000, limit: 3 })
    assert.match(my.text, /FROM `durable_transport_tasks`[\s\S]*LIMIT 3\s+FOR UPDATE SKIP LOCKED/)
    assert.deepStrictEqual(my.params, ["pay", 20_000])
    const update = Statements.claimUpdateMysql(names, { claim: "w#1", now: 9, stepIds: ["a:0", "a:1"] })
    assert.match(update.text, /IN \(\?, \?\)/)
    assert.deepStrictEqual(update.params, ["w#1", 9, "a:0", "a:1"])
  })

  it("creates the engine's DDL, with the index IF NOT EXISTS on PostgreSQL only", () => {
    const [tasks, results, pgIndex] = Statements.createSchema("postgres", names)
    assert.match(tasks!, /"step_id" varchar\(191\) PRIMARY KEY/)
    assert.match(tasks!, /"input" text/)
    assert.match(results!, /"started_at" bigint/)
    assert.match(pgIndex!, /CREATE INDEX IF NOT EXISTS "durable_transport_tasks_grp_idx"/)
    const [myTasks, , myIndex] = Statements.createSchema("mysql", names)
    assert.match(myTasks!, /`input` longtext/)
    assert.match(myIndex!, /^CREATE INDEX `durable_transport_tasks_grp_idx`/)
  })

  it("MySQL completes with a guarded delete and an idempotent result insert", () => {
    const row = toResultRow({ runId: "r", seq: 2, stepId: "r:2", status: "completed", output: { a: 1 }, startedAt: 5 }, 7)
    assert.match(Statements.insertResultMysql(names, row).text, /^INSERT IGNORE INTO `durable_transport_results`/)
    assert.deepStrictEqual(Statements.deleteClaimed("mysql", names, { stepId: "r:2", claim: "w#9" }).params, ["r:2", "w#9"])
  })

  it("batches completions: one PostgreSQL statement with a column array per field, one guarded MySQL delete and insert", () => {
    const row = (seq: number) => toResultRow({ runId: "r", seq, stepId: `r:${seq}`, status: "completed", output: seq }, 7)
    const batch = [{ row: row(1), claim: "w#1" }, { row: row(2), claim: "w#2" }]
    const pg = Statements.completeBatchPostgres(names, batch)
    assert.match(pg.text, /unnest\(\$1::varchar\[\], \$2::varchar\[\], \$3::integer\[\]/)
    assert.match(pg.text, /FOR UPDATE OF t/)
    assert.match(pg.text, /ON CONFLICT \("step_id"\) DO NOTHING/)
    assert.notMatch(pg.text, /SKIP LOCKED/)
    assert.deepStrictEqual(pg.params.slice(0, 3), [["r:1", "r:2"], ["r", "r"], [1, 2]])
    assert.deepStrictEqual(pg.params[8], ["w#1", "w#2"])
    // the text does not depend on the batch size, only on whether it claims too
    assert.strictEqual(Statements.completeBatchPostgres(names, batch.slice(0, 1)).text, pg.text)
    const next = { grp: "pay", claim: "w#3", now: 50, staleBefore: 20, limit: 2 }
    const claiming = Statements.completeBatchPostgres(names, batch, next)
    assert.match(claiming.text, /"grp" = \$10 AND \("claimed_at" IS NULL OR "claimed_at" < \$11\) AND "step_id" <> ALL\(\$1::varchar\[\]\)/)
    assert.match(claiming.text, /LIMIT \$12\s+FOR UPDATE SKIP LOCKED/)
    assert.deepStrictEqual(claiming.params.slice(9), ["pay", 20, 2, "w#3", 50])
    const deleted = Statements.deleteClaimedBatch(names, batch)
    assert.match(deleted.text, /WHERE `step_id` IN \(\?, \?\) AND \(`step_id`, `claimed_by`\) IN \(\(\?, \?\), \(\?, \?\)\)/)
    assert.deepStrictEqual(deleted.params, ["r:1", "r:2", "r:1", "w#1", "r:2", "w#2"])
    const inserted = Statements.insertResultsMysql(names, batch.map((c) => c.row))
    assert.match(inserted.text, /^INSERT IGNORE INTO `durable_transport_results` \(.*\) VALUES \((\?, ){7}\?\), \((\?, ){7}\?\)$/)
    assert.strictEqual(inserted.params.length, 16)
  })

  it("measures a MySQL result row at least as large as the driver writes it (UTF-8 bytes, escaped characters twice), and not much larger", () => {
    const output = { text: "é\"'\\\n\u0000\u001ax\t".repeat(10_000) }
    const row = toResultRow({ runId: "run-1", seq: 1, stepId: "run-1:1", status: "completed", output }, 5)
    const values = [row.stepId, row.runId, row.seq, row.status, row.output, row.error, row.startedAt, row.createdAt]
    // the batch writes the step id twice more, in its guarded delete
    const written = Buffer.byteLength(formatMysql(`(${values.map(() => "?").join(", ")}), ?, ?`, [...values, row.stepId, row.stepId]))
    const size = mysqlWrittenSize(row)
    assert.isAtLeast(size, written)
    assert.isAtMost(size, written + 300)
  })

  it("maps rows like the engine's worker: numbers from bigint strings, input parsed, NULL input absent", () => {
    const base = { step_id: "r:0", run_id: "r", seq: "0", name: "a:b", grp: "a-b@t", attempt: "2", created_at: "5" }
    assert.deepStrictEqual(toPayload({ ...base, input: "{\"x\":1}" }), {
      _tag: "Task",
      payload: { runId: "r", seq: 0, stepId: "r:0", name: "a:b", group: "a-b@t", input: { x: 1 }, attempt: 2 }
    })
    const noInput = toPayload({ ...base, input: null })
    assert.isTrue(noInput._tag === "Task" && !("input" in noInput.payload))
    const broken = toPayload({ ...base, input: "{oops" })
    assert.strictEqual(broken._tag, "Unreadable")
    assert.deepStrictEqual(
      toResultRow({ runId: "r", seq: 0, stepId: "r:0", status: "failed", error: { message: "m", retryable: false } }, 3),
      {
        stepId: "r:0",
        runId: "r",
        seq: 0,
        status: "failed",
        output: null,
        error: "{\"message\":\"m\",\"retryable\":false}",
        startedAt: null,
        createdAt: 3
      }
    )
    assert.deepStrictEqual(
      [{ ...base, input: null, created_at: "10" }, { ...base, input: null, created_at: "9" }].sort(byCreatedAt).map((r) =>
        r.created_at
      ),
      ["9", "10"]
    )
  })

  it("validates prefixes and reads the dialect from a URL", () => {
    assert.isUndefined(Statements.invalidPrefix("durable"))
    assert.isDefined(Statements.invalidPrefix("bad prefix"))
    assert.isDefined(Statements.invalidPrefix("x".repeat(41)))
    assert.deepStrictEqual(SqlTransport.dialectOfUrl("postgresql://h/db"), Either.right("postgres"))
    assert.deepStrictEqual(SqlTransport.dialectOfUrl("mariadb://h/db"), Either.right("mysql"))
    assert.isTrue(Either.isLeft(SqlTransport.dialectOfUrl("sqlite://x")))
  })
})
