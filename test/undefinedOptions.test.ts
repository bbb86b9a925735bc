/**
 * An option given as `undefined` is the option not given, in every option object a user writes:
 * it takes the environment's value where a `layerConfig` reads one, and the default otherwise.
 * Applications pass options read from unset variables (`process.env.X`) or built conditionally, so
 * both the types (this file compiles under `exactOptionalPropertyTypes`, as `npm test` type-checks
 * it) and the run time must take them.
 *
 * Each `AllUndefined<…>` below lists every option of its object: adding an option that does not
 * take `undefined`, or not listing a new one, fails the type check.
 */
import { assert, describe, it } from "@effect/vitest"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as DurableWorkflowFacade from "../src/facade/durableWorkflow.js"
import type * as TransportOptions from "../src/facade/internal/transportOptions.js"
import type { TransportHandle } from "../src/facade/internal/options.js"
import * as Promise_ from "../src/promise.js"
import * as Worker from "../src/runtime/Worker.js"
import * as WorkerConfig from "../src/runtime/WorkerConfig.js"
import { Transport } from "../src/seam/Transport.js"
import * as BullMQTransport from "../src/transport/BullMQTransport.js"
import * as DurableWorkflowTransport from "../src/transport/DurableWorkflowTransport.js"
import * as InMemoryTransport from "../src/transport/InMemoryTransport.js"
import * as SqlTransport from "../src/transport/SqlTransport.js"
import type { SqlTransport as MysqlSql } from "../src/mysql.js"
import type { SqlTransport as PostgresSql } from "../src/postgres.js"
import * as SqsTransport from "../src/transport/SqsTransport.js"
import { waitFor } from "./support/local.js"

/** Every option of `A`, given as `undefined`. */
type AllUndefined<A> = { readonly [K in keyof Required<A>]: undefined }

const fromEnv = (env: Record<string, string>) => Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))

/** The name of the transport a layer builds (nothing connects: the transports connect at registration). */
const nameOf = <E>(layer: Layer.Layer<Transport, E>) =>
  Effect.scoped(Effect.map(Layer.build(layer), (context) => Context.get(context, Transport).name))

const workerOptions: AllUndefined<WorkerConfig.WorkerOptions> = {
  workerId: undefined,
  buildId: undefined,
  concurrency: undefined,
  workflowConcurrency: undefined,
  pollTimeout: undefined,
  shutdownTimeout: undefined,
  heartbeatInterval: undefined,
  interruptTimeout: undefined,
  pollRetryDelay: undefined,
  metricsInterval: undefined,
  health: undefined,
  onTaskEnd: undefined,
  captureHistories: undefined
}

const bullmqOptions: AllUndefined<BullMQTransport.BullMQOptions> = {
  url: undefined,
  connection: undefined,
  prefix: undefined,
  namespace: undefined,
  partition: undefined,
  lockDuration: undefined,
  stepBeatInterval: undefined,
  connectTimeout: undefined,
  stalledInterval: undefined,
  brokers: undefined,
  brokerId: undefined,
  commandsPerWrite: undefined,
  waitForBroker: undefined
}

const sqlOptions: AllUndefined<PostgresSql.PostgresOptions> & AllUndefined<MysqlSql.MysqlOptions> = {
  prefix: undefined,
  partition: undefined,
  lease: undefined,
  renewInterval: undefined,
  pollInterval: undefined,
  batchSize: undefined,
  autoCreate: undefined,
  notify: undefined,
  waitForBroker: undefined,
  url: undefined,
  host: undefined,
  port: undefined,
  database: undefined,
  username: undefined,
  password: undefined,
  maxConnections: undefined,
  connectTimeout: undefined,
  applicationName: undefined
}

const sqsOptions: AllUndefined<SqsTransport.SqsOptions> = {
  client: undefined,
  clientConfig: undefined,
  prefix: undefined,
  partition: undefined,
  autoCreate: undefined,
  marker: undefined,
  resultsQueueUrl: undefined,
  taskQueueUrl: undefined,
  waitTime: undefined,
  visibilityTimeout: undefined,
  visibilityExtendInterval: undefined,
  connectTimeout: undefined,
  waitForBroker: undefined
}

