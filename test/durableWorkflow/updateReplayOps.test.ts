/**
 * An update handler that asks for a workflow op (`sleep`, an activity, …) while its `UpdateApplied`
 * is replayed waited for the very op that was waiting for it: the replay hung for ever. Now the op
 * fails the replay at once, with a `TypeError` that says so; the live update (an accepted-update
 * task), whose ops the ended turn never answered, fails its task the same way instead of hanging,
 * and so do a query handler and an update's validator (a query or validation task held its slot for
 * ever).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Deferred from "effect/Deferred"
import * as Fiber from "effect/Fiber"
import * as Queue from "effect/Queue"
import * as Schema from "effect/Schema"
import * as DurableWorkflow from "../../src/core/DurableWorkflow.js"
import { UpdateValidationFailed } from "../../src/core/internal/durableWorkflow/errors.js"
import { applyUpdate, query, replay, ReplayFailure, validateUpdate } from "../../src/core/internal/durableWorkflow/run.js"
import { accepted, applied, completed, QUEUE, replayInput, setup, startWorker, until } from "./support.js"

const later = Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, 2)))
const laterPromise = () => new Promise<void>((resolve) => setTimeout(resolve, 2))

const declarations = { updates: { bump: [DurableWorkflow.param("n", Schema.Int)] }, queries: { total: [] } } as const

/** Fails (wall clock) instead of hanging: the bug these tests pin was a replay that never ended. */
const within = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.timeoutFail(effect, { duration: "5 seconds", onTimeout: () => new Error("hung: no answer within 5 s") })

const refusal = (phase: "replayed" | "applied", what: string) =>
  `update 'bump' asked for a workflow op (${what}) while it was ${phase}; this worker does not run workflow ops inside update handlers`

/** The replay's failure: a `ReplayFailure` of a `TypeError` with `message`. */
const assertRefused = (outcome: Either.Either<unknown, unknown>, message: string) => {
  assert.isTrue(Either.isLeft(outcome), `expected a replay failure, got ${JSON.stringify(outcome)}`)
  const failure = (outcome as Either.Left<unknown, unknown>).left
  assert.instanceOf(failure, ReplayFailure)
  const error = (failure as ReplayFailure).error
  assert.instanceOf(error, TypeError)
  assert.strictEqual((error as TypeError).message, message)
}

/** Bumps the total by `n` on a `bump` update, then waits for `total >= 2` and bills it. */
const billing = {
  effect: (handler: (ctx: DurableWorkflow.EffectWorkflowContext, state: { total: number }) => (n: number) => unknown) =>
    DurableWorkflow.make("orders.billing", (ctx) =>
      Effect.gen(function*() {
        const state = { total: 0 }
        ctx.onUpdate("bump", handler(ctx, state))
        ctx.onQuery("total", () => state.total)
        yield* ctx.waitCondition(() => state.total >= 2)
        return yield* ctx.activity("orders.bill", [state.total])
      }), declarations),
  async: (handler: (ctx: DurableWorkflow.AsyncWorkflowContext, state: { total: number }) => (n: number) => unknown) =>
    DurableWorkflow.fromAsync("orders.billing", async (ctx) => {
      const state = { total: 0 }
      ctx.onUpdate("bump", handler(ctx, state))
      ctx.onQuery("total", () => state.total)
      await ctx.waitCondition(() => state.total >= 2)
      return ctx.activity("orders.bill", [state.total])
    }, declarations)
}

