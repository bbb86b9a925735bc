/**
 * Start in any order, SQS: a worker started before its queues exist (autoCreate off) waits for
 * them — logged once per queue, `run` not failing — and serves once they are created. Against a
 * real fauxqs server.
 */
import { CreateQueueCommand, DeleteMessageCommand, ReceiveMessageCommand, SendMessageCommand } from "@aws-sdk/client-sqs"
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Step from "../../src/core/Step.js"
import * as Worker from "../../src/runtime/Worker.js"
import * as SqsTransport from "../../src/transport/SqsTransport.js"
import { buildApp } from "fauxqs"
import { sqsPrefix, useFauxqs } from "../support/fauxqs.js"
import { captureLogs, freePort, stepTask } from "../support/local.js"

const server = useFauxqs()


const createQueue = (name: string) =>
  Effect.promise(async () => (await server().client.send(new CreateQueueCommand({ QueueName: name }))).QueueUrl!)

/** Receives one result from `url` (deleting it), waiting up to 10 s. */
const oneResult = (url: string) =>
  Effect.promise(async () => {
    const deadline = Date.now() + 10_000
    while (Date.now() < deadline) {
      const out = await server().client.send(new ReceiveMessageCommand({ QueueUrl: url, MaxNumberOfMessages: 1, WaitTimeSeconds: 1 }))
      const message = out.Messages?.[0]
      if (message !== undefined) {
        await server().client.send(new DeleteMessageCommand({ QueueUrl: url, ReceiptHandle: message.ReceiptHandle! }))
        return JSON.parse(message.Body!) as { status: string; output?: unknown }
      }
    }
    throw new Error("no result within 10 s")
  })

