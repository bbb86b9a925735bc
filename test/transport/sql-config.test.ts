/**
 * The SQL transport's options are checked once, when its layer is built: an unknown key or a bad
 * value fails the build with an `SqlConfigError` naming the option, and nothing connects (the URLs
 * here have no database behind them: a registration would fail with a `RegistrationError` instead).
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Step from "../../src/core/Step.js"
import * as Worker from "../../src/runtime/Worker.js"
import { Transport } from "../../src/seam/Transport.js"
import * as SqlTransport from "../../src/transport/SqlTransport.js"
import { SqlTransport as PostgresSql } from "../../src/postgres.js"
import { SqlTransport as MysqlSql } from "../../src/mysql.js"
import { mysql, type MysqlOptions, Worker as PromiseWorker } from "../../src/promise.js"

const unreachable = { postgres: "postgres://postgres:s3cret@127.0.0.1:1/test", mysql: "mysql://root:s3cret@127.0.0.1:1/test" } as const

/** The error building the layer fails with. */
const buildError = <A, E>(layer: Layer.Layer<A, E>) => Effect.flip(Effect.scoped(Layer.build(layer)))

const cases: ReadonlyArray<readonly [string, Record<string, unknown>, string, RegExp]> = [
  ["an unknown key", { leaseMs: 1_000 }, "leaseMs", /unknown SQL transport option "leaseMs"; did you mean "lease"\?.*; the options are prefix, /],
  ["a prefix SQL names cannot take", { prefix: "bad prefix" }, "prefix", /table prefix "bad prefix" must be 1-40 characters/],
  ["a prefix that is not a string", { prefix: 5 }, "prefix", /prefix must be a string, got 5/],
  ["a partition that is not a string", { partition: 5 }, "partition", /partition must be a string/],
  ["an undecodable lease", { lease: "soon" }, "lease", /lease must be a positive, finite duration \(milliseconds, or a string such as "[^"]+" or "1m30s"\), got "soon"/],
  ["a zero lease", { lease: 0 }, "lease", /lease must be a positive/],
  ["a partition of a blank (an env file's)", { partition: " " }, "partition", /^partition " " has blanks or quotes around it/],
  // 30 meant as seconds: a claim renewed every 10 ms, and lost at the first slow statement
  ["a lease under a second", { lease: 30 }, "lease", /^lease must be at least 1 second \(got 30ms; a number is milliseconds: 30 seconds is "30 seconds"\)$/],
  [
    "a renewInterval not shorter than the lease",
    { lease: "10 seconds", renewInterval: "10 seconds" },
    "renewInterval",
    /renewInterval \(10s\) must be shorter than lease \(10s\)/
  ],
  ["a negative pollInterval", { pollInterval: -5 }, "pollInterval", /pollInterval must be a positive/],
  ["a zero batchSize", { batchSize: 0 }, "batchSize", /batchSize must be a whole number of at least 1, got 0/],
  ["a fractional batchSize", { batchSize: 1.5 }, "batchSize", /batchSize must be a whole number/],
  ["an autoCreate that is not a boolean", { autoCreate: "yes" }, "autoCreate", /autoCreate must be true or false, got "yes"/],
  ["a notify that is not a boolean", { notify: 1 }, "notify", /notify must be true or false/],
  ["a port out of range", { port: 70_000 }, "port", /port must be a whole number from 1 to 65535, got 70000/],
  ["a zero maxConnections", { maxConnections: 0 }, "maxConnections", /maxConnections must be a whole number of at least 1/],
  ["an undecodable connectTimeout", { connectTimeout: "never" }, "connectTimeout", /connectTimeout must be a positive/],
  ["an empty host", { host: "" }, "host", /host must be a non-empty string/],
  ["a password that is not a string", { password: 5 }, "password", /password must be a string or a Redacted string/]
]

/** Options both dialects take. */
type Options = SqlTransport.SqlTransportOptions & SqlTransport.ConnectionOptions

// each entry point's SqlTransport names its own dialect's options, not the other's
export type OwnDialect = [PostgresSql.PostgresOptions, MysqlSql.MysqlOptions]
// @ts-expect-error: `effect-durable-worker/mysql` has no PostgresOptions
export type NoPostgresOnMysql = MysqlSql.PostgresOptions
// @ts-expect-error: `effect-durable-worker/postgres` has no MysqlOptions
export type NoMysqlOnPostgres = PostgresSql.MysqlOptions

// `applicationName` is PostgreSQL's alone: MySQL's options and `mysql()` do not take it
export const onPostgres: PostgresSql.PostgresOptions = { applicationName: "billing-worker" }
// @ts-expect-error: MySQL/MariaDB connections have no application_name
export const onMysql: MysqlSql.MysqlOptions = { applicationName: "billing-worker" }
// @ts-expect-error: the promise facade's `mysql()` refuses it at compile time too
export const onPromiseMysql = () => mysql({ applicationName: "billing-worker" })

describe("applicationName, PostgreSQL's alone", () => {
  it.effect("MySQL/MariaDB refuses it, saying why; given as undefined, it is not given", () =>
    Effect.gen(function*() {
      const error = yield* buildError(MysqlSql.layerMysql({ url: unreachable.mysql, applicationName: "x" } as MysqlSql.MysqlOptions))
      assert.strictEqual(error._tag, "SqlConfigError")
      assert.strictEqual(error.option, "applicationName")
      assert.match(error.message, /PostgreSQL's application_name; MySQL\/MariaDB connections have none/)
      yield* Effect.scoped(Layer.build(MysqlSql.layerMysql({ url: unreachable.mysql, applicationName: undefined } as MysqlSql.MysqlOptions)))
    }))

  it("the promise facade's mysql() rejects run with it, before anything connects", async () => {
    const worker = new PromiseWorker({ logLevel: "None", handleSignals: false })
    worker.step("x", () => 1)
    const error = await worker.run(mysql({ url: unreachable.mysql, applicationName: "x" } as MysqlOptions)).then(() => undefined, (e) => e)
    assert.strictEqual(error?._tag, "SqlConfigError")
    assert.strictEqual(error?.option, "applicationName")
  })

  it.effect("PostgreSQL checks it; layerConfig leaves it out on a MySQL DATABASE_URL", () =>
    Effect.gen(function*() {
      const error = yield* buildError(PostgresSql.layerPostgres({ url: unreachable.postgres, applicationName: 5 } as unknown as PostgresSql.PostgresOptions))
      assert.strictEqual(error.option, "applicationName")
      assert.match(error.message, /applicationName must be a non-empty string, got 5/)
      const fromEnv = (url: string) => Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["DATABASE_URL", url]])))
      const onMysql = yield* Effect.scoped(
        Layer.build(SqlTransport.layerConfig({ applicationName: "billing-worker" }).pipe(Layer.provide(fromEnv(unreachable.mysql))))
      )
      assert.match(Context.get(onMysql, Transport).name, /^sql mysql:/)
      const refused = yield* buildError(
        SqlTransport.layerConfig({ applicationName: "" }).pipe(Layer.provide(fromEnv(unreachable.postgres)))
      )
      assert.strictEqual((refused as SqlTransport.SqlConfigError).option, "applicationName")
    }))
})