describe("an update handler that asks for a workflow op while it is replayed fails the replay, never hangs", () => {
  it.live("Effect: the op its Effect yields, after an asynchronous step", () =>
    Effect.gen(function*() {
      const wf = billing.effect((ctx, state) => (n) =>
        Effect.gen(function*() {
          yield* later
          yield* ctx.sleep(1)
          state.total += n
        })
      )
      const outcome = yield* within(Effect.either(replay(wf, replayInput([applied("u-1", "bump", [2])]))))
      assertRefused(outcome, refusal("replayed", "sleep"))
    }))

  it.live("Effect: the op a fiber its Effect forked asks for (and a handler that swallows the defect and never ends)", () =>
    Effect.gen(function*() {
      const wf = billing.effect((ctx, state) => (n) =>
        Effect.gen(function*() {
          state.total += n
          yield* Effect.all([later, ctx.activity("orders.audit")], { concurrency: "unbounded" })
        }).pipe(Effect.catchAllDefect(() => Effect.never))
      )
      const outcome = yield* within(Effect.either(replay(wf, replayInput([applied("u-1", "bump", [2])]))))
      assertRefused(outcome, refusal("replayed", "activity 'orders.audit'"))
    }))

  it.live("async: the op its handler awaits after its first await", () =>
    Effect.gen(function*() {
      const wf = billing.async((ctx, state) => async (n) => {
        await laterPromise()
        await ctx.activity("orders.audit", [n])
        state.total += n
      })
      const outcome = yield* within(Effect.either(replay(wf, replayInput([applied("u-1", "bump", [2])]))))
      assertRefused(outcome, refusal("replayed", "activity 'orders.audit'"))
    }))

  it.live("async: the op its handler asks for before its first await, dropped or awaited", () =>
    Effect.gen(function*() {
      const dropped = billing.async((ctx, state) => (n) => {
        void ctx.sleep(5)
        state.total += n
      })
      const awaited = billing.async((ctx, state) => async (n) => {
        state.total += n
        await ctx.waitCondition(() => state.total > 10)
      })
      for (const [wf, what] of [[dropped, "sleep"], [awaited, "waitCondition"]] as const) {
        const outcome = yield* within(Effect.either(replay(wf, replayInput([applied("u-1", "bump", [2])]))))
        assertRefused(outcome, refusal("replayed", what))
      }
    }))

  it.live("async: the op an Effect handler asks for from a promise it runs", () =>
    Effect.gen(function*() {
      const wf = billing.async((ctx, state) => (n: number) =>
        Effect.gen(function*() {
          yield* later
          yield* Effect.promise(() => ctx.sleep(1))
          state.total += n
        })
      )
      const outcome = yield* within(Effect.either(replay(wf, replayInput([applied("u-1", "bump", [2])]))))
      assertRefused(outcome, refusal("replayed", "sleep"))
    }))

  it.live("the public offline replayer fails with the same message", () =>
    Effect.gen(function*() {
      const wf = billing.effect((ctx, state) => (n) => Effect.zipRight(ctx.sleep(1), Effect.sync(() => void (state.total += n))))
      const error = yield* within(Effect.flip(DurableWorkflow.replay(wf, [applied("u-1", "bump", [2])])))
      assert.include((error as { message: string }).message, refusal("replayed", "sleep"))
    }))

  it.live("a query that replays an update recorded after the code's last op fails instead of hanging", () =>
    Effect.gen(function*() {
      // the code returns after its one activity: the update recorded after it is replayed for the query only
      const wf = DurableWorkflow.make("orders.quick", (ctx) =>
        Effect.gen(function*() {
          const state = { total: 0 }
          ctx.onUpdate("bump", (n: number) => Effect.zipRight(ctx.sleep(1), Effect.sync(() => void (state.total += n))))
          ctx.onQuery("total", () => state.total)
          return yield* ctx.activity("orders.bill")
        }), declarations)
      const history = [completed("orders.bill", "ok"), applied("u-1", "bump", [2])]
      const { commands } = yield* within(replay(wf, replayInput(history)))
      assert.strictEqual(commands[0]!["type"], "complete_workflow")
      const failed = yield* within(Effect.flip(query(wf, replayInput(history), "total", [])))
      assert.strictEqual(failed.reason, "query_workflow_state_unavailable")
      assert.strictEqual(failed.message, `workflow replay failed before query: ${refusal("replayed", "sleep")}`)
    }))
})

