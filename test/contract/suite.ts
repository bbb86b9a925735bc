/**
 * The transport contract, written once: the lifecycle rules (DESIGN L1–L5, L10) and the delivery
 * rules every transport must keep, as one suite parameterised by a {@link Backend} (in the style of
 * Effect's `cluster/test/SqlMessageStorage.test.ts`). Each `*.test.ts` of this folder runs it for one
 * or two backends: in-memory (on the `TestClock`), BullMQ, PostgreSQL, MySQL, SQS and Durable Workflow
 * (on real brokers, real short durations).
 *
 * The suite reaches the package only through its public entry point (`src/index.js`). It sees a
 * worker's transport through a transparent spy built from the public seam (`Transport.Registration`,
 * `Transport.Poller`, the `Delivery` interface): what was registered, polled, taken, answered and
 * deregistered, in order; the handlers record what they ran; the backend tells what reached the broker
 * (replies read the way the engine or server reads them, tasks still waiting, registrations).
 *
 * Waiting is on observed state (events, replies, broker state), never on fixed delays; the only
 * bounded windows are the checks that something does NOT happen (a task that must stay on the broker).
 * A rule a backend cannot keep by nature (SQL and SQS have no cancel announcement, ...) is declared in
 * the backend's `unsupported` list and shows up as a skipped test naming the reason.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberId from "effect/FiberId"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import * as TestClock from "effect/TestClock"
import { randomUUID } from "node:crypto"
import { Step, Transport, Worker } from "../../src/index.js"

// ---------------------------------------------------------------------------------------------
// What a backend provides
// ---------------------------------------------------------------------------------------------

/** A reply as it reached the broker (read the way the engine or the server reads it), normalised. */
export interface Reply {
  /** The test's id of the task it answers. */
  readonly id: string
  readonly status: "completed" | "failed"
  readonly output?: unknown
  /** The task was answered as cancelled (nestjs-durable `code: "cancelled"`, Durable Workflow `ActivityCancelled`). */
  readonly cancelled: boolean
  readonly error?: string | undefined
}

/** A task put on the broker. */
export interface TaskRef {
  readonly id: string
  readonly step: string
  /** The run it belongs to (what a cancel announcement names). */
  readonly runId: string
  /** The broker's or server's id of the task, where it has one. */
  readonly taskId: string
}

/** How one worker's transport is tuned. */
export interface Tuning {
  /** Short leases / locks / visibility (two seconds), for the lease rule. */
  readonly shortLease?: boolean
}

/** What a handler sees when the cancellable step starts, and what it reports. */
export interface CancelHooks {
  readonly started: (id: string) => void
  /** The cancellation reached the handler (its signal aborted, or its heartbeat was told to stop). */
  readonly seen: (id: string) => void
}

/** A fault on the reply path that the test arms and disarms. */
export interface ReplyFault {
  /** Makes the next reply attempts fail. */
  readonly arm: Effect.Effect<void>
  /** Done once an attempt failed; by default the spy's view: the delivery's `complete` failed. */
  readonly failed?: Effect.Effect<void>
  /** Whether the fault holds until disarmed (so no reply can have gone out before `disarm`). */
  readonly holdsUntilDisarmed: boolean
  readonly disarm: Effect.Effect<void>
}

/** A refusal of every reply until disarmed (see {@link Instance.replyRefusal}). */
export interface ReplyRefusal {
  readonly arm: Effect.Effect<void>
  readonly disarm: Effect.Effect<void>
  readonly gaveUp?: Effect.Effect<void>
}

/** One test's broker: fresh prefix / tables / server, torn down with the test's scope. */
export interface Instance {
  /** A transport for one worker on this broker; each worker gets its own, and they share the broker. */
  readonly layer: (tuning?: Tuning) => Layer.Layer<Transport.Transport>
  /** A transport whose registration fails (unreachable broker, refused registration). */
  readonly failRegistration: Effect.Effect<Layer.Layer<Transport.Transport>>
  /** Puts a step task on the broker, the way the engine or the server does. */
  readonly put: (id: string, step: string, input: Record<string, unknown>) => Effect.Effect<TaskRef>
  /** The test's id of the task a delivery's payload carries. */
  readonly idOf: (payload: unknown) => string | undefined
  /** Tasks of a step waiting on the broker, takeable by any worker. */
  readonly pending?: (step: string) => Effect.Effect<number>
  /** Whether the broker holds a live worker registration (brokers with a registry). */
  readonly registered?: Effect.Effect<boolean>
  /** Deregistrations the broker received (brokers with a registry). */
  readonly deregistrations?: Effect.Effect<number>
  /** Lease renewals the broker saw (where it records them). */
  readonly renewals?: Effect.Effect<number>
  /** Announces that a task's run was cancelled, the way the engine or the server does. */
  readonly cancel?: (task: TaskRef) => Effect.Effect<void>
  /** The step the cancel rule runs (a Durable Workflow activity must heartbeat to hear of a cancel). */
  readonly cancellableStep?: (name: string, hooks: CancelHooks) => Step.Step
  readonly replyFault?: ReplyFault
  /**
   * A refusal of every reply until disarmed, failing each attempt at once (the lost-reply rule);
   * the reply fault when not given. `gaveUp`, when given, is done once the transport itself stopped
   * trying (a transport that retries its replies on its own and then leaves the task to its lease).
   */
  readonly replyRefusal?: ReplyRefusal
  /** Makes the worker-plane deregistration fail (a definite refusal). */
  readonly failDeregistration?: Effect.Effect<void>
  /** What makes a given-back task takeable again when the broker has no release call (lease expiry). */
  readonly afterGiveBack?: Effect.Effect<void>
  /**
   * Takes a running task's lease from its worker the way another claimant would (its lock, claim or
   * in-flight copy now someone else's), for the lease-loss rule.
   */
  readonly loseLease?: (task: TaskRef) => Effect.Effect<void>
  /** A transport layer may need services besides itself (a test memory source under the TestClock). */
  readonly extra?: Layer.Layer<never>
}

