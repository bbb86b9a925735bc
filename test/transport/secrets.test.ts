/**
 * Secrets stay secret: a failing start of each transport, with a password in its URL, a token or
 * AWS keys read from the environment (as a user configures them), never shows the secret — not in
 * the logs (captured by a test Logger, causes included), not in the error's message, not anywhere
 * in its cause chain (inspected deeply and as JSON).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { inspect } from "node:util"
import * as DurableWorkflow from "../../src/core/DurableWorkflow.js"
import * as Step from "../../src/core/Step.js"
import * as Worker from "../../src/runtime/Worker.js"
import type { Transport } from "../../src/seam/Transport.js"
import * as BullMQTransport from "../../src/transport/BullMQTransport.js"
import * as DurableWorkflowTransport from "../../src/transport/DurableWorkflowTransport.js"
import * as SqlTransport from "../../src/transport/SqlTransport.js"
import * as SqsTransport from "../../src/transport/SqsTransport.js"
import { freePort, startRedisServer } from "../support/local.js"

const SECRET = "Sup3rS3cretValue42"

const startPasswordRedis = (port: number, password: string) => startRedisServer(port, { password })

/** An HTTP endpoint answering every request with `status` and `body` (and its headers). */
const endpoint = (status: number, body: unknown, headers: Record<string, string> = {}) =>
  Effect.acquireRelease(
    Effect.async<Server>((resume) => {
      const server = createServer((req, res) => {
        req.resume()
        req.on("end", () => {
          res.writeHead(status, { "content-type": "application/json", ...headers })
          res.end(JSON.stringify(body))
        })
      })
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed(server)))
    }),
    (server) =>
      Effect.async<void>((resume) => {
        server.closeAllConnections()
        server.close(() => resume(Effect.void))
      })
  ).pipe(Effect.map((server) => `http://127.0.0.1:${(server.address() as AddressInfo).port}`))

/**
 * Runs a worker's start against `transport` with `env` as the environment, captures every log
 * line (message, annotations and cause, rendered), and returns all of it with the error, inspected.
 */
const failingStart = (
  transport: Layer.Layer<Transport, unknown>,
  env: Record<string, string>,
  definition: Worker.WorkerDefinition = { steps: [Step.make("x", () => Effect.succeed(1))] }
) =>
  Effect.gen(function*() {
    const logged: Array<string> = []
    const logger = Logger.make(({ annotations, cause, message }) => {
      logged.push(inspect(message, { depth: 20 }), inspect(annotations, { depth: 20 }), Cause.pretty(cause))
    })
    const worker = yield* Worker.make(definition)
    const exit = yield* worker.run.pipe(
      Effect.provide(transport),
      Effect.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))),
      Effect.provide(Logger.replace(Logger.defaultLogger, logger)),
      Effect.exit
    )
    assert.isTrue(Exit.isFailure(exit), "the start should fail")
    const error = Exit.isFailure(exit) ? Cause.squash(exit.cause) : undefined
    const everything = [
      ...logged,
      Exit.isFailure(exit) ? Cause.pretty(exit.cause) : "",
      inspect(error, { depth: 20, showHidden: true }),
      JSON.stringify(error) ?? "",
      String((error as { message?: unknown }).message)
    ].join("\n")
    return { error: error as { _tag?: string; message: string }, everything }
  })

const assertNoSecret = (everything: string) => {
  assert.notInclude(everything, SECRET)
  assert.notInclude(everything, encodeURIComponent(SECRET))
}

