/**
 * A Durable Workflow server refusing the worker's token (HTTP 401 / 403) fails the start with the
 * server's answer, named as an authentication or a permission failure with what to check — not
 * as a "Server compatibility error". With `waitForBroker`, a server that does not answer yet is
 * waited for. The servers are small node:http servers in this file: what is tested is our reaction.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Redacted from "effect/Redacted"
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import * as DurableWorkflow from "../../src/core/DurableWorkflow.js"
import * as Worker from "../../src/runtime/Worker.js"
import * as DurableWorkflowTransport from "../../src/transport/DurableWorkflowTransport.js"
import { captureLogs, freePort } from "../support/local.js"

const TOKEN = "dw-token-3b2a1c0d9e8f"

const serve = (handler: (req: IncomingMessage, res: ServerResponse) => void, port = 0) =>
  Effect.acquireRelease(
    Effect.async<Server>((resume) => {
      const server = createServer(handler)
      server.listen(port, "127.0.0.1", () => resume(Effect.succeed(server)))
    }),
    (server) =>
      Effect.async<void>((resume) => {
        server.closeAllConnections()
        server.close(() => resume(Effect.void))
      })
  ).pipe(Effect.map((server) => `http://127.0.0.1:${(server.address() as AddressInfo).port}`))

const answering = (status: number, body: unknown) => (req: IncomingMessage, res: ServerResponse) => {
  req.resume()
  res.writeHead(status, { "content-type": "application/json" })
  res.end(JSON.stringify(body))
}

const definition = () => Worker.make({ durableWorkflows: [DurableWorkflow.make("wf", () => Effect.succeed(1))] })

const failedStart = (baseUrl: string, options: Partial<DurableWorkflowTransport.DurableWorkflowOptions> = {}) =>
  Effect.gen(function*() {
    const worker = yield* definition()
    return (yield* worker.run.pipe(
      Effect.provide(DurableWorkflowTransport.layer({ baseUrl, taskQueue: "q", token: TOKEN, requestTimeout: "2 seconds", ...options })),
      Effect.flip
    )) as { _tag: string; message: string; cause?: { _tag?: string } }
  })

describe("Durable Workflow transport: a refused token", () => {
  it.scoped("HTTP 401 fails the start as an AuthenticationError naming what to check", () =>
    Effect.gen(function*() {
      const baseUrl = yield* serve(answering(401, { message: "Unauthenticated." }))
      const error = yield* failedStart(baseUrl)
      assert.strictEqual(error._tag, "RegistrationError")
      assert.strictEqual(error.cause?._tag, "AuthenticationError")
      assert.include(error.message, `the Durable Workflow server at ${baseUrl} refused the credentials (authentication failed: HTTP 401`)
      assert.include(error.message, "check DURABLE_WORKFLOW_AUTH_TOKEN")
      // the SDKs' fail-closed prefix for an unreadable /api/cluster/info is kept; the refusal follows it
      assert.match(error.message, /^Server compatibility error: unable to read \/api\/cluster\/info: the Durable Workflow server/)
      assert.notInclude(error.message, TOKEN)
    }))

  it.scoped("HTTP 403 fails the start as a PermissionError", () =>
    Effect.gen(function*() {
      const baseUrl = yield* serve(answering(403, { message: "This action is unauthorized.", reason: "forbidden" }))
      const error = yield* failedStart(baseUrl, { token: Redacted.make(TOKEN) })
      assert.strictEqual(error.cause?._tag, "PermissionError")
      assert.include(error.message, "permission denied: HTTP 403")
      assert.include(error.message, `namespace "default"`)
    }))

  it.scopedLive("a server that is not running fails the start fast by default, saying so", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(freePort)
      const error = yield* failedStart(`http://127.0.0.1:${port}`)
      assert.strictEqual(error._tag, "RegistrationError")
      assert.include(error.message, `could not reach the Durable Workflow server at http://127.0.0.1:${port}`)
    }))

  it.live("with waitForBroker, a server that starts later is waited for (logged once)", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(freePort)
      const { layer: logs, lines } = captureLogs()
      const worker = yield* definition()
      const running = yield* worker.run.pipe(
        Effect.provide(DurableWorkflowTransport.layer({
          baseUrl: `http://127.0.0.1:${port}`,
          taskQueue: "q",
          token: TOKEN,
          requestTimeout: "1 second",
          waitForBroker: true
        })),
        Effect.provide(logs),
        Effect.fork
      )
      yield* Effect.sleep("1500 millis")
      assert.isNull(running.unsafePoll())
      const waits = lines.filter((l) => l.includes("waiting for the Durable Workflow server"))
      assert.strictEqual(waits.length, 1, lines.join("\n"))
      assert.notInclude(lines.join("\n"), TOKEN)
      // the server comes up refusing the token: the wait ends in the refusal, at once
      yield* serve(answering(401, { message: "Unauthenticated." }), port)
      const exit = yield* Fiber.await(running).pipe(Effect.timeout("15 seconds"))
      assert.strictEqual(exit._tag, "Failure")
      assert.include(String(exit), "AuthenticationError")
    }).pipe(Effect.scoped), 30_000)

  it.effect("waitForBroker must be true or false", () =>
    Effect.gen(function*() {
      const worker = yield* definition()
      const error = yield* worker.run.pipe(
        Effect.provide(DurableWorkflowTransport.layer({ baseUrl: "http://127.0.0.1:1", taskQueue: "q", waitForBroker: 1 as never })),
        Effect.flip
      )
      assert.strictEqual((error as { _tag: string })._tag, "DurableWorkflowConfigError")
      assert.match((error as { message: string }).message, /waitForBroker must be true or false, got 1/)
      assert.strictEqual((error as { option?: string }).option, "waitForBroker")
    }))
})
