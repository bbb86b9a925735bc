/**
 * The worker process of `bench/memory.ts`: serves one step that holds about `--mib` MiB resident for
 * `--hold-ms`, over the real BullMQ transport, at the concurrency given on the command line
 * (`--concurrency 16` or `--concurrency adaptive`, or a JSON object of adaptive knobs).
 *
 * It prints one JSON line per event on stdout, which the driver parses:
 *
 * - `{"ev":"ready"}` once the worker is registered and polling;
 * - `{"ev":"start","i":…,"at":…}` / `{"ev":"end","i":…,"at":…}` around each task's hold;
 * - `{"ev":"status",…}` every `--status-ms` with the heartbeat status (limit, in flight, memory, gate).
 *
 * SIGTERM stops it gracefully (drain, deregister), then it exits 0.
 *
 * Run by the driver as `node --import tsx --conditions=source bench/memoryWorker.ts --prefix P ...`.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Schedule from "effect/Schedule"
import { Step, Worker } from "effect-durable-worker"
import { redis } from "effect-durable-worker/promise"
import { parseArgs } from "node:util"

/** The step the benchmark enqueues. */
export const STEP_NAME = "bench.hold-memory"

const MiB = 1024 * 1024
const PAGE = 4096

const { values } = parseArgs({
  options: {
    prefix: { type: "string" },
    concurrency: { type: "string", default: "adaptive" },
    mib: { type: "string", default: "100" },
    "hold-ms": { type: "string", default: "3000" },
    "status-ms": { type: "string", default: "250" },
    url: { type: "string" }
  }
})

if (values.prefix === undefined) {
  process.stderr.write("memoryWorker: --prefix is required\n")
  process.exit(2)
}
const prefix = values.prefix
const bytes = Math.round(Number(values.mib) * MiB)
const holdMs = Number(values["hold-ms"])
const statusMs = Number(values["status-ms"])
const concurrencyArg = values.concurrency.trim()
const concurrency = /^\d+$/.test(concurrencyArg)
  ? Number(concurrencyArg)
  : concurrencyArg.startsWith("{")
  ? JSON.parse(concurrencyArg) as Record<string, unknown>
  : concurrencyArg

const emit = (event: Record<string, unknown>) => {
  process.stdout.write(`${JSON.stringify(event)}\n`)
}

/**
 * Holds `bytes` resident for `holdMs`: the buffer is written page by page (an untouched allocation
 * is not resident), kept alive across the sleep, then dropped for the garbage collector.
 */
const holdMemory = Step.make(STEP_NAME, (input: { readonly i: number }, ctx) =>
  Effect.gen(function*() {
    emit({ ev: "start", i: input.i, stepId: ctx.stepId, at: Date.now() })
    let buffer: Buffer | undefined = Buffer.allocUnsafe(bytes)
    for (let offset = 0; offset < bytes; offset += PAGE) buffer[offset] = (input.i + offset) & 0xff
    yield* Effect.sleep(Duration.millis(holdMs))
    let checksum = 0
    for (let offset = 0; offset < bytes; offset += 64 * PAGE) checksum = (checksum + buffer[offset]!) & 0xffff
    buffer = undefined
    emit({ ev: "end", i: input.i, stepId: ctx.stepId, at: Date.now() })
    return { i: input.i, mib: bytes / MiB, checksum }
  }))

const program = Effect.gen(function*() {
  const worker = yield* Worker.make({
    steps: [holdMemory],
    concurrency: concurrency as Worker.WorkerOptions["concurrency"],
    shutdownTimeout: "10 seconds",
    heartbeatInterval: "1 second"
  })
  const transport = redis({ prefix, ...(values.url === undefined ? {} : { url: values.url }) })
  const running = yield* Effect.fork(Effect.provide(worker.run, transport.layer))
  const reporter = yield* worker.status.pipe(
    Effect.tap((status) => Effect.sync(() => emit({ ev: "status", at: Date.now(), ...status }))),
    Effect.repeat(Schedule.spaced(Duration.millis(statusMs))),
    Effect.fork
  )
  // Registered once the status carries the controller (`memory` appears once `run` built it).
  yield* worker.status.pipe(
    Effect.flatMap((status) => "memory" in status ? Effect.void : Effect.fail("not yet")),
    Effect.retry(Schedule.spaced(Duration.millis(20))),
    Effect.timeout(Duration.seconds(30)),
    Effect.orDie
  )
  emit({ ev: "ready", pid: process.pid, workerId: worker.id, at: Date.now() })
  const stopSignal = yield* Effect.async<void>((resume) => {
    const onSignal = () => resume(Effect.void)
    process.once("SIGTERM", onSignal)
    process.once("SIGINT", onSignal)
  }).pipe(Effect.fork)
  yield* Effect.raceFirst(Fiber.join(stopSignal), Fiber.join(running))
  yield* Fiber.interrupt(reporter)
  yield* worker.stop.pipe(Effect.catchAll((error) => Effect.logWarning("stop failed", error)))
  yield* Fiber.await(running)
  emit({ ev: "stopped", at: Date.now() })
})

Effect.runPromise(program).then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`memoryWorker failed: ${String(error)}\n`)
    process.exit(1)
  }
)
