/**
 * The promise facade's operator hooks, end to end through the public facade: a plain logger object,
 * onTaskEnd, status(), metrics(), the probe server, and OpenTelemetry export of spans and metrics.
 */
import { SpanStatusCode } from "@opentelemetry/api"
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  PeriodicExportingMetricReader,
  type ResourceMetrics
} from "@opentelemetry/sdk-metrics"
import { type ReadableSpan, SimpleSpanProcessor, type SpanExporter } from "@opentelemetry/sdk-trace-base"
import { assert, describe, it } from "vitest"
import { type AddressInfo, createServer } from "node:net"
import { FatalError, HealthServerError, inMemory, type TaskEnd, Worker, type WorkerOptions } from "../src/promise.js"
import { freePort } from "./support/local.js"

const task = (runId: string, name: string, extra: Record<string, unknown> = {}) => ({
  runId,
  seq: 0,
  name,
  stepId: `${runId}:0`,
  group: name,
  input: { runId },
  attempt: 1,
  ...extra
})

const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

/** Runs `tasks` on a fresh worker and in-memory broker, waits for every reply, stops. */
const serve = async (options: WorkerOptions, tasks: ReadonlyArray<Record<string, unknown>>) => {
  const worker = new Worker({ handleSignals: false, ...options })
  worker.step("ok", async (_input, ctx) => {
    ctx.log.info("serving ok")
    return 1
  })
  worker.step("fatal", async () => {
    throw new FatalError("card declined", "declined")
  })
  const broker = inMemory()
  const running = worker.run(broker)
  for (const t of tasks) await broker.enqueue(t)
  for (let i = 0; i < tasks.length; i++) await broker.takeReply()
  const during = await worker.status()
  await worker.stop()
  await running
  return { worker, during, after: await worker.status() }
}