describe.each(["postgres", "mysql"] as const)("SQL transport options on %s", (dialect) => {
  const layer = (options: Options) =>
    dialect === "postgres" ? PostgresSql.layerPostgres(options) : MysqlSql.layerMysql(options)

  for (const [what, options, option, message] of cases) {
    it.effect(`${what} fails the layer build, naming ${option}`, () =>
      Effect.gen(function*() {
        const error = yield* buildError(layer({ url: unreachable[dialect], ...options } as Options))
        assert.instanceOf(error, SqlTransport.SqlConfigError)
        assert.strictEqual(error._tag, "SqlConfigError")
        assert.strictEqual(error.option, option)
        assert.match(error.message, message)
      }))
  }

  it.effect("a URL of the other dialect fails the layer build, naming url, without its credentials", () =>
    Effect.gen(function*() {
      const other = dialect === "postgres" ? unreachable.mysql : unreachable.postgres
      for (const url of [other, Redacted.make(other), "sqlite:///tmp/x"]) {
        const error = yield* buildError(layer({ url }))
        assert.strictEqual(error.option, "url")
        assert.match(error.message, dialect === "postgres" ? /url must be a postgres:\/\/ or postgresql:\/\/ URL/ : /url must be a mysql:\/\/ or mariadb:\/\/ URL/)
        assert.notInclude(error.message, "s3cret")
      }
    }))

  it.effect("valid options build the layer without connecting", () =>
    Effect.gen(function*() {
      const context = yield* Effect.scoped(
        Layer.build(layer({ url: unreachable[dialect], prefix: "edw_ok", lease: "10 seconds", batchSize: 1, notify: false }))
      )
      assert.strictEqual(Context.get(context, Transport).name, `sql ${unreachable[dialect].replace(":s3cret", "")} prefix edw_ok`)
    }))

  it.effect("a worker run on a refused layer fails with the config error, not a registration (nothing connects)", () =>
    Effect.gen(function*() {
      const worker = yield* Worker.make({ steps: [Step.make("x", () => Effect.void)] })
      const error = yield* Effect.flip(Effect.provide(worker.run, layer({ url: unreachable[dialect], batchSize: 0 })))
      assert.strictEqual(error._tag, "SqlConfigError")
      assert.strictEqual((error as SqlTransport.SqlConfigError).option, "batchSize")
    }))
})

