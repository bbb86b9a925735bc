/**
 * A real nestjs-durable engine for integration tests, without NestJS: `WorkflowEngine` +
 * `InMemoryStateStore` + `BullMQTransport` (also the control plane) on the local Redis, under a unique
 * key prefix, with `resumeDueTimers()` driven on a short interval. `close()` stops everything and
 * deletes every Redis key of the prefix (`bull:<prefix>-*` and `<prefix>-*`).
 *
 * Use it as plain async functions ({@link startEngine}) or as a scoped Effect resource
 * ({@link engineHarness}, {@link Engine.layer}).
 */
import {
  InMemoryStateStore,
  type RunResult,
  type StartOptions,
  type StepCheckpoint,
  type WorkflowCtx,
  type WorkflowEngineDeps,
  WorkflowEngine,
  type WorkflowRun
} from "@dudousxd/nestjs-durable-core"
import { BullMQTransport } from "@dudousxd/nestjs-durable-transport-bullmq"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import { Redis } from "ioredis"
import { randomUUID } from "node:crypto"
import {
  BULL_KEY_PREFIX,
  controlChannel,
  effectivePrefix,
  heartbeatChannel
} from "../../src/transport/bullmq/internal/naming.js"

/** Redis host/port the harness and the code under test connect to (`REDIS_HOST` / `REDIS_PORT`). */
export const redisConnection = (): { readonly host: string; readonly port: number } => ({
  host: process.env.REDIS_HOST ?? "127.0.0.1",
  port: Number(process.env.REDIS_PORT ?? 6379)
})

/** A fresh key prefix, `edw-<12 hex>`, so tests sharing the Redis server never see each other's keys. */
export const uniquePrefix = (label = "edw"): string => `${label}-${randomUUID().replaceAll("-", "").slice(0, 12)}`

/** A workflow body as the engine runs it: `(ctx, input) => output`. */
export type WorkflowBody = (ctx: WorkflowCtx, input: unknown) => Promise<unknown>

/** Options for {@link startEngine}. */
export interface EngineHarnessOptions {
  /** Transport key prefix; a fresh {@link uniquePrefix} when omitted. */
  readonly prefix?: string | undefined
  /** Transport namespace, folded into the prefix (`<prefix>-<namespace>`). */
  readonly transportNamespace?: string | undefined
  /** Engine namespace: suffixes every routing token of its runs with `@<namespace>`. */
  readonly namespace?: string | undefined
  /** Engine instance id (the `from` of its control messages); `engine-<random>` when omitted. */
  readonly instanceId?: string | undefined
  /** How often `resumeDueTimers()` runs (ms). Default 100. */
  readonly timerIntervalMs?: number | undefined
  /** Redis to use; {@link redisConnection} when omitted. */
  readonly connection?: { readonly host: string; readonly port: number } | undefined
  /** Further engine dependencies (store, transport and control plane are the harness's own). */
  readonly engine?: Omit<WorkflowEngineDeps, "store" | "transport" | "transports" | "controlPlane"> | undefined
}

/** Options for {@link EngineHarness.start}: the engine's start options plus an optional run id. */
export interface StartRunOptions extends StartOptions {
  /** Run id; `run-<uuid>` when omitted. */
  readonly runId?: string | undefined
}

/** Options for waiting on a run. */
export interface WaitOptions {
  /** `terminal` (default) waits for completed/failed/cancelled/dead; `settled` also returns on suspended. */
  readonly until?: "settled" | "terminal" | undefined
  /** Give up after this many ms (default 30 000). */
  readonly timeoutMs?: number | undefined
}

