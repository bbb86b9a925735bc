import { assert, describe, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as TestClock from "effect/TestClock"
import { execFile } from "node:child_process"
import { fileURLToPath } from "node:url"
import * as Worker from "../../src/runtime/Worker.js"
import * as Memory from "../../src/services/Memory.js"
import * as InMemory from "../../src/transport/InMemoryTransport.js"
import * as Step from "../../src/core/Step.js"
import { captureLogs, stepTask } from "../support/local.js"

const memory = Memory.layerTest({ usage: 1, limit: 1024 })

describe("Worker.layer", () => {
  it.effect("is built once the worker has registered", () =>
    Effect.gen(function*() {
      const broker = yield* InMemory.make()
      yield* Layer.build(Worker.layer({}).pipe(Layer.provide(Layer.merge(broker.layer, memory)))).pipe(
        Effect.andThen(Effect.flatMap(broker.journal, (journal) => {
          assert.strictEqual(journal[0]?.op, "register")
          return Effect.void
        })),
        Effect.scoped
      )
    }))

  it.effect("fails with the registration error instead of being built without a worker", () =>
    Effect.gen(function*() {
      const broker = yield* InMemory.make()
      yield* broker.setRegisterFault({ _tag: "Fail", message: "WRONGPASS invalid username-password pair" })
      const exit = yield* Layer.build(Worker.layer({}).pipe(Layer.provide(Layer.merge(broker.layer, memory)))).pipe(
        Effect.scoped,
        Effect.exit
      )
      assert.isTrue(Exit.isFailure(exit))
      const error = Exit.isFailure(exit) ? exit.cause.toString() : ""
      assert.include(error, "RegistrationError")
      assert.include(error, "WRONGPASS")
    }))

  it.effect("a stop that fails when the layer is released is one error line, the stop's (a finalizer cannot fail)", () =>
    Effect.gen(function*() {
      const broker = yield* InMemory.make()
      const logs = captureLogs()
      const stubborn = Step.make("stubborn", () => Effect.uninterruptible(Effect.sleep("1 hour")))
      const built = yield* Effect.fork(
        Effect.scoped(Effect.zipRight(
          Layer.build(Worker.layer({ steps: [stubborn], shutdownTimeout: "1 second", interruptTimeout: "1 second" }).pipe(
            Layer.provide(Layer.merge(broker.layer, memory))
          )),
          Effect.zipRight(broker.enqueue(stepTask("r1", "stubborn")), Effect.sleep("1 second"))
        )).pipe(Effect.provide(logs.layer))
      )
      for (let i = 0; i < 10; i++) yield* TestClock.adjust("1 second")
      assert.isTrue(Exit.isSuccess(yield* Fiber.await(built)))
      assert.deepStrictEqual(logs.lines.filter((line) => line.startsWith("ERROR")), [
        "ERROR worker stop incomplete: worker shutdown timed out while stopping 1 in-flight task(s) (task m1 from in-memory queue); " +
        "the worker registration remains active and needs operator attention"
      ])
    }))

  it("NodeRuntime.runMain(Layer.launch(Worker.layer(...))) exits non-zero when Redis cannot be reached", async () => {
    const result = await launch("launchUnreachable.ts")
    assert.notStrictEqual(result.code, 0, result.output)
    assert.isFalse(result.killed, `the process did not exit by itself: ${result.output}`)
    assert.match(result.output, /RegistrationError|could not connect/)
    // reported once, by runMain: the layer that fails with it does not log it as well
    assert.strictEqual(result.output.match(/could not connect to Redis/g)?.length, 1, result.output)
  })

  it("NodeRuntime.runMain(Layer.launch(Worker.layer(...))) exits non-zero with the error when its poll loop dies after it was built", async () => {
    const result = await launch("launchLoopFailure.ts")
    assert.include(result.stdout, "worker registered", result.output)
    assert.isFalse(result.killed, `the process did not exit by itself: ${result.output}`)
    assert.strictEqual(result.code, 1, result.output)
    assert.match(result.output, /WorkerLoopError/)
    assert.match(result.output, /NOPERM this user has no permissions/)
  })

  it.effect("a program given the layer fails with the loop's error instead of running on", () =>
    Effect.gen(function*() {
      const broker = yield* InMemory.make()
      const program = Effect.zipRight(
        Effect.sleep("1 second").pipe(Effect.zipRight(broker.setPollFault({ _tag: "Fail", message: "gone", fatal: true }))),
        Effect.never
      )
      const logs = captureLogs()
      const fiber = yield* Effect.fork(
        Effect.provide(program, Worker.layer({ pollTimeout: "100 millis" }).pipe(Layer.provide(Layer.merge(broker.layer, memory)))).pipe(
          Effect.provide(logs.layer)
        )
      )
      for (let i = 0; i < 20; i++) yield* TestClock.adjust("100 millis")
      const exit = yield* Fiber.await(fiber)
      assert.isTrue(Exit.isFailure(exit) && !Cause.isInterruptedOnly(exit.cause))
      assert.include(Exit.isFailure(exit) ? Cause.pretty(exit.cause) : "", "gone")
      // logged at once, as one line naming the error
      assert.deepStrictEqual(logs.lines.filter((line) => line.startsWith("ERROR")), [
        "ERROR worker failed (WorkerLoopError): worker loop in-memory queue failed: gone"
      ])
    }))
})

const launch = (support: string) => {
  const script = fileURLToPath(new URL(`../support/${support}`, import.meta.url))
  {
    return new Promise<{ code: number | null; killed: boolean; output: string; stdout: string; stderr: string }>((resolve) => {
      const child = execFile(
        process.execPath,
        ["--import", "tsx", "--conditions=source", script],
        { timeout: 30_000, env: { ...process.env, NODE_NO_WARNINGS: "1" } },
        (error, stdout, stderr) =>
          resolve({
            code: error === null ? 0 : (error as { code?: number }).code ?? null,
            killed: error?.killed === true,
            output: stdout + stderr,
            stdout,
            stderr
          })
      )
      child.stdin?.end()
    })
  }
}