/** The rules a backend may declare unsupported, with the reason (shown in the skipped test's title). */
export type OptionalRule = "cancel" | "leaseRenewal" | "leaseLoss" | "deregistrationFault" | "redeliveryAfterLostReply"

/** A transport under test. */
export interface Backend {
  readonly name: string
  /** `test`: timing rules on the `TestClock`; `live`: real short durations on a real broker. */
  readonly clock: "test" | "live"
  /** How interrupted work gets back to the broker: a release call, or the lease running out. */
  readonly giveBack: "release" | "lease expiry"
  readonly unsupported: Partial<Record<OptionalRule, string>>
  readonly setup: (observed: Observed) => Effect.Effect<Instance, never, Scope.Scope>
}

// ---------------------------------------------------------------------------------------------
// What the test observes
// ---------------------------------------------------------------------------------------------

/** Something a worker's transport (seen by the spy) or handler did. */
export type Event =
  | {
    readonly op:
      | "register" // the runtime called register
      | "transport-registered" // the transport's register returned
      | "registered" // the registration reached the runtime
      | "register-failed"
      | "deregister"
      | "deregister-failed"
      | "poll"
    readonly worker: string
  }
  | { readonly op: "taken"; readonly worker: string; readonly ids: ReadonlyArray<string> }
  | {
    readonly op:
      | "start"
      | "done"
      | "interrupted"
      | "cancel-seen"
      | "complete-ok"
      | "complete-failed"
      | "given-back"
      | "renew" // the runtime renewed the task's lease
      | "lease-lost" // a renewal failed as fatal: the lease is gone for good
    readonly worker: string
    readonly id: string
  }

/**
 * Everything observed in a test, in order: events and replies, with one wake-up for anyone waiting on
 * either (safe to signal from promise callbacks: it never suspends).
 */
export class Observed {
  readonly events: Array<Event> = []
  readonly replies: Array<Reply> = []
  #changed = Deferred.unsafeMake<void>(FiberId.none)

  push(event: Event): void {
    this.events.push(event)
    this.#notify()
  }

  reply(reply: Reply): void {
    this.replies.push(reply)
    this.#notify()
  }

  #notify(): void {
    const changed = this.#changed
    this.#changed = Deferred.unsafeMake<void>(FiberId.none)
    Deferred.unsafeDone(changed, Exit.void)
  }

  /** Waits until `check` holds over what was observed (re-checked on every change). */
  until(check: (o: Observed) => boolean): Effect.Effect<void> {
    return Effect.suspend(() => {
      const changed = this.#changed
      return check(this) ? Effect.void : Effect.zipRight(Deferred.await(changed), this.until(check))
    })
  }

  has(op: Event["op"], worker?: string, id?: string): boolean {
    return this.events.some((e) => matches(e, op, worker, id))
  }

  count(op: Event["op"], worker?: string, id?: string): number {
    return this.events.filter((e) => matches(e, op, worker, id)).length
  }

  index(op: Event["op"], worker?: string, id?: string): number {
    return this.events.findIndex((e) => matches(e, op, worker, id))
  }

  /** Whether both happened, the first before the second. */
  before(
    first: readonly [Event["op"], string?, string?],
    second: readonly [Event["op"], string?, string?]
  ): boolean {
    const a = this.index(...first)
    const b = this.index(...second)
    return a >= 0 && b >= 0 && a < b
  }

  repliesTo(id: string): ReadonlyArray<Reply> {
    return this.replies.filter((r) => r.id === id)
  }

  /** The workers that started task `id`, in order. */
  startedBy(id: string): ReadonlyArray<string> {
    return this.events.flatMap((e) => (e.op === "start" && e.id === id ? [e.worker] : []))
  }
}

const matches = (e: Event, op: Event["op"], worker?: string, id?: string) =>
  e.op === op && (worker === undefined || e.worker === worker) && (id === undefined || ("id" in e && e.id === id))

// ---------------------------------------------------------------------------------------------
// The spy: the worker's transport, seen through the public seam
// ---------------------------------------------------------------------------------------------

/**
 * The transport of `layer`, unchanged but watched: registration (optionally held after the transport
 * registered, before the runtime gets the registration), polls, tasks taken, answers and the
 * deregistration are recorded as `worker`'s events.
 */