describe("promise facade: operators", () => {
  it("a plain logger object gets the worker's logs, with their fields after the message", async () => {
    const lines: Array<{ level: string; args: Array<unknown> }> = []
    const logger = Object.fromEntries(
      ["info", "warn", "error", "debug"].map((level) => [level, (...args: Array<unknown>) => lines.push({ level, args })])
    ) as unknown as NonNullable<WorkerOptions["logger"]>
    await serve({ logger, logLevel: "Debug" }, [task("log-1", "ok"), task("log-2", "missing")])
    const served = lines.find((line) => line.args[0] === "serving ok")
    assert.isDefined(served, `the handler's log reached the logger: ${JSON.stringify(lines.map((l) => l.args[0]))}`)
    assert.strictEqual(served!.level, "info")
    assert.strictEqual((served!.args[1] as Record<string, unknown>)["runId"], "log-1")
    const warned = lines.find((line) => line.level === "warn" && String(line.args[0]).includes("no handler"))
    assert.isDefined(warned, "the unknown step's warning reached warn")
  })

  it("a pino-style logger (bindings, child) gets the fields first; a NestJS-style one (log, no info) is used as info, the fields folded into its message", async () => {
    const pinoCalls: Array<Array<unknown>> = []
    const pino = {
      info: (...args: Array<unknown>) => pinoCalls.push(args),
      warn: () => {},
      error: () => {},
      debug: () => {},
      bindings: () => ({}),
      child: () => pino
    }
    await serve({ logger: pino }, [task("pino-1", "ok")])
    const call = pinoCalls.find((args) => args[1] === "serving ok")
    assert.isDefined(call, "pino got the message second")
    assert.strictEqual((call![0] as Record<string, unknown>)["runId"], "pino-1")

    const nestCalls: Array<Array<unknown>> = []
    const nest = { log: (...args: Array<unknown>) => nestCalls.push(args), warn: () => {}, error: () => {}, debug: () => {} }
    await serve({ logger: nest }, [task("nest-1", "ok")])
    const served = nestCalls.find((args) => String(args[0]).startsWith("serving ok "))
    assert.isDefined(served, "NestJS's log() took the info logs")
    assert.strictEqual(served!.length, 1, "one string: NestJS prints any further argument as a message of its own")
    assert.include(String(served![0]), '"runId":"nest-1"')
  })

  it("onTaskEnd is told each task's name, outcome and duration; status() carries the lifecycle state", async () => {
    const events: Array<TaskEnd> = []
    const { after, during } = await serve({ onTaskEnd: (event) => events.push(event) }, [
      task("end-1", "ok"),
      task("end-2", "fatal")
    ])
    const byName = (name: string) => events.find((event) => event.name === name)
    assert.strictEqual(byName("ok")?.outcome, "completed")
    assert.strictEqual(byName("ok")?.kind, "step")
    assert.strictEqual(byName("fatal")?.outcome, "failed")
    assert.isAtLeast(byName("ok")!.durationMs, 0)
    assert.strictEqual(during.state, "running")
    assert.strictEqual(after.state, "stopped")
  })

  it("metrics() lists the worker's series as plain values", async () => {
    const before = await new Worker({ handleSignals: false }).metrics()
    const completed = (list: typeof before) =>
      Number(list.find((m) => m.name === "durable_worker_tasks_completed" && m.tags["name"] === "ok")?.value ?? 0)
    const { worker } = await serve({}, [task("m-1", "ok"), task("m-2", "ok"), task("m-3", "fatal")])
    const after = await worker.metrics()
    assert.strictEqual(completed(after) - completed(before), 2)
    const failed = after.find((m) => m.name === "durable_worker_tasks_failed" && m.tags["name"] === "fatal")
    assert.strictEqual(failed?.type, "counter")
    assert.isAtLeast(Number(failed?.value), 1)
  })

  it("health: the probe server answers /readyz while running and is closed once stopped", async () => {
    const port = await freePort()
    const worker = new Worker({ handleSignals: false, health: { port, metrics: true } })
    worker.step("ok", async () => 1)
    const broker = inMemory()
    const running = worker.run(broker)
    let ready: Response | undefined
    for (let i = 0; i < 100 && ready?.status !== 200; i++) {
      ready = await fetch(`http://127.0.0.1:${port}/readyz`).catch(() => undefined)
      if (ready?.status !== 200) await new Promise((resolve) => setTimeout(resolve, 50))
    }
    assert.strictEqual(ready?.status, 200)
    const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text()
    assert.include(metrics, "durable_worker_slots")
    await worker.stop()
    await running
    const afterStop = await fetch(`http://127.0.0.1:${port}/readyz`).then((r) => r.status, () => "closed")
    assert.notStrictEqual(afterStop, 200)
  })

  it("health: a port already taken rejects the run with the HealthServerError /promise exports", async () => {
    const taken = createServer()
    await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve))
    try {
      const worker = new Worker({ handleSignals: false, logLevel: "None", health: { port: (taken.address() as AddressInfo).port } })
      worker.step("ok", async () => 1)
      const error = await worker.run(inMemory()).then(() => assert.fail("run should fail"), (e: unknown) => e)
      assert.instanceOf(error, HealthServerError)
    } finally {
      await new Promise((resolve) => taken.close(resolve))
    }
  })

  it("telemetry: span processors and metric readers of the OTel SDK get the worker's spans and metrics", async () => {
    // the SDK's InMemorySpanExporter forgets its spans when the SDK shuts down with the run: keep them here
    const finished: Array<ReadableSpan> = []
    const spans: SpanExporter = {
      export: (batch, done) => {
        finished.push(...batch)
        done({ code: 0 })
      },
      shutdown: async () => {}
    }
    const metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE)
    const reader = new PeriodicExportingMetricReader({ exporter: metricExporter, exportIntervalMillis: 60_000 })
    await serve(
      { telemetry: { serviceName: "facade-test", spanProcessors: [new SimpleSpanProcessor(spans)], metricReaders: [reader] } },
      [task("otel-1", "ok", { traceparent }), task("otel-2", "fatal", { traceparent })]
    )
    const fatal = finished.find((span) => span.name === "durable.step fatal")
    assert.isDefined(fatal, `spans: ${finished.map((span) => span.name).join(", ")}`)
    assert.strictEqual(fatal!.status.code, SpanStatusCode.ERROR)
    assert.strictEqual(fatal!.spanContext().traceId, "0af7651916cd43dd8448eb211c80319c")
    // the SDK's layer closed with the run: the reader flushed its last export then
    const exported: ReadonlyArray<ResourceMetrics> = metricExporter.getMetrics()
    const names = exported.flatMap((r) => r.scopeMetrics.flatMap((scope) => scope.metrics.map((m) => m.descriptor.name)))
    assert.include(names, "durable_worker_tasks_completed")
  })

  it("an unknown option is refused with the key named", () => {
    assert.throws(() => new Worker({ loger: console } as never), /unknown Worker option "loger"/)
  })
})
