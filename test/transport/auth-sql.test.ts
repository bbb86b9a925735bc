/**
 * A database refusing the worker's login fails the start with the server's answer, named as an
 * authentication failure with what to check. Against the real PostgreSQL (a role that does not
 * exist: 28000, which trust auth on loopback still refuses) and MariaDB (a wrong password: 1045).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Step from "../../src/core/Step.js"
import * as Worker from "../../src/runtime/Worker.js"
import { SqlTransport as MysqlSql } from "../../src/mysql.js"
import { SqlTransport as PostgresSql } from "../../src/postgres.js"
import type { Transport } from "../../src/seam/Transport.js"
import type * as Layer from "effect/Layer"

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

  it.live("MariaDB: a user that does not exist fails the start as an AuthenticationError", () =>
    Effect.gen(function*() {
      const error = yield* failedStart(MysqlSql.layerMysql({ url: `mysql://edw_nobody:${SECRET}@127.0.0.1:3306/test` }))
      assert.strictEqual(error.cause?._tag, "AuthenticationError", error.message)
      assert.match(error.message, /edw_nobody/)
    }))
})
