/**
 * What readiness says while a worker registers: the registration's waits, each told under a key of
 * its own, shown once per distinct wait, gone when each ends.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { makeReachability } from "../../src/runtime/internal/reachability.js"

describe("readiness while registering", () => {
  it.effect("shows each wait with its latest reason, the same wait of several once, until each is done", () =>
    Effect.gen(function*() {
      const { registrationWaits: waits, waiting } = yield* makeReachability
      assert.isTrue(Option.isNone(yield* waiting))
      const results = Symbol("results")
      const tasks = Symbol("tasks")
      yield* waits.waiting(results, "SQS at http://127.0.0.1:4566 to answer", "ECONNREFUSED")
      yield* waits.waiting(tasks, "SQS at http://127.0.0.1:4566 to answer", "ECONNREFUSED")
      assert.deepStrictEqual(yield* waiting, Option.some("waiting for SQS at http://127.0.0.1:4566 to answer (ECONNREFUSED)"))
      // the endpoint answers: the results queue is there, a task queue is not yet
      yield* waits.done(results)
      yield* waits.waiting(tasks, `queue "durable-tasks-charge" to be created`, undefined)
      assert.deepStrictEqual(yield* waiting, Option.some(`waiting for queue "durable-tasks-charge" to be created`))
      const table = Symbol("table")
      yield* waits.waiting(table, "table durable_transport_tasks to be created", undefined)
      assert.deepStrictEqual(
        yield* waiting,
        Option.some(`waiting for queue "durable-tasks-charge" to be created; waiting for table durable_transport_tasks to be created`)
      )
      yield* waits.done(tasks)
      yield* waits.done(tasks)
      yield* waits.done(table)
      assert.isTrue(Option.isNone(yield* waiting))
    }))
})
