/**
 * A broker that goes away under a running worker. `/readyz` answers 503 while the broker cannot be
 * reached, with the reason, and 200 again once it can: from what the worker's polls see (in memory, SQS, PostgreSQL: their calls fail) and from what
 * the transport knows between calls (BullMQ: its Redis client holds commands while it reconnects,
 * so no poll fails). Real servers, on loopback, each one the test's own.
 */
import { assert, describe, it } from "@effect/vitest"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import { Redis } from "ioredis"
import type { ChildProcess } from "node:child_process"
import * as Step from "../../src/core/Step.js"
import { SqlTransport as PostgresSql } from "../../src/postgres.js"
import * as Worker from "../../src/runtime/Worker.js"
import type { Transport } from "../../src/seam/Transport.js"
import * as Memory from "../../src/services/Memory.js"
import * as BullMQTransport from "../../src/transport/BullMQTransport.js"
import * as DW from "../../src/transport/DurableWorkflowTransport.js"
import * as InMemory from "../../src/transport/InMemoryTransport.js"
import * as SqsTransport from "../../src/transport/SqsTransport.js"
import { type CuttingProxy, cuttingProxy } from "../support/cuttingProxy.js"
import * as DurableWorkflowServer from "../support/durableWorkflowServer.js"
import { sqsPrefix, startFauxqs } from "../support/fauxqs.js"
import { captureLogs, freePort, startRedisServer } from "../support/local.js"
import { dropTables, openDb, uniqueTablePrefix } from "../support/sqlEngine.js"

const memory = Memory.layerTest({ usage: 1, limit: 1024 })

/** GET /readyz over real HTTP. */
const readyz = (port: number) =>
  Effect.promise(() =>
    fetch(`http://127.0.0.1:${port}/readyz`).then(
      async (response) => ({ status: response.status, body: await response.text() }),
      () => ({ status: 0, body: "refused" })
    )
  )

/** Polls `/readyz` on the wall clock (server I/O) until `done`, up to 20 s. */
const readyzUntil = (port: number, what: string, done: (r: { status: number; body: string }) => boolean) =>
  Effect.gen(function*() {
    let last = { status: 0, body: "" }
    for (let i = 0; i < 400; i++) {
      last = yield* readyz(port)
      if (done(last)) return last
      yield* Effect.sleep("50 millis")
    }
    return assert.fail(`timed out waiting for ${what}; /readyz last answered ${last.status} ${JSON.stringify(last.body)}`)
  })

/** Runs a worker with the probe server on `transport` for the scope; resolves once it is registered. */
const serve = <E>(
  transport: Layer.Layer<Transport, E>,
  options: { readonly pollTimeout?: Duration.DurationInput; readonly heartbeatInterval?: Duration.DurationInput } = {}
) =>
  Effect.gen(function*() {
    const port = yield* Effect.promise(freePort)
    const worker = yield* Worker.make({
      steps: [Step.make("work", () => Effect.succeed(1))],
      health: { port },
      ...(options.heartbeatInterval === undefined ? {} : { heartbeatInterval: options.heartbeatInterval }),
      pollTimeout: options.pollTimeout ?? "200 millis",
      pollRetryDelay: "100 millis",
      shutdownTimeout: "2 seconds"
    })
    const run = yield* Effect.fork(Effect.provide(worker.run, Layer.merge(transport, memory)))
    yield* Effect.addFinalizer(() => Effect.zipRight(worker.stop.pipe(Effect.ignore), Fiber.await(run)))
    yield* worker.registered.pipe(Effect.timeout("15 seconds"))
    assert.deepStrictEqual(yield* readyz(port), { status: 200, body: "running\n" })
    return port
  })

/**
 * A redis-server of the test's own on a free port, started; `kill` takes it away (SIGKILL, by PID),
 * `start` brings it back on the same port. Killed with the scope.
 */
const ownRedis = Effect.gen(function*() {
  const redisPort = yield* Effect.promise(freePort)
  let server: ChildProcess | undefined
  const start = Effect.promise(async () => {
    server = await startRedisServer(redisPort)
  })
  const kill = Effect.sync(() => {
    if (server?.pid !== undefined) process.kill(server.pid, "SIGKILL")
    server = undefined
  })
  yield* start
  yield* Effect.addFinalizer(() => kill)
  return { redisPort, start, kill }
})

