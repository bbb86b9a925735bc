/**
 * The worker runtime: registration, pollers, dispatch under a concurrency limit, heartbeats,
 * drain-with-deadline and single-flight deregistration, over any {@link Transport}.
 *
 * Lifecycle guarantees (DESIGN.md L1–L10): registration happens before any poll and a failed one is
 * never followed by a deregistration; shutdown stops the pollers, drains accepted work within one
 * `shutdownTimeout` deadline, interrupts what is still running at it, then deregisters exactly once;
 * `stop` is single-flight and every caller shares its outcome; something that cannot be stopped fails
 * the shutdown by name and leaves the registration in place; a worker instance runs once.
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberId from "effect/FiberId"
import * as FiberSet from "effect/FiberSet"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Schedule from "effect/Schedule"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { hostname, totalmem } from "node:os"
import { nestDurable } from "../core/internal/nestDurable.js"
import { withEventLogger } from "../core/internal/stepLogger.js"
import type { Handlers, Outcome } from "../core/internal/protocol.js"
import * as DurableWorkflow from "../core/DurableWorkflow.js"
import * as Step from "../core/Step.js"
import * as Concurrency from "../services/Concurrency.js"
import * as ConcurrencyController from "../services/ConcurrencyController.js"
import * as Memory from "../services/Memory.js"
import * as Workflow from "../core/Workflow.js"
import type { StepResult } from "../protocol/StepProtocol.js"
import type { WorkflowDecision } from "../protocol/WorkflowProtocol.js"
import {
  type DeregistrationError,
  type Delivery,
  type KeepAlive,
  type Poller,
  type RegistrationError,
  type Registration,
  type TaskPool,
  Transport,
  type TransportError,
  type WorkerDescription,
  type WorkerStatus
} from "../transport/Transport.js"
import { type Limiter, makeLimiter } from "./internal/limiter.js"
import { replyRetry } from "./internal/replyRetry.js"
import {
  RunUntilTimeoutError,
  ShutdownTimeoutError,
  TaskRejected,
  WorkerLoopError,
  WorkerOptionsError,
  WorkerStateError
} from "./WorkerError.js"

export * from "./WorkerError.js"

/**
 * Worker options. Durations take anything `Duration.decode` accepts (`"30 seconds"`, millis, …).
 *
 * @since 0.1.0
 * @category models
 */
export interface WorkerOptions {
  /** The worker's instance id. Default `ts-<hostname>-<pid>`. */
  readonly workerId?: string
  /** The build id announced to orchestrators that route by it. Must not be blank. */
  readonly buildId?: string
  /**
   * Step tasks (and, where they share a poller, workflow turns) at once: a number (fixed, never
   * gated; default 10), `"adaptive"`, or adaptive bounds and knobs (`{ min, max, start,
   * ramCeilingPct, ... }`): a latency-gradient controller with a memory admission gate that defers
   * (never rejects) a task while memory is short.
   */
  readonly concurrency?: Concurrency.ConcurrencyOption
  /** At most this many workflow turns at once where the transport polls them separately. Default 10. */
  readonly workflowConcurrency?: number
  /** How long one poll waits for work. Default 35 seconds. */
  readonly pollTimeout?: Duration.DurationInput
  /** One deadline for the whole drain at shutdown. Default 30 seconds; negative counts as 0. */
  readonly shutdownTimeout?: Duration.DurationInput
  /** Overrides the transport's heartbeat interval. */
  readonly heartbeatInterval?: Duration.DurationInput
  /**
   * How long an interrupted poller or task may take to stop before shutdown reports it as stuck
   * (and leaves the registration in place). Default 5 seconds.
   */
  readonly interruptTimeout?: Duration.DurationInput
  /** The pause after a failed poll before the next one. Default 1 second. */
  readonly pollRetryDelay?: Duration.DurationInput
}

/**
 * What a worker serves, and how.
 *
 * @since 0.1.0
 * @category models
 */
export interface WorkerConfig<R = never> extends WorkerOptions {
  readonly steps?: Iterable<Step.Step<R>>
  /** Coordinator-driven workflows whose turns this worker replays. */
  readonly workflows?: Iterable<Workflow.Workflow<any, any, R>>
  /** Durable Workflow server workflows this worker replays (its activities are `steps`). */
  readonly durableWorkflows?: Iterable<DurableWorkflow.DurableWorkflow<R>>
}

