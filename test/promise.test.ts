import { Cause, Effect, Option } from "effect"
import type { RedisOptions as IORedisOptions } from "ioredis"
import { assert, describe, it } from "vitest"
import {
  DuplicateStepError,
  durableWorkflow,
  type DurableWorkflowOptions,
  FatalError,
  inMemory,
  mysql,
  postgres,
  redis,
  type RedisOptions,
  type RunUntilOptions,
  s3Storage,
  sqs,
  type StepOptions,
  type StepResult,
  type TransportHandle,
  Worker,
  WorkerConfigError,
  type WorkerOptions
} from "../src/promise.js"
import { stepTask as task, waitFor } from "./support/local.js"
import { dropTables, openDb, uniqueTablePrefix } from "./support/sqlEngine.js"


const quiet = { handleSignals: false, logLevel: "None" } as const

/** A logger that keeps the messages of `info` and `warn`. */
const recordingLogger = () => {
  const logged: Array<string> = []
  const logger = { info: (m: string) => logged.push(m), warn: (m: string) => logged.push(m), error: () => {}, debug: () => {} }
  return { logged, logger }
}

/**
 * Runs `body` with `process.exit` recording its codes instead of exiting (the child-process tests
 * in promiseSignals.test.ts let it happen).
 */
const withExitsRecorded = async (body: (exits: ReadonlyArray<number | undefined>) => Promise<void>): Promise<void> => {
  const exits: Array<number | undefined> = []
  const exit = process.exit
  process.exit = ((code?: number) => void exits.push(code)) as typeof process.exit
  try {
    await body(exits)
  } finally {
    process.exit = exit
  }
}

/** Runs a worker of one step on `transport` until it is running, then stops it. */
const serveBriefly = async (transport: TransportHandle) => {
  const worker = new Worker(quiet)
  worker.step("x", () => 1)
  const running = worker.run(transport)
  await waitFor("the worker running", async () => (await worker.status()).state === "running")
  await worker.stop()
  await running
}