const notReady = (r: { status: number }) => r.status === 503
const ready = (r: { status: number }) => r.status === 200

/**
 * Takes the broker behind `proxy` away until `/readyz` says 503, brings it back, and checks the
 * worker is ready again within 5 s: well before a broker's hold of an empty poll (20 s, 30 s) ends.
 */
const readyAgainAtOnce = (proxy: CuttingProxy, port: number, broker: string) =>
  Effect.gen(function*() {
    proxy.setDown(true)
    yield* readyzUntil(port, "503", notReady)
    proxy.setDown(false)
    const back = Date.now()
    assert.deepStrictEqual(yield* readyzUntil(port, "200 again", ready), { status: 200, body: "running\n" })
    const took = Date.now() - back
    assert.isBelow(took, 5_000, `ready again ${took} ms after ${broker} came back`)
  })

describe("readiness follows the broker", () => {
  it.live("in memory: a failing poll makes the worker unready, with the reason, until a poll works", () =>
    Effect.scoped(Effect.gen(function*() {
      const broker = yield* InMemory.make()
      const port = yield* serve(broker.layer)
      yield* broker.setPollFault({ _tag: "Fail", message: "connection refused" })
      const away = yield* readyzUntil(port, "503", notReady)
      assert.strictEqual(away.body, "running; broker unreachable: the last poll of in-memory queue failed: connection refused\n")
      yield* broker.setPollFault(undefined)
      assert.deepStrictEqual(yield* readyzUntil(port, "200 again", ready), { status: 200, body: "running\n" })
    })))

  it.live("BullMQ: a Redis that accepts and does not answer (CLIENT PAUSE) makes the worker unready once a heartbeat gets no answer; answering, ready", () =>
    Effect.scoped(Effect.gen(function*() {
      const { redisPort } = yield* ownRedis
      const port = yield* serve(
        BullMQTransport.layer({ url: `redis://127.0.0.1:${redisPort}`, prefix: `edw-paused-${redisPort}` }),
        { heartbeatInterval: "1 second" }
      )
      // the test's own Redis: pausing it holds no other test's commands
      const admin = new Redis({ host: "127.0.0.1", port: redisPort, lazyConnect: true })
      yield* Effect.promise(() => admin.connect())
      yield* Effect.addFinalizer(() => Effect.promise(() => admin.quit().catch(() => undefined)))
      // paused for 5 s (an UNPAUSE would wait out the pause as well: it pauses every client)
      yield* Effect.promise(() => admin.call("CLIENT", "PAUSE", "5000", "ALL"))
      const answersAgain = Date.now() + 5_000
      const away = yield* readyzUntil(port, "503", notReady)
      assert.isBelow(Date.now(), answersAgain, "unready while Redis does not answer")
      // the beat waits half an interval for Redis's answer, then the worker is unready, naming it
      assert.match(
        away.body,
        new RegExp(`^running; broker unreachable: Redis at redis://127\\.0\\.0\\.1:${redisPort} did not answer the worker heartbeat within (4|5)\\d\\dms\\n$`)
      )
      assert.deepStrictEqual(yield* readyzUntil(port, "200 again", ready), { status: 200, body: "running\n" })
      assert.isBelow(Date.now() - answersAgain, 3_000, "ready again within a few heartbeats of Redis answering")
    })))

  it.live("BullMQ: Redis gone makes the worker unready while its client reconnects (no poll fails); back, ready", () =>
    Effect.scoped(Effect.gen(function*() {
      const { kill, redisPort, start } = yield* ownRedis
      const port = yield* serve(BullMQTransport.layer({ url: `redis://127.0.0.1:${redisPort}`, prefix: `edw-ready-${redisPort}` }))
      yield* kill
      const away = yield* readyzUntil(port, "503", notReady)
      assert.match(away.body, new RegExp(`^running; broker unreachable: Redis at redis://127\\.0\\.0\\.1:${redisPort} is (reconnecting|connecting|connect|end)\\n$`))
      yield* start
      assert.deepStrictEqual(yield* readyzUntil(port, "200 again", ready), { status: 200, body: "running\n" })
    })))

  it.live("SQS: the endpoint gone makes the worker unready, naming the failed receive", () =>
    Effect.scoped(Effect.gen(function*() {
      const server = yield* Effect.promise(startFauxqs)
      let stopped = false
      yield* Effect.addFinalizer(() => stopped ? Effect.void : Effect.promise(server.stop))
      const port = yield* serve(
        SqsTransport.layer({ clientConfig: server.clientConfig, prefix: sqsPrefix("edwready"), autoCreate: true, waitTime: "1 second" }),
        { pollTimeout: "1 second" }
      )
      yield* Effect.promise(server.stop)
      stopped = true
      const away = yield* readyzUntil(port, "503", notReady)
      assert.match(away.body, /^running; broker unreachable: the last poll of queue \S+ failed: /)
    })))

  it.live("SQS: back, the worker is ready again at once, not at the end of a long poll's wait", () =>
    Effect.scoped(Effect.gen(function*() {
      const server = yield* Effect.promise(startFauxqs)
      yield* Effect.addFinalizer(() => Effect.promise(server.stop))
      const proxy = yield* Effect.promise(() => cuttingProxy(server.port))
      yield* Effect.addFinalizer(() => Effect.promise(proxy.close))
      // the default wait (20 s): an idle queue's receive that works answers only at its end
      const port = yield* serve(
        SqsTransport.layer({
          clientConfig: { ...server.clientConfig, endpoint: `http://127.0.0.1:${proxy.port}` },
          prefix: sqsPrefix("edwback"),
          autoCreate: true
        }),
        { pollTimeout: "20 seconds" }
      )
      yield* readyAgainAtOnce(proxy, port, "SQS")
    })))

  it.live("Durable Workflow: back, the worker is ready again at once, not at the end of the server's hold of a poll", () =>
    Effect.scoped(Effect.gen(function*() {
      // the server holds an empty poll for 30 s
      const server = yield* DurableWorkflowServer.scoped({ longPollTimeoutSeconds: 30 })
      const proxy = yield* Effect.promise(() => cuttingProxy(server.port))
      yield* Effect.addFinalizer(() => Effect.promise(proxy.close))
      const port = yield* serve(
        DW.layer({ baseUrl: `http://127.0.0.1:${proxy.port}`, token: server.tokens.worker, taskQueue: "orders" }),
        { pollTimeout: "30 seconds" }
      )
      yield* readyAgainAtOnce(proxy, port, "the server")
    })))

  it.live("PostgreSQL: the database gone makes the worker unready, naming the failed poll", () =>
    Effect.scoped(Effect.gen(function*() {
      const prefix = uniqueTablePrefix("edwready")
      const db = openDb("postgres", 1)
      yield* Effect.addFinalizer(() => Effect.promise(() => dropTables(db, prefix).finally(() => db.end())))
      const proxy = yield* Effect.promise(() => cuttingProxy(5432))
      let closed = false
      yield* Effect.addFinalizer(() => closed ? Effect.void : Effect.promise(proxy.close))
      const port = yield* serve(
        PostgresSql.layerPostgres({ url: `postgres://postgres@127.0.0.1:${proxy.port}/test`, prefix, pollInterval: "100 millis" })
      )
      // the proxy stops taking connections and cuts those it has: the database is away
      yield* Effect.promise(proxy.close)
      closed = true
      const away = yield* readyzUntil(port, "503", notReady)
      assert.match(away.body, /^running; broker unreachable: the last poll of \S+.* failed: /)
    })))
})