/**
 * Why `stop` failed: the deregistration failed, or something could not be stopped.
 *
 * @since 0.1.0
 * @category errors
 */
export type ShutdownError = DeregistrationError | ShutdownTimeoutError

/**
 * Why `run` failed.
 *
 * @since 0.1.0
 * @category errors
 */
export type RunError = RegistrationError | WorkerStateError | WorkerLoopError | ShutdownError

/**
 * A worker. Build it with {@link make}, then `run` it with a {@link Transport} layer provided.
 *
 * @since 0.1.0
 * @category models
 */
export interface Worker<R = never> {
  readonly id: string
  /**
   * Registers, polls and runs tasks until `stop` (or an interruption, which stops gracefully), then
   * drains and deregisters. Fails with the registration error, a loop error (with any shutdown
   * error as its `cause`), or the shutdown error.
   */
  readonly run: Effect.Effect<void, RunError, Transport | R>
  /**
   * Runs the worker until `until` succeeds (then stops and returns its value) or `timeout` passes
   * (then stops and fails with {@link RunUntilTimeoutError}). An external `stop` makes it fail with
   * an interruption once accepted work has drained or been interrupted.
   */
  readonly runUntil: <A, E, R2>(
    until: Effect.Effect<A, E, R2>,
    options?: { readonly timeout?: Duration.DurationInput }
  ) => Effect.Effect<A, E | RunError | RunUntilTimeoutError, Transport | R | R2>
  /** Single-flight graceful stop: every caller shares one shutdown and its outcome. */
  readonly stop: Effect.Effect<void, ShutdownError>
  /** Like `stop`, but the drain deadline is now: running work is interrupted at once. */
  readonly forceStop: Effect.Effect<void, ShutdownError>
  /** The status published in heartbeats. */
  readonly status: Effect.Effect<WorkerStatus>
  /**
   * Runs one nestjs-durable task payload without any broker (what a poller does with each
   * delivery): a step result for a step task, a decision for a workflow turn. Fails with the reason
   * when the payload is not a task at all.
   */
  readonly processTask: (payload: unknown) => Effect.Effect<StepResult | WorkflowDecision, TaskRejected, R>
}

interface Resolved {
  readonly workerId: string
  readonly buildId: string | undefined
  readonly concurrency: Concurrency.ResolvedConcurrency
  readonly workflowConcurrency: number
  readonly pollTimeout: Duration.Duration
  readonly shutdownTimeout: Duration.Duration
  readonly heartbeatInterval: Duration.Duration | undefined
  readonly interruptTimeout: Duration.Duration
  readonly pollRetryDelay: Duration.Duration
}

const positiveInt = (option: string, value: number | undefined, fallback: number) =>
  value === undefined
    ? Effect.succeed(fallback)
    : Number.isInteger(value) && value >= 1
    ? Effect.succeed(value)
    : Effect.fail(new WorkerOptionsError({ option, message: `${option} must be an integer of at least 1, got ${value}` }))

const duration = (option: string, value: Duration.DurationInput | undefined, fallback: Duration.DurationInput) =>
  Option.match(Duration.decodeUnknown(value ?? fallback), {
    onNone: () =>
      Effect.fail(
        new WorkerOptionsError({
          option,
          message: `${option} must be a duration (milliseconds, or a string such as "30 seconds"), got ${String(value)}`
        })
      ),
    onSome: (d) => Effect.succeed(Duration.max(d, Duration.zero))
  })