describe("an option given as undefined is the option not given", () => {
  it.effect("WorkerConfig.layerConfig: the environment's values stand; WorkerConfig.layer and Worker.make: the defaults", () =>
    Effect.gen(function*() {
      const config = yield* Effect.provide(
        WorkerConfig.WorkerConfig,
        WorkerConfig.layerConfig(workerOptions).pipe(
          Layer.provide(fromEnv({ DURABLE_WORKER_ID: "from-env", DURABLE_CONCURRENCY: "3", DURABLE_SHUTDOWN_TIMEOUT: "5 seconds" }))
        )
      )
      assert.strictEqual(config.workerId, "from-env")
      assert.strictEqual(config.concurrency.limit, 3)
      assert.strictEqual(Duration.toMillis(config.shutdownTimeout), 5_000)

      const defaults = yield* Effect.provide(WorkerConfig.WorkerConfig, WorkerConfig.layer(workerOptions))
      assert.deepStrictEqual(defaults, yield* Effect.provide(WorkerConfig.WorkerConfig, WorkerConfig.layer({})))

      const worker = yield* Worker.make({ ...workerOptions, steps: undefined, workflows: undefined, durableWorkflows: undefined }).pipe(
        Effect.provide(WorkerConfig.layerConfig().pipe(Layer.provide(fromEnv({ DURABLE_WORKER_ID: "from-env", DURABLE_CONCURRENCY: "3" }))))
      )
      assert.strictEqual(worker.id, "from-env")
      assert.strictEqual((yield* worker.status).concurrency.limit, 3)
    }))

  it.effect("BullMQTransport: layerConfig keeps REDIS_URL and DURABLE_PREFIX; make takes the defaults", () =>
    Effect.gen(function*() {
      const env = fromEnv({ REDIS_URL: "redis://127.0.0.1:1", DURABLE_PREFIX: "from-env" })
      assert.match(
        yield* nameOf(BullMQTransport.layerConfig(bullmqOptions).pipe(Layer.provide(env))),
        /^bullmq redis:\/\/127\.0\.0\.1:1 prefix from-env$/
      )
      assert.strictEqual(yield* nameOf(BullMQTransport.layer(bullmqOptions)), yield* nameOf(BullMQTransport.layer()))
    }))

  it.effect("SqlTransport: layerConfig keeps DATABASE_URL and DURABLE_PREFIX", () =>
    Effect.gen(function*() {
      const env = fromEnv({ DATABASE_URL: "postgres://edw@127.0.0.1:1/test", DURABLE_PREFIX: "from_env" })
      assert.match(
        yield* nameOf(SqlTransport.layerConfig(sqlOptions).pipe(Layer.provide(env))),
        /^sql postgres:\/\/edw@127\.0\.0\.1:1\/test prefix from_env/
      )
    }))

  it.effect("SqsTransport: layerConfig keeps SQS_ENDPOINT and DURABLE_PREFIX; make takes the defaults", () =>
    Effect.gen(function*() {
      const env = fromEnv({ SQS_ENDPOINT: "http://127.0.0.1:1", DURABLE_PREFIX: "from-env" })
      assert.match(
        yield* nameOf(SqsTransport.layerConfig(sqsOptions).pipe(Layer.provide(env))),
        /^sqs http:\/\/127\.0\.0\.1:1 prefix from-env/
      )
      assert.strictEqual(
        yield* nameOf(SqsTransport.layer({ ...sqsOptions, clientConfig: { region: "us-east-1" } })),
        yield* nameOf(SqsTransport.layer({ clientConfig: { region: "us-east-1" } }))
      )
    }))

  it.effect("DurableWorkflowTransport: layerConfig keeps the server URL and namespace", () =>
    Effect.gen(function*() {
      const options: AllUndefined<Omit<DurableWorkflowTransport.DurableWorkflowOptions, "taskQueue">> = {
        baseUrl: undefined,
        namespace: undefined,
        token: undefined,
        workerToken: undefined,
        controlToken: undefined,
        protocolVersion: undefined,
        controlPlaneVersion: undefined,
        sdkVersion: undefined,
        requestTimeout: undefined,
        heartbeatInterval: undefined,
        externalStorage: undefined,
        externalStorageThresholdBytes: undefined,
        interceptors: undefined,
        waitForBroker: undefined
      }
      const env = fromEnv({ DURABLE_WORKFLOW_SERVER_URL: "http://127.0.0.1:1", DURABLE_WORKFLOW_NAMESPACE: "from-env" })
      const layer = DurableWorkflowTransport.layerConfig({ ...options, taskQueue: "q" }).pipe(Layer.provide(env))
      assert.match(
        yield* nameOf(layer as Layer.Layer<Transport, unknown>),
        /^durable-workflow http:\/\/127\.0\.0\.1:1 namespace from-env queue q/
      )
    }))

  it.effect("InMemoryTransport: the defaults", () =>
    Effect.gen(function*() {
      const options: AllUndefined<InMemoryTransport.InMemoryOptions> = { heartbeatInterval: undefined, leaseRenewInterval: undefined }
      assert.strictEqual(yield* nameOf(InMemoryTransport.layer(options)), yield* nameOf(InMemoryTransport.layer()))
    }))

  it.effect("the promise facade's transport handles take the defaults", () =>
    Effect.gen(function*() {
      const redis: AllUndefined<TransportOptions.RedisOptions> = {
        url: undefined,
        connection: undefined,
        prefix: undefined,
        namespace: undefined,
        partition: undefined,
        lockDurationMs: undefined,
        stepBeatIntervalMs: undefined,
        connectTimeoutMs: undefined,
        stalledIntervalMs: undefined,
        brokers: undefined,
        brokerId: undefined,
        commandsPerWrite: undefined,
        waitForBroker: undefined
      }
      const sql: AllUndefined<TransportOptions.PostgresOptions> = sqlOptions
      const sqs: AllUndefined<TransportOptions.SqsOptions> = sqsOptions
      const durableWorkflow: AllUndefined<DurableWorkflowFacade.DurableWorkflowOptions> = {
        baseUrl: undefined,
        token: undefined,
        workerToken: undefined,
        controlToken: undefined,
        namespace: undefined,
        taskQueue: undefined,
        requestTimeoutMs: undefined,
        heartbeatIntervalMs: undefined,
        externalStorage: undefined,
        externalStorageThresholdBytes: undefined,
        interceptors: undefined,
        waitForBroker: undefined
      }
      const same = (given: TransportHandle, none: TransportHandle) =>
        Effect.gen(function*() {
          assert.strictEqual(yield* nameOf(given.layer), yield* nameOf(none.layer))
        })
      yield* same(Promise_.redis(redis), Promise_.redis())
      // a further broker's connection
      yield* same(
        Promise_.redis({ ...redis, brokers: { other: { url: "redis://127.0.0.1:1", connection: undefined } } }),
        Promise_.redis({ brokers: { other: { url: "redis://127.0.0.1:1" } } })
      )
      yield* same(Promise_.postgres({ ...sql, url: "postgres://edw@127.0.0.1:1/test" }), Promise_.postgres({ url: "postgres://edw@127.0.0.1:1/test" }))
      yield* same(Promise_.mysql({ ...sql, url: "mysql://edw@127.0.0.1:1/test" }), Promise_.mysql({ url: "mysql://edw@127.0.0.1:1/test" }))
      yield* same(Promise_.sqs({ ...sqs, clientConfig: { region: "us-east-1" } }), Promise_.sqs({ clientConfig: { region: "us-east-1" } }))
      yield* same(
        Promise_.durableWorkflow({ ...durableWorkflow, baseUrl: "http://127.0.0.1:1", taskQueue: "q" }),
        Promise_.durableWorkflow({ baseUrl: "http://127.0.0.1:1", taskQueue: "q" })
      )
    }))

  it("the promise Worker runs and stops with every option undefined", async () => {
    const options: AllUndefined<Promise_.WorkerOptions> = {
      workerId: undefined,
      buildId: undefined,
      concurrency: undefined,
      workflowConcurrency: undefined,
      pollTimeoutMs: undefined,
      shutdownTimeoutMs: undefined,
      heartbeatIntervalMs: undefined,
      interruptTimeoutMs: undefined,
      handleSignals: undefined,
      logLevel: undefined,
      logger: undefined,
      onTaskEnd: undefined,
      health: undefined,
      metricsIntervalMs: undefined,
      telemetry: undefined,
      captureHistories: undefined
    }
    const worker = new Promise_.Worker(options)
    const broker = Promise_.inMemory({ heartbeatIntervalMs: undefined })
    worker.step("double", async (n: number) => n * 2)
    const running = worker.run(broker)
    await waitFor("the worker running", async () => (await worker.status()).state === "running")
    const status = await worker.status()
    assert.deepStrictEqual(status.concurrency, { mode: "fixed", limit: 10 })
    await worker.stop()
    await running

    // and the nested options: the probe server's
    const probed = new Promise_.Worker({
      ...options,
      health: { port: 0, host: undefined, metrics: undefined, loopDelayThresholdMs: undefined }
    })
    probed.step("double", async (n: number) => n * 2)
    const probedRun = probed.run(Promise_.inMemory())
    await waitFor("the probed worker running", async () => (await probed.status()).state === "running")
    await probed.stop()
    await probedRun
  })
})

