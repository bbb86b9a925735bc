import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as TestClock from "effect/TestClock"
import { deregister } from "../../src/runtime/internal/shutdown.js"
import * as WorkerConfig from "../../src/runtime/WorkerConfig.js"
import { Transport } from "../../src/seam/Transport.js"
import type { DurableWorkflowOptions } from "../../src/transport/DurableWorkflowTransport.js"
import type { DurableWorkflowServer, ServerEvent } from "../support/durableWorkflowServer.js"
import { describedWorker, servingSteps } from "../support/handlers.js"
import { greet, registered, setup, startWorker, transportLayer, until, waitScheduled } from "./support.js"

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

/**
 * Stops a worker whose registration the server made twice (the first, and one sent again), and checks
 * that one DELETE withdrew it: nothing registered is left.
 */
const stoppedWithNothingLeft = (
  server: DurableWorkflowServer,
  worker: { readonly id: string; readonly stop: Effect.Effect<void, unknown> },
  running: Fiber.Fiber<void, unknown>,
  { events, seen }: ReturnType<typeof recordEvents>
) =>
  Effect.gen(function*() {
    yield* worker.stop
    yield* Fiber.join(running)
    yield* seen("WorkerRegistered", 2)
    assert.isUndefined(server.registration(worker.id), "no registration left behind")
    assert.deepStrictEqual(events, ["WorkerRegistered", "WorkerRegistered", "WorkerDeregistered"])
    assert.strictEqual(server.requestsTo("deregisterRegistration").length, 1)
  })

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
      const recorded = recordEvents(server)
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
      yield* stoppedWithNothingLeft(server, worker, running, recorded)
    }))

  it.scoped("a poll that found the loss at the stop (its registration sent again) ends before the DELETE: nothing registered is left", () =>
    Effect.gen(function*() {
      // polls held briefly (wall clock): the next one after the loss gets worker_not_registered; the
      // heartbeat, on the TestClock, never beats
      const { server } = yield* setup({ maxPollHoldMs: 50 })
      const recorded = recordEvents(server)
      const { worker, running } = yield* startWorker(server, { steps: [greet] })
      yield* registered(server)
      // the server lost the registration: a poll gets worker_not_registered, and the worker sends its
      // registration again, which the server makes 300 ms later, whatever the client does meanwhile
      server.removeRegistration(worker.id)
      server.injectFault("register", { delayMs: 300 })
      yield* until(server, () => server.requestsTo("register").length === 2)
      yield* stoppedWithNothingLeft(server, worker, running, recorded)
      assert.strictEqual(server.requestsTo("heartbeat").length, 0, "the poll found the loss, not a beat")
    }))
})

/**
 * The transport registered on its own (no worker around it), the server then losing the
 * registration: a beat finds the loss, and sends the registration again.
 */
const registeredAlone = (server: DurableWorkflowServer, options: Partial<DurableWorkflowOptions> = {}) =>
  Effect.gen(function*() {
    const transport = yield* Transport
    const description = describedWorker("w-alone", servingSteps([greet.name]))
    const registration = yield* transport.register(description)
    const heartbeat = Option.getOrThrow(registration.heartbeat)
    const beat = Effect.flatMap(description.status, heartbeat.beat)
    return { registration, beat, workerId: description.workerId }
  }).pipe(Effect.provide(transportLayer(server, options)))

/**
 * The worker's registration dropped at the server, a beat forked that finds it so and registers the
 * worker again, the server answering that registration `delayMs` after it took it: the beat's fiber,
 * once the registration has reached the server.
 */
const reRegistrationHeld = (server: DurableWorkflowServer, workerId: string, beat: Effect.Effect<unknown, unknown>, delayMs: number) =>
  Effect.gen(function*() {
    server.removeRegistration(workerId)
    server.injectFault("register", { delayMs })
    const beating = yield* Effect.forkDaemon(beat)
    yield* until(server, () => server.requestsTo("register").length === 2)
    return beating
  })

