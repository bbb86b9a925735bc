/**
 * The SQS transport's options are checked once, when its layer is built: an unknown key or a bad
 * value fails the build with an `SqsConfigError` naming the option, and no request is sent (the
 * endpoint here has no server behind it: a registration would fail with a `RegistrationError`
 * instead).
 */
import { assert, describe, it } from "@effect/vitest"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Step from "../../src/core/Step.js"
import * as Worker from "../../src/runtime/Worker.js"
import { clientConfigOf } from "../../src/transport/sqs/internal/config.js"
import * as SqsTransport from "../../src/transport/SqsTransport.js"

const clientConfig = {
  endpoint: "http://127.0.0.1:1",
  region: "us-east-1",
  credentials: { accessKeyId: "test", secretAccessKey: "test" }
}

/** The error building the layer fails with. */
const buildError = <A, E>(layer: Layer.Layer<A, E>) => Effect.flip(Effect.scoped(Layer.build(layer)))

const refused = (options: Record<string, unknown>) =>
  buildError(SqsTransport.layer({ clientConfig, ...options } as SqsTransport.SqsOptions))

const cases: ReadonlyArray<readonly [string, Record<string, unknown>, string, RegExp]> = [
  [
    "an endpoint without its scheme",
    { clientConfig: { ...clientConfig, endpoint: "127.0.0.1:4566" } },
    "clientConfig.endpoint",
    /^clientConfig\.endpoint must be an http:\/\/ or https:\/\/ URL such as http:\/\/127\.0\.0\.1:4566, got "127\.0\.0\.1:4566"/
  ],
  ["an unknown key", { waitTimeMs: 1_000 }, "waitTimeMs", /unknown SQS option "waitTimeMs"; did you mean "waitTime"\?.*; the options are client, clientConfig, /],
  [
    "a client setting outside clientConfig",
    { region: "eu-west-1" },
    "region",
    /unknown SQS option "region": settings of the SQS client go in clientConfig, e\.g\. \{ clientConfig: \{ endpoint, region, credentials \} \}/
  ],
  ["a client that is not an SQSClient", { client: {} }, "client", /client must be an SQSClient of @aws-sdk\/client-sqs v3/],
  ["a clientConfig that is not an object", { clientConfig: "http://x" }, "clientConfig", /clientConfig must be an SQSClientConfig/],
  ["an empty prefix", { prefix: "" }, "prefix", /prefix must be a non-empty string/],
  [
    "a prefix that makes the results queue name invalid",
    { prefix: "my.app" },
    "prefix",
    /the results queue "my\.app-results" is not a valid SQS queue name \(it contains '\.'\); SQS queue names allow only .*resultsQueueUrl/
  ],
  [
    "a prefix that makes the task queue names invalid",
    { prefix: "my.app", resultsQueueUrl: "http://127.0.0.1:1/q/results" },
    "prefix",
    /the task queues "my\.app-tasks-<step>" are not valid SQS queue names \(it contains '\.'\); .*pass taskQueueUrl/
  ],
  [
    "a partition without taskQueueUrl",
    { partition: "acme" },
    "partition",
    /partition "acme" puts '@' into every task queue name \(durable-tasks-<step>@acme\), which SQS refuses .*taskQueueUrl/
  ],
  ["an autoCreate that is not a boolean", { autoCreate: "true" }, "autoCreate", /autoCreate must be true or false, got "true"/],
  ["a taskQueueUrl that is neither function nor record", { taskQueueUrl: 5 }, "taskQueueUrl", /taskQueueUrl must be a function of the group or a record/],
  ["a taskQueueUrl record with an empty URL", { taskQueueUrl: { pay: "" } }, "taskQueueUrl", /taskQueueUrl must be/],
  ["an empty resultsQueueUrl", { resultsQueueUrl: "" }, "resultsQueueUrl", /resultsQueueUrl must be a non-empty string/],
  ["a marker with a reserved prefix", { marker: "AWS.durable" }, "marker", /marker must be an SQS message attribute name .*got "AWS\.durable"/],
  ["a marker with a double '.'", { marker: "a..b" }, "marker", /marker must be an SQS message attribute name/],
  ["an undecodable waitTime", { waitTime: "long" }, "waitTime", /waitTime must be a duration of zero or more \(milliseconds, or a string such as "60 seconds" or "1m30s"\), got "long"/],
  ["a zero visibilityTimeout", { visibilityTimeout: 0 }, "visibilityTimeout", /visibilityTimeout must be between 1 second and 12 hours/],
  // SQS's own settings count seconds; a number here is milliseconds, and SQS cannot take a fraction
  [
    "a visibilityTimeout under a second (60 meant as seconds)",
    { visibilityTimeout: 60 },
    "visibilityTimeout",
    /^visibilityTimeout must be between 1 second and 12 hours \(got 60ms; a number is milliseconds: 60 seconds is "60 seconds"\)$/
  ],
  [
    "a waitTime under a second (20 meant as seconds), which SQS would not wait at all",
    { waitTime: 20 },
    "waitTime",
    /^waitTime must be 0 \(short polls\) or at least 1 second: SQS waits whole seconds \(got 20ms; a number is milliseconds: 20 seconds is "20 seconds"\)$/
  ],
  // no number given, no word of numbers
  ["a waitTime of \"500 millis\"", { waitTime: "500 millis" }, "waitTime", /^waitTime must be 0 .*\(got 500ms\)$/],
  ["a visibilityTimeout over 12 hours", { visibilityTimeout: "13 hours" }, "visibilityTimeout", /between 1 second and 12 hours/],
  ["an undecodable visibilityTimeout", { visibilityTimeout: "a while" }, "visibilityTimeout", /visibilityTimeout must be a duration/],
  [
    "a visibilityExtendInterval not shorter than visibilityTimeout",
    { visibilityTimeout: "10 seconds", visibilityExtendInterval: "10 seconds" },
    "visibilityExtendInterval",
    /visibilityExtendInterval must be more than 0 and less than visibilityTimeout \(10s\)/
  ],
  ["a zero connectTimeout", { connectTimeout: 0 }, "connectTimeout", /connectTimeout must be a positive, finite duration/]
]

