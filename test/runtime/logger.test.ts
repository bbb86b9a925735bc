import { assert, describe, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
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

  it.effect("NestJS's Logger (log, no info) gets one string: the fields as JSON and the cause folded into it", () =>
    Effect.gen(function*() {
      const calls: Array<[string, Array<unknown>]> = []
      // the shape of @nestjs/common's Logger: every argument after the message prints as a message of its own
      const nest = Object.fromEntries(
        (["log", "warn", "error", "debug", "verbose"] as const).map((level) => [level, (...args: Array<unknown>) => {
          calls.push([level, args])
        }])
      ) as unknown as WorkerLogger.LoggerLike
      yield* Effect.gen(function*() {
        yield* Effect.logInfo("registered")
        yield* Effect.logInfo("plain").pipe(Effect.annotateLogs({ runId: "r1" }))
        yield* Effect.logError("step failed")
        yield* Effect.logError("with a cause", Cause.fail("boom"))
      }).pipe(
        Effect.annotateLogs("workerId", "w1"),
        Logger.withMinimumLogLevel(LogLevel.All),
        Effect.provide(WorkerLogger.layer(nest))
      )
      // one string each: the message, then the fields as JSON
      const parsed = calls.slice(0, 3).map(([level, args]) => {
        assert.strictEqual(args.length, 1)
        const [, message, fields] = /^(.*?) (\{.*\})$/.exec(String(args[0]))!
        return [level, message, JSON.parse(fields!)]
      })
      assert.deepStrictEqual(parsed, [
        ["log", "registered", { workerId: "w1" }],
        ["log", "plain", { workerId: "w1", runId: "r1" }],
        ["error", "step failed", { workerId: "w1" }]
      ])
      const [level, args] = calls[3]!
      assert.strictEqual(level, "error")
      assert.strictEqual(args.length, 1)
      assert.match(String(args[0]), /^with a cause \{"workerId":"w1"\}\nError: boom/)
    }))

  it.effect("a logger that throws does not fail the effect", () =>
    Effect.gen(function*() {
      const throwing = { info: () => { throw new Error("x") }, warn: () => {}, error: () => {}, debug: () => {} }
      yield* Effect.logInfo("hello").pipe(Effect.provide(WorkerLogger.layer(throwing)))
    }))
})