describe("options that are not an object, given to a layerConfig, are refused as a whole", () => {
  // from JavaScript: spread over the environment's options, a string read as options "0", "1", …
  // (`unknown BullMQ option "0"`) and a number as none at all (a worker built on the defaults)
  const env = fromEnv({
    REDIS_URL: "redis://127.0.0.1:6379",
    DATABASE_URL: "postgres://127.0.0.1:5432/test",
    SQS_ENDPOINT: "http://127.0.0.1:4566",
    DURABLE_WORKFLOW_SERVER_URL: "http://127.0.0.1:8080"
  })
  const refusal = <A, E extends { readonly _tag: string; readonly message: string }>(layer: Layer.Layer<A, E>) =>
    Effect.flip(Effect.scoped(Layer.build(layer))).pipe(Effect.provide(env))

  it.effect("each transport's and the worker's", () =>
    Effect.gen(function*() {
      const bullmq = yield* refusal(BullMQTransport.layerConfig("redis://user:secret@127.0.0.1:6379" as never))
      assert.strictEqual(bullmq._tag, "BullMQConfigError")
      assert.strictEqual(
        bullmq.message,
        'BullMQ options must be an object, got "redis://***@127.0.0.1:6379": a URL goes in its url option, { url: "redis://***@127.0.0.1:6379" }'
      )
      const sql = yield* refusal(SqlTransport.layerConfig("postgres://user:secret@127.0.0.1/db" as never))
      assert.strictEqual(sql._tag, "SqlConfigError")
      assert.strictEqual(sql.message, 'SQL transport options must be an object, got "postgres://***@127.0.0.1/db"')
      const sqs = yield* refusal(SqsTransport.layerConfig(["http://127.0.0.1:4566"] as never))
      assert.strictEqual(sqs._tag, "SqsConfigError")
      assert.match(sqs.message, /^SQS options must be an object, got \[/)
      const dw = yield* refusal(DurableWorkflowTransport.layerConfig("http://127.0.0.1:8080" as never))
      assert.strictEqual(dw._tag, "DurableWorkflowConfigError")
      assert.include(dw.message, 'Durable Workflow options must be an object, got "http://127.0.0.1:8080": a URL goes in its baseUrl option')
      const worker = yield* refusal(WorkerConfig.layerConfig(4 as never))
      assert.strictEqual(worker._tag, "WorkerConfigError")
      assert.strictEqual(worker.message, "worker options must be an object, got 4")
    }))

  it.effect("null is refused by each as a whole; left out, the options are the environment's (the Durable Workflow server's URL at least is required)", () =>
    Effect.gen(function*() {
      const refusals = [
        yield* refusal(BullMQTransport.layerConfig(null as never)),
        yield* refusal(SqlTransport.layerConfig(null as never)),
        yield* refusal(SqsTransport.layerConfig(null as never)),
        yield* refusal(DurableWorkflowTransport.layerConfig(null as never)),
        yield* refusal(WorkerConfig.layerConfig(null as never))
      ]
      assert.deepStrictEqual(refusals.map((error) => error._tag), [
        "BullMQConfigError",
        "SqlConfigError",
        "SqsConfigError",
        "DurableWorkflowConfigError",
        "WorkerConfigError"
      ])
      for (const error of refusals) assert.match(error.message, /options must be an object, got null$/)
      const required = yield* refusal(DurableWorkflowTransport.layer(undefined as never))
      assert.strictEqual(required.message, "Durable Workflow options are required: { baseUrl, … } (the server's URL at least)")
      // as the environment says, given no options
      assert.strictEqual(yield* Effect.provide(nameOf(BullMQTransport.layerConfig()), env), "bullmq redis://127.0.0.1:6379 prefix durable")
      const config = yield* Effect.provide(WorkerConfig.WorkerConfig, WorkerConfig.layer(undefined))
      assert.strictEqual(config.concurrencyOption, 10)
    }))

  it.effect("a DurableWorkflowTransport.layerConfig given a string is refused before the server URL is missed", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Effect.scoped(Layer.build(DurableWorkflowTransport.layerConfig("http://127.0.0.1:8080" as never)))).pipe(
        Effect.provide(fromEnv({}))
      )
      assert.strictEqual((error as { _tag: string })._tag, "DurableWorkflowConfigError")
    }))
})
