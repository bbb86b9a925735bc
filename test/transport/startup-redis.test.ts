/**
 * Start in any order, BullMQ: with `waitForBroker`, a worker started before Redis waits for it
 * (logged once) and serves as soon as it answers; without it, the start still fails fast. Against
 * a real redis-server started here, later, on a spare loopback port (stopped by PID).
 */
import { assert, describe, it } from "@effect/vitest"
import { Queue } from "bullmq"
import type { ChildProcess } from "node:child_process"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Step from "../../src/core/Step.js"
import * as Worker from "../../src/runtime/Worker.js"
import * as BullMQTransport from "../../src/transport/BullMQTransport.js"
import { captureLogs, freePort, startRedisServer, stepTask } from "../support/local.js"


const stopServer = (server: ChildProcess | undefined) =>
  Effect.sync(() => {
    if (server?.pid !== undefined) process.kill(server.pid, "SIGTERM")
  })

describe("BullMQ transport: start in any order", () => {
  it.live("with waitForBroker a worker started before Redis waits for it and serves once it answers", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(freePort)
      const log = captureLogs()
      const healthPort = yield* Effect.promise(freePort)
      const worker = yield* Worker.make({
        steps: [Step.make("late", (n: number) => Effect.succeed(n * 2))],
        pollTimeout: "1 second",
        health: { port: healthPort }
      })
      const readyz = Effect.promise(() =>
        fetch(`http://127.0.0.1:${healthPort}/readyz`).then(async (r) => ({ status: r.status, body: await r.text() }))
      )
      const running = yield* worker.run.pipe(
        Effect.provide(BullMQTransport.layer({ url: `redis://127.0.0.1:${port}`, connectTimeout: "300 millis", waitForBroker: true })),
        Effect.provide(log.layer),
        Effect.fork
      )
      yield* Effect.sleep("1500 millis")
      assert.isNull(running.unsafePoll(), "the run waits instead of failing")
      const waits = log.lines.filter((l) => l.includes("waiting for Redis"))
      assert.strictEqual(waits.length, 1, log.lines.join("\n"))
      assert.match(waits[0]!, new RegExp(`^WARN waiting for Redis at redis://127.0.0.1:${port} to answer \\(.*ECONNREFUSED`))
      // the probe says what the start waits for, where it said only "registering"
      const waiting = yield* readyz
      assert.strictEqual(waiting.status, 503)
      assert.match(waiting.body, new RegExp(`^registering; waiting for Redis at redis://127.0.0.1:${port} to answer \\(.*ECONNREFUSED.*\\)\n$`))

      const server = yield* Effect.acquireRelease(Effect.promise(() => startRedisServer(port)), stopServer)
      void server
      yield* worker.registered.pipe(Effect.timeout("15 seconds"))
      assert.deepStrictEqual(yield* readyz, { status: 200, body: "running\n" })
      const connection = { host: "127.0.0.1", port }
      const tasks = new Queue("durable-tasks-late", { connection })
      const results = new Queue("durable-results", { connection })
      yield* Effect.addFinalizer(() => Effect.promise(() => Promise.all([tasks.close(), results.close()])))
      yield* Effect.promise(() => tasks.add("late", stepTask("run-late", "late", 21)))
      const deadline = Date.now() + 10_000
      let answered: Array<{ data: { status?: string; output?: unknown } }> = []
      while (answered.length === 0 && Date.now() < deadline) {
        answered = yield* Effect.promise(() => results.getJobs(["waiting", "active", "completed"]))
        if (answered.length === 0) yield* Effect.sleep("50 millis")
      }
      assert.strictEqual(answered.length, 1)
      assert.strictEqual(answered[0]!.data.status, "completed")
      assert.strictEqual(answered[0]!.data.output, 42)
      assert.isTrue(log.lines.some((l) => l.startsWith("INFO done waiting for Redis")))
      // the registration's line says where the worker takes tasks from, to compare with the engine's queues
      assert.isTrue(
        log.lines.some((l) => / registered on bullmq .*; its handlers: steps "late"; polling queue durable-tasks-late$/.test(l)),
        log.lines.join("\n")
      )
      yield* worker.stop
      yield* Fiber.join(running)
    }).pipe(Effect.scoped), 40_000)

  it.live("without waitForBroker the start still fails fast", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(freePort)
      const worker = yield* Worker.make({ steps: [Step.make("x", () => Effect.succeed(1))] })
      const started = Date.now()
      const exit = yield* worker.run.pipe(
        Effect.provide(BullMQTransport.layer({ url: `redis://127.0.0.1:${port}`, connectTimeout: "500 millis" })),
        Effect.provide(captureLogs().layer),
        Effect.exit
      )
      assert.isTrue(Exit.isFailure(exit))
      assert.isBelow(Date.now() - started, 3_000)
    }))

  it.effect("waitForBroker must be true or false", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(BullMQTransport.make({ waitForBroker: "yes" as unknown as boolean }))
      assert.strictEqual(error._tag, "BullMQConfigError")
      assert.strictEqual(error.option, "waitForBroker")
      assert.match(error.message, /waitForBroker must be true or false, got "yes"/)
    }))
})