const resolveOptions = (options: WorkerOptions): Effect.Effect<Resolved, WorkerOptionsError> =>
  Effect.gen(function*() {
    if (options.buildId !== undefined && options.buildId.trim() === "") {
      return yield* new WorkerOptionsError({ option: "buildId", message: "buildId must be a non-empty string when provided" })
    }
    if (options.workerId !== undefined && options.workerId.trim() === "") {
      return yield* new WorkerOptionsError({ option: "workerId", message: "workerId must be a non-empty string when provided" })
    }
    const heartbeatInterval = options.heartbeatInterval === undefined
      ? undefined
      : yield* duration("heartbeatInterval", options.heartbeatInterval, 0)
    if (heartbeatInterval !== undefined && Duration.toMillis(heartbeatInterval) <= 0) {
      return yield* new WorkerOptionsError({ option: "heartbeatInterval", message: "heartbeatInterval must be positive" })
    }
    return {
      workerId: options.workerId ?? `ts-${hostname()}-${process.pid}`,
      buildId: options.buildId,
      concurrency: yield* Concurrency.resolve(options.concurrency ?? 10).pipe(
        Effect.mapError((error) => new WorkerOptionsError({ option: error.option, message: error.message }))
      ),
      workflowConcurrency: yield* positiveInt("workflowConcurrency", options.workflowConcurrency, 10),
      pollTimeout: yield* duration("pollTimeout", options.pollTimeout, "35 seconds"),
      shutdownTimeout: yield* duration("shutdownTimeout", options.shutdownTimeout, "30 seconds"),
      heartbeatInterval,
      interruptTimeout: yield* duration("interruptTimeout", options.interruptTimeout, "5 seconds"),
      pollRetryDelay: yield* duration("pollRetryDelay", options.pollRetryDelay, "1 second")
    }
  })

/** Whether an outcome counts as a success for the controller's latency and cost learning. */
const succeeded = (outcome: Outcome<unknown>) => {
  if (outcome._tag === "Reject") return false
  const reply = outcome.reply as { readonly _tag?: string; readonly result?: { readonly status?: string } }
  return reply._tag !== "StepResult" || reply.result?.status === "completed"
}

type Phase = "idle" | "running" | "ran" | "stopped-before-run"

/** Which task a serving fiber is on (for shutdown's report of what could not be stopped). */
interface TaskLabel {
  readonly poller: string
  delivery: Delivery
}

/** Runs a task's processing, the one interruptible part of the task path, to its exit. */
const interruptibleExit = <A, R>(effect: Effect.Effect<A, never, R>) => Effect.exit(Effect.interruptible(effect))