describe("SQL transport options over the application's own client", () => {
  /** A client the layer never gets to: its options are refused first. */
  const client = Layer.succeed(SqlClient.SqlClient, {} as SqlClient.SqlClient)

  it.effect("connection options are unknown keys there; transport options are checked as on the own pools", () =>
    Effect.gen(function*() {
      const unknown = yield* buildError(
        SqlTransport.layer({ url: unreachable.postgres } as SqlTransport.SqlTransportOptions).pipe(Layer.provide(client))
      )
      assert.strictEqual(unknown._tag, "SqlConfigError")
      assert.strictEqual(unknown.option, "url")
      assert.match(unknown.message, /unknown SQL transport option "url"/)
      const lease = yield* buildError(SqlTransport.layer({ lease: -1 }).pipe(Layer.provide(client)))
      assert.strictEqual(lease.option, "lease")
    }))

  it.effect("make fails with the config error too", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(SqlTransport.make({ batchSize: -1 }, Effect.die("never connects"), "postgres"))
      assert.strictEqual(error.option, "batchSize")
    }))
})

describe("SQL layerConfig options", () => {
  it.effect("checks what the environment and the options give together", () =>
    Effect.gen(function*() {
      const env = ConfigProvider.fromMap(new Map([["DATABASE_URL", unreachable.postgres], ["DURABLE_PREFIX", "bad prefix"]]))
      const error = yield* buildError(SqlTransport.layerConfig().pipe(Layer.provide(Layer.setConfigProvider(env))))
      assert.strictEqual(error._tag, "SqlConfigError")
      assert.strictEqual((error as SqlTransport.SqlConfigError).option, "prefix")
      // read from a variable, not written in code: named by the variable
      assert.match(error.message, /^DURABLE_PREFIX: table prefix /)
      const given = yield* buildError(SqlTransport.layerConfig({ prefix: "bad prefix" }).pipe(Layer.provide(Layer.setConfigProvider(env))))
      assert.match(given.message, /^table prefix /)
      const mysql = ConfigProvider.fromMap(new Map([["DATABASE_URL", unreachable.mysql]]))
      const lease = yield* buildError(
        SqlTransport.layerConfig({ lease: 0 }).pipe(Layer.provide(Layer.setConfigProvider(mysql)))
      )
      assert.strictEqual((lease as SqlTransport.SqlConfigError).option, "lease")
    }))
})
