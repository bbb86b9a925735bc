import { assert, describe, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Ref from "effect/Ref"
import * as TestClock from "effect/TestClock"
import { execFile } from "node:child_process"
import * as net from "node:net"
import { fileURLToPath } from "node:url"
import * as Step from "../../src/core/Step.js"
import { LOOP_WINDOW, loopSampleInterval, sampleLoopDelay } from "../../src/runtime/internal/health.js"
import { render } from "../../src/runtime/internal/prometheus.js"
import * as Worker from "../../src/runtime/Worker.js"
import * as WorkerConfig from "../../src/runtime/WorkerConfig.js"
import * as WorkerMetrics from "../../src/seam/WorkerMetrics.js"
import * as Memory from "../../src/services/Memory.js"
import * as InMemory from "../../src/transport/InMemoryTransport.js"
import * as Metric from "effect/Metric"
import * as MetricBoundaries from "effect/MetricBoundaries"
import { freePort, stepTask } from "../support/local.js"

const memory = Memory.layerTest({ usage: 1, limit: 1024 })

/** GET over real HTTP: the status and body, or `refused` when nothing listens. */
const get = (port: number, path: string) =>
  Effect.promise(() =>
    fetch(`http://127.0.0.1:${port}${path}`).then(
      async (response) => ({ status: response.status, body: await response.text() }),
      () => ({ status: "refused" as const, body: "" })
    )
  )

const until = <A>(effect: Effect.Effect<A>, done: (a: A) => boolean): Effect.Effect<A> =>
  Effect.gen(function*() {
    for (let i = 0; i < 500; i++) {
      const value = yield* effect
      if (done(value)) return value
      yield* Effect.sleep("10 millis")
    }
    return yield* Effect.dieMessage("condition not reached within 5 seconds")
  })

describe("health probe server", () => {
  it.live("/readyz follows the worker through registering, running, draining and stopped; /livez stays 200", () =>
    Effect.gen(function*() {
      // registering: the registration hangs, the probe server already answers
      const hanging = yield* InMemory.make()
      yield* hanging.setRegisterFault({ _tag: "Hang" })
      const firstPort = yield* Effect.promise(freePort)
      const first = yield* Worker.make({ health: { port: firstPort } })
      // a daemon: a hanging registration ignores interruption, so the test must not wait for it
      const firstRun = yield* Effect.forkDaemon(Effect.provide(first.run, Layer.merge(hanging.layer, memory)))
      const registering = yield* until(get(firstPort, "/readyz"), (r) => r.status !== "refused")
      assert.deepStrictEqual(registering, { status: 503, body: "registering\n" })
      assert.strictEqual((yield* get(firstPort, "/livez")).status, 200)
      yield* Fiber.interrupt(firstRun).pipe(Effect.timeout("1 second"), Effect.ignore, Effect.forkDaemon)

      const port = yield* Effect.promise(freePort)
      const gate = yield* Deferred.make<void>()
      const held = Step.make("held", () => Deferred.await(gate))
      const broker = yield* InMemory.make()
      const worker = yield* Worker.make({ steps: [held], health: { port, metrics: true }, shutdownTimeout: "10 seconds" })
      const run = yield* Effect.fork(Effect.provide(worker.run, Layer.merge(broker.layer, memory)))
      yield* worker.registered
      assert.deepStrictEqual(yield* get(port, "/readyz"), { status: 200, body: "running\n" })
      assert.deepStrictEqual(yield* get(port, "/livez"), { status: 200, body: "ok\n" })
      assert.strictEqual((yield* get(port, "/nothing")).status, 404)
      yield* broker.enqueue(stepTask("r1", "held"))
      yield* until(broker.journal, (j) => j.some((e) => e.op === "deliver"))
      const metrics = yield* get(port, "/metrics")
      assert.strictEqual(metrics.status, 200)
      assert.include(metrics.body, "# TYPE durable_worker_tasks_started_total counter")
      assert.include(metrics.body, `durable_worker_tasks_started_total{kind="step",name="held"} 1`)
      assert.include(metrics.body, `durable_worker_tasks_in_flight{pool="step"} 1`)

      // draining: the held task keeps the drain going
      const stopping = yield* Effect.fork(worker.stop)
      assert.deepStrictEqual(yield* until(get(port, "/readyz"), (r) => r.status !== 200), { status: 503, body: "draining\n" })
      assert.strictEqual((yield* get(port, "/livez")).status, 200, "a draining worker is alive")
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(stopping)
      yield* Fiber.join(run)
      // stopped: the server is closed with the run
      assert.strictEqual((yield* get(port, "/readyz")).status, "refused")
      assert.strictEqual((yield* worker.status).state, "stopped")
    }))

  it.live("a probe connection still open when the worker stops does not hold the run's end", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(freePort)
      const broker = yield* InMemory.make()
      const worker = yield* Worker.make({ health: { port }, shutdownTimeout: "2 seconds" })
      // a daemon, and the stop disconnected below: a run held by the server fails the test at the
      // timeout instead of hanging it
      const run = yield* Effect.forkDaemon(Effect.provide(worker.run, Layer.merge(broker.layer, memory)))
      yield* worker.registered
      // a probe caught mid-request (its headers not finished) and one connected that has sent nothing
      // yet: Node's server waits for such connections up to its request timeouts (60 s and 300 s)
      const connect = (request: string) =>
        Effect.async<net.Socket>((resume) => {
          const socket = net.connect(port, "127.0.0.1", () => {
            socket.write(request)
            resume(Effect.succeed(socket))
          })
        })
      const midRequest = yield* connect("GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
      const silent = yield* connect("")
      const closedBy = (socket: net.Socket) => Effect.async<void>((resume) => void socket.once("close", () => resume(Effect.void)))
      yield* Effect.sleep("50 millis")
      const ended = yield* worker.stop.pipe(Effect.zipRight(Fiber.join(run)), Effect.disconnect, Effect.timeout("5 seconds"), Effect.either)
      assert.isTrue(Either.isRight(ended), "the run ended within the shutdown deadline")
      assert.strictEqual((yield* worker.status).state, "stopped")
      // the server closed both connections itself
      yield* Effect.all([closedBy(midRequest), closedBy(silent)]).pipe(Effect.timeout("1 second"))
      assert.strictEqual((yield* get(port, "/readyz")).status, "refused")
    }))

  it.live("/livez answers 503 after the event loop was blocked beyond the threshold, 200 again once it is not", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(freePort)
      const blocker = Step.make("blocker", () =>
        Effect.sync(() => {
          const end = Date.now() + 400
          while (Date.now() < end) {
            // a handler that blocks the event loop
          }
        }))
      const broker = yield* InMemory.make()
      const worker = yield* Worker.make({ steps: [blocker], health: { port, loopDelayThreshold: "100 millis" } })
      yield* Effect.fork(Effect.provide(worker.run, Layer.merge(broker.layer, memory)))
      yield* worker.registered
      assert.strictEqual((yield* get(port, "/livez")).status, 200)
      yield* broker.enqueue(stepTask("r1", "blocker"))
      yield* broker.takeReply
      yield* Effect.sleep("30 millis")
      const blocked = yield* get(port, "/livez")
      assert.strictEqual(blocked.status, 503)
      assert.match(blocked.body, /event loop delayed \d+ ms/)
      yield* until(get(port, "/livez"), (r) => r.status === 200)
      // /metrics is off unless asked for
      assert.strictEqual((yield* get(port, "/metrics")).status, 404)
      yield* worker.stop
    }))

  it.live("a port already taken fails the run with HealthServerError, naming it", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(freePort)
      const broker = yield* InMemory.make()
      const first = yield* Worker.make({ health: { port } })
      yield* Effect.fork(Effect.provide(first.run, Layer.merge(broker.layer, memory)))
      yield* first.registered
      const second = yield* Worker.make({ health: { port } })
      const error = yield* Effect.flip(Effect.provide(second.run, Layer.merge((yield* InMemory.make()).layer, memory)))
      assert.strictEqual(error._tag, "HealthServerError")
      assert.include(error.message, `127.0.0.1:${port}`)
      // the server's own reason, not the empty message of the error that wraps it
      assert.match(error.message, new RegExp(`could not listen on 127.0.0.1:${port}: listen EADDRINUSE`))
      assert.strictEqual((yield* second.status).state, "failed")
      yield* Effect.flip(second.registered)
      yield* first.stop
    }))

  it.effect("the loop delay is sampled on the clock, a quarter of the threshold apart, the last samples kept", () =>
    Effect.gen(function*() {
      const delays = yield* Ref.make<ReadonlyArray<number>>([])
      assert.strictEqual(Duration.toMillis(loopSampleInterval(Duration.seconds(1))), 250)
      assert.strictEqual(Duration.toMillis(loopSampleInterval(Duration.millis(8))), 10)
      assert.strictEqual(Duration.toMillis(loopSampleInterval(Duration.minutes(1))), 500)
      yield* Effect.fork(sampleLoopDelay(Duration.millis(100), delays))
      yield* TestClock.adjust("99 millis")
      assert.deepStrictEqual(yield* Ref.get(delays), [], "no sample before one interval")
      yield* TestClock.adjust("1 millis")
      assert.deepStrictEqual(yield* Ref.get(delays), [0], "on time")
      yield* TestClock.adjust(`${100 * LOOP_WINDOW * 2} millis`)
      assert.strictEqual((yield* Ref.get(delays)).length, LOOP_WINDOW, "only the last samples are kept")
    }))

  it.effect("the event loop delay gauge shows the longest delay /livez judges by, until it leaves the window", () =>
    Effect.gen(function*() {
      // a block of 300 ms a few samples ago, the samples since on time (a TestClock sleep wakes on time)
      const delays = yield* Ref.make<ReadonlyArray<number>>([0, 300, 0, 0])
      const gauge = Metric.value(WorkerMetrics.eventLoopDelay)
      yield* Effect.fork(sampleLoopDelay(Duration.millis(100), delays))
      yield* TestClock.adjust("100 millis")
      assert.strictEqual((yield* gauge).value, 0.3, "the block, not the on-time sample after it")
      yield* TestClock.adjust(`${100 * (LOOP_WINDOW - 4)} millis`)
      assert.deepStrictEqual((yield* Ref.get(delays))[0], 300, "the block is now the oldest sample kept")
      assert.strictEqual((yield* gauge).value, 0.3, "still in the window")
      yield* TestClock.adjust("100 millis")
      assert.strictEqual((yield* gauge).value, 0, "out of the window")
    }))

  it("@effect/platform-node is loaded only once a worker with health runs, never by importing the package", async () => {
    const script = fileURLToPath(new URL("../support/launchHealthImports.ts", import.meta.url))
    const stdout = await new Promise<string>((resolve, reject) =>
      execFile(
        process.execPath,
        ["--import", "tsx", "--conditions=source", script],
        { timeout: 30_000, env: { ...process.env, NODE_NO_WARNINGS: "1" } },
        (error, out, err) => error === null ? resolve(out) : reject(new Error(`${error.message}\n${out}\n${err}`))
      )
    )
    const lines = stdout.split("\n")
    const imported = lines.indexOf("ROOT IMPORTED")
    const firstLoad = lines.findIndex((line) => line.startsWith("LOADED @effect/platform-node/"))
    assert.isAtLeast(imported, 0, stdout)
    assert.isAbove(firstLoad, imported, stdout)
    assert.include(lines, "RAN")
  }, 40_000)

  it.effect("health options are checked once, naming the option", () =>
    Effect.gen(function*() {
      const bad = (health: unknown) =>
        Either.match(WorkerConfig.resolve({ health } as WorkerConfig.WorkerOptions), {
          onLeft: (e) => e.option,
          onRight: () => "accepted"
        })
      assert.strictEqual(bad({ port: 70000 }), "health.port")
      assert.strictEqual(bad({ port: 8080, prot: 1 }), "health.prot")
      assert.strictEqual(bad({ port: 8080, loopDelayThreshold: 0 }), "health.loopDelayThreshold")
      assert.strictEqual(bad({ port: 8080, metrics: "yes" }), "health.metrics")
      assert.strictEqual(bad("8080"), "health")
      const resolved = Either.getOrThrow(WorkerConfig.resolve({ health: { port: 8080 } }))
      assert.deepStrictEqual(resolved.health, {
        port: 8080,
        host: "127.0.0.1",
        metrics: false,
        loopDelayThreshold: Duration.seconds(1)
      })
      assert.strictEqual(WorkerConfig.defaults.health, undefined, "off by default")
      assert.strictEqual(
        Either.getLeft(WorkerConfig.resolve({ metricsInterval: 0 })).pipe((e) => e._tag === "Some" ? e.value.option : ""),
        "metricsInterval"
      )
    }))

  it.effect("Prometheus text: counters, gauges and histograms (cumulative buckets, +Inf, sum, count) with their labels", () =>
    Effect.gen(function*() {
      const id = Math.random().toString(16).slice(2, 8)
      const counter = Metric.counter(`prom_${id}_total`, { description: "a \"counter\"", incremental: true }).pipe(
        Metric.tagged("q", "a\"b")
      )
      // a counter that may go down, as Effect's effect_fiber_active: a Prometheus counter must not
      const upDown = Metric.counter(`prom_${id}_active`)
      yield* Metric.incrementBy(upDown, 3)
      yield* Metric.incrementBy(upDown, -1)
      // a counter named without `_total` is exposed with it, as Prometheus and OpenTelemetry's exporter name counters
      const plain = Metric.counter(`prom_${id}_taken`, { incremental: true })
      yield* Metric.incrementBy(plain, 4)
      const gauge = Metric.gauge(`prom_${id}_gauge`)
      const histogram = Metric.histogram(`prom_${id}_seconds`, MetricBoundaries.fromIterable([0.1, 1]))
      yield* Metric.increment(counter)
      yield* Metric.set(gauge, 2.5)
      yield* Metric.update(histogram, 0.05)
      yield* Metric.update(histogram, 0.5)
      yield* Metric.update(histogram, 5)
      const text = render(yield* Metric.snapshot)
      assert.include(text, `# HELP prom_${id}_total a "counter"\n# TYPE prom_${id}_total counter\nprom_${id}_total{q="a\\"b"} 1\n`)
      assert.include(text, `# TYPE prom_${id}_gauge gauge\nprom_${id}_gauge 2.5\n`)
      assert.include(text, `# TYPE prom_${id}_active gauge\nprom_${id}_active 2\n`)
      assert.include(text, `# TYPE prom_${id}_taken_total counter\nprom_${id}_taken_total 4\n`)
      assert.notInclude(text, `prom_${id}_total_total`)
      // Effect's runtime metrics have no description of their own: /metrics gives them one
      yield* Metric.increment(Metric.counter("effect_fiber_started", { incremental: true }))
      assert.include(
        render(yield* Metric.snapshot),
        "# HELP effect_fiber_started_total Fibers started by the Effect runtime\n# TYPE effect_fiber_started_total counter\n"
      )
      assert.include(
        text,
        [
          `# TYPE prom_${id}_seconds histogram`,
          `prom_${id}_seconds_bucket{le="0.1"} 1`,
          `prom_${id}_seconds_bucket{le="1"} 2`,
          `prom_${id}_seconds_bucket{le="+Inf"} 3`,
          `prom_${id}_seconds_sum 5.55`,
          `prom_${id}_seconds_count 3`
        ].join("\n")
      )
    }))

  it.effect("Prometheus text: a tag's key is made a valid label name (a `:` is a metric name's, never a label's)", () =>
    Effect.gen(function*() {
      const id = Math.random().toString(16).slice(2, 8)
      yield* Metric.set(Metric.gauge(`prom_${id}:ratio`).pipe(Metric.tagged("k8s:pod", "p-1"), Metric.tagged("9lives", "x")), 1)
      const line = render(yield* Metric.snapshot).split("\n").find((line) => line.startsWith(`prom_${id}:ratio{`))
      assert.strictEqual(line, `prom_${id}:ratio{k8s_pod="p-1",_9lives="x"} 1`)
    }))
})
