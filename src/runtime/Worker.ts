/**
 * The worker runtime: registration, pollers, dispatch under concurrency pools, heartbeats,
 * drain-with-deadline and single-flight deregistration, over any {@link Transport}.
 *
 * Lifecycle guarantees (L1–L10): registration happens before any poll and a failed one is never
 * followed by a deregistration; shutdown stops the pollers, drains accepted work within one
 * `shutdownTimeout` deadline, interrupts what is still running at it, then deregisters exactly once;
 * `stop` is single-flight and every caller shares its outcome; something that cannot be stopped fails
 * the shutdown by name and leaves the registration in place; a worker instance runs once.
 *
 * The parts live in `internal/`: `pools` (permits per declared pool), `dispatch` (poll, serve,
 * answer), `leases` (one refresher for every running task's lease), `cancellation`, `shutdown` and
 * `status`. This module composes them for one run.
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberSet from "effect/FiberSet"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Schedule from "effect/Schedule"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { randomBytes } from "node:crypto"
import { hostname } from "node:os"
import * as DurableWorkflow from "../core/DurableWorkflow.js"
import { messageOf, withReason } from "../core/internal/errors.js"
import * as FailureRun from "../core/internal/failureRun.js"
import { withEventLogger } from "../core/internal/stepLogger.js"
import * as Step from "../core/Step.js"
import type * as Workflow from "../core/Workflow.js"
import { type HandlerKind, type Handlers, names, type Protocol } from "../seam/Protocol.js"
import { type Registration, RegistrationLanded, RegistrationWaits, Transport, type WorkerDescription, type WorkerStatus } from "../seam/Transport.js"
import * as WorkerMetrics from "../seam/WorkerMetrics.js"
import * as ConcurrencyController from "../services/ConcurrencyController.js"
import { asLoop, makeDispatcher, type ServingLabel } from "./internal/dispatch.js"
import { serveHealth } from "./internal/health.js"
import { makeLeases } from "./internal/leases.js"
import { makePools } from "./internal/pools.js"
import { makeReachability } from "./internal/reachability.js"
import { deregister, shutdown } from "./internal/shutdown.js"
import { type Lifecycle, makeStatus, type WorkerState } from "./internal/status.js"
import { checkDuration } from "../core/internal/options.js"
import { type DurationOption, resolve, WorkerConfig, WorkerConfigError, type WorkerOptions } from "./WorkerConfig.js"
import {
  RunUntilTimeoutError,
  type RunError,
  type ShutdownError,
  WorkerLoopError,
  WorkerStateError
} from "./WorkerError.js"
import * as ReplayCapture from "../core/ReplayCapture.js"

export * from "./WorkerError.js"
export { type HealthOptions, type TaskEnd, type TaskOutcome, WorkerConfigError, type WorkerOptions } from "./WorkerConfig.js"

/**
 * What a worker serves, and how (options given here win over the environment's `WorkerConfig`).
 *
 * @since 0.2.0
 * @category models
 */
export interface WorkerDefinition<R = never> extends WorkerOptions {
  readonly steps?: Iterable<Step.Step<R>> | undefined
  /** Coordinator-driven workflows whose turns this worker replays. */
  readonly workflows?: Iterable<Workflow.Workflow<any, any, R>> | undefined
  /** Durable Workflow server workflows this worker replays (its activities are `steps`). */
  readonly durableWorkflows?: Iterable<DurableWorkflow.DurableWorkflow<R>> | undefined
}

/**
 * A worker. Build it with {@link make}, then `run` it with a {@link Transport} layer provided.
 *
 * @since 0.1.0
 * @category models
 */
