/**
 * The source files of the throwaway projects `install.test.ts` installs the packed package into,
 * written as a user would write them. They are strings, not files of this repository, so the
 * repository's own typecheck (whose settings are not a CommonJS NestJS app's) never sees them.
 *
 * Every worker serves the step `package.echo` on the prefix `EDW_PREFIX` of the Redis at `REDIS_URL`
 * and answers `{ via, pid, doubled }`, so the test can tell which process answered. Given a `sleepMs`,
 * the step prints `began` and sleeps that long first, so the test can send SIGTERM while it runs: every
 * project drains it before its process ends.
 */

/** The step every project serves. */
export const STEP = "package.echo"

/** What a project's step answers for the input `{ n, sleepMs? }`. */
export interface EchoOutput {
  readonly via: string
  readonly pid: number
  readonly doubled: number
}

/** (a) plain JavaScript, ES modules, only the BullMQ peers: the promise facade's lazy `redis`. */
export const bullmqPeers = {
  "worker.mjs": `
import { Worker, redis } from "effect-durable-worker/promise"

const worker = new Worker({ concurrency: 2, logLevel: "Warning" })
worker.step("${STEP}", async (input) => {
  if (input.sleepMs) {
    console.log("began")
    await new Promise((resolve) => setTimeout(resolve, input.sleepMs))
  }
  return { via: "bullmq-peers", pid: process.pid, doubled: input.n * 2 }
})
// SIGTERM: the worker drains, deregisters, and the process exits
await worker.run(redis({ url: process.env.REDIS_URL, prefix: process.env.EDW_PREFIX }))
`,
  // records every module the ES loader loads, synchronously, so the list is complete when the
  // import that loaded them settles
  "record-hooks.mjs": `
import { appendFileSync } from "node:fs"
let file
export function initialize(data) { file = data.file }
export async function load(url, context, next) {
  appendFileSync(file, url + "\\n")
  return next(url, context)
}
`,
  "record.mjs": `
import { register } from "node:module"
register("./record-hooks.mjs", import.meta.url, { data: { file: process.env.EDW_LOADED } })
`,
  // imports the specifiers given; prints what was loaded (the ES loader's list and the CommonJS cache)
  "loads.mjs": `
import { readFileSync } from "node:fs"
import { createRequire } from "node:module"
import { pathToFileURL } from "node:url"
for (const specifier of process.argv.slice(2)) await import(specifier)
const esm = readFileSync(process.env.EDW_LOADED, "utf8").split("\\n").filter(Boolean)
const cjs = Object.keys(createRequire(import.meta.url).cache).map((file) => pathToFileURL(file).href)
console.log(JSON.stringify([...new Set([...esm, ...cjs])]))
`,
  "loads.cjs": `
for (const specifier of process.argv.slice(2)) require(specifier)
console.log(JSON.stringify(Object.keys(require.cache)))
`,
  // the definitions the package's \`verify\` executable replays recorded histories against (the
  // histories are the repository's fixtures, copied beside it by the test)
  "workflows.mjs": `
import { DurableWorkflow, Workflow } from "effect-durable-worker"
import * as Effect from "effect/Effect"

export const greet = DurableWorkflow.make("orders.greet", (ctx, name) =>
  Effect.map(ctx.activity("greeting.compose", [name]), (greeting) => greeting + "!"))

export const order = Workflow.make("order", (id, ctx) =>
  Effect.gen(function*() {
    const item = yield* ctx.step("fetch", { id })
    yield* ctx.sleep("1 minute")
    return yield* ctx.step("store", { item })
  }))
`
}

