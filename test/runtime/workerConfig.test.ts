import { assert, describe, it } from "@effect/vitest"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as DurableWorkflow from "../../src/core/DurableWorkflow.js"
import * as Step from "../../src/core/Step.js"
import * as Workflow from "../../src/core/Workflow.js"
import * as Worker from "../../src/runtime/Worker.js"
import * as WorkerConfig from "../../src/runtime/WorkerConfig.js"

const fromEnv = (env: Record<string, string>) => Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))

describe("WorkerConfig", () => {
  it.effect("a worker built with no configuration in the environment takes the documented defaults", () =>
    Effect.gen(function*() {
      const worker = yield* Worker.make({})
      const status = yield* worker.status
      assert.deepStrictEqual(status.concurrency, { mode: "fixed", limit: 10 })
      assert.match(worker.id, /^ts-.+-\d+-[0-9a-f]{8}$/)
      const other = yield* Worker.make({})
      assert.notStrictEqual(worker.id, other.id, "every worker gets an id of its own")
      assert.strictEqual(Duration.toMillis(WorkerConfig.defaults.shutdownTimeout), 30_000)
      assert.strictEqual(Duration.toMillis(WorkerConfig.defaults.pollTimeout), 35_000)
      // null, which the concurrency option's type admits as "absent", is the default, as undefined is
      const nulled = yield* Worker.make({ concurrency: null })
      assert.deepStrictEqual((yield* nulled.status).concurrency, { mode: "fixed", limit: 10 })
    }))

  it.effect("layerConfig reads DURABLE_* variables; options given to make win over them", () =>
    Effect.gen(function*() {
      const worker = yield* Worker.make({ workerId: "explicit" })
      assert.strictEqual(worker.id, "explicit")
      const config = yield* WorkerConfig.WorkerConfig
      assert.strictEqual(config.workerId, "from-env")
      assert.strictEqual(config.concurrency.limit, 3)
      assert.strictEqual(config.workflowConcurrency, 2)
      assert.strictEqual(Duration.toMillis(config.shutdownTimeout), 5_000)
      const fromEnvironment = yield* Worker.make({})
      assert.strictEqual(fromEnvironment.id, "from-env")
      assert.strictEqual((yield* fromEnvironment.status).concurrency.limit, 3)
    }).pipe(
      Effect.provide(WorkerConfig.layerConfig().pipe(Layer.provide(fromEnv({
        DURABLE_WORKER_ID: "from-env",
        DURABLE_CONCURRENCY: "3",
        DURABLE_WORKFLOW_CONCURRENCY: "2",
        DURABLE_SHUTDOWN_TIMEOUT: "5 seconds"
      }))))
    ))

  it.effect("durations in the environment take the short forms operators write (30s, 500ms, 1m30s); others fail naming the forms", () =>
    Effect.gen(function*() {
      const read = (env: Record<string, string>) =>
        Effect.flatMap(WorkerConfig.WorkerConfig, (config) => Effect.succeed(config)).pipe(
          Effect.provide(WorkerConfig.layerConfig().pipe(Layer.provide(fromEnv(env))))
        )
      const config = yield* read({
        DURABLE_SHUTDOWN_TIMEOUT: "30s",
        DURABLE_INTERRUPT_TIMEOUT: "500ms",
        DURABLE_POLL_TIMEOUT: "1m30s",
        DURABLE_HEARTBEAT_INTERVAL: "10 seconds"
      })
      assert.strictEqual(Duration.toMillis(config.shutdownTimeout), 30_000)
      assert.strictEqual(Duration.toMillis(config.interruptTimeout), 500)
      assert.strictEqual(Duration.toMillis(config.pollTimeout), 90_000)
      assert.strictEqual(Duration.toMillis(config.heartbeatInterval!), 10_000)
      for (const bad of ["30", "thirty seconds", "30 s x", "-5 seconds"]) {
        const error = yield* Effect.flip(read({ DURABLE_SHUTDOWN_TIMEOUT: bad }))
        assert.include(String(error), "DURABLE_SHUTDOWN_TIMEOUT", bad)
        assert.include(String(error), `Expected a duration of zero or more such as "30 seconds" or "30s", got "${bad}"`, bad)
        if (bad === "30") assert.include(String(error), "(a number needs its unit here)")
      }
      // "no deadline" as a variable says it, where a deadline may be infinite; refused where not
      const unbounded = yield* read({ DURABLE_SHUTDOWN_TIMEOUT: "infinity", DURABLE_INTERRUPT_TIMEOUT: " Infinity " })
      assert.isFalse(Duration.isFinite(unbounded.shutdownTimeout))
      assert.isFalse(Duration.isFinite(unbounded.interruptTimeout))
      const neverBeats = yield* Effect.flip(
        Effect.flatMap(read({ DURABLE_HEARTBEAT_INTERVAL: "infinity" }), (config) => Worker.make({}).pipe(Effect.provideService(WorkerConfig.WorkerConfig, config)))
      )
      assert.include(String(neverBeats), "DURABLE_HEARTBEAT_INTERVAL")
      assert.include(String(neverBeats), "heartbeatInterval must be a positive, finite duration")
      // and in code the same forms, which the option's type takes too (WorkerConfig.DurationOption)
      const worker = yield* Worker.make({ shutdownTimeout: "45s", interruptTimeout: "infinity", pollRetryDelay: "1m30s" })
      assert.isString(worker.id, "built")
      // @ts-expect-error: "sec" is no unit of either form, in the types as at run time
      const refused = yield* Effect.flip(Worker.make({ shutdownTimeout: "45 sec" }))
      assert.include(refused.message, 'shutdownTimeout must be a duration of zero or more (milliseconds, or a string such as "30 seconds" or "1m30s"), got "45 sec"')
    }))

  it.effect("a short form takes up to three parts, largest unit first, each unit once; more parts, a unit again or an exponent fail naming the option", () =>
    Effect.gen(function*() {
      const read = (env: Record<string, string>) =>
        Effect.flatMap(WorkerConfig.WorkerConfig, (config) => Effect.succeed(config)).pipe(
          Effect.provide(WorkerConfig.layerConfig().pipe(Layer.provide(fromEnv(env))))
        )
      // the documented forms, in code and in the environment
      for (const [form, millis] of [["30s", 30_000], ["500ms", 500], ["1m30s", 90_000], ["1h30m15s", 5_415_000], ["1.5s", 1_500], ["1d12h", 129_600_000]] as const) {
        const worker = yield* Worker.make({ pollRetryDelay: form })
        assert.isString(worker.id, form)
        assert.strictEqual(Duration.toMillis((yield* read({ DURABLE_POLL_RETRY_DELAY: form })).pollRetryDelay), millis, form)
      }
      const rule = 'a short form has up to 3 parts, largest unit first, each unit once ("1h30m15s")'
      // four parts (more than the option's type takes), a unit written twice ("1m30m" for "1m30s"), or out of order
      for (const bad of ["1h2m3s4ms", "1m30m", "30s1m", "1s1s"]) {
        const refused = yield* Effect.flip(Worker.make({ pollRetryDelay: bad as WorkerConfig.DurationOption }))
        assert.strictEqual(refused._tag, "WorkerConfigError", bad)
        assert.strictEqual(refused.message, `pollRetryDelay must be a duration of zero or more (milliseconds, or a string such as "30 seconds" or "1m30s"), got "${bad}": ${rule}`)
        const unread = yield* Effect.flip(read({ DURABLE_POLL_RETRY_DELAY: bad }))
        assert.include(String(unread), "DURABLE_POLL_RETRY_DELAY", bad)
        assert.include(String(unread), `got "${bad}": ${rule}`, bad)
      }
      // an amount in exponent form, which `${number}` in the type cannot tell from digits
      const exponent = yield* Effect.flip(Worker.make({ pollRetryDelay: "1e3s" }))
      assert.strictEqual(exponent._tag, "WorkerConfigError")
      assert.include(exponent.message, 'pollRetryDelay must be a duration of zero or more (milliseconds, or a string such as "30 seconds" or "1m30s"), got "1e3s"')
      assert.include(exponent.message, 'no exponent ("1000s", not "1e3s")')
    }))

  it.effect("DURABLE_HEALTH_PORT turns the probe server on; DURABLE_HEALTH_HOST and DURABLE_HEALTH_METRICS set where and /metrics", () =>
    Effect.gen(function*() {
      const read = (env: Record<string, string>) =>
        Effect.map(WorkerConfig.WorkerConfig, (config) => config.health).pipe(
          Effect.provide(WorkerConfig.layerConfig().pipe(Layer.provide(fromEnv(env))))
        )
      const local = yield* read({ DURABLE_HEALTH_PORT: "9464" })
      assert.deepInclude(local, { port: 9464, host: "127.0.0.1", metrics: false })
      const pod = yield* read({ DURABLE_HEALTH_PORT: "9464", DURABLE_HEALTH_HOST: "0.0.0.0", DURABLE_HEALTH_METRICS: "true" })
      assert.deepInclude(pod, { port: 9464, host: "0.0.0.0", metrics: true })
      assert.isUndefined(yield* read({}))
      // asked for without the port that turns the server on: said, not ignored
      const error = yield* Effect.flip(read({ DURABLE_HEALTH_HOST: "0.0.0.0", DURABLE_HEALTH_METRICS: "true" }))
      assert.include(
        String(error),
        "DURABLE_HEALTH_HOST and DURABLE_HEALTH_METRICS set without DURABLE_HEALTH_PORT, which turns the probe server on: set the port too"
      )
      assert.include(String(yield* Effect.flip(read({ DURABLE_HEALTH_PORT: "nine" }))), "DURABLE_HEALTH_PORT")
    }))

  it.effect("DURABLE_CONCURRENCY=adaptive selects the adaptive controller", () =>
    Effect.gen(function*() {
      const config = yield* WorkerConfig.WorkerConfig
      assert.strictEqual(config.concurrency.mode, "adaptive")
    }).pipe(Effect.provide(WorkerConfig.layerConfig().pipe(Layer.provide(fromEnv({ DURABLE_CONCURRENCY: "adaptive" }))))))

  it.effect("a bad value in the environment fails the layer with the option named", () =>
    Effect.gen(function*() {
      const build = (env: Record<string, string>) =>
        Effect.flip(Layer.build(WorkerConfig.layerConfig().pipe(Layer.provide(fromEnv(env)))).pipe(Effect.scoped))
      const error = yield* build({ DURABLE_POLL_TIMEOUT: "0s" })
      assert.strictEqual(error._tag, "WorkerConfigError")
      assert.strictEqual((error as WorkerConfig.WorkerConfigError).option, "pollTimeout")
      // the operator set the variable, not the option: the message names it
      assert.match((error as WorkerConfig.WorkerConfigError).message, /^DURABLE_POLL_TIMEOUT: pollTimeout must be a positive duration \(.*\), got 0ms$/)
      const blank = (yield* build({ DURABLE_HEALTH_PORT: "8080", DURABLE_HEALTH_HOST: " " })) as WorkerConfig.WorkerConfigError
      assert.match(blank.message, /^DURABLE_HEALTH_HOST: health\.host must be a non-empty string/)
      // a whole number is digits: Config.integer read "" (an empty FOO= in an env file) as 0, so an
      // empty DURABLE_HEALTH_PORT served the probes on a random port and DURABLE_CONCURRENCY= ran one task at a time
      for (
        const [name, text, expected] of [
          ["DURABLE_WORKFLOW_CONCURRENCY", "0", "a whole number of at least 1"],
          ["DURABLE_HEALTH_PORT", "", "a whole number from 0 to 65535"],
          ["DURABLE_HEALTH_PORT", "0x1F90", "a whole number from 0 to 65535"],
          ["DURABLE_CONCURRENCY", "", 'a whole number of at least 1 or "adaptive"'],
          ["DURABLE_CONCURRENCY", "-5", 'a whole number of at least 1 or "adaptive"']
        ] as const
      ) {
        const refused = String(yield* build({ [name]: text }))
        assert.include(refused, name)
        assert.include(refused, `Expected ${expected}, got ${JSON.stringify(text)}`, `${name}=${text}`)
      }
      const read = (env: Record<string, string>) =>
        Effect.provide(WorkerConfig.WorkerConfig, WorkerConfig.layerConfig().pipe(Layer.provide(fromEnv(env))))
      assert.strictEqual((yield* read({ DURABLE_CONCURRENCY: " Adaptive " })).concurrency.mode, "adaptive", "any case, as the option")
      assert.strictEqual((yield* read({ DURABLE_CONCURRENCY: " 8 " })).concurrency.limit, 8)
    }))

  it.effect("an unknown option is refused by name when the worker is built", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Worker.make({ shutdownTimeoutMs: 10 } as Worker.WorkerDefinition))
      assert.strictEqual(error._tag, "WorkerConfigError")
      assert.strictEqual((error as WorkerConfig.WorkerConfigError).option, "shutdownTimeoutMs")
      // the promise facade's name of a duration, pointed to the Effect API's, with the options listed
      assert.match(
        error.message,
        /^unknown worker option "shutdownTimeoutMs"; did you mean "shutdownTimeout"\? it takes a duration: milliseconds, or a string such as "5 seconds" or "1m30s"; the options are workerId, buildId, /
      )
      const health = yield* Effect.flip(Worker.make({ health: { prot: 8080 } } as unknown as Worker.WorkerDefinition))
      assert.strictEqual((health as WorkerConfig.WorkerConfigError).option, "health.prot")
      assert.match(health.message, /unknown health option "prot"; did you mean "port"\?; the options are port, host, metrics, loopDelayThreshold/)
    }))

  it.effect("two definitions of one name fail the worker's build, the error naming what was registered twice", () =>
    Effect.gen(function*() {
      const step = Step.make("charge", () => Effect.void)
      const workflow = Workflow.make("order", () => Effect.void)
      const durable = DurableWorkflow.make("greet", () => Effect.void)
      const built = yield* Effect.all([
        Effect.flip(Worker.make({ steps: [step, step] })),
        Effect.flip(Worker.make({ workflows: [workflow, workflow] })),
        Effect.flip(Worker.make({ durableWorkflows: [durable, durable] }))
      ])
      assert.deepStrictEqual(built.map((error) => error.message), [
        "step \"charge\" is registered twice; each step name must have exactly one handler",
        "workflow \"order\" is registered twice; each workflow name must have exactly one body",
        "durable workflow \"greet\" is registered twice; each durable workflow name must have exactly one body"
      ])
    }))

  it("resolve checks each option and names the first bad one", () => {
    const option = (options: WorkerConfig.WorkerOptions) =>
      Either.match(WorkerConfig.resolve(options), { onLeft: (e) => e.option, onRight: () => "ok" })
    assert.strictEqual(option({ workerId: " " }), "workerId")
    assert.strictEqual(option({ buildId: "" }), "buildId")
    assert.strictEqual(option({ workflowConcurrency: 1.5 }), "workflowConcurrency")
    assert.strictEqual(option({ pollTimeout: "soon" as never }), "pollTimeout")
    assert.strictEqual(option({ heartbeatInterval: 0 }), "heartbeatInterval")
    assert.strictEqual(option({ heartbeatInterval: Duration.infinity }), "heartbeatInterval", "a worker that never beats is dead")
    assert.strictEqual(option({ concurrency: "fast" as never }), "concurrency")
    // Duration.decode reads these as zero: a stop would interrupt every running task at once
    assert.strictEqual(option({ shutdownTimeout: -5 }), "shutdownTimeout", "a negative deadline is not 'none'")
    assert.strictEqual(option({ shutdownTimeout: "-5 seconds" }), "shutdownTimeout")
    assert.strictEqual(option({ interruptTimeout: Number.NaN }), "interruptTimeout")
    assert.strictEqual(option({ pollRetryDelay: [-1, 0] }), "pollRetryDelay")
    assert.strictEqual(option({ shutdownTimeout: 0 }), "ok", "no time to drain is a choice")
    assert.strictEqual(option({ pollTimeout: 0 }), "pollTimeout", "a poll that waits for nothing asks the broker again at once")
    // the layer checks keys as Worker.make does: it built the defaults in silence
    assert.strictEqual(option({ shutdownTimeoutMs: 60_000 } as never), "shutdownTimeoutMs")
  })

  it.effect("WorkerConfig.layer and layerConfig refuse an unknown option, naming it and what was meant", () =>
    Effect.gen(function*() {
      const build = (layer: Layer.Layer<WorkerConfig.WorkerConfig, unknown>) =>
        Effect.flip(Effect.provide(WorkerConfig.WorkerConfig, layer))
      const refused = (yield* build(WorkerConfig.layer({ pollTimout: "5s" } as never))) as WorkerConfig.WorkerConfigError
      assert.strictEqual(refused.option, "pollTimout")
      assert.match(refused.message, /^unknown worker option "pollTimout"; did you mean "pollTimeout"\?/)
      const fromEnv = (yield* build(WorkerConfig.layerConfig({ shutdownTimeoutMs: 1 } as never))) as WorkerConfig.WorkerConfigError
      assert.strictEqual(fromEnv.option, "shutdownTimeoutMs")
    }))
})
