/**
 * A worker process for the facade's signal tests: the promise facade on the in-memory transport with
 * `handleSignals` left on, a step `slow` that prints `began`, sleeps `SLEEP_MS` and prints `done`, and
 * an interval standing for what keeps an application alive beside its worker (an HTTP server, a pool).
 * With `app-handler` as its argument the process also listens for SIGTERM itself, as NestJS's
 * `enableShutdownHooks()` does: it stops the worker from its hook, removes its listener and sends
 * itself the signal again.
 */
import { inMemory, Worker } from "../../src/promise.js"
import { stepTask } from "./local.js"

const out = (line: string) => process.stdout.write(`${line}\n`)
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

const worker = new Worker({
  shutdownTimeoutMs: 10_000,
  logger: { info: (m: string) => out(`log ${m}`), warn: (m: string) => out(`log ${m}`), error: (m: string) => out(`log ${m}`), debug: () => {} }
})
worker.step("slow", async () => {
  out("began")
  await sleep(Number(process.env.SLEEP_MS ?? 500))
  out("done")
  return "slept"
})
setInterval(() => {}, 1 << 30)

const broker = inMemory()
if (process.argv[2] === "app-handler") {
  const onSignal = async (signal: NodeJS.Signals) => {
    process.off("SIGTERM", onSignal)
    out("app: shutdown hooks")
    await worker.stop()
    await running
    out("app: hooks done")
    process.kill(process.pid, signal)
  }
  process.on("SIGTERM", onSignal)
}
const running = worker.run(broker)
running.then(() => out("run settled"), (error: unknown) => out(`run failed: ${String(error)}`))
await broker.enqueue(stepTask("r1", "slow"))
const reply = await broker.takeReply()
out(`reply ${reply._tag === "StepResult" ? reply.result.status : reply._tag}`)