/** A running engine on its own prefix. */
export interface EngineHarness {
  /** The key prefix the transport was given. */
  readonly prefix: string
  /** The prefix every queue/channel/key uses (transport namespace folded in). */
  readonly effectivePrefix: string
  /** The engine's instance id. */
  readonly instanceId: string
  readonly connection: { readonly host: string; readonly port: number }
  readonly engine: WorkflowEngine
  readonly store: InMemoryStateStore
  readonly transport: BullMQTransport
  /** A plain Redis client for inspecting keys; closed by {@link close}. */
  readonly redis: Redis
  /** Register workflow `name` (version `"1"` unless given). */
  readonly register: (name: string, fn: WorkflowBody, options?: { readonly version?: string }) => void
  /** Start a run and return its id; it executes asynchronously on this engine. */
  readonly start: (workflow: string, input: unknown, options?: StartRunOptions) => Promise<string>
  /** Wait for a run (terminal by default). */
  readonly waitForRun: (runId: string, options?: WaitOptions) => Promise<RunResult>
  /** Start a run and wait until it is terminal. */
  readonly run: (workflow: string, input: unknown, options?: StartRunOptions & WaitOptions) => Promise<RunResult>
  /** The run as stored, or null. */
  readonly getRun: (runId: string) => Promise<WorkflowRun | null>
  /** Every checkpoint of a run, by seq ascending. */
  readonly checkpoints: (runId: string) => Promise<Array<StepCheckpoint>>
  /** One checkpoint, or null. */
  readonly checkpoint: (runId: string, seq: number) => Promise<StepCheckpoint | null>
  /** Poll until the checkpoint at `seq` exists (with `status` when given); fails after `timeoutMs`. */
  readonly waitForCheckpoint: (
    runId: string,
    seq: number,
    options?: { readonly status?: StepCheckpoint["status"]; readonly timeoutMs?: number }
  ) => Promise<StepCheckpoint>
  /**
   * Register `name` as a remote workflow whose turns go to worker group `group` (default `name`, the
   * per-name queue a unified worker consumes): `engine.remote(name, { group, version })`.
   */
  readonly remote: (name: string, options?: { readonly group?: string; readonly version?: string }) => void
  /** Deliver the signal `token` with `payload` (`engine.signal`); buffered when no run waits on it yet. */
  readonly signal: (token: string, payload?: unknown) => Promise<RunResult | null>
  /**
   * Poll until a live worker heartbeat exists for routing token `group` (what convention routing of an
   * unregistered workflow, and of its children, needs); fails after `timeoutMs` (default 10 000).
   */
  readonly waitForWorkerGroup: (group: string, options?: { readonly timeoutMs?: number }) => Promise<void>
  /** Poll until a run waits on the signal `token` (a signal waiter exists); fails after `timeoutMs`. */
  readonly waitForSignalWaiter: (
    token: string,
    options?: { readonly timeoutMs?: number }
  ) => Promise<{ readonly runId: string; readonly seq: number }>
  /** Poll until the stored run satisfies `predicate`; fails after `timeoutMs` (default 10 000). */
  readonly waitForRunState: (
    runId: string,
    predicate: (run: WorkflowRun) => boolean,
    options?: { readonly timeoutMs?: number; readonly label?: string }
  ) => Promise<WorkflowRun>
  /** Cancel a run (publishes `{"kind":"cancel"}` on `<P>-control`). */
  readonly cancel: (runId: string, options?: { readonly compensate?: boolean }) => Promise<RunResult | null>
  /** Every Redis key of this prefix (BullMQ's and the durable ones). */
  readonly keys: () => Promise<Array<string>>
  /** Stop the timer loop, close the transport, delete the prefix's keys. Idempotent. */
  readonly close: () => Promise<void>
}

const globEscape = (text: string): string => text.replace(/[*?[\]\\]/g, "\\$&")

/** Every key matching `bull:<prefix>-*` or `<prefix>-*`. */
export const prefixKeys = async (redis: Redis, prefix: string): Promise<Array<string>> => {
  const found = new Set<string>()
  for (const pattern of [`${BULL_KEY_PREFIX}:${globEscape(prefix)}-*`, `${globEscape(prefix)}-*`]) {
    let cursor = "0"
    do {
      const [next, batch] = await redis.scan(cursor, "MATCH", pattern, "COUNT", 1000)
      cursor = next
      for (const key of batch) found.add(key)
    } while (cursor !== "0")
  }
  return Array.from(found).sort()
}

/** Delete every key of `prefix` (see {@link prefixKeys}); returns how many were removed. */
export const deletePrefixKeys = async (redis: Redis, prefix: string): Promise<number> => {
  const keys = await prefixKeys(redis, prefix)
  let removed = 0
  for (let i = 0; i < keys.length; i += 500) removed += await redis.unlink(...keys.slice(i, i + 500))
  return removed
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** Polls `probe` every 20 ms until it returns a value other than `undefined`; fails after `timeoutMs`. */
const pollFor = async <A>(
  what: string,
  timeoutMs: number,
  probe: () => Promise<A | undefined>
): Promise<A> => {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const found = await probe()
    if (found !== undefined) return found
    if (Date.now() > deadline) throw new Error(`${what} within ${timeoutMs}ms`)
    await sleep(20)
  }
}

