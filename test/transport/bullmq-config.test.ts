/**
 * The BullMQ transport's options are checked once, when its layer is built: an unknown key or a bad
 * value fails the build with a `BullMQConfigError` naming the option, and nothing connects (the URL
 * here has no Redis behind it: a registration would fail with a `RegistrationError` instead).
 */
import { assert, describe, it } from "@effect/vitest"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Step from "../../src/core/Step.js"
import * as Worker from "../../src/runtime/Worker.js"
import * as BullMQTransport from "../../src/transport/BullMQTransport.js"

const unreachable = "redis://127.0.0.1:1"

/** The error building the layer fails with. */
const buildError = <A, E>(layer: Layer.Layer<A, E>) => Effect.flip(Effect.scoped(Layer.build(layer)))

const refused = (options: BullMQTransport.BullMQOptions) =>
  buildError(BullMQTransport.layer({ url: unreachable, ...options }))

const cases: ReadonlyArray<readonly [string, Record<string, unknown>, string, RegExp]> = [
  ["an unknown key", { lockDurationMs: 1_000 }, "lockDurationMs", /unknown BullMQ option "lockDurationMs"; did you mean "lockDuration"\? it takes a duration: milliseconds, or a string such as "5 seconds" or "1m30s"; the options are url, /],
  ["a URL that is not redis://", { url: "http://127.0.0.1:6379" }, "url", /url must be a redis:\/\/ or rediss:\/\/ URL/],
  ["ioredis options that are not an object", { connection: "127.0.0.1:6379" }, "connection", /connection must be ioredis options/],
  ["an empty prefix", { prefix: "" }, "prefix", /prefix must be a non-empty string, got ""/],
  ["a namespace that is not a string", { namespace: 7 }, "namespace", /namespace must be a string, got 7/],
  [
    "a partition with a namespace",
    { namespace: "dev", partition: "acme" },
    "partition",
    /partition "acme" cannot be used with namespace "dev": the engine never dispatches tenant/
  ],
  ["an undecodable lockDuration", { lockDuration: "soon" }, "lockDuration", /lockDuration must be a positive, finite duration \(milliseconds, or a string such as "30 seconds" or "1m30s"\), got "soon"/],
  ["a zero lockDuration", { lockDuration: 0 }, "lockDuration", /lockDuration must be a positive, finite duration/],
  ["a negative stepBeatInterval", { stepBeatInterval: -5 }, "stepBeatInterval", /stepBeatInterval must be a positive/],
  ["an infinite connectTimeout", { connectTimeout: Infinity }, "connectTimeout", /connectTimeout must be a positive, finite duration/],
  ["an undecodable stalledInterval", { stalledInterval: "often" }, "stalledInterval", /stalledInterval must be a positive/],
  ["a zero commandsPerWrite", { commandsPerWrite: 0 }, "commandsPerWrite", /commandsPerWrite must be a whole number of at least 1 .*got 0/],
  ["a fractional commandsPerWrite", { commandsPerWrite: 2.5 }, "commandsPerWrite", /whole number of at least 1 .*got 2\.5/],
  ["an empty brokerId", { brokerId: "" }, "brokerId", /brokerId must be a non-empty string/],
  ["brokers that are not a record", { brokers: "redis://b" }, "brokers", /brokers must be a record of brokers by pool id/],
  [
    "a broker under the main broker's id",
    { brokers: { default: { url: "redis://127.0.0.1:2" } } },
    "brokers.default",
    /brokers\.default has the id of the main broker \(brokerId "default"\)/
  ],
  ["a broker that is not an object", { brokers: { b: "redis://b" } }, "brokers.b", /brokers\.b must be \{ url \} or \{ connection \}/],
  ["an unknown key of a broker", { brokers: { b: { host: "b" } } }, "brokers.b.host", /unknown brokers\.b option "host"; did you mean "url" or "connection" \(\{ host: … \}\)\?; the options are url, connection/],
  ["a broker URL that is not redis://", { brokers: { b: { url: "b:6379" } } }, "brokers.b.url", /brokers\.b\.url must be a redis:\/\//],
  // as an env file may keep it: no queue of the engine's has such a name, and the worker would take nothing
  ["a prefix in quotes", { prefix: '"shop"' }, "prefix", /^prefix "\\"shop\\"" has blanks or quotes around it \(a value quoted in an env file\?\)/],
  ["a partition of a blank", { partition: " " }, "partition", /^partition " " has blanks or quotes around it/],
  ["a namespace with a ':'", { namespace: "a:b" }, "namespace", /^namespace "a:b" has a ":", which BullMQ refuses in a queue name/],
  // it would connect to 127.0.0.1:6379, serving that pool's queues from the main Redis
  [
    "a further broker with neither url nor connection (a url from an unset variable)",
    { brokers: { eu: { url: undefined } } },
    "brokers.eu",
    /^brokers\.eu needs a url or a connection: it has neither/
  ]
]

describe("BullMQ transport options", () => {
  for (const [what, options, option, message] of cases) {
    it.effect(`${what} fails the layer build, naming ${option}`, () =>
      Effect.gen(function*() {
        const error = yield* refused(options as BullMQTransport.BullMQOptions)
        assert.instanceOf(error, BullMQTransport.BullMQConfigError)
        assert.strictEqual(error._tag, "BullMQConfigError")
        assert.strictEqual(error.option, option)
        assert.match(error.message, message)
      }))
  }

  it.effect("a URL's credentials are not shown in the error", () =>
    Effect.gen(function*() {
      const error = yield* refused({ url: "redis://user:s3cret@127.0.0.1:6379:bad" })
      assert.strictEqual(error.option, "url")
      assert.notInclude(error.message, "s3cret")
    }))

  it.effect("valid options build the layer without connecting; the empty or default scopes go together", () =>
    Effect.gen(function*() {
      for (
        const options of [
          {},
          { namespace: "dev", partition: "default" },
          { namespace: "", partition: "acme" },
          { lockDuration: "2 seconds", stepBeatInterval: 500, commandsPerWrite: 1, brokers: { b: { url: "redis://127.0.0.1:2" } } }
        ] satisfies ReadonlyArray<BullMQTransport.BullMQOptions>
      ) {
        const transport = yield* BullMQTransport.make({ url: unreachable, ...options })
        assert.match(transport.name, /^bullmq redis:\/\/127\.0\.0\.1:1 prefix durable/)
      }
    }))

  it.effect("a worker run on a refused layer fails with the config error, not a registration (nothing connects)", () =>
    Effect.gen(function*() {
      const worker = yield* Worker.make({ steps: [Step.make("x", () => Effect.void)] })
      const error = yield* Effect.flip(Effect.provide(worker.run, BullMQTransport.layer({ url: unreachable, commandsPerWrite: 0 })))
      assert.strictEqual(error._tag, "BullMQConfigError")
      assert.strictEqual((error as BullMQTransport.BullMQConfigError).option, "commandsPerWrite")
    }))

  it.effect("layerConfig checks what the environment and the options give together", () =>
    Effect.gen(function*() {
      const env = ConfigProvider.fromMap(new Map([["REDIS_URL", unreachable], ["DURABLE_NAMESPACE", "dev"], ["DURABLE_PARTITION", "acme"]]))
      const error = yield* buildError(BullMQTransport.layerConfig().pipe(Layer.provide(Layer.setConfigProvider(env))))
      assert.strictEqual(error._tag, "BullMQConfigError")
      assert.strictEqual((error as BullMQTransport.BullMQConfigError).option, "partition")
      const unknown = yield* buildError(
        BullMQTransport.layerConfig({ lockDurationMs: 1 } as BullMQTransport.BullMQOptions).pipe(
          Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map())))
        )
      )
      assert.strictEqual((unknown as BullMQTransport.BullMQConfigError).option, "lockDurationMs")
    }))

  it.effect("layerConfig names the variable a refused value came from, and only then", () =>
    Effect.gen(function*() {
      const refusal = (variables: ReadonlyArray<readonly [string, string]>, options: BullMQTransport.BullMQOptions = {}) =>
        Effect.map(
          buildError(BullMQTransport.layerConfig(options).pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(variables)))))),
          (error) => error as BullMQTransport.BullMQConfigError
        )
      const url = yield* refusal([["REDIS_URL", "localhost:6379"]])
      assert.strictEqual(url.option, "url")
      assert.match(url.message, /^REDIS_URL: url must be a redis:\/\/ or rediss:\/\/ URL .*, got "localhost:6379"$/)
      const prefix = yield* refusal([["DURABLE_PREFIX", '"shop"']])
      assert.match(prefix.message, /^DURABLE_PREFIX: prefix "\\"shop\\"" has blanks or quotes around it/)
      // given in code, over the variable: the option's own refusal
      const given = yield* refusal([["REDIS_URL", "redis://127.0.0.1:6379"]], { url: "localhost:6379" })
      assert.match(given.message, /^url must be a redis:\/\/ or rediss:\/\/ URL/)
    }))
})