/**
 * A registered worker on PostgreSQL through a proxy the test closes to take the database away, with
 * `extra` layers (a logger); `end` stops it and drops its tables.
 */
const onPostgresBehindProxy = (
  label: string,
  extra: Layer.Layer<never> = Layer.empty,
  options: { readonly lease?: Duration.DurationInput } = {}
) =>
  Effect.gen(function*() {
    const prefix = uniqueTablePrefix(label)
    const db = openDb("postgres", 1)
    const proxy = yield* Effect.promise(() => cuttingProxy(5432))
    const worker = yield* Worker.make({ steps: [Step.make("work", () => Effect.succeed(1))], pollRetryDelay: "100 millis", shutdownTimeout: "2 seconds" })
    const transport = PostgresSql.layerPostgres({
      url: `postgres://postgres@127.0.0.1:${proxy.port}/test`,
      prefix,
      pollInterval: "100 millis",
      ...(options.lease === undefined ? {} : { lease: options.lease })
    })
    const run = yield* Effect.fork(Effect.provide(worker.run, Layer.mergeAll(transport, memory, extra)))
    yield* worker.registered.pipe(Effect.timeout("15 seconds"))
    const end = Effect.promise(() => dropTables(db, prefix).finally(() => db.end()))
    return { prefix, db, proxy, worker, run, end }
  })

