/**
 * `durable_worker_connections_lost` on the SQL and SQS transports, against real servers: a killed
 * PostgreSQL backend (the LISTEN connection, a statement's connection) and a stopped fauxqs server.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Metric from "effect/Metric"
import * as Step from "../../src/core/Step.js"
import * as Worker from "../../src/runtime/Worker.js"
import * as WorkerMetrics from "../../src/seam/WorkerMetrics.js"
import * as SqlTransport from "../../src/transport/SqlTransport.js"
import * as SqsTransport from "../../src/transport/SqsTransport.js"
import { SqlTransport as PostgresSql } from "../../src/postgres.js"
import { sqsPrefix, startFauxqs } from "../support/fauxqs.js"
import { describedWorker, servingSteps } from "../support/handlers.js"
import { databaseUrl, dropTables, openDb, uniqueTablePrefix } from "../support/sqlEngine.js"

const lost = (transport: string) =>
  Effect.map(Metric.value(Metric.tagged(WorkerMetrics.connectionsLost, "transport", transport)), (state) => Number(state.count))

/** Waits on the wall clock for server I/O: re-checks every 20 ms, up to 10 s. */
const until = (what: string, check: Effect.Effect<boolean>) =>
  Effect.gen(function*() {
    for (let i = 0; i < 500; i++) {
      if (yield* check) return
      yield* Effect.sleep("20 millis")
    }
    return assert.fail(`timed out waiting for ${what}`)
  })

const description = (workerId: string) => describedWorker(workerId, servingSteps(["work"]))

/** A fresh table prefix and a plain pool of the test's own; tables dropped at the end. */
const database = Effect.acquireRelease(
  Effect.sync(() => ({ prefix: uniqueTablePrefix("edwcl"), db: openDb("postgres", 2) })),
  ({ db, prefix }) => Effect.promise(() => dropTables(db, prefix).finally(() => db.end()))
)

describe("connections lost: SQL (PostgreSQL)", () => {
  it.live("a killed LISTEN connection counts once; a statement whose backend is killed counts once", () =>
    Effect.scoped(Effect.gen(function*() {
      const { db, prefix } = yield* database
      const transport = yield* SqlTransport.make({ prefix }, PostgresSql.connectPostgres({ url: databaseUrl("postgres") }), "postgres")
      const registration = yield* transport.register(description("worker-cl"))
      const poller = registration.pollers[0]!
      assert.deepStrictEqual(yield* poller.poll(1), [])

      // the LISTEN connection: a loss fires both `error` and `end` on the client, counted once
      const before = yield* lost("sql")
      const killed = yield* Effect.promise(() =>
        db.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1", [`LISTEN "${prefix}_transport_tasks"`])
      )
      assert.strictEqual(killed.length, 1)
      yield* until("the LISTEN loss to be counted", Effect.map(lost("sql"), (n) => n > before))
      yield* Effect.sleep("200 millis")
      assert.strictEqual(yield* lost("sql"), before + 1)

      // a statement's connection: the claim waits on a table lock the test holds, and its backend is killed
      const afterListen = yield* lost("sql")
      let release!: () => void
      const held = new Promise<void>((resolve) => (release = resolve))
      const locking = db.transaction(async (query) => {
        await query(`LOCK TABLE "${prefix}_transport_tasks" IN ACCESS EXCLUSIVE MODE`)
        await held
      })
      yield* Effect.addFinalizer(() => Effect.promise(() => (release(), locking)))
      yield* until("the test's lock", Effect.promise(async () =>
        (await db.query("SELECT 1 FROM pg_locks WHERE mode = 'AccessExclusiveLock' AND granted")).length > 0))
      const polling = yield* Effect.fork(poller.poll(1))
      yield* until("the claim to wait on the lock, to kill its connection", Effect.promise(async () =>
        (await db.query(
          "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1",
          [`%${prefix}_transport_tasks%`]
        )).length > 0))
      const exit = yield* Fiber.await(polling)
      assert.isTrue(Exit.isFailure(exit), "the claim fails on its lost connection")
      release()
      yield* Effect.promise(() => locking)
      // the LISTEN connection was not touched this time: exactly the claim is counted
      assert.strictEqual(yield* lost("sql"), afterListen + 1)
    })))
})

describe("connections lost: SQS (fauxqs)", () => {
  it.live("receives that fail once the server is gone are counted", () =>
    Effect.scoped(Effect.gen(function*() {
      const server = yield* Effect.promise(startFauxqs)
      let stopped = false
      yield* Effect.addFinalizer(() => stopped ? Effect.void : Effect.promise(server.stop))
      const worker = yield* Worker.make({ steps: [Step.make("work", () => Effect.succeed(1))], pollTimeout: "1 second" })
      const running = yield* worker.run.pipe(
        Effect.provide(SqsTransport.layer({ clientConfig: server.clientConfig, prefix: sqsPrefix("edwcl"), autoCreate: true })),
        Effect.fork
      )
      yield* worker.registered.pipe(Effect.timeout("15 seconds"))
      // polling against a live server loses nothing
      const before = yield* lost("sqs")
      yield* Effect.sleep("1500 millis")
      assert.strictEqual(yield* lost("sqs"), before)
      yield* Effect.promise(server.stop)
      stopped = true
      yield* until("a failed receive to be counted", Effect.map(lost("sqs"), (n) => n > before))
      yield* Fiber.interrupt(running)
    })))
})
