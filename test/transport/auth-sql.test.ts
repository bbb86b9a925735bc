/**
 * A database refusing the worker's login fails the start with the server's answer, named as an
 * authentication failure with what to check; one refusing its statements later ends the run. Against the real PostgreSQL (a role that does not
 * exist: 28000, which trust auth on loopback still refuses) and MariaDB (a wrong password: 1045).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Step from "../../src/core/Step.js"
import * as Worker from "../../src/runtime/Worker.js"
import { SqlTransport as MysqlSql } from "../../src/mysql.js"
import { SqlTransport as PostgresSql } from "../../src/postgres.js"
import type { Transport } from "../../src/seam/Transport.js"
import type * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as Statements from "../../src/transport/sql/internal/statements.js"
import { type DialectName, dropTables, openDb, startSqlEngine, uniqueTablePrefix } from "../support/sqlEngine.js"

const SECRET = "sql-pass-5e4d3c2b1a"

const failedStart = (layer: Layer.Layer<Transport, unknown>) =>
  Effect.gen(function*() {
    const worker = yield* Worker.make({ steps: [Step.make("x", () => Effect.succeed(1))] })
    return (yield* worker.run.pipe(Effect.provide(layer), Effect.flip)) as { _tag: string; message: string; cause?: { _tag?: string } }
  })

describe("SQL transport: a refused login", () => {
  it.live("PostgreSQL: a role that does not exist fails the start as an AuthenticationError (SQLSTATE 28000)", () =>
    Effect.gen(function*() {
      const error = yield* failedStart(PostgresSql.layerPostgres({ url: `postgres://edw_no_such_role:${SECRET}@127.0.0.1:5432/test` }))
      assert.strictEqual(error._tag, "RegistrationError")
      assert.strictEqual(error.cause?._tag, "AuthenticationError", error.message)
      assert.match(error.message, /PostgreSQL at postgres:\/\/edw_no_such_role@127\.0\.0\.1:5432\/test refused the credentials/)
      assert.match(error.message, /authentication failed: .*edw_no_such_role.*\(SQLSTATE 28000\)/)
      assert.match(error.message, /check the user and password in DATABASE_URL/)
      assert.notInclude(error.message, SECRET)
      assert.notInclude(JSON.stringify(error.cause), SECRET)
    }))

  it.live("MariaDB: a wrong password fails the start as an AuthenticationError (ER_ACCESS_DENIED_ERROR 1045)", () =>
    Effect.gen(function*() {
      const error = yield* failedStart(MysqlSql.layerMysql({ url: `mysql://root:${SECRET}@127.0.0.1:3306/test` }))
      assert.strictEqual(error.cause?._tag, "AuthenticationError", error.message)
      assert.match(error.message, /MySQL\/MariaDB at mysql:\/\/root@127\.0\.0\.1:3306\/test refused the credentials/)
      assert.match(error.message, /Access denied for user 'root'.*\(ER_ACCESS_DENIED_ERROR, 1045\)/)
      assert.notInclude(error.message, SECRET)
    }))

  it.live("a database that does not exist is named as such, not as a server to check is running", () =>
    Effect.gen(function*() {
      const postgres = yield* failedStart(PostgresSql.layerPostgres({ url: "postgres://postgres@127.0.0.1:5432/edw_no_such_db" }))
      assert.strictEqual(postgres._tag, "RegistrationError")
      assert.match(
        postgres.message,
        /^PostgreSQL at postgres:\/\/postgres@127\.0\.0\.1:5432\/edw_no_such_db has no such database \(.*edw_no_such_db.* \(SQLSTATE 3D000\)\); create it, or fix the database's name/
      )
      assert.notInclude(postgres.message, "running")
      const mysql = yield* failedStart(MysqlSql.layerMysql({ url: "mysql://root@127.0.0.1:3306/edw_no_such_db" }))
      assert.match(
        mysql.message,
        /^MySQL\/MariaDB at mysql:\/\/root@127\.0\.0\.1:3306\/edw_no_such_db has no such database \(.*edw_no_such_db.*\(ER_BAD_DB_ERROR, 1049\)\); create it/
      )
      // named by the option it came from
      const byOption = yield* failedStart(PostgresSql.layerPostgres({ host: "127.0.0.1", username: "postgres", database: "edw_no_such_db" }))
      assert.match(byOption.message, /has no such database .*; create it, or fix the database's name in the database option$/)
    }))

  it.live("MariaDB: a user that does not exist fails the start as an AuthenticationError", () =>
    Effect.gen(function*() {
      const error = yield* failedStart(MysqlSql.layerMysql({ url: `mysql://edw_nobody:${SECRET}@127.0.0.1:3306/test` }))
      assert.strictEqual(error.cause?._tag, "AuthenticationError", error.message)
      assert.match(error.message, /edw_nobody/)
    }))
})

for (const dialect of ["postgres", "mysql"] as const satisfies ReadonlyArray<DialectName>) {
  describe(`SQL transport (${dialect}): a user that may read the tables but not claim from them`, () => {
    it.live("the run fails with the refusal and what to grant, at once, instead of polling on as if it served", () =>
      Effect.gen(function*() {
        // the real engine makes the tables and dispatches a step, which the worker must claim
        const engine = yield* Effect.acquireRelease(
          Effect.promise(() => startSqlEngine(dialect, { pollMs: 50 })),
          (engine) => Effect.promise(() => engine.close())
        )
        const { db, prefix } = engine
        const user = `edw_ro_${prefix.slice(4)}`
        const names = Statements.names(prefix)
        yield* Effect.addFinalizer(() => Effect.promise(async () => {
          if (dialect === "postgres") {
            await db.query(`DROP OWNED BY ${user}`).catch(() => undefined)
            await db.query(`DROP ROLE IF EXISTS ${user}`).catch(() => undefined)
          } else {
            await db.query(`DROP USER IF EXISTS '${user}'@'%'`).catch(() => undefined)
          }
        }))
        const url = yield* Effect.promise(async () => {
          if (dialect === "postgres") {
            await db.query(`CREATE ROLE ${user} LOGIN`)
            await db.query(`GRANT SELECT ON ${names.tasks}, ${names.results} TO ${user}`)
            return `postgres://${user}@127.0.0.1:5432/test`
          }
          await db.query(`CREATE USER '${user}'@'%' IDENTIFIED BY '${SECRET}'`)
          for (const table of [names.tasks, names.results]) await db.query(`GRANT SELECT ON test.${table} TO '${user}'@'%'`)
          return `mysql://${user}:${SECRET}@127.0.0.1:3306/test`
        })
        engine.register("read-only", async (ctx) => ctx.step("x", {}))
        yield* Effect.promise(() => engine.start("read-only", {}))
        const options = { url, prefix, autoCreate: false, pollInterval: "200 millis" } as const
        const layer = dialect === "postgres" ? PostgresSql.layerPostgres(options) : MysqlSql.layerMysql(options)
        const worker = yield* Worker.make({ steps: [Step.make("x", () => Effect.succeed(1))], pollTimeout: "1 second" })
        const started = Date.now()
        const error = yield* worker.run.pipe(
          Effect.provide(layer),
          Effect.provide(Logger.replace(Logger.defaultLogger, Logger.none)),
          Effect.flip,
          Effect.timeout("10 seconds")
        )
        // the claim's refusal ends the run; the release of its claim is not tried for a lease
        assert.isBelow(Date.now() - started, 8_000)
        assert.strictEqual((error as { _tag?: string })._tag, "WorkerLoopError")
        const reason = (error as { reason?: { message?: string } }).reason?.message ?? ""
        assert.match(reason, /the database refused it \(.*(permission denied|command denied).*\); grant the worker's user SELECT, INSERT, UPDATE and DELETE/)
        assert.notInclude(reason, SECRET)
        assert.strictEqual((yield* worker.status).state, "failed")
      }).pipe(Effect.scoped), 30_000)
  })
}

describe("SQL transport (postgres): a login refused after the start", () => {
  it.live("ends the run saying the user and password are no longer valid, not asking for grants", () =>
    Effect.gen(function*() {
      const db = openDb("postgres", 1)
      const prefix = uniqueTablePrefix()
      const user = `edw_gone_${prefix.slice(4)}`
      yield* Effect.addFinalizer(() =>
        Effect.promise(async () => {
          await dropTables(db, prefix)
          await db.query(`DROP OWNED BY ${user}`).catch(() => undefined)
          await db.query(`DROP ROLE IF EXISTS ${user}`).catch(() => undefined)
          await db.end()
        })
      )
      yield* Effect.promise(async () => {
        await db.query(`CREATE ROLE ${user} LOGIN`)
        await db.query(`GRANT CREATE ON SCHEMA public TO ${user}`)
      })
      const layer = PostgresSql.layerPostgres({ url: `postgres://${user}@127.0.0.1:5432/test`, prefix, pollInterval: "100 millis" })
      const worker = yield* Worker.make({ steps: [Step.make("x", () => Effect.succeed(1))], pollTimeout: "1 second" })
      const running = yield* worker.run.pipe(
        Effect.provide(layer),
        Effect.provide(Logger.replace(Logger.defaultLogger, Logger.none)),
        Effect.flip,
        Effect.fork
      )
      yield* worker.registered
      // the role may no longer log in, and its connections are cut: the pool's next login is refused
      yield* Effect.promise(async () => {
        await db.query(`ALTER ROLE ${user} NOLOGIN`)
        await db.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, [user])
      })
      const error = yield* Fiber.join(running).pipe(Effect.timeout("10 seconds"))
      assert.strictEqual((error as { _tag?: string })._tag, "WorkerLoopError")
      const reason = (error as { reason?: { message?: string } }).reason?.message ?? ""
      assert.match(reason, /refused the worker's login on a new connection \(.*not permitted to log in.*\)/)
      assert.match(reason, /check that the user and password in DATABASE_URL .* are still valid/)
      assert.notMatch(reason, /grant/)
      assert.strictEqual((yield* worker.status).state, "failed")
    }).pipe(Effect.scoped), 30_000)
})

for (const dialect of ["postgres", "mysql"] as const satisfies ReadonlyArray<DialectName>) {
  describe(`SQL transport (${dialect}): autoCreate as a user that may not create tables`, () => {
    it.live("the start fails at once as a PermissionError saying what to grant, not retried, the tables not half made", () =>
      Effect.gen(function*() {
        const db = yield* Effect.acquireRelease(Effect.sync(() => openDb(dialect, 2)), (db) => Effect.promise(() => db.end()))
        const prefix = uniqueTablePrefix()
        const user = `edw_nc_${prefix.slice(4)}`
        yield* Effect.addFinalizer(() =>
          Effect.promise(async () => {
            await dropTables(db, prefix).catch(() => undefined)
            if (dialect === "postgres") await db.query(`DROP ROLE IF EXISTS ${user}`).catch(() => undefined)
            else await db.query(`DROP USER IF EXISTS '${user}'@'%'`).catch(() => undefined)
          })
        )
        // PostgreSQL 15 and later grant no CREATE on schema public to a new role; on MariaDB the
        // user gets the statements of the task path and nothing else
        const url = yield* Effect.promise(async () => {
          if (dialect === "postgres") {
            await db.query(`CREATE ROLE ${user} LOGIN`)
            return `postgres://${user}@127.0.0.1:5432/test`
          }
          await db.query(`CREATE USER '${user}'@'%' IDENTIFIED BY '${SECRET}'`)
          await db.query(`GRANT SELECT, INSERT, UPDATE, DELETE ON test.* TO '${user}'@'%'`)
          return `mysql://${user}:${SECRET}@127.0.0.1:3306/test`
        })
        const options = { url, prefix } as const
        const started = Date.now()
        const error = yield* failedStart(
          dialect === "postgres" ? PostgresSql.layerPostgres(options) : MysqlSql.layerMysql(options)
        ).pipe(Effect.timeout("10 seconds"))
        assert.isBelow(Date.now() - started, 5_000)
        assert.strictEqual(error._tag, "RegistrationError")
        assert.strictEqual(error.cause?._tag, "PermissionError", error.message)
        const names = Statements.names(prefix)
        assert.include(error.message, `creating ${names.tasks} / ${names.results} (autoCreate), refused the operation`)
        assert.match(
          error.message,
          dialect === "postgres"
            ? /permission denied for schema public \(SQLSTATE 42501\)\); grant the worker's user CREATE on the schema .*GRANT CREATE ON SCHEMA public TO edw_nc_\w+\)/
            : /CREATE command denied .*\(ER_TABLEACCESS_DENIED_ERROR, 1142\)\); grant the worker's user CREATE and INDEX on the database \(GRANT CREATE, INDEX ON test\.\* TO edw_nc_\w+\)/
        )
        assert.match(error.message, /or create the tables with the engine \(or a migration\) and set autoCreate: false$/)
        assert.notInclude(error.message, SECRET)
        const made = yield* Effect.promise(() =>
          db.query(
            dialect === "postgres"
              ? "SELECT table_name FROM information_schema.tables WHERE table_name LIKE $1"
              : "SELECT table_name FROM information_schema.tables WHERE table_name LIKE ?",
            [`${prefix}%`]
          )
        )
        assert.deepStrictEqual(made, [])
      }).pipe(Effect.scoped), 30_000)
  })
}

describe("SQL transport (mysql): autoCreate as a user that may create tables but not indexes", () => {
  it.live("the start fails as a PermissionError instead of claiming without the task index", () =>
    Effect.gen(function*() {
      const db = yield* Effect.acquireRelease(Effect.sync(() => openDb("mysql", 2)), (db) => Effect.promise(() => db.end()))
      const prefix = uniqueTablePrefix()
      const user = `edw_ni_${prefix.slice(4)}`
      yield* Effect.addFinalizer(() =>
        Effect.promise(async () => {
          await dropTables(db, prefix).catch(() => undefined)
          await db.query(`DROP USER IF EXISTS '${user}'@'%'`).catch(() => undefined)
        })
      )
      yield* Effect.promise(async () => {
        await db.query(`CREATE USER '${user}'@'%' IDENTIFIED BY '${SECRET}'`)
        await db.query(`GRANT SELECT, INSERT, UPDATE, DELETE, CREATE ON test.* TO '${user}'@'%'`)
      })
      const error = yield* failedStart(MysqlSql.layerMysql({ url: `mysql://${user}:${SECRET}@127.0.0.1:3306/test`, prefix }))
      assert.strictEqual(error.cause?._tag, "PermissionError", error.message)
      assert.match(error.message, /INDEX command denied .*; grant the worker's user CREATE and INDEX on the database/)
    }).pipe(Effect.scoped), 30_000)
})