export interface Worker<R = never> {
  readonly id: string
  /** What the worker serves, by name (what its transport's protocol runs deliveries against). */
  readonly handlers: Handlers<R>
  /**
   * Registers, polls and runs tasks until `stop` (or an interruption, which stops gracefully), then
   * drains and deregisters. Fails with the registration error, a loop error (with any shutdown
   * error as its `cause`), or the shutdown error.
   */
  readonly run: Effect.Effect<void, RunError, Transport | R>
  /**
   * Runs the worker until `until` succeeds (then stops and returns its value), fails or dies (then
   * stops and fails with its cause), or `timeout` passes (then stops and fails with
   * {@link RunUntilTimeoutError}). An external `stop` makes it fail with
   * an interruption once accepted work has drained or been interrupted. A `timeout` that is not a
   * duration of zero or more fails it with a `WorkerConfigError` before anything runs.
   */
  readonly runUntil: <A, E, R2>(
    until: Effect.Effect<A, E, R2>,
    options?: { readonly timeout?: DurationOption }
  ) => Effect.Effect<A, E | RunError | RunUntilTimeoutError | WorkerConfigError, Transport | R | R2>
  /** Single-flight graceful stop: every caller shares one shutdown and its outcome. */
  readonly stop: Effect.Effect<void, ShutdownError>
  /** Like `stop`, but the drain deadline is now: running work is interrupted at once. */
  readonly forceStop: Effect.Effect<void, ShutdownError>
  /** The status published in heartbeats. */
  readonly status: Effect.Effect<WorkerStatus>
  /**
   * Waits until the run has registered; fails with the run's error when registration failed. A run
   * that never starts (its transport's layer failed to build, before the run's first step) leaves
   * it waiting: wait on the run too, as `layer` does.
   */
  readonly registered: Effect.Effect<void, RunError>
}

/** A worker id of its own for every worker, so two workers of one process never share a registration. */
const defaultWorkerId = () => `ts-${hostname()}-${process.pid}-${randomBytes(4).toString("hex")}`

/** How many names of each kind the registration's line lists. */
const HANDLERS_LISTED = 10

const KINDS: ReadonlyArray<readonly [HandlerKind, string]> = [
  ["steps", "steps"],
  ["workflows", "workflows"],
  ["durableWorkflows", "durable workflows"]
]

/** The kinds the worker has handlers of, each with its label and its names (sorted). */
const given = (handlers: Handlers<unknown>) =>
  KINDS.map(([kind, label]) => ({ kind, label, named: names(handlers[kind]) })).filter(({ named }) => named.length > 0)

/** The first {@link HANDLERS_LISTED} of `items`, then how many more: `"a", "b" and 3 more`. */
const firstOf = (items: ReadonlyArray<string>): string => {
  const more = items.length - HANDLERS_LISTED
  return `${items.slice(0, HANDLERS_LISTED).join(", ")}${more > 0 ? ` and ${more} more` : ""}`
}

/** A kind's label and its first names, quoted, then how many more: `steps "a", "b" and 3 more`. */
const listed = ({ label, named }: { readonly label: string; readonly named: ReadonlyArray<string> }): string =>
  `${label} ${firstOf(named.map((name) => JSON.stringify(name)))}`

/**
 * The names the worker has handlers for, as its registration's line says them (`steps "a", "b";
 * workflows "c"`). A name mistyped, or served on another prefix, takes no task and fails nothing:
 * the line is where an operator compares the names with the engine's.
 */
const handlerNames = (handlers: Handlers<unknown>): string => given(handlers).map(listed).join("; ")

/**
 * The warning for the kinds of handler the worker was given that its transport's protocol never
 * runs (their tasks would never come), if any.
 */
const notServed = (handlers: Handlers<unknown>, protocol: Protocol<unknown>): string | undefined => {
  const serves = protocol.serves
  if (serves === undefined) return undefined
  const unserved = given(handlers).filter(({ kind }) => !serves.includes(kind))
  if (unserved.length === 0) return undefined
  const runs = KINDS.filter(([kind]) => serves.includes(kind)).map(([, label]) => label).join(" and ")
  return `${unserved.map(listed).join("; ")} will take no task: the ${protocol.name} protocol runs ${runs} only`
}

type Phase = "idle" | "running" | "ran" | "stopped-before-run"