describe("SQS transport: start in any order", () => {
  it.live("a worker started before its queues exist waits for them and serves once they are created", () =>
    Effect.gen(function*() {
      const prefix = sqsPrefix()
      const log = captureLogs()
      const worker = yield* Worker.make({ steps: [Step.make("early", (n: number) => Effect.succeed(n + 1))], pollTimeout: "1 second" })
      const running = yield* worker.run.pipe(
        Effect.provide(SqsTransport.layer({ clientConfig: server().clientConfig, prefix })),
        Effect.provide(log.layer),
        Effect.fork
      )
      yield* Effect.sleep("1500 millis")
      assert.isNull(running.unsafePoll(), "run waits instead of failing")
      const waits = log.lines.filter((l) => l.startsWith("WARN waiting for queue"))
      assert.strictEqual(waits.length, 2, log.lines.join("\n"))
      assert.isTrue(waits.some((l) => /waiting for queue "[^"]+-results" at http:\/\/127\.0\.0\.1:\d+ for the results to be created/.test(l)))
      assert.isTrue(waits.some((l) => l.includes(`-tasks-early" at http://127.0.0.1:`) && l.includes(`for the tasks of step "early"`)))
      // said once: where, and what makes the queue exist, without the error repeating it
      for (const line of waits) {
        assert.match(line, /to be created \(create it, let the engine create it \(its autoCreate\), or set autoCreate: true\); retrying/)
        assert.strictEqual(line.split(prefix).length - 1, 1, line)
      }

      const tasks = yield* createQueue(`${prefix}-tasks-early`)
      const results = yield* createQueue(`${prefix}-results`)
      yield* worker.registered.pipe(Effect.timeout("15 seconds"))
      yield* Effect.promise(() =>
        server().client.send(new SendMessageCommand({ QueueUrl: tasks, MessageBody: JSON.stringify(stepTask("r1", "early", 41)) }))
      )
      const result = yield* oneResult(results)
      assert.strictEqual(result.status, "completed")
      assert.strictEqual(result.output, 42)
      // logged once each: no further warnings while it waited
      assert.strictEqual(log.lines.filter((l) => l.startsWith("WARN waiting for queue")).length, 2)
      yield* worker.stop
      yield* Fiber.join(running)
    }), 40_000)

  it.live("a queue behind a taskQueueUrl that does not exist yet is waited for too", () =>
    Effect.gen(function*() {
      const prefix = sqsPrefix()
      const log = captureLogs()
      const results = yield* createQueue(`${prefix}-results`)
      // the URL the queue will have once created: the server's own URL form, with the queue's name
      const url = results.replace(/-results$/, "-mapped")
      const worker = yield* Worker.make({ steps: [Step.make("mapped", () => Effect.succeed("ok"))], pollTimeout: "1 second" })
      const running = yield* worker.run.pipe(
        Effect.provide(SqsTransport.layer({ clientConfig: server().clientConfig, prefix, taskQueueUrl: { mapped: url } })),
        Effect.provide(log.layer),
        Effect.fork
      )
      yield* Effect.sleep("1 second")
      assert.isNull(running.unsafePoll())
      // a queue given by URL is never created by autoCreate: the line says so, not to set it
      assert.isTrue(
        log.lines.some((l) =>
          l.startsWith(`WARN waiting for queue ${url} for the tasks of step "mapped"`) &&
          l.includes("(queues given by URL are never created: create it or fix the mapping)") && !l.includes("autoCreate")
        ),
        log.lines.join("\n")
      )
      const created = yield* createQueue(`${prefix}-mapped`)
      yield* worker.registered.pipe(Effect.timeout("15 seconds"))
      yield* Effect.promise(() =>
        server().client.send(new SendMessageCommand({ QueueUrl: created, MessageBody: JSON.stringify(stepTask("r2", "mapped")) }))
      )
      assert.strictEqual((yield* oneResult(results)).output, "ok")
      yield* worker.stop
      yield* Fiber.join(running)
    }), 40_000)

  it.live("autoCreate still creates the queues at once", () =>
    Effect.gen(function*() {
      const prefix = sqsPrefix()
      const log = captureLogs()
      const worker = yield* Worker.make({ steps: [Step.make("auto", () => Effect.succeed(1))], pollTimeout: "1 second" })
      const running = yield* worker.run.pipe(
        Effect.provide(SqsTransport.layer({ clientConfig: server().clientConfig, prefix, autoCreate: true })),
        Effect.provide(log.layer),
        Effect.fork
      )
      yield* worker.registered.pipe(Effect.timeout("10 seconds"))
      assert.isFalse(log.lines.some((l) => l.includes("waiting for")))
      yield* worker.stop
      yield* Fiber.join(running)
    }))

  it.live("with waitForBroker, an SQS endpoint that comes up later is waited for (logged once)", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(freePort)
      const prefix = sqsPrefix()
      const log = captureLogs()
      const worker = yield* Worker.make({ steps: [Step.make("later", () => Effect.succeed(1))], pollTimeout: "1 second" })
      const running = yield* worker.run.pipe(
        Effect.provide(SqsTransport.layer({
          clientConfig: { ...server().clientConfig, endpoint: `http://127.0.0.1:${port}`, maxAttempts: 1 },
          prefix,
          autoCreate: true,
          connectTimeout: "1 second",
          waitForBroker: true
        })),
        Effect.provide(log.layer),
        Effect.fork
      )
      yield* Effect.sleep("1500 millis")
      assert.isNull(running.unsafePoll(), "run waits instead of failing")
      const waits = log.lines.filter((l) => l.startsWith(`WARN waiting for SQS at http://127.0.0.1:${port} to answer`))
      assert.isAtLeast(waits.length, 1, log.lines.join("\n"))
      assert.isAtMost(waits.length, 2, "once per queue resolved")
      const app = buildApp({ logger: false })
      yield* Effect.acquireRelease(Effect.promise(() => app.listen({ port, host: "127.0.0.1" })), () => Effect.promise(() => app.close()))
      yield* worker.registered.pipe(Effect.timeout("15 seconds"))
      yield* worker.stop
      yield* Fiber.join(running)
    }).pipe(Effect.scoped), 40_000)

  it.live("without waitForBroker an endpoint that is down still fails the start", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(freePort)
      const worker = yield* Worker.make({ steps: [Step.make("x", () => Effect.succeed(1))] })
      const error = yield* worker.run.pipe(
        Effect.provide(SqsTransport.layer({ clientConfig: { ...server().clientConfig, endpoint: `http://127.0.0.1:${port}`, maxAttempts: 1 } })),
        Effect.provide(captureLogs().layer),
        Effect.flip
      )
      assert.match(error.message, /could not reach SQS/)
    }))

  it.effect("waitForBroker must be true or false", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(SqsTransport.make({ waitForBroker: "no" as unknown as boolean }))
      assert.strictEqual(error.option, "waitForBroker")
      assert.match(error.message, /waitForBroker must be true or false/)
    }))
})