/**
 * Builds a worker. Fails on invalid options (naming the option) or duplicate step names.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = <R = never>(
  config: WorkerConfig<R>
): Effect.Effect<Worker<R>, WorkerOptionsError | Step.DuplicateStepError | DurableWorkflow.WorkflowDefinitionChanged> =>
  Effect.gen(function*() {
    const options = yield* resolveOptions(config)
    const steps = yield* Step.registry(config.steps ?? [])
    const workflows = yield* Step.registry(config.workflows ?? [])
    const durableWorkflows = yield* Step.registry(config.durableWorkflows ?? [])
    // a Durable Workflow definition may not change under a worker id within a process (the
    // transport checks again at registration, when the id may come from the transport)
    if (config.workerId !== undefined) yield* DurableWorkflow.guardDefinitions(config.workerId, durableWorkflows.values())
    const handlers: Handlers<R> = { steps, workflows, durableWorkflows }
    let workerId = options.workerId
    const startedAt = yield* Clock.currentTimeMillis
    const phase = yield* Ref.make<Phase>("idle")
    const stopRequested = yield* Deferred.make<void>()
    const forceRequested = yield* Deferred.make<void>()
    const shutdownOutcome = yield* Deferred.make<void, ShutdownError>()
    const limiters: Record<TaskPool, Limiter> = {
      step: yield* makeLimiter(options.concurrency.limit),
      workflow: yield* makeLimiter(options.workflowConcurrency),
      query: yield* makeLimiter(1)
    }
    const running: Record<TaskPool, Ref.Ref<number>> = {
      step: yield* Ref.make(0),
      workflow: yield* Ref.make(0),
      query: yield* Ref.make(0)
    }

    /** The running worker's concurrency controller and memory gate (none before `run`). */
    let controller: ConcurrencyController.ConcurrencyController["Type"] | undefined

    /** Before `run` there is no controller: the fixed configuration and the process's RSS. */
    const idleSnapshot = Effect.gen(function*() {
      const rssBytes = process.memoryUsage.rss()
      const rssLimitBytes = totalmem()
      return {
        runtime: "node" as const,
        concurrency: { mode: options.concurrency.mode, limit: options.concurrency.limit },
        inFlight: (yield* Ref.get(running.step)) + (yield* Ref.get(running.workflow)) + (yield* Ref.get(running.query)),
        rssBytes,
        rssLimitBytes,
        rssPct: Math.round((rssBytes / rssLimitBytes) * 10_000) / 100
      }
    })

    const status: Effect.Effect<WorkerStatus> = Effect.gen(function*() {
      const base = controller === undefined ? yield* idleSnapshot : yield* controller.snapshot
      return {
        ...base,
        slots: {
          step: { limit: yield* limiters.step.limit, inUse: yield* limiters.step.inUse, running: yield* Ref.get(running.step) },
          workflow: {
            limit: yield* limiters.workflow.limit,
            inUse: yield* limiters.workflow.inUse,
            running: yield* Ref.get(running.workflow)
          },
          query: { limit: 1, inUse: yield* limiters.query.inUse, running: yield* Ref.get(running.query) }
        }
      }
    })

    const description: WorkerDescription = {
      workerId: options.workerId,
      buildId: options.buildId,
      steps: Array.from(steps.keys()).sort(),
      workflows: [...workflows.keys(), ...durableWorkflows.keys()].sort(),
      durableWorkflows: Array.from(durableWorkflows.values()),
      startedAt,
      pollTimeout: options.pollTimeout,
      status
    }

    /** Sends a reply (or the rejection), retrying a failed send a few times; never fails. */
    const answer = (delivery: Delivery, outcome: Outcome<unknown>) => {
      const send = outcome._tag === "Reply"
        ? delivery.complete(outcome.reply)
        : Effect.zipRight(Effect.logError(`rejected a task: ${outcome.reason}`), delivery.reject(outcome.reason))
      // the retry schedule is only built when the first attempt failed
      return send.pipe(
        Effect.catchAll((first) =>
          Effect.zipRight(Effect.logWarning("could not deliver the reply; retrying", first), Effect.retry(send, replyRetry))
        ),
        Effect.catchAll((error) =>
          Effect.logError("could not deliver the reply; the task stays with the broker and will be redelivered", error)
        )
      )
    }

    /**
     * Answers a task and, unless the worker is stopping, lets the transport hand over the next task
     * of the same subscription in the same round trip (the permit stays with this fiber).
     */
    const answerTakingNext = (
      delivery: Delivery,
      outcome: Outcome<unknown>
    ): Effect.Effect<Option.Option<Delivery>> => {
      // built only where the next task is not taken with the answer
      const answered = () => Effect.as(answer(delivery, outcome), Option.none<Delivery>())
      if (outcome._tag === "Reject" || delivery.completeAndTakeNext === undefined) return answered()
      return Effect.flatMap(Deferred.isDone(stopRequested), (stopping) =>
        stopping
          ? answered()
          : Effect.catchAll(
            delivery.completeAndTakeNext!(outcome.reply),
            (error) => Effect.zipRight(Effect.logWarning("could not deliver the reply; retrying", error), answered())
          ))
    }

    /**
     * Leases of running deliveries, renewed by one keeper fiber rather than a timer per task: it
     * sleeps until the earliest lease is due (woken when a sooner one is added) and renews each
     * lease once its interval has passed since it was taken or last renewed.
     */
    const leases = new Map<Delivery, { due: number; readonly interval: number; readonly keepAlive: KeepAlive }>()
    let keeperWakesAt = Number.POSITIVE_INFINITY
    let wakeKeeper = Deferred.unsafeMake<void>(FiberId.none)
    const addLease = (delivery: Delivery, keepAlive: KeepAlive, now: number) => {
      const interval = Duration.toMillis(keepAlive.interval)
      leases.set(delivery, { due: now + interval, interval, keepAlive })
      if (now + interval < keeperWakesAt) {
        keeperWakesAt = now + interval
        Deferred.unsafeDone(wakeKeeper, Exit.void)
      }
    }
    const keepLeases = Effect.gen(function*() {
      // a fresh wake-up first, so a lease added while this pass runs cuts the coming sleep short
      const woken = wakeKeeper = Deferred.unsafeMake<void>(FiberId.none)
      const now = yield* Clock.currentTimeMillis
      // the wake-up a lease asked for stands even if that lease is gone already (short tasks end
      // before the keeper runs): one harmless early pass, rather than a pass per task
      let next = keeperWakesAt > now ? keeperWakesAt : Number.POSITIVE_INFINITY
      for (const [delivery, lease] of leases) {
        if (lease.due <= now) {
          lease.due = now + lease.interval
          yield* lease.keepAlive.renew.pipe(
            Effect.catchAll((error) => Effect.logWarning("could not extend the task's lease", error)),
            Effect.annotateLogs({ delivery: delivery.id }),
            Effect.forkDaemon
          )
        }
        next = Math.min(next, lease.due)
      }
      keeperWakesAt = next
      yield* Number.isFinite(next)
        ? Effect.raceFirst(Effect.sleep(next - now), Deferred.await(woken))
        : Deferred.await(woken)
    }).pipe(Effect.forever)

    /**
     * Processes a delivery under the concurrency controller, interruptibly, to its exit, and goes on
     * with `then`: a gating controller admits it first (a deferred task waits here, its lease kept
     * alive); one that does not gate counts it from the call on (made when the task starts). The
     * controller learns from how long it ran and whether it succeeded.
     */
    const processed = <A>(
      delivery: Delivery,
      then: (exit: Exit.Exit<Outcome<unknown>>) => Effect.Effect<A, never, R>
    ): Effect.Effect<A, never, R> => {
      const gate = controller
      const process = delivery.protocol.process(handlers, delivery.payload)
      if (gate === undefined) return Effect.flatMap(interruptibleExit(process), then)
      const label = delivery.protocol.label(delivery.payload)
      const name = label.kind === "workflow" ? undefined : label.name
      const ok = (exit: Exit.Exit<Outcome<unknown>>) => Exit.isSuccess(exit) && succeeded(exit.value)
      if (gate.gates) {
        return Effect.flatMap(interruptibleExit(gate.run(name, process, { kind: label.kind, ok })), then)
      }
      // nothing to wait for: counted around the processing, with no interruption handler of its own
      const done = gate.count(name, label.kind)
      return Effect.flatMap(interruptibleExit(process), (exit) => {
        done(ok(exit))
        return then(exit)
      })
    }

    /** Logs about one delivery carry its id (annotated here rather than on the whole task path). */
    const aboutDelivery = (delivery: Delivery) => Effect.annotateLogs("delivery", delivery.id)

    /**
     * Runs one delivery under the caller's permit, in the serving fiber itself: keeps its lease
     * alive, processes it, answers, and returns the next delivery the transport handed over, if any.
     * A cancel of its run interrupts this fiber while the task is processing; the task is then
     * answered as cancelled and the fiber ends (its permit goes back to the poller). Interrupted
     * otherwise (shutdown deadline), it gives the task back. Runs uninterruptibly but for the
     * processing itself.
     */
    const serveOne = (
      delivery: Delivery,
      self: Fiber.RuntimeFiber<unknown, unknown>,
      clock: Clock.Clock
    ): Effect.Effect<Option.Option<Delivery>, never, R> =>
      Effect.suspend(() => {
        if (Option.isSome(delivery.keepAlive)) addLease(delivery, delivery.keepAlive.value, clock.unsafeCurrentTimeMillis())
        let state = "processing" as "processing" | "cancelled" | "processed"
        const unwatch = delivery.onCancel(() => {
          if (state !== "processing") return
          state = "cancelled"
          self.unsafeInterruptAsFork(self.id())
        })
        return processed(delivery, (exit) => {
          const cancelled = state === "cancelled"
          state = "processed"
          unwatch()
          leases.delete(delivery)
          if (Exit.isSuccess(exit)) {
            // a cancel that raced the end of processing leaves this fiber interrupted: answer, stop here
            return cancelled
              ? Effect.as(answer(delivery, exit.value), Option.none())
              : answerTakingNext(delivery, exit.value)
          }
          return Effect.as(unanswered(delivery, exit, cancelled), Option.none())
        })
      })

    /** A delivery whose processing ended without an outcome: answered as cancelled, or given back. */
    const unanswered = (delivery: Delivery, exit: Exit.Failure<unknown, never>, cancelled: boolean) =>
      Effect.gen(function*() {
        const reply = cancelled ? delivery.protocol.cancelled(delivery.payload) : Option.none()
        if (Option.isSome(reply)) {
          yield* Effect.logInfo("run cancelled: its running task was interrupted").pipe(aboutDelivery(delivery))
          yield* answer(delivery, { _tag: "Reply", reply: reply.value })
        } else if (Exit.isInterrupted(exit)) {
          yield* delivery.abandon.pipe(
            Effect.timeout(options.interruptTimeout),
            Effect.catchAll((error) => Effect.logWarning("could not give an interrupted task back", error)),
            aboutDelivery(delivery)
          )
        } else {
          yield* Effect.logError("a task ended without an outcome; giving it back", Cause.pretty(exit.cause)).pipe(
            aboutDelivery(delivery)
          )
          yield* Effect.ignore(delivery.abandon)
        }
      })

    /**
     * Serves deliveries one after another under one permit, as long as the transport hands them
     * over; `labels` tells shutdown which task each serving fiber is on.
     */
    const serveDeliveries = (first: Delivery, poller: Poller, labels: Map<Fiber.RuntimeFiber<unknown, unknown>, TaskLabel>) =>
      Effect.clockWith((clock) =>
        Effect.withFiberRuntime<void, never, R>((self) => {
          const label: TaskLabel = { poller: poller.name, delivery: first }
          labels.set(self, label)
          const serveFrom = (delivery: Delivery): Effect.Effect<void, never, R> => {
            label.delivery = delivery
            return Effect.flatMap(
              serveOne(delivery, self, clock),
              (next) => Option.isNone(next) ? Effect.void : serveFrom(next.value)
            )
          }
          return Effect.uninterruptible(serveFrom(first)).pipe(Effect.ensuring(Effect.sync(() => labels.delete(self))))
        })
      )

    const pollOnce = (poller: Poller, work: FiberSet.FiberSet, labels: Map<Fiber.RuntimeFiber<unknown, unknown>, TaskLabel>) => {
      const limiter = limiters[poller.pool]
      return Effect.uninterruptibleMask((restore) =>
        Effect.gen(function*() {
          if (poller.ready !== undefined) yield* restore(poller.ready)
          const taken = yield* restore(limiter.takeUpTo(Number.MAX_SAFE_INTEGER))
          // not restored: a poll is interruptible only where it says so (while it waits and has taken
          // nothing), so the tasks it took are always handed over
          const polled = yield* Effect.exit(poller.poll(taken))
          if (Exit.isFailure(polled)) {
            yield* limiter.release(taken)
            return yield* polled
          }
          const deliveries = polled.value
          yield* limiter.release(taken - deliveries.length)
          for (const delivery of deliveries) {
            yield* Ref.update(running[poller.pool], (n) => n + 1)
            yield* FiberSet.run(
              work,
              serveDeliveries(delivery, poller, labels).pipe(
                Effect.ensuring(
                  Effect.zipRight(
                    limiter.release(1),
                    Ref.update(running[poller.pool], (n) => n - 1)
                  )
                )
              )
            )
          }
        })
      )
    }

    const pollLoop = (poller: Poller, work: FiberSet.FiberSet, labels: Map<Fiber.RuntimeFiber<unknown, unknown>, TaskLabel>) =>
      pollOnce(poller, work, labels).pipe(
        Effect.catchIf(
          (error: TransportError) => !error.fatal,
          (error) =>
            Effect.zipRight(
              Effect.logWarning(`poll failed on ${poller.name}; retrying`, error),
              Effect.sleep(options.pollRetryDelay)
            )
        ),
        Effect.forever,
        Effect.catchAllCause((cause) =>
          Effect.fail(new WorkerLoopError({ poller: poller.name, reason: Cause.squash(cause) }))
        )
      )

    /**
     * Beats one interval apart (the worker's `heartbeatInterval`, else the transport's), the first
     * one interval in; an interval a beat answers with applies from the next wait on.
     */
    const heartbeatLoop = (registration: Registration) =>
      Option.match(registration.heartbeat, {
        onNone: () => Effect.never,
        onSome: (heartbeat) =>
          Effect.gen(function*() {
            const interval = yield* Ref.make(options.heartbeatInterval ?? heartbeat.interval)
            const beat = status.pipe(
              Effect.flatMap(heartbeat.beat),
              Effect.flatMap((next) => Option.isSome(next) ? Ref.set(interval, next.value) : Effect.void),
              Effect.catchAll((error) => Effect.logWarning("worker heartbeat failed", error))
            )
            // `Effect.schedule` waits before each run, the first one included
            yield* Effect.schedule(beat, Schedule.forever.pipe(Schedule.addDelayEffect(() => Ref.get(interval))))
            return yield* Effect.never
          })
      })

    /** Interrupts fibers and waits for each up to the bound; returns the labels of those still running. */
    const stopFibers = (fibers: ReadonlyArray<Fiber.RuntimeFiber<unknown, unknown>>, label: (f: Fiber.RuntimeFiber<unknown, unknown>) => string) =>
      Effect.gen(function*() {
        for (const fiber of fibers) yield* Fiber.interruptFork(fiber)
        const stopped = yield* Effect.forEach(
          fibers,
          (fiber) => Fiber.await(fiber).pipe(Effect.timeout(options.interruptTimeout), Effect.option),
          { concurrency: "unbounded" }
        )
        return fibers.flatMap((fiber, i) => Option.isNone(stopped[i]!) ? [label(fiber)] : [])
      })

    const shutdown = (
      registration: Registration,
      loops: FiberSet.FiberSet<never, WorkerLoopError>,
      loopNames: Map<Fiber.RuntimeFiber<unknown, unknown>, string>,
      work: FiberSet.FiberSet,
      labels: Map<Fiber.RuntimeFiber<unknown, unknown>, TaskLabel>
    ): Effect.Effect<void, ShutdownError> =>
      Effect.gen(function*() {
        const begun = yield* Clock.currentTimeMillis
        const deadline = begun + Duration.toMillis(options.shutdownTimeout)
        yield* Effect.logInfo("worker stopping: pollers first, then draining accepted work")
        if (controller !== undefined) yield* controller.beginDrain
        const stuckPollers = yield* stopFibers(Array.from(loops), (f) => loopNames.get(f) ?? "a worker loop")
        const remaining = Math.max(0, deadline - (yield* Clock.currentTimeMillis))
        const drained = yield* FiberSet.awaitEmpty(work).pipe(
          Effect.as(true),
          Effect.raceFirst(Effect.as(Effect.sleep(remaining), false)),
          Effect.raceFirst(Effect.as(Deferred.await(forceRequested), false))
        )
        const leftover = Array.from(work)
        if (!drained && leftover.length > 0) {
          yield* Effect.logWarning(`interrupting ${leftover.length} task(s) still running at the shutdown deadline`)
        }
        const stuckTasks = yield* stopFibers(leftover, (f) => {
          const label = labels.get(f)
          return label === undefined ? "a task" : `task ${label.delivery.id} from ${label.poller}`
        })
        if (stuckPollers.length > 0 || stuckTasks.length > 0) {
          return yield* new ShutdownTimeoutError({ stuckPollers, stuckTasks })
        }
        yield* registration.deregister
        yield* Effect.logInfo("worker stopped and deregistered")
      })

    const lifecycle = Effect.gen(function*() {
      const transport = yield* Transport
      const resources = yield* Scope.make()
      const registered = yield* transport.register({ ...description, workerId }).pipe(Scope.extend(resources), Effect.exit)
      if (Exit.isFailure(registered)) {
        yield* Scope.close(resources, registered)
        yield* Deferred.succeed(shutdownOutcome, undefined)
        return yield* Effect.failCause(registered.cause)
      }
      const registration = registered.value
      // the memory sources of the environment when it provides them (tests), else the live ones
      const source = yield* Effect.serviceOption(Memory.MemorySource)
      const limit = yield* Effect.serviceOption(Memory.MemoryLimit)
      const memory = Option.isSome(source) && Option.isSome(limit)
        ? Layer.succeedContext(Context.make(Memory.MemorySource, source.value).pipe(Context.add(Memory.MemoryLimit, limit.value)))
        : Memory.layer()
      controller = yield* ConcurrencyController.make(config.concurrency ?? 10).pipe(
        Effect.provide(memory),
        Effect.orDie,
        Scope.extend(resources)
      )
      yield* controller.limitChanges.pipe(
        Stream.runForEach((limit) => limiters.step.resize(limit)),
        Effect.forkIn(resources)
      )
      yield* Effect.logInfo(`worker ${workerId} registered on ${transport.name}`)
      const fibers = yield* Scope.make()
      const loops = yield* FiberSet.make<never, WorkerLoopError>().pipe(Scope.extend(fibers))
      const work = yield* FiberSet.make().pipe(Scope.extend(fibers))
      const loopNames = new Map<Fiber.RuntimeFiber<unknown, unknown>, string>()
      const labels = new Map<Fiber.RuntimeFiber<unknown, unknown>, TaskLabel>()
      for (const poller of registration.pollers) {
        loopNames.set(yield* FiberSet.run(loops, pollLoop(poller, work, labels)), poller.name)
      }
      loopNames.set(yield* FiberSet.run(loops, heartbeatLoop(registration)), "heartbeat")
      const keeper = yield* Effect.forkDaemon(keepLeases)
      const loopError = yield* Effect.raceFirst(
        Effect.as(Deferred.await(stopRequested), Option.none<WorkerLoopError>()),
        FiberSet.join(loops).pipe(Effect.zipRight(Effect.never), Effect.catchAll((e) => Effect.succeed(Option.some(e))))
      )
      const shutdownExit = yield* Effect.exit(shutdown(registration, loops, loopNames, work, labels))
      yield* Fiber.interruptFork(keeper)
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
    }).pipe((effect) => Effect.suspend(() => Effect.annotateLogs(withEventLogger(effect), { workerId })))

    /** Claims this instance's single run (L10). */
    const claim = Effect.gen(function*() {
      const previous = yield* Ref.getAndUpdate(phase, (p) => p === "idle" ? "running" : p)
      if (previous !== "idle") {
        return yield* new WorkerStateError({ reason: previous === "stopped-before-run" ? "stopped" : "already-running" })
      }
    })

    /** The claimed run: the lifecycle in its own fiber; interrupting this stops gracefully. */
    const serve = Effect.gen(function*() {
      const transport = yield* Transport
      if (config.workerId === undefined && transport.defaultWorkerId !== undefined) workerId = transport.defaultWorkerId
      const fiber = yield* Effect.forkDaemon(lifecycle)
      return yield* Fiber.join(fiber).pipe(
        Effect.onInterrupt(() => Effect.zipRight(Deferred.succeed(stopRequested, undefined), Fiber.await(fiber))),
        Effect.ensuring(Ref.set(phase, "ran"))
      )
    })

    const run: Worker<R>["run"] = Effect.zipRight(claim, serve)

    const stop: Worker<R>["stop"] = Effect.gen(function*() {
      const previous = yield* Ref.getAndUpdate(phase, (p) => p === "idle" ? "stopped-before-run" : p)
      yield* Deferred.succeed(stopRequested, undefined)
      if (previous === "idle" || previous === "stopped-before-run") {
        yield* Deferred.succeed(shutdownOutcome, undefined)
      }
      return yield* Deferred.await(shutdownOutcome)
    })

    const runUntil: Worker<R>["runUntil"] = (until, untilOptions) =>
      Effect.gen(function*() {
        yield* claim
        const running = yield* Effect.fork(serve)
        const timeout = untilOptions?.timeout === undefined ? undefined : Duration.decode(untilOptions.timeout)
        const first = yield* Effect.raceAll([
          Effect.map(Effect.either(until), (result) => ({ _tag: "Until" as const, result })),
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
      get id() {
        return workerId
      },
      run,
      runUntil,
      stop,
      forceStop: Effect.zipRight(Deferred.succeed(forceRequested, undefined), stop),
      status,
      processTask: (payload) =>
        Effect.flatMap(
          nestDurable().process(handlers, payload),
          (outcome) =>
            outcome._tag === "Reject"
              ? Effect.fail(new TaskRejected({ reason: outcome.reason }))
              : Effect.succeed(outcome.reply._tag === "StepResult" ? outcome.reply.result : outcome.reply.decision)
        )
    }
  })

/**
 * A layer that runs a worker for as long as it is in use; releasing it stops the worker gracefully
 * (a failed shutdown is logged, as finalizers cannot fail).
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = <R = never>(
  config: WorkerConfig<R>
): Layer.Layer<never, WorkerOptionsError | Step.DuplicateStepError | DurableWorkflow.WorkflowDefinitionChanged, Transport | R> =>
  Layer.scopedDiscard(
    Effect.gen(function*() {
      const worker = yield* make(config)
      yield* worker.run.pipe(
        Effect.tapErrorCause((cause) => Effect.logError("worker failed", cause)),
        Effect.forkScoped
      )
    })
  )