export const spy = (
  layer: Layer.Layer<Transport.Transport>,
  worker: string,
  observed: Observed,
  idOf: (payload: unknown) => string | undefined,
  hold?: Deferred.Deferred<void>
): Layer.Layer<Transport.Transport> =>
  Layer.map(layer, (context) => {
    const inner = Context.get(context, Transport.Transport)
    const push = (event: Event) => Effect.sync(() => observed.push(event))
    const idOfDelivery = (delivery: Transport.Delivery) => idOf(delivery.payload) ?? delivery.id
    const watch = (delivery: Transport.Delivery): Transport.Delivery => {
      const id = idOfDelivery(delivery)
      const answered = <A, E>(effect: Effect.Effect<A, E>) =>
        effect.pipe(
          Effect.tap(() => push({ op: "complete-ok", worker, id })),
          Effect.tapError(() => push({ op: "complete-failed", worker, id }))
        )
      // a proxy, so a delivery that is a class instance keeps its prototype and its getters
      return new Proxy(delivery, {
        get(target, key) {
          if (key === "complete") return (reply: unknown) => answered(target.complete(reply))
          if (key === "completeAndTakeNext") {
            return (reply: unknown) => Effect.map(answered(target.completeAndTakeNext(reply)), Option.map(watch))
          }
          if (key === "abandon") return Effect.tap(target.abandon, () => push({ op: "given-back", worker, id }))
          if (key === "keepAlive") {
            return Option.map(target.keepAlive, (keepAlive) => ({
              interval: keepAlive.interval,
              // read when due, as the runtime does
              get renew() {
                return Effect.zipRight(
                  push({ op: "renew", worker, id }),
                  Effect.tapError(keepAlive.renew, (error) => error.fatal ? push({ op: "lease-lost", worker, id }) : Effect.void)
                )
              }
            }))
          }
          const value = Reflect.get(target, key, target)
          return typeof value === "function" ? value.bind(target) : value
        }
      })
    }
    const watched: Transport.Transport["Type"] = {
      name: inner.name,
      protocol: inner.protocol,
      register: (description) =>
        Effect.gen(function*() {
          yield* push({ op: "register", worker })
          const registration = yield* inner.register(description).pipe(
            Effect.tapError(() => push({ op: "register-failed", worker }))
          )
          yield* push({ op: "transport-registered", worker })
          if (hold !== undefined) yield* Deferred.await(hold)
          yield* push({ op: "registered", worker })
          return Transport.Registration.make({
            heartbeat: registration.heartbeat,
            pollers: registration.pollers.map((poller) =>
              Transport.Poller.make({
                name: poller.name,
                pool: poller.pool,
                ready: poller.ready,
                poll: (max, after) =>
                  Effect.zipRight(
                    push({ op: "poll", worker }),
                    Effect.tap(
                      Effect.map(poller.poll(max, after), (deliveries) => deliveries.map(watch)),
                      (deliveries) => push({ op: "taken", worker, ids: deliveries.map(idOfDelivery) })
                    )
                  )
              })
            ),
            deregister: Effect.zipRight(
              push({ op: "deregister", worker }),
              Effect.tapError(registration.deregister, () => push({ op: "deregister-failed", worker }))
            )
          })
        })
    }
    return Context.add(context, Transport.Transport, watched)
  })

// ---------------------------------------------------------------------------------------------
// One test's world: a broker, gates for the handlers, workers
// ---------------------------------------------------------------------------------------------

/** Task inputs carry the test's id; a Durable Workflow activity gets them as its first argument. */
export const idOfInput = (input: unknown): string => {
  const first = Array.isArray(input) ? input[0] : input
  const id = (first as { id?: unknown } | null)?.id
  if (typeof id !== "string") throw new Error(`a contract task without an id: ${JSON.stringify(input)}`)
  return id
}

const msOfInput = (input: unknown): number => {
  const first = Array.isArray(input) ? input[0] : input
  return Number((first as { ms?: unknown } | null)?.ms ?? 0)
}

const oddOfInput = (input: unknown): unknown => ((Array.isArray(input) ? input[0] : input) as { odd?: unknown } | null)?.odd

interface WorkerOptions {
  readonly concurrency?: number
  readonly shutdownTimeout?: Duration.DurationInput
  readonly tuning?: Tuning
  /** Another transport layer than the instance's own (a failing one). */
  readonly layer?: Layer.Layer<Transport.Transport>
  /** Holds the registration after the transport registered, until it is done. */
  readonly hold?: Deferred.Deferred<void>
  /** Runs `runUntil(until)` rather than `run`. */
  readonly until?: Effect.Effect<unknown>
  /** Gives the worker no steps at all (it serves nothing). */
  readonly servesNothing?: boolean
}