/**
 * Builds a worker. Fails on an invalid or unknown option (naming it), duplicate names, or a Durable
 * Workflow definition that changed under this worker id.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = <R = never>(
  definition: WorkerDefinition<R>
): Effect.Effect<Worker<R>, WorkerConfigError | Step.DuplicateStepError | DurableWorkflow.WorkflowDefinitionChanged> =>
  Effect.gen(function*() {
    const { durableWorkflows: durable, steps: stepList, workflows: workflowList, ...options } = definition
    const config = yield* resolve(options, yield* WorkerConfig)
    const steps = yield* Step.registry(stepList ?? [])
    const workflows = yield* Step.registry(workflowList ?? [], "workflow")
    const durableWorkflows = yield* Step.registry(durable ?? [], "durable workflow")
    const handlers: Handlers<R> = { steps, workflows, durableWorkflows }
    const servesNothing = steps.size + workflows.size + durableWorkflows.size === 0
    const workerId = config.workerId ?? defaultWorkerId()
    // a Durable Workflow definition may not change under a worker id within a process
    yield* DurableWorkflow.guardDefinitions(workerId, handlers.durableWorkflows.values())
    const startedAt = yield* Clock.currentTimeMillis
    const phase = yield* Ref.make<Phase>("idle")
    const stopRequested = yield* Deferred.make<void>()
    const forceRequested = yield* Deferred.make<void>()
    const shutdownOutcome = yield* Deferred.make<void, ShutdownError>()
    /** Done once the registration succeeded, or failed with the run's error. */
    const registered = yield* Deferred.make<void, RunError>()
    const pools = yield* makePools(config)
    const controllerRef = yield* Ref.make(Option.none<ConcurrencyController.ConcurrencyController["Type"]>())
    const lifecycleState = yield* Ref.make<Lifecycle>({ state: "starting" })
    const enter = (state: WorkerState, failure?: string) =>
      Ref.set(lifecycleState, failure === undefined ? { state } : { state, failure })
    const status = makeStatus(config, pools, controllerRef, lifecycleState)
    const reachability = yield* makeReachability
    /** Ready while running and the broker can be reached; the probe's body says which state, and why not. */
    const readiness = Effect.gen(function*() {
      const { state } = yield* Ref.get(lifecycleState)
      if (state === "registering") {
        const waiting = yield* reachability.waiting
        return { ready: false, state: Option.isNone(waiting) ? state : `${state}; ${waiting.value}` }
      }
      if (state !== "running") return { ready: false, state }
      const away = yield* reachability.unreachable
      return Option.isNone(away) ? { ready: true, state } : { ready: false, state: `${state}; broker unreachable: ${away.value}` }
    })
    const description: WorkerDescription = {
      workerId,
      buildId: config.buildId,
      handlers,
      startedAt,
      pollTimeout: config.pollTimeout,
      shutdownTimeout: config.shutdownTimeout,
      status
    }

    /**
     * Beats one interval apart (the worker's `heartbeatInterval`, else the transport's), the first
     * one interval in; an interval a beat answers with applies from the next wait on. One beat at a
     * time, each left to finish however long it takes: a beat still unanswered when the next is due
     * has failed ("no answer"), and the worker is unready until it is answered. A broker that accepts
     * and does not answer fails no call otherwise, so readiness and the log would not know it is away.
     * A beat holds `beating` while it is in flight, and a stop leaves it to end (a request sent cannot
     * be recalled): the deregistration waits for it, so that no beat reaches the broker after it.
     */
    const heartbeatLoop = (registration: Registration, beating: Effect.Semaphore): Effect.Effect<never, never> =>
      Option.match(registration.heartbeat, {
        onNone: () => Effect.never,
        onSome: (heartbeat) =>
          Effect.gen(function*() {
            const interval = yield* Ref.make(config.heartbeatInterval ?? heartbeat.interval)
            const failures = FailureRun.make()
            const failed = (reason: string) =>
              failures.failed(
                `worker heartbeat failed: ${reason} (until a beat works again, further failures are debug lines)`,
                (n) => `worker heartbeat failed (${n} beats in a row): ${reason}`
              )
            const beat = status.pipe(
              Effect.flatMap(heartbeat.beat),
              Effect.matchEffect({
                onSuccess: (next) =>
                  Effect.all([
                    failures.worked((n) => `worker heartbeat works again, after ${n} failed beat(s)`),
                    Option.isSome(next) ? Ref.set(interval, next.value) : Effect.void
                  ]),
                // a broker that refuses the beat answers: its polls tell readiness about it
                onFailure: (error) => failed(error.message)
              }),
              Effect.ensuring(reachability.heartbeatWorked),
              beating.withPermits(1)
            )
            const unanswered = (bound: Duration.Duration) => {
              const reason = `no answer within ${Duration.format(bound)}`
              return Effect.zipRight(reachability.heartbeatFailed(reason), failed(reason))
            }
            const running = yield* Ref.make(Option.none<Fiber.RuntimeFiber<unknown>>())
            const due = Effect.gen(function*() {
              const bound = yield* Ref.get(interval)
              const previous = yield* Ref.get(running)
              if (Option.isSome(previous) && Option.isNone(yield* Fiber.poll(previous.value))) return yield* unanswered(bound)
              // not the loop's child: the loop's stop does not cut a beat in flight, the deregistration waits for it
              const fiber = yield* Effect.forkDaemon(beat)
              yield* Ref.set(running, Option.some(fiber))
              // its answer, and the interval it may carry, comes before the next wait; up to an interval
              const answered = yield* Fiber.await(fiber).pipe(Effect.timeout(bound), Effect.option)
              if (Option.isNone(answered)) yield* unanswered(bound)
              // a failed beat was told above; a defect (a bug in the transport's beat) ends the loop
              else if (Exit.isFailure(answered.value) && Cause.isDie(answered.value.cause)) yield* Effect.failCause(answered.value.cause)
            })
            // `Effect.schedule` waits before each run, the first one included
            yield* Effect.schedule(due, Schedule.forever.pipe(Schedule.addDelayEffect(() => Ref.get(interval))))
            return yield* Effect.never
          })
      })

    /**
     * Samples what the broker and the gate say every `metricsInterval`, the first sample at once:
     * each poller's backlog, the tasks deferred, and the saturation, (tasks holding a slot, the
     * deferred included, + backlog) / the slots of the pools polled.
     */
    const sampleMetrics = (
      registration: Registration,
      controller: ConcurrencyController.ConcurrencyController["Type"]
    ): Effect.Effect<never> => {
      const polled = new Set(registration.pollers.map((poller) => poller.pool.name))
      const backlogs = registration.pollers.map((poller) => ({
        poller,
        gauge: WorkerMetrics.backlog.pipe(Metric.tagged("poller", poller.name))
      }))
      const once = Effect.gen(function*() {
        let backlog = 0
        for (const { gauge, poller } of backlogs) {
          const waiting = yield* poller.backlog.pipe(
            Effect.tapError((error) => Effect.logDebug(withReason(`could not read the backlog of ${poller.name}`, error))),
            Effect.orElseSucceed(() => Option.none<number>())
          )
          if (Option.isSome(waiting)) {
            backlog += waiting.value
            yield* Metric.set(gauge, waiting.value)
          }
        }
        let slots = 0
        let holding = 0
        let running = 0
        for (const [pool, state] of Object.entries(yield* pools.slots)) {
          running += state.running
          if (!polled.has(pool)) continue
          slots += state.limit
          holding += state.running
        }
        // tasks holding a slot that the controller has not admitted are waiting at the gate (read
        // without the snapshot, which samples memory)
        yield* Metric.set(WorkerMetrics.deferred, Math.max(0, running - (yield* controller.inFlight)))
        yield* Metric.set(WorkerMetrics.saturation, slots > 0 ? (holding + backlog) / slots : 0)
      })
      return Effect.repeat(once, Schedule.spaced(config.metricsInterval)).pipe(Effect.zipRight(Effect.never))
    }

    /**
     * One run. Its resources live in two scopes: `resources` (the registration's connections, the
     * controller) closes after the shutdown; `fibers` (the loops and the work) closes only after a
     * clean shutdown, since a stuck fiber is left where it is and reported.
     */
    const lifecycle = Effect.gen(function*() {
      const transport = yield* Transport
      // the probe server answers from before the registration to the end of the run
      const probes = yield* Scope.make()
      yield* Effect.addFinalizer(() => Scope.close(probes, Exit.void))
      if (config.health !== undefined) {
        yield* serveHealth(config.health, readiness).pipe(
          Scope.extend(probes),
          Effect.tapErrorCause((cause) =>
            Effect.zipRight(Deferred.succeed(shutdownOutcome, undefined), Deferred.failCause(registered, cause))
          )
        )
      }
      yield* enter("registering")
      yield* pools.declare(Object.values(transport.protocol.pools))
      const resources = yield* Scope.make()
      // closed by each way the run ends below; this one covers a way none of them foresaw
      yield* Effect.addFinalizer(() => Scope.close(resources, Exit.void))
      // a stop while the worker is still registering (waiting for its broker, its tables or its
      // queues) ends the wait: the registration is interrupted. What a transport has sent to register
      // the worker cannot be recalled (`Registration.commit` waits for its answer, and hands the
      // registration over here): a registration made meanwhile is deregistered, once. A daemon, so
      // that a registration that ignores its interruption does not hold the run's end: it is waited
      // for up to `interruptTimeout`, then left to end on its own, its resources closed as they come.
      const landed = yield* Deferred.make<Registration>()
      const registerFiber = yield* Scope.extend(transport.register(description), resources).pipe(
        Effect.provideService(RegistrationWaits, reachability.registrationWaits),
        Effect.provideService(RegistrationLanded, (made) => Effect.asVoid(Deferred.succeed(landed, made))),
        Effect.forkDaemon
      )
      const registering = yield* Effect.raceFirst(
        Effect.map(Fiber.join(registerFiber), Option.some),
        Effect.as(Deferred.await(stopRequested), Option.none<Registration>())
      ).pipe(Effect.onInterrupt(() => Fiber.interruptFork(registerFiber)), Effect.exit)
      if (Exit.isFailure(registering)) {
        yield* Scope.close(resources, registering)
        yield* Deferred.succeed(shutdownOutcome, undefined)
        yield* Deferred.failCause(registered, registering.cause)
        return yield* Effect.failCause(registering.cause)
      }
      if (Option.isNone(registering.value)) {
        yield* Fiber.interruptFork(registerFiber)
        const ended = yield* Fiber.await(registerFiber).pipe(Effect.timeout(config.interruptTimeout), Effect.option)
        const handed = yield* Deferred.poll(landed)
        const made = Option.isSome(handed)
          ? Option.some(yield* handed.value)
          : Option.isSome(ended) && Exit.isSuccess(ended.value)
          ? Option.some(ended.value.value)
          : Option.none<Registration>()
        yield* Deferred.interrupt(registered)
        if (Option.isNone(made)) {
          yield* Scope.close(resources, Exit.void)
          yield* Effect.logInfo(
            Option.isSome(ended)
              ? `worker ${workerId} stopped before it had registered on ${transport.name}`
              : `worker ${workerId} stopped before it had registered on ${transport.name}; its registration did not end within ` +
                `${Duration.format(config.interruptTimeout)} (interruptTimeout) of its interruption, and is left to end on its own`
          )
          yield* Deferred.succeed(shutdownOutcome, undefined)
          return
        }
        yield* Effect.logInfo(`worker ${workerId} stopped while it registered on ${transport.name}; the registration was made meanwhile, and is withdrawn`)
        const withdrawn = yield* Effect.exit(deregister({ registration: made.value, transport: transport.name, config }))
        yield* Scope.close(resources, Exit.void)
        yield* Deferred.done(shutdownOutcome, withdrawn)
        return yield* withdrawn
      }
      const registration = registering.value.value
      yield* reachability.watch(registration)
      yield* pools.declare(registration.pollers.map((poller) => poller.pool))
      const controller = yield* ConcurrencyController.make(config.concurrencyOption).pipe(Effect.orDie, Scope.extend(resources))
      yield* Ref.set(controllerRef, Option.some(controller))
      // an adaptive limit moves and the pools follow it; a fixed one never moves, so nothing follows
      // it (a stream's machinery is no small part of a worker's start)
      if (controller.config.mode === "adaptive") {
        yield* controller.limitChanges.pipe(Stream.runForEach(pools.resizeConcurrency), Effect.forkIn(resources))
      }
      // what it serves and where it takes tasks from: the two things to compare with the engine's
      // when a worker takes nothing (a name mistyped, another prefix, queue or partition)
      const polling = registration.pollers.map((poller) => poller.name)
      yield* Effect.logInfo(
        `worker ${workerId} registered on ${transport.name}${servesNothing ? "" : `; its handlers: ${handlerNames(handlers)}`}${
          polling.length === 0 ? "" : `; polling ${firstOf(polling)}`
        }`
      )
      const unserved = notServed(handlers, transport.protocol)
      if (unserved !== undefined) yield* Effect.logWarning(unserved)
      if (servesNothing) {
        // most likely a registration forgotten or made after `run`: say so rather than sit there
        yield* Effect.logWarning(
          "this worker serves nothing: it was given no steps, workflows or durable workflows, so it has no task to run " +
            "(register them before it runs)"
        )
      }
      yield* Deferred.succeed(registered, undefined)
      yield* enter("running")

      const fibers = yield* Scope.make()
      const leaseScope = yield* Scope.make()
      const leases = yield* makeLeases.pipe(Scope.extend(leaseScope))
      const loops = yield* FiberSet.make<never, WorkerLoopError>().pipe(Scope.extend(fibers))
      // the heartbeat and the metrics run on through the drain, so that the broker hears the worker
      // draining (its registration could otherwise expire while tasks still run)
      const beats = yield* FiberSet.make<never, WorkerLoopError>().pipe(Scope.extend(fibers))
      const work = yield* FiberSet.make().pipe(Scope.extend(fibers))
      const loopNames = new Map<Fiber.RuntimeFiber<unknown, unknown>, string>()
      const serving = new Map<Fiber.RuntimeFiber<unknown, unknown>, ServingLabel>()
      const dispatcher = makeDispatcher({
        config,
        handlers,
        pools,
        leases,
        controller,
        stopping: stopRequested,
        serving,
        reachability
      })
      yield* dispatcher.countersAtZero
      const pollersOf = new Map<string, number>()
      for (const poller of registration.pollers) pollersOf.set(poller.pool.name, (pollersOf.get(poller.pool.name) ?? 0) + 1)
      for (const poller of registration.pollers) {
        const shared = (pollersOf.get(poller.pool.name) ?? 0) > 1
        loopNames.set(yield* FiberSet.run(loops, dispatcher.pollLoop(poller, work, shared)), poller.name)
      }
      const beating = yield* Effect.makeSemaphore(1)
      loopNames.set(yield* FiberSet.run(beats, asLoop("heartbeat", heartbeatLoop(registration, beating))), "heartbeat")
      loopNames.set(yield* FiberSet.run(beats, asLoop("metrics", sampleMetrics(registration, controller))), "metrics")

      // any loop that ends ends the run through the shutdown: a failure, and a defect too (a bug in a
      // transport's call), which would otherwise end the run with nothing drained or deregistered
      const loopError = yield* Effect.raceFirst(
        Effect.as(Deferred.await(stopRequested), Option.none<WorkerLoopError>()),
        Effect.raceFirst(FiberSet.join(loops), FiberSet.join(beats)).pipe(
          Effect.zipRight(Effect.never),
          Effect.catchAllCause((cause) =>
            Effect.succeed(Option.some(
              Option.getOrElse(
                Cause.failureOption(cause),
                () => new WorkerLoopError({ poller: "worker", reason: Cause.squash(cause) })
              )
            ))
          )
        )
      )
      yield* enter("draining")
      const shutdownExit = yield* Effect.exit(
        shutdown({
          config,
          registration,
          transport: transport.name,
          controller,
          loops,
          beats,
          loopNames,
          work,
          serving,
          forced: forceRequested,
          beating
        })
      )
      yield* Scope.close(leaseScope, Exit.void)
      yield* Deferred.done(shutdownOutcome, shutdownExit)
      if (Exit.isSuccess(shutdownExit)) yield* Scope.close(fibers, Exit.void)
      yield* Scope.close(resources, Exit.void)
      if (Option.isSome(loopError)) {
        return yield* new WorkerLoopError({
          poller: loopError.value.poller,
          reason: loopError.value.reason,
          ...(Exit.isFailure(shutdownExit) ? { cause: Cause.squash(shutdownExit.cause) } : {})
        })
      }
      return yield* shutdownExit
    }).pipe(
      // the capture's writer lives for the run: what is queued when it ends is written then
      (effect) =>
        config.captureHistories === undefined
          ? effect
          : Effect.provide(effect, Layer.orDie(ReplayCapture.layerOption(config.captureHistories))),
      Effect.scoped,
      Effect.onExit((exit) =>
        Effect.zipRight(
          Exit.isSuccess(exit) || Exit.isInterrupted(exit) ? enter("stopped") : enter("failed", messageOf(Cause.squash(exit.cause))),
          // a run that ended in a way its shutdown did not (a defect of its own) still ends a stop's wait
          Deferred.succeed(shutdownOutcome, undefined)
        )
      ),
      (effect) => Effect.suspend(() => Effect.annotateLogs(withEventLogger(effect), { workerId }))
    )

    /** Claims this instance's single run (L10). */
    const claim = Effect.gen(function*() {
      const previous = yield* Ref.getAndUpdate(phase, (p) => p === "idle" ? "running" : p)
      if (previous !== "idle") {
        return yield* new WorkerStateError({ reason: previous === "stopped-before-run" ? "stopped" : "already-running" })
      }
    })

    /**
     * The claimed run: the lifecycle in a fiber of its own, in a scope of the run's own rather than
     * the caller's (whose interruption would interrupt its children at once): an interruption of the
     * caller asks for a graceful stop and waits for it instead.
     */
    const serve = Effect.uninterruptibleMask((restore) =>
      Effect.gen(function*() {
        const scope = yield* Scope.make()
        const fiber = yield* Effect.forkIn(restore(lifecycle), scope)
        return yield* restore(Fiber.join(fiber)).pipe(
          Effect.onInterrupt(() => Effect.zipRight(Deferred.succeed(stopRequested, undefined), Fiber.await(fiber))),
          Effect.ensuring(Effect.zipRight(Scope.close(scope, Exit.void), Ref.set(phase, "ran")))
        )
      })
    )

    const run: Worker<R>["run"] = Effect.zipRight(claim, serve)

    const stop: Worker<R>["stop"] = Effect.gen(function*() {
      const previous = yield* Ref.getAndUpdate(phase, (p) => p === "idle" ? "stopped-before-run" : p)
      yield* Deferred.succeed(stopRequested, undefined)
      if (previous === "idle" || previous === "stopped-before-run") {
        yield* enter("stopped")
        yield* Deferred.succeed(shutdownOutcome, undefined)
      }
      return yield* Deferred.await(shutdownOutcome)
    })

    const runUntil: Worker<R>["runUntil"] = (until, untilOptions) =>
      Effect.gen(function*() {
        // Duration.decode would throw on "30s" and read -5000 as no time at all
        const timeout = untilOptions?.timeout === undefined ? undefined : yield* Either.mapLeft(
          checkDuration("runUntil's timeout", untilOptions.timeout),
          (message) => new WorkerConfigError({ option: "timeout", message })
        )
        yield* claim
        const running = yield* Effect.fork(serve)
        // its exit, not only its failure: a condition that dies (a thrown callback) must end the run
        // with its cause, where raceAll would wait on the other racers
        const first = yield* Effect.raceAll([
          Effect.map(Effect.exit(until), (result) => ({ _tag: "Until" as const, result })),
          Effect.map(Fiber.await(running), (exit) => ({ _tag: "Ended" as const, exit })),
          ...(timeout === undefined ? [] : [Effect.as(Effect.sleep(timeout), { _tag: "Timeout" as const })])
        ])
        if (first._tag === "Ended") {
          // stopped from outside (or failed): an external stop ends runUntil with an interruption
          return yield* Exit.isSuccess(first.exit) ? Effect.interrupt : Effect.failCause(first.exit.cause)
        }
        yield* Deferred.succeed(stopRequested, undefined)
        const ended = yield* Fiber.await(running)
        if (first._tag === "Timeout") {
          return yield* new RunUntilTimeoutError({
            timeoutMillis: Duration.toMillis(timeout!),
            ...(Exit.isFailure(ended) ? { cause: Cause.squash(ended.cause) } : {})
          })
        }
        if (Exit.isFailure(ended)) return yield* Effect.failCause(ended.cause)
        return yield* first.result
      })

    return {
      id: workerId,
      handlers,
      run,
      runUntil,
      stop,
      forceStop: Effect.zipRight(Deferred.succeed(forceRequested, undefined), stop),
      status,
      registered: Deferred.await(registered)
    }
  })