describe("an update handler that asks for a workflow op while it is applied fails its task, never hangs", () => {
  it.live("Effect and async", () =>
    Effect.gen(function*() {
      const effectWf = billing.effect((ctx, state) => (n) =>
        Effect.gen(function*() {
          state.total += n
          yield* ctx.sleep(1)
          return state.total
        })
      )
      const asyncWf = billing.async((ctx, state) => async (n) => {
        state.total += n
        await laterPromise()
        await ctx.sleep(1)
        return state.total
      })
      for (const wf of [effectWf, asyncWf]) {
        const outcome = yield* within(Effect.either(applyUpdate(wf, replayInput([accepted("u-1", "bump", [2])]), "u-1")))
        assertRefused(outcome, refusal("applied", "sleep"))
      }
    }))

  it.scoped("a worker fails the accepted-update task, with the message, instead of holding a slot for ever", () =>
    Effect.gen(function*() {
      const { server } = yield* setup({ retryFailedWorkflowTasks: false })
      const wf = billing.effect((ctx, state) => (n) => Effect.zipRight(ctx.sleep(1), Effect.sync(() => state.total += n)))
      yield* startWorker(server, { durableWorkflows: [wf] })
      server.enqueueWorkflowTask({ workflowType: "orders.billing", taskQueue: QUEUE, updateId: "u-1", historyEvents: [accepted("u-1", "bump", [2])] })
      yield* until(server, () => server.failedWorkflowTasks.length === 1 || server.completedWorkflowTasks.length === 1)
      assert.strictEqual(server.completedWorkflowTasks.length, 0)
      assert.strictEqual(String(server.failedWorkflowTasks[0]!.failure["message"]), `replay failed: ${refusal("applied", "sleep")}`)
    }))

  it.effect("a handler that asks for no op is applied as before", () =>
    Effect.gen(function*() {
      const wf = billing.async((_ctx, state) => async (n) => {
        await laterPromise()
        state.total += n
        return state.total
      })
      const command = yield* applyUpdate(wf, replayInput([applied("u-0", "bump", [1]), accepted("u-1", "bump", [2])]), "u-1")
      assert.strictEqual(command["type"], "complete_update")
    }))
})

describe("the workflow's own ops are never taken for an update handler's", () => {
  it.live("after a replay refused a handler's op (inside the handler's call), the next replay in the same fiber runs as usual", () =>
    Effect.gen(function*() {
      const refused = billing.effect((ctx, state) => (n) => {
        state.total += n
        Effect.runSync(ctx.sleep(1))
      })
      const plain = billing.async((_ctx, state) => async (n) => {
        await laterPromise()
        state.total += n
      })
      assertRefused(yield* within(Effect.either(replay(refused, replayInput([applied("u-1", "bump", [2])])))), refusal("replayed", "sleep"))
      const { commands } = yield* within(replay(plain, replayInput([applied("u-2", "bump", [2])])))
      assert.strictEqual(commands[0]!["type"], "schedule_activity", JSON.stringify(commands))
    }))
})