describe("promise facade", () => {
  it("runs steps on a transport, stops single-flight and drains before resolving run()", async () => {
    const worker = new Worker({ ...quiet, concurrency: 4, shutdownTimeoutMs: 30_000 })
    worker.step("payments.charge-card", async (input: { amount: number }) => ({ chargeId: `ch_${input.amount}` }))
    const broker = inMemory()
    const running = worker.run(broker)
    await broker.enqueue(task("r1", "payments.charge-card", { amount: 99 }))
    const reply = await broker.takeReply()
    assert.strictEqual(reply._tag, "StepResult")
    if (reply._tag !== "StepResult") return
    const { result } = reply
    assert.strictEqual(result.status, "completed")
    assert.deepStrictEqual(result.output, { chargeId: "ch_99" })
    await Promise.all([worker.stop(), worker.stop()])
    await running
    const deregistrations = (await import("effect")).Effect.runSync(broker.broker.journal)
      .filter((e) => e.op === "deregister")
    assert.strictEqual(deregistrations.length, 1)
  })

  it("processTask maps FatalError, other errors and unknown names like the wire expects", async () => {
    const worker = new Worker(quiet)
    worker.step("pay", async (input: { declined: boolean }) => {
      if (input.declined) throw new FatalError("card declined", "card_declined")
      throw "gateway said no"
    })
    const fatal = await worker.processTask(task("r1", "pay", { declined: true })) as StepResult
    assert.deepStrictEqual(
      { message: fatal.error?.message, code: fatal.error?.code, retryable: fatal.error?.retryable },
      { message: "card declined", code: "card_declined", retryable: false }
    )
    const other = await worker.processTask(task("r2", "pay", { declined: false })) as StepResult
    assert.deepStrictEqual(other.error, { message: "gateway said no" })
    const missing = await worker.processTask(task("r3", "nope")) as StepResult
    assert.deepStrictEqual(missing.error, { message: "no handler for nope", retryable: false })
    await worker.processTask("garbage").then(() => assert.fail("should reject"), (e: Error) => assert.match(e.message, /malformed step task/))
  })

  it("invalid options throw at construction, naming the option", () => {
    assert.throws(() => new Worker({ concurrency: 1.5 }), /concurrency/)
    assert.throws(() => new Worker({ buildId: "" }), /buildId must be a non-empty string/)
  })

  it("a log level that is not one of Effect's throws a WorkerConfigError with the one most likely meant (it crashed the process at the first log)", () => {
    const refused = (logLevel: unknown) => {
      try {
        new Worker({ handleSignals: false, logLevel: logLevel as "Info" })
      } catch (error) {
        assert.instanceOf(error, WorkerConfigError)
        assert.strictEqual(error.option, "logLevel")
        return error.message
      }
      return assert.fail(`logLevel ${String(logLevel)} was taken`)
    }
    assert.match(refused("warn"), /^logLevel must be one of "All", "Trace", "Debug", "Info", "Warning", .*got "warn"; did you mean "Warning"\?$/)
    assert.match(refused("info"), /got "info"; did you mean "Info"\?$/)
    assert.match(refused("Eror"), /did you mean "Error"\?$/)
    assert.match(refused(3), /got 3$/)
    for (const level of ["All", "Trace", "Debug", "Info", "Warning", "Error", "Fatal", "None"] as const) {
      new Worker({ handleSignals: false, logLevel: level })
    }
  })

  it("run given something other than a transport handle rejects with a TypeError saying what to pass, and the worker is failed", async () => {
    const cases: ReadonlyArray<readonly [unknown, RegExp]> = [
      [redis, /got the function redis itself; call it \(e\.g\. redis\(\{ url \}\)\)$/],
      [undefined, /got undefined$/],
      ["redis://127.0.0.1:6379", /got a string$/],
      [{}, /got an object that is not one$/]
    ]
    for (const [given, said] of cases) {
      const worker = new Worker(quiet)
      worker.step("x", () => 1)
      const running = worker.run(given as TransportHandle)
      assert.instanceOf(running, Promise, "a rejection, not a throw")
      const error = await running.then(() => assert.fail("run should reject"), (e: unknown) => e)
      assert.instanceOf(error, TypeError)
      assert.match((error as TypeError).message, /^run needs a transport handle, as inMemory\(\), redis\(…\)/)
      assert.match((error as TypeError).message, said)
      assert.strictEqual((await worker.status()).state, "failed")
    }
  })

  it("unknown options throw at construction, naming the key (and its milliseconds form)", () => {
    const refused = (make: () => unknown) => {
      try {
        make()
      } catch (error) {
        return error as { _tag?: string; option?: string; message: string }
      }
      return assert.fail("should throw")
    }
    const worker = refused(() => new Worker({ ...quiet, pollTimeout: 5_000 } as WorkerOptions))
    assert.strictEqual(worker._tag, "WorkerConfigError")
    assert.strictEqual(worker.option, "pollTimeout")
    assert.match(worker.message, /unknown Worker option "pollTimeout"; did you mean "pollTimeoutMs"\? durations are in milliseconds here; the options are workerId, /)
    assert.match(refused(() => new Worker({ concurency: 4 } as WorkerOptions)).message, /unknown Worker option "concurency"; did you mean "concurrency"\?; the options are workerId, /)
    assert.match(refused(() => new Worker({ LogLevel: "Info" } as WorkerOptions)).message, /unknown Worker option "LogLevel"; did you mean "logLevel"\?/)
    assert.match(refused(() => new Worker({ tracer: true } as WorkerOptions)).message, /unknown Worker option "tracer"; the options are workerId, /)
    // from JavaScript, options that are not an object: not read key by key ("0"), nor taken as none
    for (const [given, shown] of [["x", '"x"'], [4, "4"], [null, "null"], [[], "[]"]] as const) {
      const notObject = refused(() => new Worker(given as unknown as WorkerOptions))
      assert.strictEqual(notObject._tag, "WorkerConfigError")
      assert.strictEqual(notObject.message, `Worker options must be an object, got ${shown}`)
    }
    // inside health too: a misspelt key would have left /metrics off, or the threshold at its default
    const health = refused(() => new Worker({ health: { port: 0, metric: true } } as WorkerOptions))
    assert.strictEqual(health.option, "health.metric")
    assert.match(health.message, /unknown health option "metric"; did you mean "metrics"\?; the options are port, host, metrics, loopDelayThresholdMs/)
    assert.match(
      refused(() => new Worker({ health: { port: 0, loopDelayThreshold: 500 } } as WorkerOptions)).message,
      /unknown health option "loopDelayThreshold"; did you mean "loopDelayThresholdMs"\? durations are in milliseconds here/
    )

    // a milliseconds option that is not a number, refused under its own name (the Effect API's
    // duration took "1 second" and named "abc" as shutdownTimeout)
    for (const given of ["1 second", "abc", Number.NaN, -1, Number.NEGATIVE_INFINITY]) {
      const millis = refused(() => new Worker({ ...quiet, shutdownTimeoutMs: given } as WorkerOptions))
      assert.strictEqual(millis._tag, "WorkerConfigError")
      assert.strictEqual(millis.option, "shutdownTimeoutMs")
      assert.match(millis.message, /^Worker option "shutdownTimeoutMs" is a number of milliseconds, zero or more; got /)
    }
    const threshold = refused(() => new Worker({ health: { port: 0, loopDelayThresholdMs: "500" } } as unknown as WorkerOptions))
    assert.strictEqual(threshold.option, "health.loopDelayThresholdMs")
    assert.match(threshold.message, /health option "loopDelayThresholdMs" is a number of milliseconds, zero or more; got "500"/)
    assert.match(
      refused(() => inMemory({ heartbeatIntervalMs: "5s" } as unknown as { heartbeatIntervalMs?: number })).message,
      /inMemory\(\) option "heartbeatIntervalMs" is a number of milliseconds, zero or more; got "5s"/
    )
    // the in-memory broker's beat every 0 ms would never pause
    const beat = refused(() => inMemory({ heartbeatIntervalMs: 0 }))
    assert.strictEqual(beat._tag, "InMemoryConfigError")
    assert.strictEqual(beat.option, "heartbeatIntervalMs")
    assert.strictEqual(beat.message, "heartbeatIntervalMs must be a positive duration, got 0")
    // a number the Effect API refuses (it must be positive) is named as written here, not as the
    // Effect API's option (heartbeatInterval)
    for (
      const [options, option] of [
        [{ heartbeatIntervalMs: 0 }, "heartbeatIntervalMs"],
        [{ pollTimeoutMs: 0 }, "pollTimeoutMs"],
        [{ metricsIntervalMs: 0 }, "metricsIntervalMs"],
        [{ health: { port: 0, loopDelayThresholdMs: 0 } }, "health.loopDelayThresholdMs"]
      ] as const
    ) {
      const error = refused(() => new Worker({ ...quiet, ...options }))
      assert.strictEqual(error.option, option)
      assert.match(error.message, new RegExp(`^${option.replace(".", "\\.")} must be a positive(, finite)? duration, got 0$`))
    }

    const step = refused(() => new Worker(quiet).step("pay", () => 1, { inputs: undefined } as StepOptions<unknown, unknown>))
    assert.instanceOf(step, TypeError)
    assert.match(step.message, /unknown step "pay" option "inputs"; did you mean "input"\?; the options are input, output/)
    assert.match(
      refused(() => new Worker(quiet).workflow("flow", () => 1, { versoin: "2" } as { version?: string })).message,
      /unknown workflow "flow" option "versoin"; did you mean "version"\?; the options are version/
    )
    assert.match(
      refused(() => inMemory({ heartbeatInterval: 5 } as { heartbeatIntervalMs?: number })).message,
      /unknown inMemory\(\) option "heartbeatInterval"; did you mean "heartbeatIntervalMs"\? durations are in milliseconds here/
    )
    assert.match(
      refused(() => s3Storage({ bucket: "b", region: "eu-west-1" } as Parameters<typeof s3Storage>[0])).message,
      /unknown s3Storage\(\) option "region"; the options are bucket, prefix, client, clientConfig/
    )
  })

  it("runUntil rejects an unknown option before anything runs", async () => {
    const worker = new Worker(quiet)
    const error = await worker.runUntil(inMemory(), { until: () => true, pollInterval: 5 } as RunUntilOptions).then(
      () => assert.fail("should reject"),
      (e: Error) => e
    )
    assert.instanceOf(error, TypeError)
    assert.match(error.message, /unknown runUntil option "pollInterval"; did you mean "pollIntervalMs"\? durations are in milliseconds here/)
    // an until that is neither a function nor a promise would be awaited as a value already there,
    // and the worker stopped at once; nor may until() be asked without a pause
    for (
      const [options, message] of [
        [{ until: false }, /^runUntil's until must be a function \(asked every pollIntervalMs\) or a promise, got false$/],
        [{ timeoutMs: 5_000 }, /^runUntil's until must be a function .* got undefined$/],
        [{ until: () => true, pollIntervalMs: 0 }, /^runUntil's pollIntervalMs must be more than 0/]
      ] as const
    ) {
      const refused = await worker.runUntil(inMemory(), options as unknown as RunUntilOptions).then(
        () => assert.fail("should reject"),
        (e: Error) => e
      )
      assert.instanceOf(refused, TypeError)
      assert.match(refused.message, message)
    }
    assert.strictEqual((await worker.status()).state, "starting", "nothing ran")
  })

  it("the facade's own options are checked as the Effect API checks its own: nothing taken for something else", () => {
    const refused = (options: unknown) => {
      try {
        new Worker({ ...quiet, ...(options as WorkerOptions) })
      } catch (error) {
        return error as { _tag?: string; option?: string; message: string }
      }
      return assert.fail(`should throw: ${JSON.stringify(options)}`)
    }
    const cases: ReadonlyArray<readonly [unknown, string, RegExp]> = [
      // "false" would install the signal handlers
      [{ handleSignals: "false" }, "handleSignals", /^handleSignals must be true or false, got "false"$/],
      // a logger without warn and error would drop those lines
      [{ logger: { info: () => {} } }, "logger", /^logger must have the methods warn and error \(and info or log\), .*; it has no warn, no error$/],
      [{ logger: true }, "logger", /; got true$/],
      // the OTel SDK's own (singular) key would export nothing
      [{ telemetry: { spanProcessor: {} } }, "telemetry.spanProcessor", /unknown telemetry option "spanProcessor"; did you mean "spanProcessors"\?/],
      [{ telemetry: { metricReaders: {} } }, "telemetry.metricReaders", /^telemetry\.metricReaders must be an array/],
      // not an object: refused as it is, not as an object without a port
      [{ health: 8080 }, "health", /^health must be an object such as \{ port: 8080 \}, got 8080$/],
      [{ health: null }, "health", /got null$/],
      [{ health: { port: "8080" } }, "health.port", /^health\.port must be an integer from 0 to 65535, got "8080"$/]
    ]
    for (const [options, option, message] of cases) {
      const error = refused(options)
      assert.strictEqual(error._tag, "WorkerConfigError", JSON.stringify(options))
      assert.strictEqual(error.option, option)
      assert.match(error.message, message)
    }
    // what the type allows is taken
    new Worker({ ...quiet, logger: { log: () => {}, warn: () => {}, error: () => {} } })
    new Worker({ ...quiet, logger: { warn: () => {}, error: () => {} } })
    new Worker({ ...quiet, logger: console, telemetry: { serviceName: "billing", spanProcessors: [] } })
  })

  it("a transport function's unknown option makes run reject with the transport's config error, before anything connects", async () => {
    const runOn = async (transport: TransportHandle) => {
      const worker = new Worker(quiet)
      worker.step("x", () => 1)
      return worker.run(transport).then(
        () => assert.fail("run should fail"),
        (e: { _tag?: string; option?: string; message: string }) => e
      )
    }
    // the addresses have nothing behind them: a registration would fail with a RegistrationError
    const bullmq = await runOn(redis({ url: "redis://127.0.0.1:1", lockDuration: 1_000 } as RedisOptions))
    assert.strictEqual(bullmq._tag, "BullMQConfigError")
    assert.strictEqual(bullmq.option, "lockDuration")
    assert.match(bullmq.message, /unknown redis\(\) option "lockDuration"; did you mean "lockDurationMs"\? durations are in milliseconds here/)
    const millis = await runOn(redis({ url: "redis://127.0.0.1:1", lockDurationMs: "30 seconds" } as unknown as RedisOptions))
    assert.strictEqual(millis._tag, "BullMQConfigError")
    assert.strictEqual(millis.option, "lockDurationMs")
    assert.match(millis.message, /redis\(\) option "lockDurationMs" is a number of milliseconds, zero or more; got "30 seconds"/)
    // a number the transport refuses (it must be positive), named as written, without the forms of
    // the Effect API's durations that the facade does not take
    const zero = await runOn(redis({ url: "redis://127.0.0.1:1", connectTimeoutMs: 0 }))
    assert.strictEqual(zero._tag, "BullMQConfigError")
    assert.strictEqual(zero.option, "connectTimeoutMs")
    assert.strictEqual(zero.message, "connectTimeoutMs must be a positive, finite duration, got 0")
    const noTime = await runOn(durableWorkflow({ baseUrl: "http://127.0.0.1:1", taskQueue: "q", requestTimeoutMs: 0 }))
    assert.strictEqual(noTime._tag, "DurableWorkflowConfigError")
    assert.strictEqual(noTime.message, "requestTimeoutMs must be a positive duration, got 0")
    assert.strictEqual(noTime.option, "requestTimeoutMs")
    // an option the facade takes as the transport does: named as it is
    const blank = await runOn(durableWorkflow({ baseUrl: "http://127.0.0.1:1", taskQueue: "q", namespace: " shop" }))
    assert.strictEqual(blank._tag, "DurableWorkflowConfigError")
    assert.strictEqual(blank.option, "namespace")
    assert.strictEqual(blank.message, 'namespace must be a non-empty string without blanks around it, got " shop"')

    // a url from REDIS_URL, which the application did not write: the refusal names the variable
    const saved = process.env.REDIS_URL
    process.env.REDIS_URL = ""
    try {
      const fromEnvironment = await runOn(redis())
      assert.strictEqual(fromEnvironment.option, "url")
      assert.match(fromEnvironment.message, /^REDIS_URL, which redis\(\) reads when given no url: url must be a redis:\/\/ or rediss:\/\/ URL/)
    } finally {
      if (saved === undefined) delete process.env.REDIS_URL
      else process.env.REDIS_URL = saved
    }

    // from JavaScript, a URL given alone: pointed to the option it goes in, its password masked
    const urlAlone = await runOn(redis("redis://user:secret@127.0.0.1:1" as never))
    assert.strictEqual(urlAlone._tag, "BullMQConfigError")
    assert.strictEqual(
      urlAlone.message,
      'redis() options must be an object, got "redis://***@127.0.0.1:1": a URL goes in its url option, { url: "redis://***@127.0.0.1:1" }'
    )
    assert.include((await runOn(durableWorkflow("http://127.0.0.1:1" as never))).message, "a URL goes in its baseUrl option")
    // the drivers' own names for an option, pointed to this one's
    for (
      const [handle, said] of [
        [postgres({ connectionString: "postgres://127.0.0.1:1/test" } as never), /option "connectionString"; did you mean "url"\?/],
        [mysql({ user: "root" } as never), /option "user"; did you mean "username"\?/],
        [redis({ host: "127.0.0.1", port: 1 } as never), /option "host"; did you mean "url" or "connection" \(\{ host: … \}\)\?/],
        [sqs({ queueUrl: "http://127.0.0.1:1/q" } as never), /option "queueUrl"; did you mean "taskQueueUrl"\?/]
      ] as const
    ) {
      assert.match((await runOn(handle)).message, said)
    }

    const sqsError = await runOn(sqs({ endpoint: "http://127.0.0.1:1", region: "us-east-1" } as Parameters<typeof sqs>[0]))
    assert.strictEqual(sqsError._tag, "SqsConfigError")
    assert.strictEqual(sqsError.option, "endpoint")
    assert.match(sqsError.message, /unknown SQS option "endpoint": settings of the SQS client go in clientConfig/)

    const databases = [
      postgres({ url: "postgres://postgres@127.0.0.1:1/test", leaseMs: 1 } as Parameters<typeof postgres>[0]),
      mysql({ url: "mysql://root@127.0.0.1:1/test", leaseMs: 1 } as Parameters<typeof mysql>[0])
    ]
    for (const database of databases) {
      const error = await runOn(database)
      assert.strictEqual(error._tag, "SqlConfigError")
      assert.strictEqual(error.option, "leaseMs")
      // the Effect API's durations under the facade's milliseconds name: pointed to the option there is
      assert.match(error.message, /unknown SQL transport option "leaseMs"; did you mean "lease"\? it takes a duration: milliseconds, or a string such as "5 seconds"/)
    }

    const dw = durableWorkflow({ baseUrl: "http://127.0.0.1:1", taskQueue: "q", pollTimeoutMs: 1 } as DurableWorkflowOptions)
    const dwError = await runOn(dw)
    assert.strictEqual(dwError._tag, "DurableWorkflowConfigError")
    assert.match(dwError.message, /unknown durableWorkflow\(\) option "pollTimeoutMs"; the options are baseUrl, /)
    assert.strictEqual(dwError.option, "pollTimeoutMs")
    const control = await dw.workflowTerminal("wf")().then(() => assert.fail("should reject"), (e: { _tag?: string }) => e)
    assert.strictEqual(control._tag, "DurableWorkflowConfigError")
  })

  it("a bad value of a transport option makes run reject with the config error naming it", async () => {
    const worker = new Worker(quiet)
    worker.step("x", () => 1)
    const error = await worker.run(redis({ url: "redis://127.0.0.1:1", commandsPerWrite: 0 })).then(
      () => assert.fail("run should fail"),
      (e: { _tag?: string; option?: string }) => e
    )
    assert.strictEqual(error._tag, "BullMQConfigError")
    assert.strictEqual(error.option, "commandsPerWrite")
  })

  it("a run that fails before it connects leaves the worker failed, with the reason, and refuses a second run", async () => {
    const worker = new Worker(quiet)
    worker.step("x", () => 1)
    const first = await worker.run(redis({ url: "redis://127.0.0.1:1", commandsPerWrite: 0 })).then(
      () => assert.fail("run should fail"),
      (e: { _tag?: string; message: string }) => e
    )
    assert.strictEqual(first._tag, "BullMQConfigError")
    const status = await worker.status()
    assert.strictEqual(status.state, "failed")
    assert.strictEqual(status.failure, first.message)
    // a stop has nothing to stop and leaves the reason in place
    await worker.stop()
    assert.strictEqual((await worker.status()).state, "failed")
    const second = await worker.run(inMemory()).then(
      () => assert.fail("a second run should be refused"),
      (e: { _tag?: string; message: string }) => e
    )
    assert.strictEqual(second._tag, "WorkerStateError")
    assert.match(second.message, /a worker instance runs once, create a new one/)
  })

  it("a second run whose transport cannot be built is refused, and leaves the running one to its stop", async () => {
    const worker = new Worker(quiet)
    worker.step("s", async () => 1)
    const handle = inMemory()
    const running = worker.run(handle)
    await handle.enqueue(task("r1", "s"))
    while ((await handle.replies()).length === 0) await new Promise((r) => setTimeout(r, 5))
    const second = await worker.run(redis({ commandsPerWrite: 0 })).then(
      () => assert.fail("a second run should be refused"),
      (e: { _tag?: string; reason?: string }) => e
    )
    assert.strictEqual(second._tag, "WorkerStateError")
    assert.strictEqual(second.reason, "already-running")
    assert.strictEqual((await worker.status()).state, "running")
    await worker.stop()
    await running
    assert.strictEqual((await worker.status()).state, "stopped")
    assert.isTrue(Option.isNone(Effect.runSync(handle.broker.registered)), "the running one was deregistered")
    // and a second stop() or run() after a stop before any run says so, however often
    const idle = new Worker(quiet)
    await idle.stop()
    for (let i = 0; i < 2; i++) {
      await idle.run(inMemory()).then(() => assert.fail("should reject"), (e: Error) => assert.match(e.message, /cannot run after stop\(\)/))
    }
  })

  it("connection options read from the environment may be undefined (exactOptionalPropertyTypes): undefined is the default", async () => {
    // this file compiles under exactOptionalPropertyTypes, as `npm test` type-checks it: the options
    // below are `string | undefined`, as `process.env` gives them
    const env: Record<string, string | undefined> = { DATABASE_URL: "postgres://postgres@127.0.0.1:5432/test" }
    await serveBriefly(redis({ url: env.REDIS_URL, prefix: uniqueTablePrefix("edw-env") }))
    const prefix = uniqueTablePrefix()
    const db = openDb("postgres", 1)
    const saved = process.env.DATABASE_URL
    process.env.DATABASE_URL = env.DATABASE_URL
    try {
      await serveBriefly(postgres({ url: env.EDW_UNSET_URL, host: env.EDW_UNSET_HOST, password: env.EDW_UNSET_PASSWORD, prefix }))
    } finally {
      if (saved === undefined) delete process.env.DATABASE_URL
      else process.env.DATABASE_URL = saved
      await dropTables(db, prefix)
      await db.end()
    }
    const dw = durableWorkflow({ baseUrl: "http://127.0.0.1:1", taskQueue: "q", token: env.EDW_UNSET_TOKEN })
    assert.isDefined(dw.layer)
  })

  it("redis({ connection }) takes ioredis's own RedisOptions, an application's options interface, and fields read from the environment", async () => {
    // type-checked by `npm test` under exactOptionalPropertyTypes: each value below must fit `connection`
    const env: Record<string, string | undefined> = {}
    const ioredisOptions: IORedisOptions = { host: "127.0.0.1", port: 6379 }
    interface AppRedisConfig {
      readonly host: string
      readonly port: number
    }
    const appConfig: AppRedisConfig = { host: "127.0.0.1", port: 6379 }
    const prefix = () => uniqueTablePrefix("edw-conn")
    const handles = [
      redis({ connection: ioredisOptions, prefix: prefix() }),
      redis({ connection: appConfig, prefix: prefix() }),
      // a literal with further ioredis options, and settings that are unset in this environment
      redis({ connection: { host: env.REDIS_HOST, password: env.REDIS_PASSWORD, maxRetriesPerRequest: null }, prefix: prefix() })
    ]
    for (const handle of handles) await serveBriefly(handle)
  })

  it("a step needs a name and a function: from JavaScript, step(\"a\") would fail every task of a as retryable", () => {
    const worker = new Worker(quiet)
    const step = worker.step.bind(worker) as (name: unknown, handler?: unknown) => unknown
    assert.throws(() => step("a"), TypeError, /^step "a" needs its handler, a function; got undefined$/)
    assert.throws(() => step(() => 1, "a"), TypeError, /^a step needs a name, a non-empty string; got function$/)
    assert.throws(() => step("", () => 1), TypeError, /^a step needs a name, a non-empty string; got ""$/)
    const workflow = worker.workflow.bind(worker) as (name: unknown, body?: unknown) => unknown
    assert.throws(() => workflow("w"), TypeError, /^workflow "w" needs its body, a function; got undefined$/)
    const activity = worker.activity.bind(worker) as (name: unknown, handler?: unknown) => unknown
    assert.throws(() => activity("act", 1), TypeError, /^activity "act" needs its handler, a function; got number$/)
    const durable = worker.durableWorkflow.bind(worker) as (name: unknown, body?: unknown) => unknown
    assert.throws(() => durable(undefined, async () => 1), TypeError, /^a workflow needs a name/)
  })

  it("a step, workflow or activity cannot be registered twice (a DuplicateStepError, as from the Effect API), nor after the worker started", async () => {
    const worker = new Worker(quiet)
    worker.step("a", () => 1)
    assert.throws(() => worker.step("a", () => 2), DuplicateStepError, /^step "a" is registered twice/)
    // workflows and activities too, each named as what it is
    worker.workflow("w", async () => 1)
    assert.throws(() => worker.workflow("w", async () => 2), DuplicateStepError, /^workflow "w" is registered twice; each workflow name must have exactly one body$/)
    worker.activity("act", async () => 1)
    assert.throws(() => worker.activity("act", async () => 2), DuplicateStepError, /^activity "act" is registered twice; each activity name must have exactly one handler$/)
    worker.durableWorkflow("greet", async () => 1)
    assert.throws(() => worker.durableWorkflow("greet", async () => 2), DuplicateStepError, /^durable workflow "greet" is registered twice; each durable workflow name must have exactly one body$/)
    const running = worker.run(inMemory())
    assert.throws(() => worker.step("b", () => 2), /already started/)
    await worker.stop()
    await running
  })

  it("a failed deregistration rejects every stop() and run() with the same error", async () => {
    const worker = new Worker(quiet)
    const broker = inMemory()
    ;(await import("effect")).Effect.runSync(broker.broker.setDeregisterFault({ _tag: "Fail", message: "403 forbidden" }))
    const running = worker.run(broker)
    // registered first: a stop while the worker registers ends the registration instead
    await waitFor("the worker running", async () => (await worker.status()).state === "running")
    const outcomes = await Promise.allSettled([worker.stop(), worker.stop(), running])
    for (const outcome of outcomes) {
      assert.strictEqual(outcome.status, "rejected")
      if (outcome.status === "rejected") {
        assert.strictEqual(outcome.reason._tag, "DeregistrationError")
        assert.strictEqual(outcome.reason.message, "403 forbidden")
      }
    }
  })

  it("run() after stop() rejects clearly", async () => {
    const worker = new Worker(quiet)
    await worker.stop()
    await worker.run(inMemory()).then(() => assert.fail("should reject"), (e: Error) => assert.match(e.message, /cannot run after stop\(\)/))
  })

  it("runUntil stops and rejects with the error until throws or rejects with", async () => {
    const conditions = [
      () => () => {
        throw new Error("until broke")
      },
      () => Promise.reject(new Error("until broke"))
    ]
    for (const condition of conditions) {
      const until = condition()
      const worker = new Worker(quiet)
      worker.step("noop", () => 1)
      const error = await worker.runUntil(inMemory(), { until, timeoutMs: 60_000 }).then(() => undefined, (e: unknown) => e)
      assert.instanceOf(error, Error)
      assert.strictEqual((error as Error).message, "until broke")
      assert.strictEqual((await worker.status()).state, "stopped")
    }
  })

  it("runUntil resolves when the predicate holds, and rejects with an interruption on an external stop", async () => {
    const worker = new Worker(quiet)
    let done = 0
    worker.step("count", () => ++done)
    const broker = inMemory()
    const until = worker.runUntil(broker, { until: () => done >= 3, pollIntervalMs: 5 })
    for (let i = 0; i < 3; i++) await broker.enqueue(task(`r${i}`, "count"))
    await until
    assert.strictEqual(done, 3)

    const other = new Worker(quiet)
    const waiting = other.runUntil(inMemory(), { until: new Promise(() => {}) })
    await other.stop()
    const error = await waiting.then(() => undefined, (e: unknown) => e)
    assert.isTrue(Cause.isInterruptedException(error))
  })

  it("SIGTERM stops gracefully; a second signal interrupts running work; the process then exits", async () => {
    const { logged, logger } = recordingLogger()
    const worker = new Worker({ logger, shutdownTimeoutMs: 60_000 })
    let aborted = false
    let started!: () => void
    const running = new Promise<void>((resolve) => (started = resolve))
    worker.step("long", (_input: unknown, ctx) =>
      new Promise((_, reject) => {
        started()
        ctx.signal.addEventListener("abort", () => {
          aborted = true
          reject(new Error("aborted"))
        })
      }))
    const broker = inMemory()
    await withExitsRecorded(async (exits) => {
      const run = worker.run(broker)
      await broker.enqueue(task("r1", "long"))
      await running
      process.emit("SIGTERM", "SIGTERM")
      await new Promise((resolve) => setImmediate(resolve))
      assert.isFalse(aborted)
      assert.deepStrictEqual(exits, [], "no exit while the worker drains")
      process.emit("SIGTERM", "SIGTERM")
      await run
      assert.deepStrictEqual(exits, [], "the caller sees run() settle before the process exits")
      await new Promise((resolve) => setImmediate(resolve))
      assert.deepStrictEqual(exits, [0])
    })
    assert.isTrue(aborted)
    assert.strictEqual(process.listenerCount("SIGTERM"), 0)
    assert.deepStrictEqual(logged.filter((m) => m.startsWith("SIGTERM")), [
      "SIGTERM: stopping gracefully (send it again to interrupt running work)",
      "SIGTERM again: interrupting running work"
    ], "the signal's messages go through the worker's logger")
  })

  it("a signal the application listens for itself is left to it: the worker stops only when told", async () => {
    const { logged, logger } = recordingLogger()
    const worker = new Worker({ logger })
    const app = () => {}
    process.on("SIGTERM", app)
    await withExitsRecorded(async (exits) => {
      const run = worker.run(inMemory())
      await worker.status() // the run has started
      process.emit("SIGTERM", "SIGTERM")
      process.emit("SIGTERM", "SIGTERM")
      await new Promise((resolve) => setImmediate(resolve))
      assert.strictEqual((await worker.status()).state, "running", "the application's signal did not stop the worker")
      await worker.stop()
      await run
      await new Promise((resolve) => setImmediate(resolve))
      assert.deepStrictEqual(exits, [], "a stop the application asked for does not end the process")
    }).finally(() => process.off("SIGTERM", app))
    assert.strictEqual(process.listenerCount("SIGTERM"), 0)
    assert.include(logged, "SIGTERM: left to the application's own SIGTERM handler, which stops the worker (worker.stop())")
  })

  it("two workers in one process are one shutdown: one signal drains both, and the process exits after the last", async () => {
    const quietLogs = { logLevel: "None" } as const
    const first = new Worker(quietLogs)
    const second = new Worker(quietLogs)
    let release!: () => void
    const held = new Promise<void>((resolve) => (release = resolve))
    let began!: () => void
    const beganP = new Promise<void>((resolve) => (began = resolve))
    second.step("held", async () => {
      began()
      await held
      return "done"
    })
    await withExitsRecorded(async (exits) => {
      const broker = inMemory()
      const runs = [first.run(inMemory()), second.run(broker)]
      await broker.enqueue(task("r1", "held"))
      await beganP
      process.emit("SIGTERM", "SIGTERM")
      await runs[0]
      await new Promise((resolve) => setImmediate(resolve))
      assert.deepStrictEqual(exits, [], "the second worker is still draining")
      release()
      await runs[1]
      const reply = await broker.takeReply()
      assert.strictEqual(reply._tag === "StepResult" && reply.result.status, "completed", "the held step finished")
      await new Promise((resolve) => setImmediate(resolve))
      assert.deepStrictEqual(exits, [0])
    })
    assert.strictEqual(process.listenerCount("SIGTERM"), 0)
  })
})
