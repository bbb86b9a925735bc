/**
 * The source files of the throwaway projects `install.test.ts` installs the packed package into,
 * written as a user would write them. They are strings, not files of this repository, so the
 * repository's own typecheck (whose settings are not a CommonJS NestJS app's) never sees them.
 *
 * Every worker serves the step `package.echo` on the prefix `EDW_PREFIX` of the Redis at `REDIS_URL`
 * and answers `{ via, pid, doubled }`, so the test can tell which process answered, and stops
 * gracefully on SIGTERM.
 */

/** The step every project serves. */
export const STEP = "package.echo"

/** What a project's step answers for the input `{ n }`. */
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
worker.step("${STEP}", async (input) => ({ via: "bullmq-peers", pid: process.pid, doubled: input.n * 2 }))
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

const echo = Step.make("${STEP}", (input: { readonly n: number }) =>
  input.n < 0
    ? Effect.fail(new FatalError("n must not be negative", "negative"))
    : Effect.succeed({ via: "esm-effect", pid: process.pid, doubled: input.n * 2 }))

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
 * (c) a CommonJS NestJS-style application: NestJS's default compiler options (`skipLibCheck: true`
 * among them; `tsconfig.libs.json` turns it off), decorators, the promise facade.
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
  "src/durable.ts": `
import "reflect-metadata"
import { FatalError, type StepContext, Worker } from "effect-durable-worker/promise"
import { redis } from "effect-durable-worker/bullmq"

type Handler = (input: any, ctx: StepContext) => Promise<unknown>
const STEPS = Symbol("durable:steps")

/** What @nestjs/common's @Injectable() is to the container: a marker here. */
export function Injectable(): ClassDecorator {
  return () => undefined
}

/** Marks a method as the handler of a durable step. */
export function DurableStep(name: string): MethodDecorator {
  return (target, key) => {
    const steps: Array<[string, string | symbol]> = Reflect.getMetadata(STEPS, target) ?? []
    Reflect.defineMetadata(STEPS, [...steps, [name, key]], target)
  }
}

@Injectable()
export class DurableWorkerService {
  private readonly worker = new Worker({ concurrency: 2, logLevel: "Warning", handleSignals: false })
  private running: Promise<void> | undefined

  register(provider: object): void {
    const steps: Array<[string, string | symbol]> = Reflect.getMetadata(STEPS, Object.getPrototypeOf(provider)) ?? []
    for (const [name, key] of steps) {
      const handler = (provider as Record<string | symbol, Handler>)[key]!.bind(provider)
      this.worker.step(name, handler)
    }
  }

  onApplicationBootstrap(): void {
    this.running = this.worker.run(redis({ url: process.env.REDIS_URL, prefix: process.env.EDW_PREFIX }))
  }

  async onApplicationShutdown(): Promise<void> {
    await this.worker.stop()
    await this.running
  }
}

export { FatalError }
`,
  "src/payments.service.ts": `
import type { StepContext } from "effect-durable-worker/promise"
import { DurableStep, FatalError, Injectable } from "./durable"

export interface EchoInput {
  readonly n: number
}

@Injectable()
export class PaymentsService {
  @DurableStep("${STEP}")
  async echo(input: EchoInput, ctx: StepContext): Promise<{ via: string; pid: number; doubled: number }> {
    if (input.n < 0) throw new FatalError("n must not be negative", "negative")
    if (ctx.attempt < 1) throw new Error("attempts count from 1")
    return { via: "nest-cjs", pid: process.pid, doubled: input.n * 2 }
  }
}
`,
  "src/main.ts": `
import { DurableWorkerService } from "./durable"
import { PaymentsService } from "./payments.service"

async function bootstrap(): Promise<void> {
  const durable = new DurableWorkerService()
  durable.register(new PaymentsService())
  durable.onApplicationBootstrap()
  // what app.enableShutdownHooks() does: the hooks run on SIGTERM, the process then exits
  process.once("SIGTERM", () => {
    durable.onApplicationShutdown().then(
      () => process.exit(0),
      (error: unknown) => {
        console.error("shutdown failed:", error)
        process.exit(1)
      }
    )
  })
}

void bootstrap()
`
}