const makeWorld = (backend: Backend) =>
  Effect.gen(function*() {
    const observed = new Observed()
    const instance = yield* backend.setup(observed)
    const live = backend.clock === "live"
    const label = `c${randomUUID().replaceAll("-", "").slice(0, 8)}`
    // a gate per run of a task (its first start, its second, ...), or one for all its runs
    const gates = new Map<string, Deferred.Deferred<void>>()
    const gate = (key: string) => {
      let found = gates.get(key)
      if (found === undefined) gates.set(key, found = Deferred.unsafeMake<void>(FiberId.none))
      return found
    }
    const runGate = (id: string, nth: number) =>
      Effect.raceFirst(Deferred.await(gate(`${id}#${nth}`)), Deferred.await(gate(`${id}#all`)))
    const timing: { readonly pollTimeout: Duration.DurationInput; readonly shutdownTimeout: number } = live
      ? { pollTimeout: "1 second", shutdownTimeout: 2_000 }
      : { pollTimeout: "5 seconds", shutdownTimeout: 10_000 }

    const stepsOf = (worker: string): Array<Step.Step> => {
      const push = (op: "start" | "done" | "interrupted" | "cancel-seen", id: string) => observed.push({ op, worker, id })
      const steps: Array<Step.Step> = [
        // runs until the test opens its gate
        Step.make("gate", (input: unknown) =>
          Effect.suspend(() => {
            const id = idOfInput(input)
            push("start", id)
            return runGate(id, observed.startedBy(id).length).pipe(
              Effect.zipRight(Effect.sync(() => push("done", id))),
              Effect.onInterrupt(() => Effect.sync(() => push("interrupted", id))),
              Effect.as({ id, by: worker })
            )
          })),
        // runs for `ms` (on the TestClock, or for real)
        Step.make("sleepy", (input: unknown) =>
          Effect.suspend(() => {
            const id = idOfInput(input)
            push("start", id)
            return Effect.sleep(msOfInput(input)).pipe(
              Effect.zipRight(Effect.sync(() => push("done", id))),
              Effect.onInterrupt(() => Effect.sync(() => push("interrupted", id))),
              Effect.as({ id, by: worker })
            )
          })),
        // logs data JSON cannot carry (`odd: "logs"`), or returns a value too deep for JSON (`odd: "deep"`)
        Step.make("odd", (input: unknown, ctx) =>
          Effect.suspend(() => {
            const id = idOfInput(input)
            push("start", id)
            if (oddOfInput(input) === "logs") {
              // recorded as a step event whatever the log level
              ctx.log.info("counted", { total: 10n })
              return Effect.succeed({ id, by: worker })
            }
            const root: Record<string, unknown> = {}
            let at = root
            for (let i = 0; i < 100_000; i++) at = (at["n"] = {}) as Record<string, unknown>
            return Effect.succeed(root)
          }))
      ]
      if (instance.cancellableStep !== undefined) {
        steps.push(instance.cancellableStep("cancellable", {
          started: (id) => push("start", id),
          seen: (id) => push("cancel-seen", id)
        }))
      }
      return steps
    }

    /** Builds a worker and runs it in a daemon fiber; it is force-stopped at the end of the test. */
    const start = (name: string, options: WorkerOptions = {}) =>
      Effect.gen(function*() {
        const worker = yield* Effect.orDie(Worker.make({
          workerId: `${label}-${name}`,
          steps: options.servesNothing === true ? [] : stepsOf(name),
          concurrency: options.concurrency ?? 1,
          pollTimeout: timing.pollTimeout,
          shutdownTimeout: options.shutdownTimeout ?? timing.shutdownTimeout,
          interruptTimeout: "2 seconds",
          pollRetryDelay: "200 millis"
        }))
        const layer = transportOf(name, options)
        const program: Effect.Effect<unknown, unknown, Transport.Transport> = options.until === undefined
          ? worker.run
          : worker.runUntil(options.until)
        // the runtime's warnings and errors only: the contract reads what happened from the spy and the broker
        const running = yield* Effect.forkDaemon(
          Effect.provide(program, layer).pipe(Logger.withMinimumLogLevel(LogLevel.Warning))
        )
        yield* Effect.addFinalizer(() =>
          Effect.zipRight(Effect.ignore(worker.forceStop), Fiber.await(running)).pipe(
            // finalizers run uninterruptibly: let the bound cut a stuck worker short
            Effect.interruptible,
            Effect.timeout("10 seconds"),
            Effect.ignore,
            Effect.withClock(liveClock)
          )
        )
        return { worker, running, layer }
      })

    const transportOf = (name: string, options: WorkerOptions = {}) => {
      const spied = spy(options.layer ?? instance.layer(options.tuning), name, observed, instance.idOf, options.hold)
      return instance.extra === undefined ? spied : Layer.merge(spied, instance.extra)
    }

    /** Waits for an observation, for at most 10 s of real time (the TestClock does not move on its own). */
    const until = (what: string, check: (o: Observed) => boolean) => within(what, observed.until(check))

    /** Waits (10 s at most, real time) for an effect that only ends once the world moved on. */
    const within = <A, E, R>(what: string, effect: Effect.Effect<A, E, R>) =>
      effect.pipe(
        Effect.timeoutFail({ duration: "10 seconds", onTimeout: () => new Error(`timed out waiting for ${what}`) }),
        Effect.orDie,
        Effect.withClock(liveClock)
      )

    /** Broker state that must come to hold: re-read every 20 ms for up to 10 s (at once under the TestClock). */
    const eventually = (what: string, check: Effect.Effect<boolean>) =>
      live
        ? Effect.gen(function*() {
          const deadline = Date.now() + 10_000
          while (!(yield* check)) {
            if (Date.now() > deadline) return assert.fail(`timed out waiting for ${what}`)
            yield* Effect.sleep("20 millis")
          }
        })
        : Effect.flatMap(check, (holds) => Effect.sync(() => assert.isTrue(holds, what)))

    /** Broker state that must keep holding: checked for 300 ms of real time (once under the TestClock). */
    const stays = (what: string, check: Effect.Effect<boolean>) =>
      live
        ? Effect.gen(function*() {
          const end = Date.now() + 300
          do {
            assert.isTrue(yield* check, what)
            yield* Effect.sleep("25 millis")
          } while (Date.now() < end)
        })
        : Effect.flatMap(check, (holds) => Effect.sync(() => assert.isTrue(holds, what)))

    /** Lets `ms` pass: real time on a live broker, the TestClock moved on otherwise. */
    const pause = (ms: number) => live ? Effect.withClock(Effect.sleep(ms), liveClock) : TestClock.adjust(ms)

    /** Moves the TestClock on (in steps, so timers set on the way fire in order); real time passes by itself. */
    const advance = (ms: number, step = ms) =>
      live ? Effect.void : Effect.gen(function*() {
        for (let done = 0; done < ms; done += step) yield* TestClock.adjust(Math.min(step, ms - done))
      })

    const put = (id: string, step: string, input: Record<string, unknown> = {}) => instance.put(id, step, { id, ...input })
    /** Lets the gate step of task `id` finish: its `nth` run only, or every run of it. */
    const release = (id: string, nth?: number) => Deferred.succeed(gate(`${id}#${nth ?? "all"}`), undefined)
    const reply = (id: string) =>
      Effect.map(until(`the reply to ${id}`, (o) => o.repliesTo(id).length > 0), () => observed.repliesTo(id)[0]!)

    return {
      instance,
      observed,
      live,
      start,
      transportOf,
      until,
      within,
      eventually,
      stays,
      advance,
      pause,
      put,
      release,
      reply
    }
  })

type World = Effect.Effect.Success<ReturnType<typeof makeWorld>>

const liveClock = Clock.make()