/** (d) no driver installed: `redis()` must fail its run naming the packages to install. */
export const noDriver = {
  "missing.mjs": `
import * as root from "effect-durable-worker"
import { Worker, redis } from "effect-durable-worker/promise"

const worker = new Worker({ handleSignals: false, logLevel: "None" })
worker.step("${STEP}", () => 1)
try {
  await worker.run(redis({ prefix: "never-used" }))
  console.log(JSON.stringify({ outcome: "resolved" }))
} catch (error) {
  console.log(JSON.stringify({
    outcome: "rejected",
    tag: error?._tag,
    isRootMissingDriverError: error instanceof root.MissingDriverError,
    packages: error?.packages,
    message: String(error?.message)
  }))
}
`,
  // the probe server without @effect/platform-node, the PostgreSQL, MySQL and SQS transports without
  // their drivers, and the telemetry option without OpenTelemetry:
  // each message's install command must work as given (inside the peer ranges)
  "others.mjs": `
import { Worker, inMemory, mysql, postgres, sqs } from "effect-durable-worker/promise"

const outcome = async (run) => {
  try {
    await run()
    return { outcome: "resolved" }
  } catch (error) {
    return { outcome: "rejected", tag: error?._tag, message: String(error?.message) }
  }
}
const health = await outcome(() => new Worker({ handleSignals: false, logLevel: "None", health: { port: 0 } }).run(inMemory()))
const pg = await outcome(() => {
  const worker = new Worker({ handleSignals: false, logLevel: "None" })
  worker.step("${STEP}", () => 1)
  return worker.run(postgres({ url: "postgres://127.0.0.1:5432/never-used" }))
})
const telemetry = await outcome(() => new Worker({ handleSignals: false, logLevel: "None", telemetry: {} }).run(inMemory()))
const served = (transport) => outcome(() => {
  const worker = new Worker({ handleSignals: false, logLevel: "None" })
  worker.step("${STEP}", () => 1)
  return worker.run(transport)
})
const mysqlRun = await served(mysql({ url: "mysql://root@127.0.0.1:3306/never-used" }))
const sqsRun = await served(sqs({ prefix: "never-used" }))
console.log(JSON.stringify({ health, pg, telemetry, mysql: mysqlRun, sqs: sqsRun }))
`,
  "missing.cjs": `
const { Worker, redis } = require("effect-durable-worker/promise")
const worker = new Worker({ handleSignals: false, logLevel: "None" })
worker.step("${STEP}", () => 1)
worker.run(redis({ prefix: "never-used" })).then(
  () => console.log(JSON.stringify({ outcome: "resolved" })),
  (error) => console.log(JSON.stringify({ outcome: "rejected", tag: error?._tag, packages: error?.packages, message: String(error?.message) }))
)
`
}

/** (b) an ES-module Effect application in TypeScript (`module: NodeNext`). */
export const esmEffect = {
  "tsconfig.json": JSON.stringify(
    {
      compilerOptions: {
        target: "ES2022",
        module: "NodeNext",
        moduleResolution: "NodeNext",
        lib: ["ES2022"],
        types: ["node"],
        strict: true,
        exactOptionalPropertyTypes: true,
        skipLibCheck: false,
        outDir: "dist",
        rootDir: "src"
      },
      include: ["src"]
    },
    null,
    2
  ),
  "src/main.ts": `
import { Effect, Exit, Fiber, Layer, Redacted } from "effect"
import { FatalError, Step, Worker } from "effect-durable-worker"
import { BullMQTransport } from "effect-durable-worker/bullmq"

const echo = Step.make("${STEP}", (input: { readonly n: number; readonly sleepMs?: number }) =>
  Effect.gen(function*() {
    if (input.n < 0) return yield* Effect.fail(new FatalError("n must not be negative", "negative"))
    if (input.sleepMs !== undefined) {
      yield* Effect.sync(() => console.log("began"))
      yield* Effect.sleep(input.sleepMs)
    }
    return { via: "esm-effect", pid: process.pid, doubled: input.n * 2 }
  }))

const TransportLive = BullMQTransport.layer({
  url: Redacted.make(process.env.REDIS_URL ?? "redis://127.0.0.1:6379"),
  prefix: process.env.EDW_PREFIX ?? "durable"
})

const WorkerLive = Worker.layer({ steps: [echo], concurrency: 2, shutdownTimeout: "10 seconds" })

// no @effect/platform-node here: the signal interrupts the main fiber, the layer then drains
const main = Effect.runFork(Layer.launch(WorkerLive.pipe(Layer.provide(TransportLive))))
process.once("SIGTERM", () => Effect.runFork(Fiber.interrupt(main)))
main.addObserver((exit) => {
  if (!Exit.isInterrupted(exit)) {
    console.error("worker ended:", exit)
    process.exitCode = 1
  }
})
`
}