describe("a refusal is of its own replay's handler only (a worker runs several workflow tasks at once)", () => {
  it.live("an op of another replay, run by a fiber one replay's async handler woke up, is that other replay's op", () =>
    Effect.gen(function*() {
      // a fiber the workflows share (a rate limiter, say), started outside any replay
      type Job = readonly [Effect.Effect<unknown>, Deferred.Deferred<unknown>]
      const jobs = yield* Queue.unbounded<Job>()
      const runner = yield* Effect.forkDaemon(
        Effect.forever(Effect.flatMap(Queue.take(jobs), ([job, done]) => Effect.flatMap(Effect.exit(job), (exit) => Deferred.done(done, exit))))
      )
      // B (no update handlers) hands its op to the shared fiber, through A's handler
      const handedOver: Array<Job> = []
      const b = DurableWorkflow.make("orders.shared-b", (ctx) =>
        Effect.gen(function*() {
          const done = yield* Deferred.make<unknown>()
          handedOver.push([ctx.sideEffect(() => 7), done])
          return yield* Deferred.await(done)
        }))
      // A's async handler, in its promise code, wakes the shared fiber with B's op
      const a = DurableWorkflow.fromAsync("orders.shared-a", async (ctx) => {
        ctx.onUpdate("bump", async () => {
          await laterPromise()
          const job = handedOver.shift()
          if (job !== undefined) await Effect.runPromise(Queue.offer(jobs, job))
        })
        return ctx.activity("orders.after")
      }, declarations)
      const [outB, outA] = yield* within(Effect.all([
        Effect.either(replay(b, replayInput([]))),
        Effect.either(replay(a, replayInput([applied("u-1", "bump", [1])])))
      ], { concurrency: "unbounded" }))
      assert.isTrue(Either.isRight(outA), String(Either.isLeft(outA) ? outA.left : ""))
      assert.isTrue(Either.isRight(outB), `B was refused as A's update: ${Either.isLeft(outB) ? String((outB.left as ReplayFailure).error) : ""}`)
      yield* Fiber.interrupt(runner)
    }))
})

const queryRefusal = (what: string) =>
  `query 'total' asked for a workflow op (${what}); a query only reads the workflow's state and cannot run workflow ops`

const validatorRefusal = (what: string) =>
  `the validator of update 'bump' asked for a workflow op (${what}); a validator only judges the update and cannot run workflow ops`

/** The billing workflow, with its query `total` and a validator of `bump` as given. */
const audited = {
  effect: (total: (ctx: DurableWorkflow.EffectWorkflowContext, state: { total: number }) => () => unknown, validator: (ctx: DurableWorkflow.EffectWorkflowContext) => (n: number) => any) =>
    DurableWorkflow.make("orders.audited", (ctx) =>
      Effect.gen(function*() {
        const state = { total: 0 }
        ctx.onUpdate("bump", (n: number) => void (state.total += n))
        ctx.onUpdateValidator("bump", validator(ctx))
        ctx.onQuery("total", total(ctx, state))
        yield* ctx.waitCondition(() => state.total >= 2)
        return yield* ctx.activity("orders.bill", [state.total])
      }), { ...declarations, updateValidators: ["bump"] }),
  async: (total: (ctx: DurableWorkflow.AsyncWorkflowContext, state: { total: number }) => () => unknown, validator: (ctx: DurableWorkflow.AsyncWorkflowContext) => (n: number) => any) =>
    DurableWorkflow.fromAsync("orders.audited", async (ctx) => {
      const state = { total: 0 }
      ctx.onUpdate("bump", (n: number) => void (state.total += n))
      ctx.onUpdateValidator("bump", validator(ctx))
      ctx.onQuery("total", total(ctx, state))
      await ctx.waitCondition(() => state.total >= 2)
      return ctx.activity("orders.bill", [state.total])
    }, { ...declarations, updateValidators: ["bump"] })
}