describe("Durable Workflow transport: its re-registrations come before its deregistration", () => {
  it.scoped("the deregistration waits for a re-registration in flight: the DELETE goes after it", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const { events, seen } = recordEvents(server)
      const { registration, beat, workerId } = yield* registeredAlone(server)
      const beating = yield* reRegistrationHeld(server, workerId, beat, 300)
      yield* registration.deregister
      yield* seen("WorkerRegistered", 2)
      assert.isTrue(Exit.isSuccess(yield* Fiber.await(beating)))
      assert.isUndefined(server.registration(workerId), "no registration left behind")
      assert.deepStrictEqual(events, ["WorkerRegistered", "WorkerRegistered", "WorkerDeregistered"])
    }))

  it.scoped("a re-registration whose caller is interrupted is still answered before the DELETE, not cut on the client's side", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const { events, seen } = recordEvents(server)
      const { registration, beat, workerId } = yield* registeredAlone(server)
      const beating = yield* reRegistrationHeld(server, workerId, beat, 300)
      yield* Fiber.interruptFork(beating)
      yield* registration.deregister
      yield* seen("WorkerRegistered", 2)
      assert.isFalse(server.requestsTo("register")[1]!.aborted, "the request was not cut")
      assert.isUndefined(server.registration(workerId), "no registration left behind")
      assert.deepStrictEqual(events, ["WorkerRegistered", "WorkerRegistered", "WorkerDeregistered"])
    }))

  it.scoped("no re-registration is sent once the deregistration has begun", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const { registration, beat, workerId } = yield* registeredAlone(server)
      yield* registration.deregister
      // a beat after it finds the worker unknown, and does not register it again
      const beaten = yield* Effect.either(beat)
      assert.isTrue(Either.isLeft(beaten))
      assert.include(Either.isLeft(beaten) ? beaten.left.message : "", "is being deregistered")
      assert.strictEqual(server.requestsTo("register").length, 1)
      assert.isUndefined(server.registration(workerId), "no registration left behind")
    }))

  it.scoped("a re-registration that gets no answer holds the deregistration no longer than interruptTimeout; no DELETE is sent", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      const { registration, beat, workerId } = yield* registeredAlone(server)
      const beating = yield* reRegistrationHeld(server, workerId, beat, 1_000)
      const config = Either.getOrThrow(WorkerConfig.resolve({ interruptTimeout: "2 seconds" }))
      const stopping = yield* Effect.fork(Effect.either(deregister({ config, registration, transport: "durable-workflow" })))
      yield* waitScheduled("2 seconds")
      yield* TestClock.adjust("2 seconds")
      const stopped = yield* Fiber.join(stopping)
      assert.isTrue(Either.isLeft(stopped), "the deregistration failed at interruptTimeout")
      assert.strictEqual(server.requestsTo("register")[1]!.status, undefined, "the re-registration was still unanswered")
      assert.strictEqual(server.requestsTo("deregisterRegistration").length, 0, "no DELETE sent")
      yield* Fiber.await(beating)
    }))

  it.live("a re-registration's request the server does not answer ends at requestTimeout, and is sent again", () =>
    Effect.scoped(Effect.gen(function*() {
      const { server } = yield* setup()
      const { beat, workerId } = yield* registeredAlone(server, { requestTimeout: "200 millis" })
      const beating = yield* reRegistrationHeld(server, workerId, beat, 5_000)
      // the transport retry's next send, while the one before is still unanswered at the server
      yield* until(server, () => server.requestsTo("register").length === 3)
      assert.strictEqual(server.requestsTo("register")[1]!.status, undefined, "sent again at its timeout, not once answered")
      assert.isTrue(Exit.isSuccess(yield* Fiber.await(beating)))
      assert.isDefined(server.registration(workerId), "registered again")
    })))
})
