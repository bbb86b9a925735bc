/**
 * Coordinator-driven workflows authored in OUR worker, driven by the real nestjs-durable engine over
 * Redis/BullMQ: `engine.start(name, input)` of a workflow the engine does not know (convention routing
 * to the live worker group of that name, or an explicit `engine.remote(name)`), whose steps our worker
 * serves too. Every scenario runs with an async body (promise facade, `worker.workflow`) and, where it
 * adds something, an Effect body (`Workflow.make` on `Worker.make`).
 */
import { Queue, QueueEvents } from "bullmq"
import { spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import * as Effect from "effect/Effect"
import { afterAll, assert, describe, it } from "vitest"
import { FatalError, Step, Workflow } from "../../src/index.js"
import { tasksQueue } from "../../src/transport/bullmq/internal/naming.js"
import type { EngineHarness } from "../support/engine.js"
import { engines, plain, serveEffect, serveFacade, trace } from "../support/workflowWorkers.js"

const fleet = engines()
afterAll(() => fleet.closeAll())

const ingestion = async (input: { key: string }) => ({ rows: input.key.length })

describe("remote workflows on the real engine", () => {
  it("pipeline (async body, convention routing): now, a dispatched step, a durable sleep; completes after the timer", async () => {
    const engine = await fleet.start()
    const served = fleet.track(await serveFacade(engine, (worker) => {
      worker.step("ingestion", ingestion)
      worker.workflow("pipeline", async (ctx, base: string) => {
        const startedAt = await ctx.now()
        const { rows } = await ctx.step<{ rows: number }>("ingestion", { key: `/${base}/data.csv` })
        await ctx.sleep("300 millis")
        return { rows, startedAt }
      })
    }, { workflows: ["pipeline"] }))
    const runId = await engine.start("pipeline", "b1")
    const result = await engine.waitForRun(runId)
    assert.strictEqual(result.status, "completed", JSON.stringify(result.error))
    const checkpoints = (await engine.checkpoints(runId)).map(plain)
    assert.deepStrictEqual(trace(await engine.checkpoints(runId)), [
      { seq: 0, name: "now", kind: "local" },
      { seq: 1, name: "ingestion", kind: "remote" },
      { seq: 2, name: "sleep:2", kind: "sleep" }
    ])
    assert.deepStrictEqual(result.output, { rows: 12, startedAt: checkpoints[0]!.output })
    assert.strictEqual(checkpoints[1]!.status, "completed")
    assert.deepStrictEqual(checkpoints[1]!.input, { key: "/b1/data.csv" })
    // the run completed only once the engine's timer was due: the sleep really was durable
    const run = await engine.getRun(runId)
    assert.isAtLeast(new Date(run!.updatedAt).getTime(), checkpoints[2]!.wakeAt)
    assert.isAtLeast(checkpoints[2]!.wakeAt - new Date(checkpoints[2]!.startedAt).getTime(), 300)
    await served.stop()
  })

  it("pipeline (Effect body, engine.remote registration): same run, same checkpoints", async () => {
    const engine = await fleet.start()
    engine.remote("pipeline")
    const pipeline = Workflow.make("pipeline", (base: string, ctx) =>
      Effect.gen(function*() {
        const startedAt = yield* ctx.now()
        const { rows } = yield* ctx.step<{ rows: number }>("ingestion", { key: `/${base}/data.csv` })
        yield* ctx.sleep("300 millis")
        return { rows, startedAt }
      }))
    const served = fleet.track(
      await serveEffect(engine, { steps: [Step.fromPromise("ingestion", ingestion)], workflows: [pipeline] })
    )
    const runId = await engine.start("pipeline", "b1")
    const result = await engine.waitForRun(runId)
    assert.strictEqual(result.status, "completed", JSON.stringify(result.error))
    assert.deepStrictEqual(trace(await engine.checkpoints(runId)), [
      { seq: 0, name: "now", kind: "local" },
      { seq: 1, name: "ingestion", kind: "remote" },
      { seq: 2, name: "sleep:2", kind: "sleep" }
    ])
    const now = plain((await engine.checkpoint(runId, 0))!)
    assert.deepStrictEqual(result.output, { rows: 12, startedAt: now.output })
    await served.stop()
  })

  describe("a signal delivered while the run waits", () => {
    const check = async (engine: EngineHarness) => {
      const runId = await engine.start("approval", { id: "o-1" })
      const waiter = await engine.waitForSignalWaiter("approve:o-1")
      assert.deepStrictEqual(waiter, { ...waiter, runId, seq: 1 })
      assert.strictEqual((await engine.getRun(runId))?.status, "suspended")
      await engine.signal("approve:o-1", { by: "ops" })
      const result = await engine.waitForRun(runId)
      assert.strictEqual(result.status, "completed", JSON.stringify(result.error))
      assert.deepStrictEqual(result.output, { reserved: "o-1", approvedBy: "ops" })
      assert.deepStrictEqual(trace(await engine.checkpoints(runId)), [
        { seq: 0, name: "reserve", kind: "remote" },
        { seq: 1, name: "signal:approve:o-1", kind: "signal" }
      ])
    }

    it("async body", async () => {
      const engine = await fleet.start()
      const served = fleet.track(await serveFacade(engine, (worker) => {
        worker.step("reserve", async (input: { id: string }) => input.id)
        worker.workflow("approval", async (ctx, input: { id: string }) => {
          const reserved = await ctx.step<string>("reserve", input)
          const approval = await ctx.waitForSignal<{ by: string }>(`approve:${input.id}`)
          return { reserved, approvedBy: approval.by }
        })
      }, { workflows: ["approval"] }))
      await check(engine)
      await served.stop()
    })

    it("Effect body", async () => {
      const engine = await fleet.start()
      const approval = Workflow.make("approval", (input: { id: string }, ctx) =>
        Effect.gen(function*() {
          const reserved = yield* ctx.step<string>("reserve", input)
          const signal = yield* ctx.waitForSignal<{ by: string }>(`approve:${input.id}`)
          return { reserved, approvedBy: signal.by }
        }))
      const served = fleet.track(await serveEffect(engine, {
        steps: [Step.fromPromise("reserve", async (input: { id: string }) => input.id)],
        workflows: [approval]
      }))
      await check(engine)
      await served.stop()
    })
  })

  it("a child run (and a fan of children) served by the same worker", async () => {
    const engine = await fleet.start()
    const served = fleet.track(await serveFacade(engine, (worker) => {
      worker.step("square", async (n: number) => n * n)
      worker.workflow("square-child", async (ctx, n: number) => ctx.step<number>("square", n))
      worker.workflow("parent", async (ctx, n: number) => {
        const one = await ctx.child<number>("square-child", n)
        const many = await ctx.all<number>("square-child", [1, 2, 3])
        return { one, many }
      })
    }, { workflows: ["parent", "square-child"] }))
    const runId = await engine.start("parent", 4)
    const result = await engine.waitForRun(runId)
    assert.strictEqual(result.status, "completed", JSON.stringify(result.error))
    assert.deepStrictEqual(result.output, { one: 16, many: [1, 4, 9] })
    const checkpoints = (await engine.checkpoints(runId)).map(plain)
    assert.deepStrictEqual(
      checkpoints.map(({ kind, name, parallelGroup, seq }) => ({ seq, name, kind, parallelGroup })),
      [
        { seq: 0, name: `signal:child:${runId}.child.0`, kind: "signal", parallelGroup: undefined },
        ...[1, 2, 3].map((seq) => ({ seq, name: `signal:child:${runId}.child.${seq}`, kind: "signal", parallelGroup: "gather:1" }))
      ]
    )
    for (const seq of [0, 1, 2, 3]) {
      const child = await engine.getRun(`${runId}.child.${seq}`)
      assert.strictEqual(child?.status, "completed")
      assert.strictEqual(child?.workflow, "square-child")
    }
    await served.stop()
  })

  describe("a gather of 20 dispatched steps", () => {
    const check = async (engine: EngineHarness, executions: Map<string, number>) => {
      const runId = await engine.start("fan", 20)
      const result = await engine.waitForRun(runId)
      assert.strictEqual(result.status, "completed", JSON.stringify(result.error))
      assert.strictEqual(result.output, 2 * (19 * 20) / 2)
      const checkpoints = (await engine.checkpoints(runId)).map(plain)
      assert.strictEqual(checkpoints.length, 20)
      assert.isTrue(checkpoints.every((c, i) => c.seq === i && c.kind === "remote" && c.status === "completed"))
      assert.isTrue(checkpoints.every((c) => c.parallelGroup === "gather:0"))
      assert.strictEqual(executions.size, 20)
      assert.isTrue([...executions.values()].every((n) => n === 1), "every item ran exactly once")
    }

    it("async body (ctx.gatherCalls)", async () => {
      const engine = await fleet.start()
      const executions = new Map<string, number>()
      const served = fleet.track(await serveFacade(engine, (worker) => {
        worker.step("item", async (input: { i: number }, ctx) => {
          executions.set(ctx.stepId, (executions.get(ctx.stepId) ?? 0) + 1)
          return input.i * 2
        })
        worker.workflow("fan", async (ctx, n: number) => {
          const outputs = await ctx.gatherCalls<number>(Array.from({ length: n }, (_, i) => ["item", { i }] as const))
          return outputs.reduce((a, b) => a + b, 0)
        })
      }, { workflows: ["fan"] }))
      await check(engine, executions)
      await served.stop()
    })

    it("Effect body (ctx.gatherCalls)", async () => {
      const engine = await fleet.start()
      const executions = new Map<string, number>()
      const fan = Workflow.make("fan", (n: number, ctx) =>
        Effect.map(
          ctx.gatherCalls<number>(Array.from({ length: n }, (_, i) => ({ name: "item", input: { i } }))),
          (outputs) => outputs.reduce((a, b) => a + b, 0)
        ))
      const served = fleet.track(await serveEffect(engine, {
        steps: [Step.fromPromise("item", async (input: { i: number }, ctx) => {
          executions.set(ctx.stepId, (executions.get(ctx.stepId) ?? 0) + 1)
          return input.i * 2
        })],
        workflows: [fan]
      }))
      await check(engine, executions)
      await served.stop()
    })
  })

  describe("a failing step caught and compensated", () => {
    const check = async (engine: EngineHarness, charges: () => number) => {
      const runId = await engine.start("checkout", { amount: 20_000 })
      const result = await engine.waitForRun(runId)
      assert.strictEqual(result.status, "completed", JSON.stringify(result.error))
      assert.deepStrictEqual(result.output, { status: "compensated", reason: "card declined", released: "hold-20000" })
      const [charge, release] = (await engine.checkpoints(runId)).map(plain)
      assert.strictEqual(charge!.name, "charge")
      assert.strictEqual(charge!.status, "failed")
      assert.strictEqual(charge!.error.code, "card_declined")
      assert.strictEqual(release!.name, "release")
      assert.strictEqual(release!.status, "completed")
      assert.strictEqual(charges(), 1)
    }

    it("async body (try/catch StepFailed)", async () => {
      const engine = await fleet.start()
      let charges = 0
      const served = fleet.track(await serveFacade(engine, (worker) => {
        worker.step("charge", async () => {
          charges++
          throw new FatalError("card declined", "card_declined")
        })
        worker.step("release", async (input: { amount: number }) => `hold-${input.amount}`)
        worker.workflow("checkout", async (ctx, input: { amount: number }) => {
          try {
            return await ctx.step("charge", input)
          } catch (error) {
            if (!(error instanceof Workflow.StepFailed)) throw error
            const released = await ctx.step<string>("release", input)
            return { status: "compensated", reason: error.message, released }
          }
        })
      }, { workflows: ["checkout"] }))
      await check(engine, () => charges)
      await served.stop()
    })

    it("Effect body (catchTag StepFailed)", async () => {
      const engine = await fleet.start()
      let charges = 0
      const checkout = Workflow.make("checkout", (input: { amount: number }, ctx) =>
        ctx.step("charge", input).pipe(
          Effect.catchTag("StepFailed", (failed) =>
            Effect.map(ctx.step<string>("release", input), (released) => ({
              status: "compensated",
              reason: failed.error.message,
              released
            })))
        ))
      const served = fleet.track(await serveEffect(engine, {
        steps: [
          Step.fromPromise("charge", async () => {
            charges++
            throw new FatalError("card declined", "card_declined")
          }),
          Step.fromPromise("release", async (input: { amount: number }) => `hold-${input.amount}`)
        ],
        workflows: [checkout]
      }))
      await check(engine, () => charges)
      await served.stop()
    })
  })

  it("an uncaught failure fails the run: a failed step's error verbatim, a thrown error with its message", async () => {
    const engine = await fleet.start()
    const served = fleet.track(await serveFacade(engine, (worker) => {
      worker.step("charge", async () => {
        throw new FatalError("card declined", "card_declined")
      })
      worker.step("noop", async () => "ok")
      worker.workflow("uncaught-step", async (ctx) => ctx.step("charge", {}))
      worker.workflow("throws", async (ctx) => {
        await ctx.step("noop", {})
        throw Object.assign(new Error("inventory mismatch"), { code: "mismatch" })
      })
    }, { workflows: ["uncaught-step", "throws"] }))
    const failedStep = await engine.run("uncaught-step", {})
    assert.strictEqual(failedStep.status, "failed")
    assert.strictEqual(failedStep.error?.message, "card declined")
    assert.strictEqual((failedStep.error as { code?: string }).code, "card_declined")
    assert.strictEqual((failedStep.error as { retryable?: boolean }).retryable, false)
    const thrown = await engine.run("throws", {})
    assert.strictEqual(thrown.status, "failed")
    assert.strictEqual(thrown.error?.message, "inventory mismatch")
    assert.strictEqual((thrown.error as { code?: string }).code, "mismatch")
    assert.deepStrictEqual(trace(await engine.checkpoints(thrown.runId)), [{ seq: 0, name: "noop", kind: "remote" }])
    await served.stop()
  })

  describe("cancellation", () => {
    it("a cancel while a step of the run runs: the step is aborted, the run is cancelled, nothing after it runs", async () => {
      const engine = await fleet.start()
      let entered!: () => void
      const holding = new Promise<void>((resolve) => (entered = resolve))
      let aborted = false
      let after = 0
      const served = fleet.track(await serveFacade(engine, (worker) => {
        worker.step("hold", (_input: unknown, ctx) =>
          new Promise((_, reject) => {
            entered()
            ctx.signal.addEventListener("abort", () => {
              aborted = true
              reject(new Error("aborted"))
            })
          }))
        worker.step("after", async () => ++after)
        worker.workflow("held", async (ctx) => {
          await ctx.step("hold", {})
          return ctx.step("after", {})
        })
      }, { workflows: ["held"] }))
      const runId = await engine.start("held", {})
      await holding
      const cancelled = await engine.cancel(runId)
      assert.strictEqual(cancelled?.status, "cancelled")
      const deadline = Date.now() + 5_000
      while (!aborted && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10))
      assert.isTrue(aborted, "the running step's signal was aborted")
      await served.stop()
      assert.strictEqual((await engine.getRun(runId))?.status, "cancelled")
      assert.strictEqual(after, 0)
      assert.deepStrictEqual(trace(await engine.checkpoints(runId)), [{ seq: 0, name: "hold", kind: "remote" }])
    })

    it("a cancel that reaches the worker during a turn stops the replay at the next op boundary", async () => {
      const engine = await fleet.start()
      let releaseGate!: () => void
      const gate = new Promise<void>((resolve) => (releaseGate = resolve))
      let inGate!: () => void
      const gateEntered = new Promise<void>((resolve) => (inGate = resolve))
      let watcherAborted!: () => void
      const cancelSeen = new Promise<void>((resolve) => (watcherAborted = resolve))
      let watcherStarted!: () => void
      const watching = new Promise<void>((resolve) => (watcherStarted = resolve))
      let afterGate = 0
      const served = fleet.track(await serveFacade(engine, (worker) => {
        // a step of the same run: its abort proves the cancel reached this worker's registry
        worker.step("watch", (_input: unknown, ctx) =>
          new Promise((_, reject) => {
            ctx.signal.addEventListener("abort", () => {
              watcherAborted()
              reject(new Error("aborted"))
            })
            watcherStarted()
          }))
        worker.step("never", async () => "never")
        worker.workflow("gated", async (ctx) => {
          await ctx.sideEffect(async () => {
            inGate()
            await gate
            return "gated"
          })
          await ctx.sideEffect(() => ++afterGate)
          return ctx.step("never", {})
        })
      }, { workflows: ["gated"] }))
      const runId = await engine.start("gated", {})
      await gateEntered
      const watchQueue = new Queue(tasksQueue(engine.effectivePrefix, "watch"), { connection: engine.connection })
      await watchQueue.add("task", { runId, seq: 99, name: "watch", stepId: `${runId}:99`, group: "watch", input: {}, attempt: 1 })
      await watchQueue.close()
      await watching
      await engine.cancel(runId)
      await Promise.race([
        cancelSeen,
        new Promise((_, reject) => setTimeout(() => reject(new Error("the cancel never reached the worker")), 10_000))
      ])
      releaseGate()
      // the turn is answered (cancelled) and acknowledged: its job leaves the queue
      const turns = new Queue(tasksQueue(engine.effectivePrefix, "gated"), { connection: engine.connection })
      const deadline = Date.now() + 10_000
      while ((await turns.getActiveCount()) + (await turns.getWaitingCount()) > 0 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
      assert.strictEqual((await turns.getActiveCount()) + (await turns.getWaitingCount()), 0)
      await turns.close()
      assert.strictEqual(afterGate, 0, "no op after the cancel ran")
      await served.stop()
      assert.strictEqual((await engine.getRun(runId))?.status, "cancelled")
      assert.deepStrictEqual(await engine.checkpoints(runId), [])
    })
  })

  describe("code changed under a run in flight: the replay fails the run loudly", () => {
    it("async body: a renamed step (the new code even catches the error) fails the run, runs nothing new", async () => {
      const engine = await fleet.start()
      const ran = { reserve: 0, reserveV2: 0, ship: 0 }
      const v1 = fleet.track(await serveFacade(engine, (worker) => {
        worker.step("reserve", async () => ++ran.reserve)
        worker.workflow("order", async (ctx) => {
          await ctx.step("reserve", {})
          const go = await ctx.waitForSignal("order-go")
          return ctx.step("ship", go)
        })
      }, { workflows: ["order"] }))
      const runId = await engine.start("order", {})
      await engine.waitForSignalWaiter("order-go")
      await v1.stop()
      const v2 = fleet.track(await serveFacade(engine, (worker) => {
        worker.step("reserve-v2", async () => ++ran.reserveV2)
        worker.step("ship", async () => ++ran.ship)
        worker.workflow("order", async (ctx) => {
          try {
            await ctx.step("reserve-v2", {})
          } catch {
            return "swallowed"
          }
          const go = await ctx.waitForSignal("order-go")
          return ctx.step("ship", go)
        })
      }, { workflows: ["order"] }))
      await engine.signal("order-go", { now: true })
      const result = await engine.waitForRun(runId)
      assert.strictEqual(result.status, "failed")
      assert.include(result.error?.message, `history at seq 0 is call/"reserve", but replay reached call/"reserve-v2"`)
      assert.include(result.error?.message, runId)
      assert.deepStrictEqual(ran, { reserve: 1, reserveV2: 0, ship: 0 })
      assert.deepStrictEqual(trace(await engine.checkpoints(runId)), [
        { seq: 0, name: "reserve", kind: "remote" },
        { seq: 1, name: "signal:order-go", kind: "signal" }
      ])
      await v2.stop()
    })

    it("Effect body: an op inserted before recorded history (another kind at the same seq) fails the run", async () => {
      const engine = await fleet.start()
      let shipped = 0
      const reserve = Step.fromPromise("reserve", async () => "reserved")
      const ship = Step.fromPromise("ship", async () => ++shipped)
      const v1 = fleet.track(await serveEffect(engine, {
        steps: [reserve, ship],
        workflows: [Workflow.make("order", (_: unknown, ctx) =>
          Effect.gen(function*() {
            yield* ctx.step("reserve", {})
            yield* ctx.waitForSignal("order-go-2")
            return yield* ctx.step("ship", {})
          }))]
      }))
      const runId = await engine.start("order", {})
      await engine.waitForSignalWaiter("order-go-2")
      await v1.stop()
      const v2 = fleet.track(await serveEffect(engine, {
        steps: [reserve, ship],
        workflows: [Workflow.make("order", (_: unknown, ctx) =>
          Effect.gen(function*() {
            yield* ctx.sleep("1 second")
            yield* ctx.step("reserve", {})
            yield* ctx.waitForSignal("order-go-2")
            return yield* ctx.step("ship", {})
          }).pipe(Effect.catchAllDefect(() => Effect.succeed("swallowed"))))]
      }))
      await engine.signal("order-go-2", {})
      const result = await engine.waitForRun(runId)
      assert.strictEqual(result.status, "failed")
      assert.include(result.error?.message, `history at seq 0 is call/"reserve", but replay reached timer/(no name)`)
      assert.strictEqual(shipped, 0)
      assert.deepStrictEqual(trace(await engine.checkpoints(runId)).map(({ seq }) => seq), [0, 1])
      await v2.stop()
    })
  })
})

describe("a turn replaying 10,000 history entries", () => {
  const N = 10_000
  /** Busy CPU per op (ms): workflow code computing between ops; about 2 s per turn. */
  const SPIN_MS = 0.2
  /** The BullMQ lock of a turn: each turn outlives it twice over, so it lives only if it is renewed. */
  const LOCK_MS = 1_000
  /** How often the worker's stalled checker takes back jobs whose lock expired. */
  const STALLED_MS = 300

  /**
   * Turn 1 runs N local ops (10,000 `recordStep`s) and blocks on a step; turn 2 replays those N
   * entries and completes. The worker runs in its own process (the engine's own work on a run this
   * size must not share its event loop). A turn that held the event loop past its lock would be taken
   * back by the stalled checker and run again: a stalled job, a third body start, a local op run
   * twice. And another run's step, dispatched a tenth of the way into turn 2, must be served while
   * turn 2 is still replaying, not after it.
   */
  const scenario = async (style: "async" | "effect") => {
    const engine = await fleet.start()
    const name = `long-${style}`
    engine.register("probe", async (ctx) => ctx.step("long.probe", {}))
    const child = spawn(
      process.execPath,
      [
        "--import",
        "tsx",
        "--conditions=source",
        fileURLToPath(new URL("../support/longReplayWorker.ts", import.meta.url)),
        style,
        engine.prefix,
        `redis://${engine.connection.host}:${engine.connection.port}`,
        String(N),
        String(SPIN_MS),
        String(LOCK_MS),
        String(STALLED_MS)
      ],
      { stdio: ["pipe", "pipe", "pipe"] }
    )
    const lines: Array<string> = []
    let stderr = ""
    let probeRun: Promise<string> | undefined
    let pending = ""
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      pending += chunk
      for (let at = pending.indexOf("\n"); at >= 0; at = pending.indexOf("\n")) {
        const line = pending.slice(0, at)
        pending = pending.slice(at + 1)
        lines.push(line)
        if (line === "trigger") probeRun ??= engine.start("probe", {})
      }
    })
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk))
    const exited = new Promise<number | null>((resolve) => child.once("exit", resolve))
    try {
      await engine.waitForWorkerGroup(name, { timeoutMs: 30_000 })
      const events = new QueueEvents(tasksQueue(engine.effectivePrefix, name), { connection: engine.connection })
      await events.waitUntilReady()
      const stalled: Array<string> = []
      const failed: Array<string> = []
      events.on("stalled", ({ jobId }) => stalled.push(jobId))
      events.on("failed", ({ failedReason, jobId }) => failed.push(`${jobId}: ${failedReason}`))

      const runId = await engine.start(name, N)
      const result = await engine.waitForRun(runId, { timeoutMs: 120_000 })
      assert.strictEqual(result.status, "completed", `${JSON.stringify(result.error)} ${stderr}`)
      assert.strictEqual(result.output, (N * (N - 1)) / 2 + 1)
      assert.strictEqual((await engine.checkpoints(runId)).length, N + 1)
      assert.isDefined(probeRun, "turn 2 reached the trigger")
      assert.strictEqual((await engine.waitForRun(await probeRun!)).output, "probed")
      child.stdin.write("stop\n")
      assert.strictEqual(await exited, 0, stderr)
      await events.close()
      const report = lines.join(" | ")
      // no lock lost: nothing stalled or failed, each turn's body ran once, each local op ran once
      assert.deepStrictEqual(stalled, [], report)
      assert.deepStrictEqual(failed, [], report)
      assert.deepStrictEqual(lines.filter((line) => line.startsWith("body ")), ["body 1", "body 2"], report)
      assert.deepStrictEqual(lines.filter((line) => line.startsWith("loop-done ")), [`loop-done ${N}`, `loop-done ${N}`], report)
      // other work was served during the replay
      assert.deepStrictEqual(lines.filter((line) => line.startsWith("probe ")), ["probe during"], report)
    } finally {
      if (child.exitCode === null) child.kill("SIGKILL")
    }
  }

  it("async body", () => scenario("async"))
  it("Effect body", () => scenario("effect"))
})

describe("a turn whose decision JSON cannot carry", () => {
  it("a step input with a BigInt fails the run once, named, instead of the turn being replayed for ever", async () => {
    const engine = await fleet.start()
    let turns = 0
    const served = fleet.track(await serveFacade(engine, (worker) => {
      worker.step("charge", async () => "charged")
      worker.workflow("billing", async (ctx) => {
        turns++
        return ctx.step("charge", { amount: 10n })
      })
    }, { workflows: ["billing"] }))
    const runId = await engine.start("billing", {})
    const result = await engine.waitForRun(runId, { timeoutMs: 10_000 })
    assert.strictEqual(result.status, "failed")
    assert.match(String(result.error?.message), /^the input of step "charge" \(seq 0\) cannot be encoded as JSON: a BigInt .* at \$\.amount$/)
    assert.strictEqual(turns, 1)
    assert.deepStrictEqual(await engine.checkpoints(runId), [])
    await served.stop()
  })
})