describe("a query handler or an update's validator that asks for a workflow op is refused, never hangs", () => {
  it.live("queries: Effect (after an asynchronous step, and swallowing the op's defect), async (after an await, and catching the rejection), synchronous", () =>
    Effect.gen(function*() {
      const cases = [
        [audited.effect((ctx, state) => () => Effect.zipRight(later, Effect.as(ctx.sleep(1), state.total)), () => () => true), "sleep"],
        [
          audited.effect((ctx, state) => () => Effect.as(Effect.catchAllDefect(ctx.activity("orders.audit"), () => Effect.void), state.total), () => () => true),
          "activity 'orders.audit'"
        ],
        [audited.async((ctx, state) => async () => {
          await laterPromise()
          await ctx.waitCondition(() => state.total > 10)
          return state.total
        }, () => () => true), "waitCondition"],
        [audited.async((ctx, state) => () => ctx.sleep(1).then(() => state.total, () => -1), () => () => true), "sleep"],
        [audited.effect((ctx, state) => () => {
          Effect.runFork(ctx.sleep(1))
          return state.total
        }, () => () => true), "sleep"]
      ] as const
      for (const [wf, what] of cases) {
        const failed = yield* within(Effect.flip(query(wf, replayInput([applied("u-1", "bump", [1])]), "total", [])))
        assert.strictEqual(failed.reason, "query_rejected")
        assert.strictEqual(failed.message, queryRefusal(what))
        const offline = yield* within(Effect.flip(DurableWorkflow.replayQuery(wf, [applied("u-1", "bump", [1])], "total")))
        assert.strictEqual((offline as { message: string }).message, queryRefusal(what))
      }
    }))

  it.live("validators: Effect and async, awaited or dropped; a validator that asks for none still judges", () =>
    Effect.gen(function*() {
      const cases = [
        audited.effect(() => () => true, (ctx) => (n) => Effect.zipRight(later, Effect.as(ctx.sleep(1), n > 0))),
        audited.async(() => () => 0, (ctx) => async (n) => {
          await laterPromise()
          await ctx.sleep(1)
          return n > 0
        }),
        audited.async(() => () => 0, (ctx) => (n) => {
          void ctx.sleep(1)
          return n > 0
        })
      ]
      for (const wf of cases) {
        const failed = yield* within(Effect.flip(validateUpdate(wf, replayInput([]), "bump", [1])))
        assert.instanceOf(failed, UpdateValidationFailed)
        assert.strictEqual(failed.message, validatorRefusal("sleep"))
      }
      const judging = audited.async(() => () => 0, () => async (n) => {
        await laterPromise()
        return n > 0
      })
      yield* within(validateUpdate(judging, replayInput([]), "bump", [1]))
      const rejected = yield* within(Effect.flip(validateUpdate(judging, replayInput([]), "bump", [-1])))
      assert.strictEqual(rejected._tag, "UpdateRejected")
    }))

  it.scoped("a worker fails the query task and the validation task, with the message, instead of holding their slots for ever", () =>
    Effect.gen(function*() {
      const queue = `receiver-ops-${Math.random().toString(16).slice(2)}`
      const { server } = yield* setup({ updateValidation: true })
      const wf = audited.effect((ctx, state) => () => Effect.as(ctx.sleep(1), state.total), (ctx) => () => Effect.as(ctx.sleep(1), true))
      yield* startWorker(server, { durableWorkflows: [wf] }, { taskQueue: queue })
      server.enqueueQueryTask({ workflowType: "orders.audited", queryName: "total", taskQueue: queue })
      server.enqueueUpdateValidationTask({ workflowType: "orders.audited", updateName: "bump", taskQueue: queue, updateInput: [1] })
      yield* until(server, () => server.failedQueryTasks.length === 1 && server.updateValidations.length === 1)
      const queried = server.failedQueryTasks[0]!.body["failure"] as Record<string, unknown>
      assert.strictEqual(queried["reason"], "query_rejected")
      assert.strictEqual(queried["message"], queryRefusal("sleep"))
      const validated = server.updateValidations[0]!.body["failure"] as Record<string, unknown>
      assert.strictEqual(server.updateValidations[0]!.outcome, "rejected")
      assert.strictEqual(validated["reason"], "update_validation_worker_failed")
      assert.strictEqual(validated["message"], validatorRefusal("sleep"))
    }))
})