describe("a stop while the broker is away", () => {
  it.live("BullMQ: a stop while Redis is away ends at once, its deregistration not tried (the keys expire)", () =>
    Effect.scoped(Effect.gen(function*() {
      const { kill, redisPort } = yield* ownRedis
      const worker = yield* Worker.make({ steps: [Step.make("work", () => Effect.succeed(1))], shutdownTimeout: "2 seconds" })
      const where = `redis://127.0.0.1:${redisPort}`
      const logs = captureLogs()
      const run = yield* Effect.fork(Effect.provide(
        worker.run,
        Layer.mergeAll(BullMQTransport.layer({ url: where, prefix: `edw-away-${redisPort}` }), memory, logs.layer)
      ))
      yield* worker.registered.pipe(Effect.timeout("15 seconds"))
      // idle: its poller waits for the queue's marker
      yield* Effect.sleep("500 millis")
      yield* kill
      // once the client knows Redis is away
      for (let i = 0; i < 200 && !logs.lines.some((line) => line.includes("cannot be reached")); i++) yield* Effect.sleep("25 millis")
      const started = Date.now()
      // the Redis client would hold the deregistration's command until Redis is back: for ever here
      const error = yield* Effect.flip(worker.stop).pipe(
        Effect.timeoutFail({ duration: "10 seconds", onTimeout: () => "the stop did not end within 10 s" }),
        Effect.orDie
      )
      const took = Date.now() - started
      assert.strictEqual(error._tag, "DeregistrationError")
      assert.match(error.message, new RegExp(`Redis at ${where.replaceAll(".", "\\.")} is (reconnecting|connecting|connect|end)\\); they expire by themselves within 35 s$`))
      assert.isBelow(took, 2_000, `the stop ended ${took} ms after it was asked for`)
      assert.strictEqual(yield* Effect.flip(Fiber.join(run)), error)
    })))

  it.live("PostgreSQL: a stop while the database is away ends the run within the shutdown deadline", () =>
    Effect.gen(function*() {
      const { end, proxy, run, worker } = yield* onPostgresBehindProxy("edwaway")
      yield* Effect.promise(proxy.close)
      // polls fail now (each leaves a claim whose outcome is unknown, released in the background)
      yield* Effect.sleep("500 millis")
      const started = Date.now()
      yield* worker.stop.pipe(Effect.ignore)
      yield* Fiber.await(run)
      const took = Date.now() - started
      yield* end
      // the background releases used to hold the run's end for a lease (30 s by default)
      assert.isBelow(took, 10_000, `the run ended ${took} ms after the stop`)
    }))
})