/** One line, naming the error's class for those who search the log by it. */
const failedLine = (error: unknown) => {
  const tag = (error as { _tag?: unknown } | null)?._tag
  return withReason(typeof tag === "string" ? `worker failed (${tag})` : "worker failed", error)
}

/**
 * A layer that runs a worker for as long as it is in use; releasing it stops the worker gracefully
 * (a failed shutdown is logged, as finalizers cannot fail). The layer is built once the worker has
 * registered, and fails with the run's error when registration fails, so an application launched on it
 * (`Layer.launch`, `NodeRuntime.runMain`) exits with that error instead of living on without a worker.
 *
 * A run that fails later (a poll loop dies of a broker error that is not retried) fails the
 * application too: the fiber that built the layer is interrupted and the layer's release dies
 * with the run's error, so `NodeRuntime.runMain(Layer.launch(Worker.layer(...).pipe(Layer.provide(transport))))`
 * exits non-zero with it, and a program given the layer with `Effect.provide` fails with it. (Built
 * beside other layers with `Layer.merge`, the worker is built in a fiber of its own that has ended
 * by then: launch such an application with the worker layer outermost, providing the others.)
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = <R = never>(
  definition: WorkerDefinition<R>
): Layer.Layer<
  never,
  WorkerConfigError | Step.DuplicateStepError | DurableWorkflow.WorkflowDefinitionChanged | RunError,
  Transport | R
> =>
  Layer.scopedDiscard(
    Effect.gen(function*() {
      const worker = yield* make(definition)
      const builder = yield* Effect.withFiberRuntime<Fiber.RuntimeFiber<unknown, unknown>>((fiber) => Effect.succeed(fiber))
      const failedLater = yield* Ref.make(Option.none<Cause.Cause<RunError>>())
      // added before the run is forked, so it is released after the run has ended
      yield* Effect.addFinalizer(() =>
        Effect.flatMap(Ref.get(failedLater), (failed) => Option.isSome(failed) ? Effect.die(Cause.squash(failed.value)) : Effect.void)
      )
      const running = yield* Effect.forkScoped(worker.run)
      // built when registered; a run that ended before that (a failed registration) fails the layer,
      // and whoever built it reports the error: it is not logged here as well
      yield* Effect.raceFirst(worker.registered, Effect.zipRight(Fiber.join(running), Effect.never))
      // a failure after that is logged at once (the layer's release, which fails with it, may come
      // much later when the layer was merged beside others) and ends whatever waits on the layer
      // (Layer.launch's never)
      yield* Fiber.await(running).pipe(
        Effect.flatMap((exit) =>
          Exit.isFailure(exit) && !Cause.isInterruptedOnly(exit.cause)
            ? Effect.logError(failedLine(Cause.squash(exit.cause))).pipe(
              Effect.zipRight(Ref.set(failedLater, Option.some(exit.cause))),
              Effect.zipRight(Fiber.interruptFork(builder))
            )
            : Effect.void
        ),
        Effect.forkScoped
      )
    })
  )