describe("SQS transport options", () => {
  for (const [what, options, option, message] of cases) {
    it.effect(`${what} fails the layer build, naming ${option}`, () =>
      Effect.gen(function*() {
        const error = yield* refused(options)
        assert.instanceOf(error, SqsTransport.SqsConfigError)
        assert.strictEqual(error._tag, "SqsConfigError")
        assert.strictEqual(error.option, option)
        assert.match(error.message, message)
      }))
  }

  it.effect("valid options build the layer without a request; a partition or a dotted prefix is fine with URLs", () =>
    Effect.gen(function*() {
      for (
        const options of [
          {},
          { partition: "acme", taskQueueUrl: (group: string) => `http://127.0.0.1:1/q/${group}` },
          { prefix: "my.app", resultsQueueUrl: "http://127.0.0.1:1/q/results", taskQueueUrl: { x: "http://127.0.0.1:1/q/x" } },
          { partition: "default" },
          { marker: "durable.task", waitTime: 0, visibilityTimeout: "30 seconds", visibilityExtendInterval: "5 seconds" }
        ] satisfies ReadonlyArray<SqsTransport.SqsOptions>
      ) {
        const transport = yield* SqsTransport.make({ clientConfig, ...options })
        assert.match(transport.name, /^sqs http:\/\/127\.0\.0\.1:1 prefix /)
      }
    }))

  it.effect("a worker run on a refused layer fails with the config error, not a registration (nothing is sent)", () =>
    Effect.gen(function*() {
      const worker = yield* Worker.make({ steps: [Step.make("x", () => Effect.void)] })
      const error = yield* Effect.flip(Effect.provide(worker.run, SqsTransport.layer({ clientConfig, partition: "acme" })))
      assert.strictEqual(error._tag, "SqsConfigError")
      assert.strictEqual((error as SqsTransport.SqsConfigError).option, "partition")
    }))

  it.effect("layerConfig checks what the environment and the options give together", () =>
    Effect.gen(function*() {
      const env = ConfigProvider.fromMap(
        new Map([["SQS_ENDPOINT", clientConfig.endpoint], ["AWS_REGION", "us-east-1"], ["DURABLE_PARTITION", "acme"]])
      )
      const error = yield* buildError(SqsTransport.layerConfig().pipe(Layer.provide(Layer.setConfigProvider(env))))
      assert.strictEqual(error._tag, "SqsConfigError")
      assert.strictEqual((error as SqsTransport.SqsConfigError).option, "partition")
      // read from a variable, not written in code: named by the variable
      assert.match(error.message, /^DURABLE_PARTITION: /)
      const marker = yield* buildError(
        SqsTransport.layerConfig({ marker: ".bad" }).pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map()))))
      )
      assert.strictEqual((marker as SqsTransport.SqsConfigError).option, "marker")
      assert.match(marker.message, /^marker /)
      const endpoint = yield* buildError(
        SqsTransport.layerConfig().pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["SQS_ENDPOINT", "localhost:4566"]])))))
      )
      assert.strictEqual((endpoint as SqsTransport.SqsConfigError).option, "clientConfig.endpoint")
      assert.match(endpoint.message, /^SQS_ENDPOINT: clientConfig\.endpoint /)
    }))
})

describe("SQS client settings read from the environment", () => {
  const none = { endpoint: undefined, region: undefined, accessKeyId: undefined, secretAccessKey: undefined, sessionToken: undefined }

  it("nothing set leaves everything to the AWS SDK's own lookup", () => {
    assert.deepStrictEqual(clientConfigOf(none), {})
  })

  it("an endpoint without a region gets us-east-1; a region given wins", () => {
    assert.deepStrictEqual(clientConfigOf({ ...none, endpoint: "http://127.0.0.1:4566" }), { endpoint: "http://127.0.0.1:4566", region: "us-east-1" })
    assert.deepStrictEqual(clientConfigOf({ ...none, endpoint: "http://127.0.0.1:4566", region: "eu-west-1" }), {
      endpoint: "http://127.0.0.1:4566",
      region: "eu-west-1"
    })
    assert.deepStrictEqual(clientConfigOf({ ...none, region: "eu-west-1" }), { region: "eu-west-1" })
  })

  it("the keys become a provider that reads them only when called, the session token with them when set", async () => {
    const keys = { ...none, accessKeyId: Redacted.make("AKID"), secretAccessKey: Redacted.make("SECRET") }
    const plain = clientConfigOf(keys)
    assert.notInclude(JSON.stringify(plain), "SECRET")
    assert.deepStrictEqual(await (plain.credentials as () => Promise<unknown>)(), { accessKeyId: "AKID", secretAccessKey: "SECRET" })
    const session = clientConfigOf({ ...keys, sessionToken: Redacted.make("TOKEN") })
    assert.deepStrictEqual(await (session.credentials as () => Promise<unknown>)(), {
      accessKeyId: "AKID",
      secretAccessKey: "SECRET",
      sessionToken: "TOKEN"
    })
    // one key alone is not credentials: the SDK's chain is left to find them
    assert.deepStrictEqual(clientConfigOf({ ...none, accessKeyId: Redacted.make("AKID") }), {})
  })
})