describe("an op a receiver reaches through a fiber of its own making, or returns, is refused too", () => {
  // `Effect.runPromise` inside a receiver's Effect: a fiber neither the workflow nor the receiver forked
  const ownFiber = (op: Effect.Effect<unknown, unknown>) => Effect.promise(() => Effect.runPromise(Effect.either(op)))

  it.live("an update handler's, replayed (it waited for the replay that waited for it) and applied", () =>
    Effect.gen(function*() {
      const wf = billing.effect((ctx, state) => (n) =>
        Effect.gen(function*() {
          yield* later
          yield* ownFiber(ctx.sleep(1))
          state.total += n
        })
      )
      assertRefused(yield* within(Effect.either(replay(wf, replayInput([applied("u-1", "bump", [2])])))), refusal("replayed", "sleep"))
      assertRefused(
        yield* within(Effect.either(applyUpdate(wf, replayInput([accepted("u-1", "bump", [2])]), "u-1"))),
        refusal("applied", "sleep")
      )
    }))

  it.live("an Effect workflow's update handler that returns a promise, replayed after the workflow's code ended (for a query)", () =>
    Effect.gen(function*() {
      // its promise code makes the op after an await, where nothing says whose code it is: once the
      // workflow's code has ended, it is the running handler's (while the code runs, it could be the
      // code's own, and is answered: such a handler still waits for ever in a workflow task)
      for (const pause of [() => Promise.resolve(), laterPromise]) {
        const wf = DurableWorkflow.make("orders.quick", (ctx) =>
          Effect.gen(function*() {
            const state = { total: 0 }
            ctx.onUpdate("bump", async (n: number) => {
              await pause()
              await Effect.runPromise(Effect.either(ctx.sleep(1)))
              state.total += n
            })
            ctx.onQuery("total", () => state.total)
            return yield* ctx.activity("orders.bill")
          }), declarations)
        const failed = yield* within(Effect.flip(query(wf, replayInput([completed("orders.bill", "ok"), applied("u-1", "bump", [2])]), "total", [])))
        assert.strictEqual(failed.message, `workflow replay failed before query: ${refusal("replayed", "sleep")}`)
      }
    }))

  it.live("a query's and a validator's", () =>
    Effect.gen(function*() {
      const wf = audited.effect(
        (ctx, state) => () => Effect.as(ownFiber(ctx.activity("orders.audit")), state.total),
        (ctx) => () => Effect.as(ownFiber(ctx.sleep(1)), true)
      )
      const failed = yield* within(Effect.flip(query(wf, replayInput([]), "total", [])))
      assert.strictEqual(failed.message, queryRefusal("activity 'orders.audit'"))
      const invalid = yield* within(Effect.flip(validateUpdate(wf, replayInput([]), "bump", [1])))
      assert.strictEqual(invalid.message, validatorRefusal("sleep"))
    }))

  it.live("a generator workflow's receiver that returns an op (its context makes ops as values)", () =>
    Effect.gen(function*() {
      const wf = DurableWorkflow.fromGenerator("orders.audited", function*(ctx) {
        const state = { total: 0 }
        ctx.onUpdate("bump", (n: number) => ctx.sleep(n))
        ctx.onUpdateValidator("bump", () => [ctx.sleep(1), ctx.activity("orders.audit")] as never)
        ctx.onQuery("total", () => ctx.activity("orders.audit"))
        yield ctx.waitCondition(() => state.total >= 2)
        return state.total
      }, { ...declarations, updateValidators: ["bump"] })
      const failed = yield* within(Effect.flip(query(wf, replayInput([]), "total", [])))
      assert.strictEqual(failed.message, queryRefusal("activity 'orders.audit'"))
      const invalid = yield* within(Effect.flip(validateUpdate(wf, replayInput([]), "bump", [1])))
      assert.strictEqual(invalid.message, validatorRefusal("all"))
      assertRefused(yield* within(Effect.either(applyUpdate(wf, replayInput([accepted("u-1", "bump", [2])]), "u-1"))), refusal("applied", "sleep"))
    }))

  it.live("a workflow whose own code hands its op to a shared fiber, with no receiver running, is answered as before", () =>
    Effect.gen(function*() {
      const wf = DurableWorkflow.make("orders.handed", (ctx) =>
        Effect.gen(function*() {
          const value = Either.getOrThrow(yield* ownFiber(ctx.sideEffect(() => 7)))
          return yield* ctx.activity("orders.bill", [value])
        }))
      const { commands } = yield* within(replay(wf, replayInput([])))
      assert.deepStrictEqual(commands.map((command) => command["type"]), ["record_side_effect", "schedule_activity"])
    }))
})