/** Start a real engine on the local Redis under a unique prefix. */
export const startEngine = async (options: EngineHarnessOptions = {}): Promise<EngineHarness> => {
  const prefix = options.prefix ?? uniquePrefix()
  const connection = options.connection ?? redisConnection()
  const instanceId = options.instanceId ?? `engine-${randomUUID().slice(0, 8)}`
  const redis = new Redis({ host: connection.host, port: connection.port, maxRetriesPerRequest: null, lazyConnect: true })
  // a test that stops Redis makes this client fail its reconnects; they surface through its commands
  redis.on("error", () => {})
  await redis.connect()
  const store = new InMemoryStateStore()
  const transport = new BullMQTransport({
    connection: { host: connection.host, port: connection.port },
    prefix,
    ...(options.transportNamespace !== undefined ? { namespace: options.transportNamespace } : {})
  })
  const engine = new WorkflowEngine({
    ...options.engine,
    store,
    transport,
    controlPlane: transport,
    instanceId,
    ...(options.namespace !== undefined ? { namespace: options.namespace } : {})
  })

  // The transport subscribes to its channels in the background; wait until both subscriptions are
  // live, so control messages are not missed and an early close() does not cut a pending SUBSCRIBE.
  const channels = [controlChannel, heartbeatChannel].map((name) => name(effectivePrefix(prefix, options.transportNamespace)))
  const readyBy = Date.now() + 10_000
  for (;;) {
    const counts = (await redis.pubsub("NUMSUB", ...channels)) as Array<string | number>
    if (counts.filter((_, i) => i % 2 === 1).every((n) => Number(n) > 0)) break
    if (Date.now() > readyBy) {
      await transport.close()
      await redis.quit()
      throw new Error(`engine transport did not subscribe to ${channels.join(", ")} within 10s`)
    }
    await sleep(10)
  }

  let ticking: Promise<unknown> = Promise.resolve()
  let busy = false
  const timer = setInterval(() => {
    if (busy) return
    busy = true
    ticking = engine.resumeDueTimers().catch(() => undefined).finally(() => {
      busy = false
    })
  }, options.timerIntervalMs ?? 100)

  let closing: Promise<void> | undefined
  const close = (): Promise<void> => {
    closing ??= (async () => {
      clearInterval(timer)
      await ticking
      try {
        await engine.drain(2_000)
        await transport.close()
      } finally {
        await deletePrefixKeys(redis, prefix)
        await redis.quit()
      }
    })()
    return closing
  }

  const waitForRun = (runId: string, wait: WaitOptions = {}) =>
    engine.waitForRun(runId, { until: wait.until ?? "terminal", timeoutMs: wait.timeoutMs ?? 30_000 })

  const start = async (workflow: string, input: unknown, { runId, ...startOptions }: StartRunOptions = {}) => {
    const id = runId ?? `run-${randomUUID()}`
    await engine.start(workflow, input, id, startOptions)
    return id
  }

  return {
    prefix,
    effectivePrefix: effectivePrefix(prefix, options.transportNamespace),
    instanceId,
    connection,
    engine,
    store,
    transport,
    redis,
    register: (name, fn, registerOptions) => engine.register(name, registerOptions?.version ?? "1", fn),
    start,
    waitForRun,
    run: async (workflow, input, { until, timeoutMs, ...startOptions } = {}) =>
      waitForRun(await start(workflow, input, startOptions), { until, timeoutMs }),
    getRun: (runId) => engine.getRun(runId),
    checkpoints: (runId) => store.listCheckpoints(runId),
    checkpoint: (runId, seq) => store.getCheckpoint(runId, seq),
    waitForCheckpoint: async (runId, seq, wait = {}) => {
      const deadline = Date.now() + (wait.timeoutMs ?? 10_000)
      for (;;) {
        const checkpoint = await store.getCheckpoint(runId, seq)
        if (checkpoint !== null && (wait.status === undefined || checkpoint.status === wait.status)) return checkpoint
        if (Date.now() > deadline) {
          throw new Error(
            `checkpoint ${runId}:${seq} did not reach ${wait.status ?? "existence"} within ${wait.timeoutMs ?? 10_000}ms ` +
              `(last: ${checkpoint?.status ?? "none"})`
          )
        }
        await sleep(20)
      }
    },
    remote: (name, remoteOptions) =>
      engine.remote(name, {
        group: remoteOptions?.group ?? name,
        ...(remoteOptions?.version === undefined ? {} : { version: remoteOptions.version })
      }),
    signal: (token, payload) => engine.signal(token, payload),
    waitForWorkerGroup: async (group, wait) => {
      await pollFor(`no live worker heartbeat for group ${group}`, wait?.timeoutMs ?? 10_000, async () =>
        (await transport.listWorkerGroups()).includes(group) ? true : undefined)
    },
    waitForSignalWaiter: (token, wait) =>
      pollFor(`no run waits on signal ${token}`, wait?.timeoutMs ?? 10_000, async () =>
        (await store.listSignalWaiters(token)).find((waiter) => waiter.token === token)),
    waitForRunState: (runId, predicate, wait) =>
      pollFor(
        `run ${runId} did not reach ${wait?.label ?? "the expected state"}`,
        wait?.timeoutMs ?? 10_000,
        async () => {
          const run = await store.getRun(runId)
          return run !== null && predicate(run) ? run : undefined
        }
      ),
    cancel: (runId, cancelOptions) => engine.cancel(runId, cancelOptions?.compensate ? { compensate: true } : undefined),
    keys: () => prefixKeys(redis, prefix),
    close
  }
}

/** The engine harness as a scoped resource: started on acquire, closed (keys deleted) on release. */
export const engineHarness = (
  options: EngineHarnessOptions = {}
): Effect.Effect<EngineHarness, unknown, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.tryPromise({ try: () => startEngine(options), catch: (cause) => cause }),
    (harness) => Effect.promise(() => harness.close())
  )

/** The engine harness as a service, for `it.layer` / `Effect.provide`. */
export class Engine extends Context.Tag("effect-durable-worker/test/Engine")<Engine, EngineHarness>() {
  /** A layer that starts an engine for the layer's lifetime. */
  static readonly layer = (options: EngineHarnessOptions = {}): Layer.Layer<Engine, unknown> =>
    Layer.scoped(Engine, engineHarness(options))
}