describe("secrets stay out of logs and errors", () => {
  it.live("BullMQ: REDIS_URL with a password, Redis not running", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(freePort)
      const { error, everything } = yield* failingStart(BullMQTransport.layerConfig({ connectTimeout: "500 millis" }), {
        REDIS_URL: `redis://worker:${SECRET}@127.0.0.1:${port}`
      })
      assert.match(error.message, new RegExp(`redis://worker:\\*\\*\\*\\*@127.0.0.1:${port}`))
      assertNoSecret(everything)
    }))

  it.live("BullMQ: a wrong password sent to a Redis that checks it (AUTH echoes it in the driver's error)", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(freePort)
      const server = yield* Effect.acquireRelease(
        Effect.promise(() => startPasswordRedis(port, "the-right-one")),
        (child) => Effect.sync(() => child.pid !== undefined && process.kill(child.pid, "SIGTERM"))
      )
      void server
      const { error, everything } = yield* failingStart(BullMQTransport.layerConfig(), {
        REDIS_URL: `redis://:${SECRET}@127.0.0.1:${port}`
      })
      assert.match(error.message, /WRONGPASS/)
      assertNoSecret(everything)
    }).pipe(Effect.scoped))

  it.live("PostgreSQL: DATABASE_URL with a password and a role the server refuses", () =>
    Effect.gen(function*() {
      const { error, everything } = yield* failingStart(SqlTransport.layerConfig(), {
        DATABASE_URL: `postgres://edw_no_such_role:${SECRET}@127.0.0.1:5432/test`
      })
      assert.match(error.message, /authentication failed/)
      assertNoSecret(everything)
    }))

  it.live("MariaDB: DATABASE_URL with a wrong password", () =>
    Effect.gen(function*() {
      const { error, everything } = yield* failingStart(SqlTransport.layerConfig(), {
        DATABASE_URL: `mysql://root:${SECRET}@127.0.0.1:3306/test`
      })
      assert.match(error.message, /authentication failed/)
      assertNoSecret(everything)
    }))

  it.live("SQS: AWS keys from the environment, refused by the endpoint", () =>
    Effect.gen(function*() {
      const url = yield* endpoint(403, { __type: "com.amazonaws.sqs#SignatureDoesNotMatch", message: "signature mismatch" }, {
        "content-type": "application/x-amz-json-1.0",
        "x-amzn-query-error": "SignatureDoesNotMatch;Sender"
      })
      const { error, everything } = yield* failingStart(SqsTransport.layerConfig(), {
        SQS_ENDPOINT: url,
        AWS_ACCESS_KEY_ID: "AKIDSECRETTEST",
        AWS_SECRET_ACCESS_KEY: SECRET
      })
      assert.match(error.message, /authentication failed: SignatureDoesNotMatch/)
      assertNoSecret(everything)
    }).pipe(Effect.scoped))

  it.live("SQS: AWS keys from the environment, endpoint not running", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(freePort)
      const { everything } = yield* failingStart(
        SqsTransport.layerConfig({ connectTimeout: "3 seconds" }),
        { SQS_ENDPOINT: `http://127.0.0.1:${port}`, AWS_ACCESS_KEY_ID: "AKIDSECRETTEST", AWS_SECRET_ACCESS_KEY: SECRET }
      )
      assertNoSecret(everything)
    }))

  const durable = { durableWorkflows: [DurableWorkflow.make("wf", () => Effect.succeed(1))] }

  it.live("Durable Workflow: the token from the environment, refused (HTTP 401)", () =>
    Effect.gen(function*() {
      const url = yield* endpoint(401, { message: "Unauthenticated." })
      const { error, everything } = yield* failingStart(
        DurableWorkflowTransport.layerConfig({ taskQueue: "q", requestTimeout: "2 seconds" }),
        { DURABLE_WORKFLOW_SERVER_URL: url, DURABLE_WORKFLOW_AUTH_TOKEN: SECRET },
        durable
      )
      assert.match(error.message, /authentication failed: HTTP 401/)
      assertNoSecret(everything)
    }).pipe(Effect.scoped))

  it.live("Durable Workflow: the token from the environment, server not running (the request, headers and all, in the cause)", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(freePort)
      const { everything } = yield* failingStart(
        DurableWorkflowTransport.layerConfig({ taskQueue: "q", requestTimeout: "2 seconds" }),
        { DURABLE_WORKFLOW_SERVER_URL: `http://127.0.0.1:${port}`, DURABLE_WORKFLOW_AUTH_TOKEN: SECRET },
        durable
      )
      assertNoSecret(everything)
    }))
})
