import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import { execFile } from "node:child_process"
import { fileURLToPath } from "node:url"
import * as Worker from "../../src/runtime/Worker.js"
import * as Memory from "../../src/services/Memory.js"
import * as InMemory from "../../src/transport/InMemoryTransport.js"

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

  it("NodeRuntime.runMain(Layer.launch(Worker.layer(...))) exits non-zero when Redis cannot be reached", async () => {
    const script = fileURLToPath(new URL("../support/launchUnreachable.ts", import.meta.url))
    const result = await new Promise<{ code: number | null; killed: boolean; output: string }>((resolve) => {
      const child = execFile(
        process.execPath,
        ["--import", "tsx", "--conditions=source", script],
        { timeout: 30_000, env: { ...process.env, NODE_NO_WARNINGS: "1" } },
        (error, stdout, stderr) =>
          resolve({
            code: error === null ? 0 : (error as { code?: number }).code ?? null,
            killed: error?.killed === true,
            output: stdout + stderr
          })
      )
      child.stdin?.end()
    })
    assert.notStrictEqual(result.code, 0, result.output)
    assert.isFalse(result.killed, `the process did not exit by itself: ${result.output}`)
    assert.match(result.output, /RegistrationError|could not connect/)
  })
})