describe("the workflow's own ops are answered, whoever runs them, while a receiver runs", () => {
  // a fiber the workflows share (a rate limiter, say), one job at a time after `pause`
  const sharedRunner = (pause: Effect.Effect<void>) =>
    Effect.gen(function*() {
      type Job = readonly [Effect.Effect<unknown, unknown>, Deferred.Deferred<unknown, unknown>]
      const jobs = yield* Queue.unbounded<Job>()
      yield* Effect.forkScoped(Effect.forever(Effect.flatMap(Queue.take(jobs), ([job, done]) =>
        Effect.zipRight(pause, Effect.flatMap(Effect.exit(job), (exit) => Deferred.done(done, exit))))))
      return <A>(job: Effect.Effect<A, unknown>) =>
        Effect.gen(function*() {
          const done = yield* Deferred.make<unknown, unknown>()
          yield* Queue.offer(jobs, [job, done])
          return (yield* Deferred.await(done)) as A
        })
    })

  /** Bumps on a `bump` update (after an asynchronous step), while `other` runs beside the wait for it. */
  const bumped = (other: (ctx: DurableWorkflow.EffectWorkflowContext) => Effect.Effect<unknown, unknown>) =>
    DurableWorkflow.make("orders.beside", (ctx) =>
      Effect.gen(function*() {
        const state = { total: 0 }
        ctx.onUpdate("bump", (n: number) => Effect.zipRight(later, Effect.sync(() => void (state.total += n))))
        const [, value] = yield* Effect.all([ctx.waitCondition(() => state.total >= 2), other(ctx)], { concurrency: "unbounded" })
        return yield* ctx.activity("orders.bill", [value])
      }), declarations)

  it.scopedLive("an op the code runs through Effect.runPromise, or hands to a shared fiber, while a replayed update settles", () =>
    Effect.gen(function*() {
      const shared = yield* sharedRunner(Effect.void)
      for (
        const wf of [
          bumped((ctx) => Effect.promise(() => Effect.runPromise(ctx.sideEffect(() => 7)))),
          bumped((ctx) => shared(ctx.sideEffect(() => 7)))
        ]
      ) {
        const { commands } = yield* within(replay(wf, replayInput([applied("u-1", "bump", [2])])))
        assert.deepStrictEqual(commands.map((command) => command["type"]), ["record_side_effect", "schedule_activity"])
      }
    }))

  it.scopedLive("an op of the code still queued on a shared fiber while a query runs: the query answers", () =>
    Effect.gen(function*() {
      const shared = yield* sharedRunner(Effect.sleep("30 millis"))
      const wf = DurableWorkflow.make("orders.queued", (ctx) =>
        Effect.gen(function*() {
          ctx.onQuery("total", () => Effect.as(Effect.sleep("80 millis"), 5))
          return yield* Effect.all([ctx.activity("orders.bill"), shared(ctx.sideEffect(() => 7))], { concurrency: "unbounded" })
        }), declarations)
      assert.strictEqual(yield* within(query(wf, replayInput([]), "total", [])), 5)
    }))

  it.live("a receiver's own answer shaped like an op, in an Effect or async workflow", () =>
    Effect.gen(function*() {
      const timer = { _tag: "Timer", seconds: 3 }
      const effectWf = DurableWorkflow.make("orders.shaped", (ctx) =>
        Effect.gen(function*() {
          ctx.onQuery("total", () => timer)
          return yield* ctx.activity("orders.bill")
        }), declarations)
      const asyncWf = DurableWorkflow.fromAsync("orders.shaped", async (ctx) => {
        ctx.onQuery("total", async () => timer)
        return ctx.activity("orders.bill")
      }, declarations)
      for (const wf of [effectWf, asyncWf]) assert.deepStrictEqual(yield* within(query(wf, replayInput([]), "total", [])), timer)
    }))
})