/**
 * (c) a CommonJS NestJS application: NestJS's default compiler options (`skipLibCheck: true` among
 * them; `tsconfig.libs.json` turns it off), `@nestjs/core`'s container and lifecycle hooks, the
 * promise facade logging through NestJS's `Logger`. The worker stops in `onModuleDestroy`, the first
 * of NestJS's shutdown hooks, so it drains before what the steps use is closed. With `EDW_NEST_HOOKS=off`
 * the app does not call `enableShutdownHooks()`: the worker's own signal handling then stops it, and
 * ends the process that the app's server would keep alive.
 */
export const nestCjs = {
  "tsconfig.json": JSON.stringify(
    {
      compilerOptions: {
        module: "commonjs",
        moduleResolution: "node",
        declaration: true,
        removeComments: true,
        emitDecoratorMetadata: true,
        experimentalDecorators: true,
        allowSyntheticDefaultImports: true,
        target: "ES2021",
        sourceMap: true,
        outDir: "./dist",
        baseUrl: "./",
        strict: true,
        skipLibCheck: true,
        forceConsistentCasingInFileNames: true,
        noFallthroughCasesInSwitch: true
      },
      include: ["src"]
    },
    null,
    2
  ),
  // the declarations of every package the app reaches, checked too
  "tsconfig.libs.json": JSON.stringify({ extends: "./tsconfig.json", compilerOptions: { skipLibCheck: false, noEmit: true } }, null, 2),
  "src/payments.service.ts": `
import { Injectable } from "@nestjs/common"
import { FatalError, type StepContext } from "effect-durable-worker/promise"

export interface EchoInput {
  readonly n: number
  readonly sleepMs?: number
}

@Injectable()
export class PaymentsService {
  async echo(input: EchoInput, ctx: StepContext): Promise<{ via: string; pid: number; doubled: number }> {
    if (input.n < 0) throw new FatalError("n must not be negative", "negative")
    if (ctx.attempt < 1) throw new Error("attempts count from 1")
    if (input.sleepMs !== undefined) {
      console.log("began")
      await new Promise((resolve) => setTimeout(resolve, input.sleepMs))
    }
    return { via: "nest-cjs", pid: process.pid, doubled: input.n * 2 }
  }
}
`,
  "src/durable-worker.service.ts": `
import { Injectable, Logger, type OnApplicationBootstrap, type OnModuleDestroy } from "@nestjs/common"
import { Worker } from "effect-durable-worker/promise"
import { redis } from "effect-durable-worker/bullmq"
import { type EchoInput, PaymentsService } from "./payments.service"

@Injectable()
export class DurableWorkerService implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly logger = new Logger("DurableWorker")
  private readonly worker = new Worker({ concurrency: 2, logger: this.logger })
  private running: Promise<void> | undefined

  constructor(private readonly payments: PaymentsService) {}

  onApplicationBootstrap(): void {
    this.worker.step("${STEP}", (input: EchoInput, ctx) => this.payments.echo(input, ctx))
    this.running = this.worker.run(redis({ url: process.env.REDIS_URL, prefix: process.env.EDW_PREFIX }))
    this.running.catch((error: unknown) => this.logger.error(\`the durable worker stopped: \${String(error)}\`))
  }

  async onModuleDestroy(): Promise<void> {
    await this.worker.stop()
    await this.running?.catch(() => undefined)
  }
}
`,
  "src/app.module.ts": `
import { Module } from "@nestjs/common"
import { DurableWorkerService } from "./durable-worker.service"
import { PaymentsService } from "./payments.service"

@Module({ providers: [PaymentsService, DurableWorkerService] })
export class AppModule {}
`,
  "src/main.ts": `
import "reflect-metadata"
import { createServer } from "node:http"
import { NestFactory } from "@nestjs/core"
import { AppModule } from "./app.module"

async function bootstrap(): Promise<void> {
  const app = await NestFactory.createApplicationContext(AppModule)
  if (process.env.EDW_NEST_HOOKS !== "off") app.enableShutdownHooks()
  // the app's own HTTP side, which keeps the process alive beside the worker
  createServer((_, res) => res.end("ok")).listen(0, "127.0.0.1")
}

void bootstrap()
`
}
