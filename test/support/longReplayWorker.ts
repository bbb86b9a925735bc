/**
 * A worker process for the long-replay test (the engine runs in the parent, so its own work on a
 * 10,000-entry run never shares this process's event loop). Serves workflow `long-<style>`: N local
 * ops (`sideEffect`), each followed by `spinMs` of busy CPU, then a dispatched step `long.ping`; and
 * the steps `long.ping` and `long.probe`. Reports on stdout, one line each:
 * `body <n>` when a turn's body starts, `trigger` a tenth of the way into the second turn,
 * `loop-done <localRuns>`, `probe during|after` (whether `long.probe` ran while a turn was still
 * looping), and `stopped <max event-loop delay ms>` once "stop" arrives on stdin and the worker drained.
 *
 * Arguments: style (`async` | `effect`), prefix, redis url, N, spinMs, lockMs, stalledMs.
 */
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import { monitorEventLoopDelay } from "node:perf_hooks"
import { Step, Workflow, Worker as EffectWorker } from "../../src/index.js"
import { BullMQTransport } from "../../src/bullmq.js"
import { redis, Worker } from "../../src/promise.js"

const [style, prefix, url, nArg, spinArg, lockArg, stalledArg] = process.argv.slice(2)
const n = Number(nArg)
const spinMs = Number(spinArg)
const lockMs = Number(lockArg)
const stalledMs = Number(stalledArg)
const say = (line: string) => process.stdout.write(`${line}\n`)

const delay = monitorEventLoopDelay({ resolution: 10 })
delay.enable()

let bodies = 0
let localRuns = 0
let looping = false
const onBodyStart = () => {
  bodies++
  looping = true
  say(`body ${bodies}`)
}
const onLocal = () => {
  localRuns++
}
const onOp = (i: number) => {
  const until = performance.now() + spinMs
  while (performance.now() < until) {
    // workflow code computing between two ops
  }
  if (bodies === 2 && i === n / 10) say("trigger")
}
const onLoopDone = () => {
  looping = false
  say(`loop-done ${localRuns}`)
}
const ping = async () => 1
const probe = async () => {
  say(`probe ${looping ? "during" : "after"}`)
  return "probed"
}

const fail = (error: unknown) => {
  process.stderr.write(`worker failed: ${String(error)}\n`)
  process.exit(1)
}

const start = (): { readonly stop: () => Promise<void> } => {
  if (style === "async") {
    const worker = new Worker({ handleSignals: false, logLevel: "None", concurrency: 4, shutdownTimeoutMs: 10_000 })
    worker.step("long.ping", ping)
    worker.step("long.probe", probe)
    worker.workflow("long-async", async (ctx, count: number) => {
      onBodyStart()
      let sum = 0
      for (let i = 0; i < count; i++) {
        sum += await ctx.sideEffect(() => {
          onLocal()
          return i
        })
        onOp(i)
      }
      onLoopDone()
      return sum + await ctx.step<number>("long.ping", {})
    })
    const running = worker.run(redis({ prefix: prefix!, url: url!, lockDurationMs: lockMs, stalledIntervalMs: stalledMs }))
    running.catch(fail)
    return { stop: async () => {
      await worker.stop()
      await running
    } }
  }
  const workflow = Workflow.make("long-effect", (count: number, ctx) =>
    Effect.gen(function*() {
      onBodyStart()
      let sum = 0
      for (let i = 0; i < count; i++) {
        sum += yield* ctx.sideEffect(Effect.sync(() => {
          onLocal()
          return i
        }))
        onOp(i)
      }
      onLoopDone()
      return sum + (yield* ctx.step<number>("long.ping", {}))
    }))
  const worker = Effect.runSync(EffectWorker.make({
    steps: [Step.fromPromise("long.ping", ping), Step.fromPromise("long.probe", probe)],
    workflows: [workflow],
    concurrency: 4,
    shutdownTimeout: "10 seconds"
  }))
  const running = Effect.runPromise(worker.run.pipe(
    Effect.provide(BullMQTransport.layer({ prefix: prefix!, url: url!, lockDuration: lockMs, stalledInterval: stalledMs })),
    Logger.withMinimumLogLevel(LogLevel.None)
  ))
  running.catch(fail)
  return { stop: async () => {
    await Effect.runPromise(worker.stop)
    await running
  } }
}

const served = start()
process.stdin.setEncoding("utf8")
process.stdin.on("data", (text: string) => {
  if (!text.includes("stop")) return
  served.stop().then(() => {
    delay.disable()
    say(`stopped ${Math.round(delay.max / 1e6)}`)
    process.exit(0)
  }, fail)
})
