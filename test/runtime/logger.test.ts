import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as WorkerLogger from "../../src/runtime/WorkerLogger.js"

describe("WorkerLogger", () => {
  it.effect("writes each level to its method, with the annotations and the cause after the message", () =>
    Effect.gen(function*() {
      const calls: Array<[string, string, unknown]> = []
      const target = Object.fromEntries(
        (["info", "warn", "error", "debug"] as const).map((level) => [level, (message: string, fields?: unknown) => {
          calls.push([level, message, fields])
        }])
      ) as unknown as WorkerLogger.LoggerLike
      yield* Effect.gen(function*() {
        yield* Effect.logInfo("registered")
        yield* Effect.logWarning("retrying").pipe(Effect.annotateLogs({ runId: "r1" }))
        yield* Effect.logError("failed", "boom")
        yield* Effect.logDebug("details")
      }).pipe(
        Effect.annotateLogs("workerId", "w1"),
        Logger.withMinimumLogLevel(LogLevel.All),
        Effect.provide(WorkerLogger.layer(target))
      )
      assert.deepStrictEqual(calls.map(([level, message]) => [level, message]), [
        ["info", "registered"],
        ["warn", "retrying"],
        ["error", "failed boom"],
        ["debug", "details"]
      ])
      assert.deepStrictEqual(calls[1]![2], { workerId: "w1", runId: "r1" })
      assert.deepStrictEqual(calls[0]![2], { workerId: "w1" })
    }))

  it.effect("a logger that throws does not fail the effect", () =>
    Effect.gen(function*() {
      const throwing = { info: () => { throw new Error("x") }, warn: () => {}, error: () => {}, debug: () => {} }
      yield* Effect.logInfo("hello").pipe(Effect.provide(WorkerLogger.layer(throwing)))
    }))
})
