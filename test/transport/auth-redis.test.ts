/**
 * A Redis that refuses the worker's credentials fails the start with the server's own answer,
 * named as an authentication failure with what to check — not "could not connect … check that
 * Redis is running". Against a real redis-server started here with `--requirepass` (stopped by PID).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Cause from "effect/Cause"
import * as Fiber from "effect/Fiber"
import * as TestClock from "effect/TestClock"
import type { ChildProcess } from "node:child_process"
import { afterAll, beforeAll } from "vitest"
import * as Step from "../../src/core/Step.js"
import * as Worker from "../../src/runtime/Worker.js"
import * as BullMQTransport from "../../src/transport/BullMQTransport.js"
import { freePort, silentServer, startRedisServer } from "../support/local.js"

const PASSWORD = "redis-pass-7f3a9c"

let server: ChildProcess | undefined
let port = 0

const startPasswordRedis = (port: number, password: string) => startRedisServer(port, { password })

beforeAll(async () => {
  port = await freePort()
  server = await startPasswordRedis(port, PASSWORD)
})
afterAll(() => {
  if (server?.pid !== undefined) process.kill(server.pid, "SIGTERM")
})

/** Runs a worker against `options` and returns why its start failed. */
const failedStart = (options: BullMQTransport.BullMQOptions) =>
  Effect.gen(function*() {
    const worker = yield* Worker.make({ steps: [Step.make("x", () => Effect.succeed(1))] })
    const exit = yield* worker.run.pipe(Effect.provide(BullMQTransport.layer(options)), Effect.exit)
    assert.isTrue(Exit.isFailure(exit), "the start should fail")
    const failure = Exit.isFailure(exit) ? Cause.failureOption(exit.cause) : undefined
    assert.isTrue(failure !== undefined && failure._tag === "Some", `a typed failure, got ${String(exit)}`)
    return (failure as { value: unknown }).value as { _tag: string; message: string; cause?: { _tag?: string } }
  })

describe("BullMQ transport: Redis refusing the credentials", () => {
  it.live("a wrong password fails the start at once as an AuthenticationError naming WRONGPASS", () =>
    Effect.gen(function*() {
      const started = Date.now()
      const error = yield* failedStart({ url: `redis://:wrong-password@127.0.0.1:${port}`, connectTimeout: "3 seconds" })
      assert.strictEqual(error._tag, "RegistrationError")
      assert.strictEqual(error.cause?._tag, "AuthenticationError")
      assert.match(error.message, /authentication failed: WRONGPASS/)
      assert.match(error.message, /check the user and password in REDIS_URL/)
      assert.notMatch(error.message, /check that Redis is running/)
      assert.notInclude(error.message, "wrong-password")
      assert.isBelow(Date.now() - started, 2_500, "refused at once, not after the connect timeout")
    }))

  it.live("no password fails the start as an AuthenticationError naming NOAUTH", () =>
    Effect.gen(function*() {
      const error = yield* failedStart({ url: `redis://127.0.0.1:${port}` })
      assert.strictEqual(error.cause?._tag, "AuthenticationError")
      assert.match(error.message, /authentication failed: NOAUTH Authentication required/)
    }))

  it.live("an unknown user fails the start as an AuthenticationError", () =>
    Effect.gen(function*() {
      const error = yield* failedStart({ url: `redis://nobody:${PASSWORD}@127.0.0.1:${port}` })
      assert.strictEqual(error.cause?._tag, "AuthenticationError")
      assert.match(error.message, /WRONGPASS/)
      assert.notInclude(error.message, PASSWORD)
    }))

  it.live("waitForBroker does not wait out a refused password: it fails at once", () =>
    Effect.gen(function*() {
      const started = Date.now()
      const error = yield* failedStart({ url: `redis://:wrong-password@127.0.0.1:${port}`, waitForBroker: true })
      assert.strictEqual(error.cause?._tag, "AuthenticationError")
      assert.isBelow(Date.now() - started, 2_500)
    }))

  it.live("Redis not running: the connection error keeps the underlying cause (ECONNREFUSED)", () =>
    Effect.gen(function*() {
      const free = yield* Effect.promise(freePort)
      const error = yield* failedStart({ url: `redis://:${PASSWORD}@127.0.0.1:${free}`, connectTimeout: "1 second" })
      assert.strictEqual(error._tag, "RegistrationError")
      // refused at once: the message does not claim the timeout was waited out
      assert.match(error.message, /could not connect to Redis at redis:\/\/:\*\*\*\*@127\.0\.0\.1:\d+ \(connect ECONNREFUSED/)
      assert.notMatch(error.message, /within|unknown error/)
      assert.notInclude(error.message, PASSWORD)
    }))

  it.scoped("a server that accepts but never answers fails the start after connectTimeout, saying so (TestClock)", () =>
    Effect.gen(function*() {
      const silent = yield* Effect.acquireRelease(Effect.promise(silentServer), (server) => Effect.sync(server.close))
      const fiber = yield* Effect.fork(failedStart({ url: `redis://127.0.0.1:${silent.port}`, connectTimeout: "3 seconds" }))
      // the connection is made on the wall clock; the timeout is the test clock's
      yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 200)))
      yield* TestClock.adjust("2999 millis")
      yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 50)))
      assert.isNull(fiber.unsafePoll(), "still connecting before connectTimeout")
      yield* TestClock.adjust("1 millis")
      const error = yield* Fiber.join(fiber)
      assert.strictEqual(error._tag, "RegistrationError")
      assert.match(error.message, new RegExp(`Redis at redis://127.0.0.1:${silent.port} did not answer within 3s; check that Redis is running`))
    }))

  it.live("the right password serves", () =>
    Effect.gen(function*() {
      const worker = yield* Worker.make({ steps: [Step.make("x", () => Effect.succeed(1))] })
      const fiber = yield* worker.run.pipe(
        Effect.provide(BullMQTransport.layer({ url: `redis://:${PASSWORD}@127.0.0.1:${port}` })),
        Effect.fork
      )
      yield* worker.registered
      yield* worker.stop
      yield* fiber.await
    }))
})
