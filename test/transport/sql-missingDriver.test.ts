/**
 * `SqlTransport.layerConfig()` loads the driver of the dialect `DATABASE_URL` names. An application
 * installed for PostgreSQL whose `DATABASE_URL` is a mysql:// URL meets the MySQL driver missing:
 * the message says it was the variable that picked it. The MySQL driver module is made to fail to
 * load here as a missing package does (this repository has every driver installed).
 */
import { assert, describe, it } from "@effect/vitest"
import { vi } from "vitest"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as SqlTransport from "../../src/transport/SqlTransport.js"

vi.mock("../../src/transport/sql/mysql.js", () => ({
  get driver(): never {
    throw Object.assign(new Error("Cannot find package 'mysql2' imported from …"), { code: "ERR_MODULE_NOT_FOUND" })
  }
}))

describe("SQL layerConfig, the dialect's driver missing", () => {
  it.effect("names DATABASE_URL's scheme as what picked the packages, and the install command", () =>
    Effect.gen(function*() {
      const env = ConfigProvider.fromMap(new Map([["DATABASE_URL", "mysql://root@127.0.0.1:1/test"]]))
      const error = yield* Effect.flip(Effect.scoped(Layer.build(SqlTransport.layerConfig().pipe(Layer.provide(Layer.setConfigProvider(env))))))
      assert.strictEqual(error._tag, "MissingDriverError")
      assert.match(
        error.message,
        /^DATABASE_URL is a mysql:\/\/ URL, so layerConfig\(\) connects to MySQL\/MariaDB: the MySQL\/MariaDB transport needs @effect\/sql, @effect\/sql-mysql2, @effect\/experimental, mysql2 \(optional peer dependencies of effect-durable-worker\); install them: npm install /
      )
    }))
})
