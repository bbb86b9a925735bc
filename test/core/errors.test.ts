import { assert, describe, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import { messageOf, withReason } from "../../src/core/internal/errors.js"

describe("what a log line says of a failure", () => {
  it.effect("a rejected promise's reason, not Effect's \"An unknown error occurred in Effect.tryPromise\"", () =>
    Effect.gen(function*() {
      const rejected = yield* Effect.flip(Effect.tryPromise(() => Promise.reject(new Error("Missing lock for job 7"))))
      assert.instanceOf(rejected, Cause.UnknownException)
      assert.strictEqual(messageOf(rejected), "Missing lock for job 7")
      const thrownString = yield* Effect.flip(Effect.tryPromise(() => Promise.reject("socket hang up")))
      assert.strictEqual(messageOf(thrownString), "socket hang up")
    }))

  it("an empty message speaks through its cause; anything else as a string", () => {
    assert.strictEqual(messageOf(new Error("", { cause: new Error("listen EADDRINUSE") })), "listen EADDRINUSE")
    assert.strictEqual(messageOf(42), "42")
  })

  it("withReason: one line, the error's message, then what follows", () => {
    assert.strictEqual(
      withReason("could not deliver the reply", new Error("first line\n  second line"), "retrying"),
      "could not deliver the reply: first line second line; retrying"
    )
    assert.strictEqual(withReason("could not fail job 3", new Error("boom")), "could not fail job 3: boom")
  })
})