describe("the logs of an outage", () => {
  it.live("BullMQ: Redis away is warned of once, not at every reconnection attempt, and said to be back once it is", () =>
    Effect.scoped(Effect.gen(function*() {
      const logs = captureLogs()
      const { kill, redisPort, start } = yield* ownRedis
      const where = `redis://127.0.0.1:${redisPort}`
      // two steps: two task queues, each with a BullMQ worker repeating the errors of the shared connection
      const worker = yield* Worker.make({
        steps: [Step.make("one", () => Effect.succeed(1)), Step.make("two", () => Effect.succeed(2))],
        shutdownTimeout: "2 seconds"
      })
      const run = yield* Effect.fork(Effect.provide(
        worker.run,
        Layer.mergeAll(BullMQTransport.layer({ url: where, prefix: `edw-logs-${redisPort}` }), memory, logs.layer, Logger.minimumLogLevel(LogLevel.Debug))
      ))
      yield* worker.registered.pipe(Effect.timeout("15 seconds"))
      const about = () => logs.lines.filter((line) => line.includes(`Redis at ${where}`) || line.includes("BullMQ error"))

      // away for 3 s: ioredis tries again every 50 ms, 100 ms, ... so some 20 attempts per connection
      yield* kill
      yield* Effect.sleep("3 seconds")
      const outage = about()
      assert.deepStrictEqual(outage.filter((line) => !line.startsWith("DEBUG")).map((line) => line.split(" (")[0]), [
        `WARN Redis at ${where} cannot be reached`
      ], outage.join("\n"))
      assert.isAbove(outage.length, 10, "the attempts go on, as debug lines")

      yield* start
      for (let i = 0; i < 200 && !about().some((line) => line.startsWith("INFO")); i++) yield* Effect.sleep("50 millis")
      assert.deepStrictEqual(about().filter((line) => !line.startsWith("DEBUG")).map((line) => line.split(" (")[0]), [
        `WARN Redis at ${where} cannot be reached`,
        `INFO Redis at ${where} is back`
      ])
      yield* worker.stop
      yield* Fiber.await(run)
    })))

  it.live("PostgreSQL: a LISTEN connection that stays down is warned of once, and said to be back once it is", () =>
    Effect.gen(function*() {
      const logs = captureLogs()
      const { db, end, prefix, proxy, run, worker } = yield* onPostgresBehindProxy(
        "edwlisten",
        Layer.merge(logs.layer, Logger.minimumLogLevel(LogLevel.Debug))
      )
      const listenLines = () => logs.lines.filter((line) => line.includes(`LISTEN ${prefix}_transport_tasks`))

      // back: its backend killed, the LISTEN connection comes back at once through the proxy
      yield* Effect.promise(() =>
        db.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1", [`LISTEN "${prefix}_transport_tasks"`])
      )
      for (let i = 0; i < 200 && !listenLines().some((line) => line.startsWith("INFO")); i++) yield* Effect.sleep("50 millis")
      assert.deepStrictEqual(listenLines().map((line) => line.split(" ")[0] + " " + / is (down|back)/.exec(line)?.[1]), ["WARN down", "INFO back"])

      // away for good: the retries (100 ms, 200 ms, 400 ms, ... up to every 5 s) write one warning
      yield* Effect.promise(proxy.close)
      yield* Effect.sleep("3 seconds")
      const outage = listenLines().slice(2)
      assert.strictEqual(outage.filter((line) => line.startsWith("WARN")).length, 1, outage.join("\n"))
      assert.isAbove(outage.filter((line) => line.startsWith("DEBUG")).length, 0, "the retries go on, as debug lines")

      yield* worker.stop.pipe(Effect.ignore)
      yield* Fiber.await(run)
      yield* end
    }))

  it.live("PostgreSQL: the database away for longer than a lease writes no line per failed poll", () =>
    Effect.gen(function*() {
      const logs = captureLogs()
      // a poll fails every 100 ms; each failed claim may have been committed, and is released once the
      // database answers, or let go after the lease (1 s)
      const { end, prefix, proxy, run, worker } = yield* onPostgresBehindProxy("edwlong", Layer.merge(logs.layer, Logger.minimumLogLevel(LogLevel.Debug)), {
        lease: "1 second"
      })
      const from = logs.lines.length
      proxy.setDown(true)
      yield* Effect.sleep("4 seconds")
      proxy.setDown(false)
      // back: the polls work again, and the releaser's next try (every 250 ms, which may come after the
      // first poll that works) says what it let go
      const settled = () => {
        const since = logs.lines.slice(from)
        return since.some((line) => line.startsWith("INFO polling")) && since.some((line) => /let go \d+ claim/.test(line))
      }
      for (let i = 0; i < 100 && !settled(); i++) yield* Effect.sleep("50 millis")
      const outage = logs.lines.slice(from)
      const claims = outage.filter((line) => line.includes("of unknown outcome"))
      assert.deepStrictEqual(claims.filter((line) => !line.startsWith("DEBUG")), [], "no warning for a claim of unknown outcome")
      // some 40 failed polls: the claims are let go together, a line for several
      assert.isBelow(claims.length, 12, claims.join("\n"))
      const letGo = claims.map((line) => Number(/let go (\d+) claim/.exec(line)?.[1] ?? 0))
      assert.isAbove(Math.max(0, ...letGo), 1, `the releaser let several claims go at once: ${claims.join("\n")}`)
      // the outage's own two warnings, in either order
      const warnings = outage.filter((line) => line.startsWith("WARN")).map((line) => line.split(" ").slice(0, 3).join(" ")).sort()
      assert.deepStrictEqual(warnings, [`WARN LISTEN ${prefix}_transport_tasks`, "WARN poll failed"])
      yield* worker.stop.pipe(Effect.ignore)
      yield* Fiber.await(run)
      yield* end
    }))
})