/** The error a fiber failed with (squashed). */
const failureOf = (exit: Exit.Exit<unknown, unknown>) =>
  Exit.isFailure(exit) ? Cause.squash(exit.cause) : assert.fail("expected a failure, got a success")

const tagOf = (error: unknown) => (error as { _tag?: unknown } | null)?._tag

// ---------------------------------------------------------------------------------------------
// The rules
// ---------------------------------------------------------------------------------------------

interface Rule {
  readonly title: string
  readonly optional?: OptionalRule
  readonly run: (world: World) => Effect.Effect<void, unknown, Scope.Scope>
}

const rules = (backend: Backend): ReadonlyArray<Rule> => [
  {
    title: "L1 registers before any poll: no task is taken before the registration succeeds",
    run: (w) =>
      Effect.gen(function*() {
        yield* w.put("t1", "gate")
        const hold = yield* Deferred.make<void>()
        const a = yield* w.start("A", { hold })
        yield* w.until("the transport to register", (o) => o.has("transport-registered", "A"))
        // the transport registered but the runtime does not have the registration yet
        assert.isFalse(w.observed.has("poll", "A"))
        if (w.instance.pending !== undefined) {
          yield* w.stays("the task to wait on the broker", Effect.map(w.instance.pending("gate"), (n) => n === 1))
        }
        assert.isFalse(w.observed.has("start"))
        yield* Deferred.succeed(hold, undefined)
        yield* w.until("t1 to start", (o) => o.has("start", "A", "t1"))
        assert.isTrue(w.observed.before(["registered", "A"], ["poll", "A"]), "registered before poll")
        assert.isTrue(w.observed.before(["poll", "A"], ["start", "A", "t1"]), "poll before start")
        yield* w.release("t1")
        assert.strictEqual((yield* w.reply("t1")).status, "completed")
        yield* a.worker.stop
        yield* Fiber.join(a.running)
      })
  },
  {
    title: "L2 a failed registration fails run with that error, and nothing is ever deregistered",
    run: (w) =>
      Effect.gen(function*() {
        const layer = yield* w.instance.failRegistration
        const a = yield* w.start("A", { layer })
        const exit = yield* w.within("run to fail", Fiber.await(a.running))
        const error = failureOf(exit)
        assert.strictEqual(tagOf(error), "RegistrationError", String(error))
        assert.deepStrictEqual(w.observed.events.map((e) => e.op), ["register", "register-failed"])
        // a stop afterwards shares the (clean) outcome and sends nothing either
        yield* a.worker.stop
        assert.isFalse(w.observed.has("deregister"))
        if (w.instance.deregistrations !== undefined) assert.strictEqual(yield* w.instance.deregistrations, 0)
        if (w.instance.registered !== undefined) assert.isFalse(yield* w.instance.registered)
      })
  },
  {
    title: "L3 shutdown drains accepted work within one deadline, interrupts the rest at it, then deregisters once",
    run: (w) =>
      Effect.gen(function*() {
        const deadline = w.live ? 2_500 : 10_000
        const a = yield* w.start("A", { concurrency: 2, shutdownTimeout: deadline })
        yield* w.put("t1", "gate")
        yield* w.put("t2", "gate")
        yield* w.until("t1 and t2 to start", (o) => o.has("start", "A", "t1") && o.has("start", "A", "t2"))
        if (w.instance.registered !== undefined) assert.isTrue(yield* w.instance.registered)
        const began = Date.now()
        const stopping = yield* Effect.fork(a.worker.stop)
        // t1 finishes inside the deadline: answered before anything is deregistered
        yield* w.release("t1")
        assert.strictEqual((yield* w.reply("t1")).status, "completed")
        assert.isNull(stopping.unsafePoll())
        assert.isFalse(w.observed.has("deregister"))
        assert.isFalse(w.observed.has("interrupted", "A", "t2"))
        if (!w.live) {
          yield* TestClock.adjust(deadline - 1)
          assert.isNull(stopping.unsafePoll())
          assert.isFalse(w.observed.has("interrupted", "A", "t2"))
          yield* TestClock.adjust(1)
        }
        yield* w.within("the shutdown", Fiber.join(stopping))
        if (w.live) {
          const took = Date.now() - began
          assert.isAtLeast(took, deadline - 100, "the drain waited for the deadline")
          assert.isBelow(took, deadline + 2_000, "one deadline for the whole drain")
        }
        // t2 was still running at the deadline: interrupted, not answered
        assert.isTrue(w.observed.has("interrupted", "A", "t2"))
        assert.deepStrictEqual(w.observed.repliesTo("t2"), [])
        assert.strictEqual(w.observed.count("deregister", "A"), 1)
        assert.isTrue(w.observed.before(["complete-ok", "A", "t1"], ["deregister", "A"]), "complete-ok before deregister")
        assert.isTrue(w.observed.before(["interrupted", "A", "t2"], ["given-back", "A", "t2"]), "interrupted before given-back")
        assert.isTrue(w.observed.before(["given-back", "A", "t2"], ["deregister", "A"]), "given-back before deregister")
        if (w.instance.pending !== undefined && backend.giveBack === "release") {
          yield* w.eventually("t2 back on the broker", Effect.map(w.instance.pending("gate"), (n) => n === 1))
        }
        if (w.instance.deregistrations !== undefined) assert.strictEqual(yield* w.instance.deregistrations, 1)
        if (w.instance.registered !== undefined) assert.isFalse(yield* w.instance.registered)
        yield* Fiber.join(a.running)
        assert.strictEqual(w.observed.repliesTo("t1").length, 1)
      })
  },
  {
    title: "L4 stop is single-flight: concurrent and later stops share one outcome and one deregistration",
    run: (w) =>
      Effect.gen(function*() {
        const a = yield* w.start("A")
        yield* w.put("t1", "gate")
        yield* w.until("t1 to start", (o) => o.has("start", "A", "t1"))
        const stops = yield* Effect.fork(Effect.all([a.worker.stop, a.worker.stop, a.worker.stop], { concurrency: "unbounded" }))
        yield* w.release("t1")
        yield* w.within("the stops", Fiber.join(stops))
        yield* a.worker.stop
        yield* Fiber.join(a.running)
        assert.strictEqual(w.observed.count("deregister", "A"), 1)
        if (w.instance.deregistrations !== undefined) assert.strictEqual(yield* w.instance.deregistrations, 1)
        assert.strictEqual((yield* w.reply("t1")).status, "completed")
        assert.strictEqual(w.observed.repliesTo("t1").length, 1)
      })
  },
  {
    title: "L4 a worker that serves nothing (a user's first try of a connection) registers, and its stop ends clean",
    run: (w) =>
      Effect.gen(function*() {
        const a = yield* w.start("A", { servesNothing: true })
        yield* w.until("the registration", (o) => o.has("registered", "A"))
        yield* a.worker.stop
        yield* Fiber.join(a.running)
        assert.strictEqual(w.observed.count("deregister", "A"), 1)
        assert.strictEqual(w.observed.count("deregister-failed", "A"), 0)
        if (w.instance.deregistrations !== undefined) assert.strictEqual(yield* w.instance.deregistrations, 1)
        if (w.instance.registered !== undefined) assert.isFalse(yield* w.instance.registered)
      })
  },
  {
    title: "L4 a failed deregistration is every stop's and run's outcome, and is not retried",
    optional: "deregistrationFault",
    run: (w) =>
      Effect.gen(function*() {
        yield* w.instance.failDeregistration!
        const a = yield* w.start("A")
        yield* w.until("the registration", (o) => o.has("poll", "A"))
        const [first, second] = yield* Effect.all([Effect.flip(a.worker.stop), Effect.flip(a.worker.stop)], {
          concurrency: "unbounded"
        })
        const later = yield* Effect.flip(a.worker.stop)
        const fromRun = failureOf(yield* Fiber.await(a.running))
        for (const error of [first, second, later, fromRun]) assert.strictEqual(tagOf(error), "DeregistrationError")
        assert.strictEqual(first, second)
        assert.strictEqual(first, later)
        assert.strictEqual(w.observed.count("deregister", "A"), 1)
        assert.strictEqual(w.observed.count("deregister-failed", "A"), 1)
      })
  },
  {
    title: "L5 an external stop ends runUntil with an interruption, once accepted work has drained",
    run: (w) =>
      Effect.gen(function*() {
        const a = yield* w.start("A", { until: Effect.never })
        yield* w.put("t1", "gate")
        yield* w.until("t1 to start", (o) => o.has("start", "A", "t1"))
        const stopping = yield* Effect.fork(a.worker.stop)
        assert.isNull(a.running.unsafePoll())
        yield* w.release("t1")
        yield* w.within("the stop", Fiber.join(stopping))
        const exit = yield* Fiber.await(a.running)
        assert.isTrue(Exit.isInterrupted(exit), `runUntil ended with ${String(exit)}`)
        assert.isTrue(w.observed.before(["complete-ok", "A", "t1"], ["deregister", "A"]), "complete-ok before deregister")
        assert.strictEqual((yield* w.reply("t1")).status, "completed")
      })
  },
  {
    title: "L10 a worker runs once: a second run, or a run after stop, fails with WorkerStateError",
    run: (w) =>
      Effect.gen(function*() {
        const a = yield* w.start("A")
        yield* w.until("the registration", (o) => o.has("poll", "A"))
        const again = yield* Effect.flip(Effect.provide(a.worker.run, w.transportOf("A-again")))
        assert.strictEqual(tagOf(again), "WorkerStateError")
        assert.strictEqual((again as Worker.WorkerStateError).reason, "already-running")
        yield* a.worker.stop
        yield* Fiber.join(a.running)
        const after = yield* Effect.flip(Effect.provide(a.worker.run, w.transportOf("A-again")))
        assert.strictEqual((after as Worker.WorkerStateError).reason, "already-running")
        // a worker stopped before it ran never runs
        const fresh = yield* Effect.orDie(Worker.make({ steps: [] }))
        yield* fresh.stop
        const stopped = yield* Effect.flip(Effect.provide(fresh.run, w.transportOf("B")))
        assert.strictEqual((stopped as Worker.WorkerStateError).reason, "stopped")
        assert.isFalse(w.observed.has("register", "A-again"))
        assert.isFalse(w.observed.has("register", "B"))
        assert.strictEqual(w.observed.count("register", "A"), 1)
      })
  },
  {
    title: "a task taken is a task started: with concurrency 1 the second task stays on the broker, for another worker",
    run: (w) =>
      Effect.gen(function*() {
        yield* w.put("t1", "gate")
        yield* w.put("t2", "gate")
        const a = yield* w.start("A", { concurrency: 1 })
        yield* w.until("A to start a task", (o) => o.has("start", "A"))
        const first = w.observed.has("start", "A", "t1") ? "t1" : "t2"
        const second = first === "t1" ? "t2" : "t1"
        if (w.instance.pending !== undefined) {
          yield* w.stays("the second task to wait on the broker", Effect.map(w.instance.pending("gate"), (n) => n === 1))
        }
        assert.deepStrictEqual(w.observed.startedBy(second), [])
        // another worker takes it while A still runs the first
        const b = yield* w.start("B", { concurrency: 1 })
        yield* w.until(`B to start ${second}`, (o) => o.has("start", "B", second))
        assert.isFalse(w.observed.has("done", "A", first))
        yield* w.release(first)
        yield* w.release(second)
        assert.strictEqual((yield* w.reply(first)).status, "completed")
        assert.strictEqual((yield* w.reply(second)).status, "completed")
        yield* Effect.all([a.worker.stop, b.worker.stop], { concurrency: "unbounded" })
        assert.deepStrictEqual(w.observed.startedBy(first), ["A"])
        assert.deepStrictEqual(w.observed.startedBy(second), ["B"])
        assert.strictEqual(w.observed.repliesTo(first).length, 1)
        assert.strictEqual(w.observed.repliesTo(second).length, 1)
      })
  },
  {
    title: "leases are renewed while a task runs: a step longer than the lease runs once, with another worker polling",
    optional: "leaseRenewal",
    run: (w) =>
      Effect.gen(function*() {
        // the short lease is two seconds (TestClock: renewed every second); the step runs more than twice as long
        const runs = w.live ? 4_500 : 3_500
        const a = yield* w.start("A", { tuning: { shortLease: true } })
        yield* w.put("t1", "sleepy", { ms: runs })
        yield* w.until("t1 to start", (o) => o.has("start", "A", "t1"))
        const b = yield* w.start("B", { tuning: { shortLease: true } })
        yield* w.until("B to poll", (o) => o.has("poll", "B"))
        yield* w.advance(runs, 250)
        yield* w.until("t1 to be answered, or to start again", (o) => o.repliesTo("t1").length > 0 || o.startedBy("t1").length > 1)
        assert.deepStrictEqual(w.observed.startedBy("t1"), ["A"], "a step longer than its lease was run again")
        assert.strictEqual((yield* w.reply("t1")).status, "completed")
        if (w.instance.renewals !== undefined) assert.isAtLeast(yield* w.instance.renewals, 3)
        if (w.instance.pending !== undefined) assert.strictEqual(yield* w.instance.pending("sleepy"), 0)
        yield* Effect.all([a.worker.stop, b.worker.stop], { concurrency: "unbounded" })
        assert.deepStrictEqual(w.observed.startedBy("t1"), ["A"])
        assert.strictEqual(w.observed.repliesTo("t1").length, 1)
      })
  },
  {
    title: "a lease another claimant took over is given up: lost once, renewed no more, and the worker goes on",
    optional: "leaseLoss",
    run: (w) =>
      Effect.gen(function*() {
        const a = yield* w.start("A", { tuning: { shortLease: true } })
        const task = yield* w.put("t1", "gate")
        yield* w.until("t1 to start", (o) => o.has("start", "A", "t1"))
        yield* w.until("a renewal of t1's lease", (o) => o.has("renew", "A", "t1"))
        yield* w.instance.loseLease!(task)
        yield* w.until("the renewal that finds the lease lost", (o) => o.has("lease-lost", "A", "t1"))
        const renewals = w.observed.count("renew", "A", "t1")
        // more than two intervals (the short lease is renewed every second or less: a third of it on SQL and SQS, half on
        // BullMQ): a lease gone for good is not tried again
        yield* w.pause(2_500)
        assert.strictEqual(w.observed.count("renew", "A", "t1"), renewals, "a lost lease was renewed again")
        assert.strictEqual(w.observed.count("lease-lost", "A", "t1"), 1)
        // the worker goes on: the handler ends, and the next task is served
        yield* w.release("t1")
        yield* w.until("t1's handler to end", (o) => o.has("done", "A", "t1"))
        yield* w.put("t2", "gate")
        yield* w.release("t2")
        assert.strictEqual((yield* w.reply("t2")).status, "completed")
        yield* a.worker.stop
      })
  },
  {
    title: "a cancel announced for a run reaches its running handler, and the task is answered as cancelled",
    optional: "cancel",
    run: (w) =>
      Effect.gen(function*() {
        const a = yield* w.start("A")
        const task = yield* w.put("t1", "cancellable")
        yield* w.until("t1 to start", (o) => o.has("start", "A", "t1"))
        yield* w.instance.cancel!(task)
        yield* w.until("the cancel to reach the handler", (o) => o.has("cancel-seen", "A", "t1"))
        const answered = yield* w.reply("t1")
        assert.strictEqual(answered.status, "failed")
        assert.isTrue(answered.cancelled, `answered ${JSON.stringify(answered)}`)
        // the worker goes on with the next task
        yield* w.put("t2", "gate")
        yield* w.release("t2")
        assert.strictEqual((yield* w.reply("t2")).status, "completed")
        yield* a.worker.stop
        assert.strictEqual(w.observed.repliesTo("t1").length, 1)
      })
  },
  {
    title: `interrupted work is given back at the shutdown deadline (${backend.giveBack}) and redelivered to another worker`,
    run: (w) =>
      Effect.gen(function*() {
        const deadline = w.live ? 500 : 1_000
        const a = yield* w.start("A", { shutdownTimeout: deadline })
        yield* w.put("t1", "gate")
        yield* w.until("t1 to start", (o) => o.has("start", "A", "t1"))
        const stopping = yield* Effect.fork(a.worker.stop)
        if (!w.live) {
          yield* TestClock.adjust(deadline - 1)
          assert.isFalse(w.observed.has("interrupted", "A", "t1"))
          yield* TestClock.adjust(1)
        }
        yield* w.within("the shutdown", Fiber.join(stopping))
        assert.isTrue(w.observed.has("interrupted", "A", "t1"))
        assert.isTrue(w.observed.before(["given-back", "A", "t1"], ["deregister", "A"]), "given-back before deregister")
        assert.deepStrictEqual(w.observed.repliesTo("t1"), [])
        if (w.instance.afterGiveBack !== undefined) yield* w.instance.afterGiveBack
        if (w.instance.pending !== undefined) {
          yield* w.eventually("t1 back on the broker", Effect.map(w.instance.pending("gate"), (n) => n === 1))
        }
        const b = yield* w.start("B")
        yield* w.until("B to start t1", (o) => o.has("start", "B", "t1"))
        yield* w.release("t1")
        const answered = yield* w.reply("t1")
        assert.strictEqual(answered.status, "completed")
        assert.deepStrictEqual(answered.output, { id: "t1", by: "B" })
        yield* b.worker.stop
        assert.deepStrictEqual(w.observed.startedBy("t1"), ["A", "B"])
        assert.strictEqual(w.observed.repliesTo("t1").length, 1)
      })
  },
  {
    title: "a reply that fails to go out is retried, never lost: the task is answered exactly once",
    run: (w) =>
      Effect.gen(function*() {
        const fault = w.instance.replyFault
        if (fault === undefined) return assert.fail(`${backend.name} declares no reply fault`)
        const a = yield* w.start("A")
        yield* w.put("t1", "gate")
        yield* w.until("t1 to start", (o) => o.has("start", "A", "t1"))
        yield* fault.arm
        yield* w.release("t1")
        yield* w.within(
          "a failed reply attempt",
          fault.failed ?? w.observed.until((o) => o.has("complete-failed", "A", "t1"))
        )
        if (fault.holdsUntilDisarmed) assert.deepStrictEqual(w.observed.repliesTo("t1"), [])
        yield* fault.disarm
        yield* w.advance(2_000, 100)
        const answered = yield* w.reply("t1")
        assert.strictEqual(answered.status, "completed")
        assert.deepStrictEqual(answered.output, { id: "t1", by: "A" })
        if (w.instance.pending !== undefined) assert.strictEqual(yield* w.instance.pending("gate"), 0)
        yield* a.worker.stop
        yield* Fiber.join(a.running)
        assert.strictEqual(w.observed.repliesTo("t1").length, 1)
        assert.deepStrictEqual(w.observed.startedBy("t1"), ["A"])
      })
  },
  {
    title: "what a handler logs or returns that JSON cannot carry is answered once, never given back to run again",
    run: (w) =>
      Effect.gen(function*() {
        const a = yield* w.start("A")
        yield* w.put("t1", "odd", { odd: "logs" })
        yield* w.put("t2", "odd", { odd: "deep" })
        // data logged through ctx.log (a BigInt) is an event the step result carries where the broker keeps them
        const logged = yield* w.reply("t1")
        assert.strictEqual(logged.status, "completed", logged.error)
        assert.deepStrictEqual(logged.output, { id: "t1", by: "A" })
        // a value too deep for JSON: the step fails, for good
        assert.strictEqual((yield* w.reply("t2")).status, "failed")
        yield* a.worker.stop
        yield* Fiber.join(a.running)
        for (const id of ["t1", "t2"]) {
          assert.deepStrictEqual(w.observed.startedBy(id), ["A"], `${id} ran once`)
          assert.strictEqual(w.observed.repliesTo(id).length, 1, `${id} answered once`)
          assert.isFalse(w.observed.has("given-back", "A", id), `${id} was not given back`)
        }
        if (w.instance.pending !== undefined) assert.strictEqual(yield* w.instance.pending("odd"), 0)
      })
  },
  {
    title: "a reply still refused after every retry is not lost: the broker redelivers the task, and it is answered once",
    optional: "redeliveryAfterLostReply",
    run: (w) =>
      Effect.gen(function*() {
        const refusal: ReplyRefusal | undefined = w.instance.replyRefusal ?? w.instance.replyFault
        if (refusal === undefined) return assert.fail(`${backend.name} declares no reply refusal`)
        const a = yield* w.start("A", { tuning: { shortLease: true } })
        yield* w.put("t1", "gate")
        yield* w.until("t1 to start", (o) => o.has("start", "A", "t1"))
        yield* refusal.arm
        yield* w.release("t1", 1)
        if (refusal.gaveUp !== undefined) yield* w.within("the transport to give up on the reply", refusal.gaveUp)
        if (w.instance.afterGiveBack !== undefined) yield* w.instance.afterGiveBack
        // every reply refused: once the worker gave up and the task's lease ran out, the task is taken again
        yield* w.until("t1 to be taken again", (o) => o.startedBy("t1").length === 2)
        if (refusal.gaveUp === undefined) assert.isAtLeast(w.observed.count("complete-failed", "A", "t1"), 1)
        assert.deepStrictEqual(w.observed.repliesTo("t1"), [])
        yield* refusal.disarm
        yield* w.release("t1", 2)
        const answered = yield* w.reply("t1")
        assert.strictEqual(answered.status, "completed")
        assert.deepStrictEqual(w.observed.startedBy("t1"), ["A", "A"])
        yield* a.worker.stop
        yield* Fiber.join(a.running)
        assert.strictEqual(w.observed.repliesTo("t1").length, 1)
      })
  }
]


/**
 * The contract for one backend: one `it` per rule (on the TestClock or live, as the backend says);
 * a rule the backend declares unsupported is a skipped test whose title names the reason.
 */
export const transportContract = (backend: Backend): void => {
  describe(`transport contract: ${backend.name}`, () => {
    for (const rule of rules(backend)) {
      const reason = rule.optional === undefined ? undefined : backend.unsupported[rule.optional]
      if (reason !== undefined) {
        it.skip(`${rule.title} [not supported: ${reason}]`, () => {})
        continue
      }
      const test = backend.clock === "test" ? it.scoped : it.scopedLive
      test(rule.title, () => Effect.flatMap(makeWorld(backend), rule.run))
    }
  })
}
