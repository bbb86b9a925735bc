/**
 * Start in any order, SQL: with autoCreate off, a worker started before its tables exist waits for
 * them — logged once per table, `run` not failing — and registers and polls once they are created.
 * Against the real PostgreSQL and MariaDB.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Logger from "effect/Logger"
import { connect as tcpConnect, createServer as createTcpServer } from "node:net"
import * as Step from "../../src/core/Step.js"
import * as Worker from "../../src/runtime/Worker.js"
import { SqlTransport as MysqlSql } from "../../src/mysql.js"
import { SqlTransport as PostgresSql } from "../../src/postgres.js"
import * as Statements from "../../src/transport/sql/internal/statements.js"
import { databaseUrl, type DialectName, dropTables, openDb, startSqlEngine, uniqueTablePrefix } from "../support/sqlEngine.js"
import { captureLogs, freePort } from "../support/local.js"

/** A TCP relay on `port` to the local PostgreSQL, started late to play a database that comes up late. */
const relayToPostgres = (port: number) =>
  Effect.acquireRelease(
    Effect.async<ReturnType<typeof createTcpServer>>((resume) => {
      const server = createTcpServer((client) => {
        const upstream = tcpConnect(5432, "127.0.0.1")
        client.pipe(upstream).pipe(client)
        client.on("error", () => upstream.destroy())
        upstream.on("error", () => client.destroy())
        client.on("close", () => upstream.destroy())
      })
      server.listen(port, "127.0.0.1", () => resume(Effect.succeed(server)))
    }),
    (server) => Effect.async<void>((resume) => {
      server.close(() => resume(Effect.void))
    })
  )

describe("SQL transport: waitForBroker", () => {
  it.live("a worker started before its database waits for it (logged once) and registers once it answers", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(freePort)
      const { layer: logs, lines } = captureLogs()
      const worker = yield* Worker.make({ steps: [Step.make("t", () => Effect.succeed(1))], pollTimeout: "1 second" })
      const layer = PostgresSql.layerPostgres({
        url: `postgres://postgres@127.0.0.1:${port}/test`,
        prefix: uniqueTablePrefix(),
        connectTimeout: "500 millis",
        waitForBroker: true
      })
      const running = yield* worker.run.pipe(Effect.provide(layer), Effect.provide(logs), Effect.fork)
      yield* Effect.sleep("1500 millis")
      assert.isNull(running.unsafePoll(), "run waits instead of failing")
      const waits = lines.filter((l) => l.startsWith("WARN waiting for the database"))
      assert.strictEqual(waits.length, 1, lines.join("\n"))
      assert.include(waits[0]!, `postgres://postgres@127.0.0.1:${port}/test to answer`)
      yield* relayToPostgres(port)
      yield* worker.registered.pipe(Effect.timeout("15 seconds"))
      yield* worker.stop
      yield* Fiber.join(running)
    }).pipe(Effect.scoped), 40_000)
})

for (const dialect of ["postgres", "mysql"] as const satisfies ReadonlyArray<DialectName>) {
  describe(`SQL transport (${dialect}): start in any order`, () => {
    /**
     * A fresh prefix whose tables do not exist (dropped at the end of the test, with the pool that
     * made them), and a worker with a layer that waits for them (autoCreate off).
     */
    const beforeTables = Effect.gen(function*() {
      const prefix = uniqueTablePrefix()
      const db = openDb(dialect, 2)
      yield* Effect.addFinalizer(() => Effect.promise(async () => {
        await dropTables(db, prefix)
        await db.end()
      }))
      const options = { url: databaseUrl(dialect), prefix, autoCreate: false, pollInterval: "200 millis" } as const
      const layer = dialect === "postgres" ? PostgresSql.layerPostgres(options) : MysqlSql.layerMysql(options)
      const worker = yield* Worker.make({ steps: [Step.make("t", () => Effect.succeed(1))], pollTimeout: "1 second" })
      return { prefix, db, layer, worker }
    })

    it.live("with autoCreate off, a worker started before its tables waits for them, then registers", () =>
      Effect.gen(function*() {
        const { db, layer, prefix, worker } = yield* beforeTables
        const { layer: logs, lines } = captureLogs()
        const running = yield* worker.run.pipe(Effect.provide(layer), Effect.provide(logs), Effect.fork)
        yield* Effect.sleep("1500 millis")
        assert.isNull(running.unsafePoll(), "run waits instead of failing")
        const waits = lines.filter((l) => l.startsWith("WARN waiting for table"))
        assert.strictEqual(waits.length, 1, lines.join("\n"))
        assert.include(waits[0]!, `waiting for table ${prefix}_transport_tasks to be created`)

        for (const statement of Statements.createSchema(dialect, Statements.names(prefix))) {
          yield* Effect.promise(() => db.query(statement))
        }
        yield* worker.registered.pipe(Effect.timeout("15 seconds"))
        assert.isTrue(lines.some((l) => l.startsWith(`INFO done waiting for table ${prefix}_transport_tasks`)))
        yield* worker.stop
        yield* Fiber.join(running)
      }).pipe(Effect.scoped), 40_000)

    it.live("a stop while the worker waits for its tables ends the wait: run ends, status stopped", () =>
      Effect.gen(function*() {
        const { layer, worker } = yield* beforeTables
        const running = yield* worker.run.pipe(Effect.provide(layer), Effect.provide(Logger.replace(Logger.defaultLogger, Logger.none)), Effect.fork)
        yield* Effect.sleep("1500 millis")
        assert.strictEqual((yield* worker.status).state, "registering")
        const started = Date.now()
        yield* worker.stop.pipe(Effect.timeout("5 seconds"))
        yield* Fiber.join(running).pipe(Effect.timeout("5 seconds"))
        assert.isBelow(Date.now() - started, 5_000)
        assert.strictEqual((yield* worker.status).state, "stopped")
      }).pipe(Effect.scoped), 40_000)

    it.live("a worker started before the engine (autoCreate off) serves its steps once the engine has created the tables", () =>
      Effect.gen(function*() {
        const prefix = uniqueTablePrefix()
        const options = { url: databaseUrl(dialect), prefix, autoCreate: false, pollInterval: "200 millis" } as const
        const layer = dialect === "postgres" ? PostgresSql.layerPostgres(options) : MysqlSql.layerMysql(options)
        const worker = yield* Worker.make({
          steps: [Step.make("any-order.double", (input: { readonly n: number }) => Effect.succeed(input.n * 2))],
          pollTimeout: "1 second"
        })
        const running = yield* worker.run.pipe(Effect.provide(layer), Effect.fork)
        yield* Effect.sleep("1 second")
        assert.isNull(running.unsafePoll(), "run waits for the tables instead of failing")
        // the real engine comes up second and creates its tables; the waiting worker then serves it
        const engine = yield* Effect.acquireRelease(
          Effect.promise(() => startSqlEngine(dialect, { prefix, pollMs: 50 })),
          (engine) => Effect.promise(() => engine.close())
        )
        engine.register("any-order", async (ctx) => ctx.step("any-order.double", { n: 21 }))
        yield* worker.registered.pipe(Effect.timeout("15 seconds"))
        const result = yield* Effect.promise(() => engine.run("any-order", {}, 20_000))
        assert.strictEqual(result.status, "completed")
        assert.strictEqual(result.output, 42)
        yield* worker.stop
        yield* Fiber.join(running)
      }).pipe(Effect.scoped), 60_000)
  })
}
