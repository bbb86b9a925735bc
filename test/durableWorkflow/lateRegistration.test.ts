import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as TestClock from "effect/TestClock"
import type { ServerEvent } from "../support/durableWorkflowServer.js"
import { greet, registered, setup, startWorker, until } from "./support.js"

/** The server's events so far, and a wait until one kind was seen `times` times. */
const recordEvents = (server: { onEvent: (listener: (event: ServerEvent) => void) => () => void }) => {
  const events: Array<ServerEvent["_tag"]> = []
  const waiters: Array<() => void> = []
  server.onEvent((event) => {
    events.push(event._tag)
    for (const wake of waiters.splice(0)) wake()
  })
  const seen = (tag: ServerEvent["_tag"], times = 1): Effect.Effect<void> =>
    Effect.suspend(() =>
      events.filter((seen) => seen === tag).length >= times
        ? Effect.void
        : Effect.zipRight(Effect.async<void>((resume) => void waiters.push(() => resume(Effect.void))), seen(tag, times))
    )
  return { events, seen }
}

describe("Durable Workflow: a registration or a beat in flight at a stop", () => {
  it.scoped("a stop while the register request is at the server: the registration it makes is deregistered, once", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const { events, seen } = recordEvents(server)
      // the server takes the request, and registers the worker 300 ms later, whatever the client does meanwhile
      server.injectFault("register", { delayMs: 300 })
      const { worker, running } = yield* startWorker(server, { steps: [greet] })
      yield* until(server, () => server.requestsTo("register").length === 1)
      yield* worker.stop
      yield* Fiber.join(running)
      yield* seen("WorkerRegistered")
      assert.isUndefined(server.registration(worker.id), "no registration left behind")
      assert.deepStrictEqual(events, ["WorkerRegistered", "WorkerDeregistered"])
      assert.strictEqual(server.requestsTo("deregisterRegistration").length, 1)
    }))

  it.scoped("a heartbeat in flight at the stop (its registration sent again) ends before the DELETE: nothing registered is left", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ maxPollHoldMs: 60_000 })
      const { events, seen } = recordEvents(server)
      const { worker, running } = yield* startWorker(server, { steps: [greet], heartbeatInterval: "1 second" })
      yield* registered(server)
      // the pollers all wait in held polls: only the heartbeat can find the loss
      yield* until(server, () => (["workflowTaskPoll", "activityTaskPoll", "queryTaskPoll"] as const).every((route) => server.heldPolls(route) === 1))
      // the server lost the registration: the next beat gets worker_not_registered, and the worker
      // sends its registration again, which the server makes 300 ms later
      server.removeRegistration(worker.id)
      server.injectFault("register", { delayMs: 300 })
      yield* TestClock.adjust("1 second")
      yield* until(server, () => server.requestsTo("register").length === 2)
      yield* worker.stop
      yield* Fiber.join(running)
      yield* seen("WorkerRegistered", 2)
      assert.isUndefined(server.registration(worker.id), "no registration left behind")
      assert.deepStrictEqual(events, ["WorkerRegistered", "WorkerRegistered", "WorkerDeregistered"])
      assert.strictEqual(server.requestsTo("deregisterRegistration").length, 1)
    }))

  it.scoped("a poll that found the loss at the stop (its registration sent again) ends before the DELETE: nothing registered is left", () =>
    Effect.gen(function*() {
      // polls held briefly (wall clock): the next one after the loss gets worker_not_registered; the
      // heartbeat, on the TestClock, never beats
      const { server } = yield* setup({ maxPollHoldMs: 50 })
      const { events, seen } = recordEvents(server)
      const { worker, running } = yield* startWorker(server, { steps: [greet] })
      yield* registered(server)
      // the server lost the registration: a poll gets worker_not_registered, and the worker sends its
      // registration again, which the server makes 300 ms later, whatever the client does meanwhile
      server.removeRegistration(worker.id)
      server.injectFault("register", { delayMs: 300 })
      yield* until(server, () => server.requestsTo("register").length === 2)
      yield* worker.stop
      yield* Fiber.join(running)
      yield* seen("WorkerRegistered", 2)
      assert.isUndefined(server.registration(worker.id), "no registration left behind")
      assert.deepStrictEqual(events, ["WorkerRegistered", "WorkerRegistered", "WorkerDeregistered"])
      assert.strictEqual(server.requestsTo("deregisterRegistration").length, 1)
      assert.strictEqual(server.requestsTo("heartbeat").length, 0, "the poll found the loss, not a beat")
    }))
})
