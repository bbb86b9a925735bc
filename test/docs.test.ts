import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { repoRoot, run } from "./package/pack.js"

// `npm run docs` builds the API reference from the JSDoc of the entry points (typedoc.json). Run
// here without writing it, any warning an error: a `{@link}` to a name that is gone, an entry point
// that no longer resolves, a comment typedoc cannot read.
describe("API reference", () => {
  it("generates from the JSDoc of every entry point with no warning", async () => {
    const { stderr, stdout } = await run(
      process.execPath,
      [path.join(repoRoot, "node_modules/typedoc/bin/typedoc"), "--emit", "none", "--treatWarningsAsErrors"],
      { cwd: repoRoot, maxBuffer: 16 * 1024 * 1024 }
    )
    expect(`${stdout}${stderr}`).not.toMatch(/\[warning\]|\[error\]/)
  }, 180_000)
})

// npm's `latest` of `effect` and of several `@effect/*` packages is Effect 4, so an install line that
// names one of them bare installs a version outside this package's peer ranges (a peer conflict, or
// a second Effect). Every install line the README and the examples show names each `effect` and
// `@effect/*` package with a version inside the range package.json declares for it.
/** The version an install names for a peer range: "^3.22.0" → "3", "^0.108.0" → "0.108". */
const peerLine = (range: string): string => {
  const [major, minor] = range.replace(/^\^/, "").split(".")
  return major === "0" ? `${major}.${minor}` : major!
}

describe("install lines", () => {
  it("name every peer dependency at a version inside its peer range (npm's latest is past several)", async () => {
    const { readFile, readdir } = await import("node:fs/promises")
    const manifest = JSON.parse(await readFile(path.join(repoRoot, "package.json"), "utf8")) as {
      peerDependencies: Record<string, string>
    }
    const examples = (await readdir(path.join(repoRoot, "examples"), { recursive: true }))
      .filter((file) => file.endsWith(".ts"))
      .map((file) => path.join("examples", file))
    const lines: Array<[string, string]> = []
    for (const file of ["README.md", ...examples]) {
      // a command continued with a backslash is one line
      const text = (await readFile(path.join(repoRoot, file), "utf8")).replace(/\\\n[\s*]*/g, " ")
      for (const match of text.matchAll(/npm install ([^`\n#]*)/g)) lines.push([file, match[1]!])
    }
    // and the Install table's last column, which says what to install beside the core
    const readme = await readFile(path.join(repoRoot, "README.md"), "utf8")
    const table = readme.slice(readme.indexOf("| transport | import from | install beside the core |"))
    for (const row of table.slice(0, table.indexOf("\n\n")).split("\n").slice(2)) {
      const cell = row.split("|").at(-2)!
      for (const match of cell.matchAll(/`([^`]+)`/g)) lines.push(["README.md (Install table)", match[1]!])
    }
    expect(lines.length).toBeGreaterThanOrEqual(6)
    const problems: Array<string> = []
    for (const [file, line] of lines) {
      for (const spec of line.trim().split(/\s+/)) {
        const at = spec.lastIndexOf("@")
        const name = at > 0 ? spec.slice(0, at) : spec
        const range = manifest.peerDependencies[name]
        if (range === undefined) {
          // the Effect packages are all peers; others (a driver's own dependency, a dev tool) may not be
          if (name === "effect" || name.startsWith("@effect/")) problems.push(`${file}: ${spec} is not a peer dependency`)
          continue
        }
        const line = peerLine(range)
        const version = at > 0 ? spec.slice(at + 1) : ""
        if (version !== line && !version.startsWith(`${line}.`)) problems.push(`${file}: ${spec} (peer range ${range})`)
      }
    }
    expect(problems).toEqual([])
  })

  it("the install commands the errors give (a missing driver, the probe server's package) name versions inside the peer ranges", async () => {
    const { readFile } = await import("node:fs/promises")
    const { INSTALL_SPECS } = await import("../src/core/internal/packages.js")
    const { peerDependencies } = JSON.parse(await readFile(path.join(repoRoot, "package.json"), "utf8")) as {
      peerDependencies: Record<string, string>
    }
    for (const name of Object.keys(peerDependencies)) {
      expect(INSTALL_SPECS[name], name).toBe(`${name}@${peerLine(peerDependencies[name]!)}`)
    }
    // and every package a transport's MissingDriverError names, peer or not: mysql2 is not a peer
    // (@effect/sql-mysql2 depends on it), named at the line of that dependency's range
    const drivers = await import("../src/transport/internal/drivers.js")
    const sqlMysql2 = JSON.parse(await readFile(path.join(repoRoot, "node_modules/@effect/sql-mysql2/package.json"), "utf8")) as {
      dependencies: Record<string, string>
    }
    const ranges: Record<string, string> = { ...peerDependencies, mysql2: sqlMysql2.dependencies.mysql2! }
    for (const name of [...drivers.BULLMQ_PACKAGES, ...drivers.POSTGRES_PACKAGES, ...drivers.MYSQL_PACKAGES, ...drivers.SQS_PACKAGES]) {
      expect(ranges[name], `${name}: no range to install it in`).toBeDefined()
      expect(INSTALL_SPECS[name], name).toBe(`${name}@${peerLine(ranges[name]!)}`)
    }
  })
})

describe("the version", () => {
  it("the worker advertises to an orchestrator is package.json's", async () => {
    const { readFile } = await import("node:fs/promises")
    const { VERSION } = await import("../src/core/internal/version.js")
    const { version } = JSON.parse(await readFile(path.join(repoRoot, "package.json"), "utf8")) as { version: string }
    expect(VERSION).toBe(version)
    const { DEFAULT_SDK } = await import("../src/transport/bullmq/internal/descriptor.js")
    expect(DEFAULT_SDK).toEqual({ name: "effect-durable-worker", version })
  })
})

// The README's quickstarts are what a new user copies first. Each is checked as the README prints
// it: cut out of README.md, type-checked with the repository's compiler options (NestJS's decorator
// options for its block), the promise one also run, its printed reply the one its comment shows.
// The files go to a directory of the checkout (ignored by git), so the package's own name resolves
// to its sources as it does for `examples/`.
describe("the README's quickstarts", () => {
  /** The first ```ts block after the README line `heading`. */
  const blockAfter = (readme: string, heading: string): string => {
    const at = readme.indexOf(`\n${heading}\n`)
    if (at < 0) throw new Error(`README.md has no heading "${heading}"`)
    const open = readme.indexOf("\n```ts\n", at)
    const close = readme.indexOf("\n```\n", open + 1)
    if (open < 0 || close < 0) throw new Error(`README.md has no ts block after "${heading}"`)
    return readme.slice(open + "\n```ts\n".length, close + 1)
  }

  let dir: string
  let readme: string

  beforeAll(async () => {
    const { mkdtemp, readFile } = await import("node:fs/promises")
    readme = await readFile(path.join(repoRoot, "README.md"), "utf8")
    dir = await mkdtemp(path.join(repoRoot, ".readme-snippets-"))
  })

  afterAll(async () => {
    const { rm } = await import("node:fs/promises")
    if (dir !== undefined) await rm(dir, { recursive: true, force: true })
  })

  it("type-check as written: promises, NestJS, Effect and Durable Workflow", async () => {
    const { mkdir, writeFile } = await import("node:fs/promises")
    const files: Record<string, string> = {
      "promise.ts": blockAfter(readme, "## Quickstart (promises)"),
      "nest/durable-worker.service.ts": blockAfter(readme, "### In a NestJS application"),
      // the application's own service the NestJS block injects (the README leaves it to the reader)
      "nest/payments.service.ts": `import { Injectable } from "@nestjs/common"
import type { StepContext } from "effect-durable-worker/promise"

@Injectable()
export class PaymentsService {
  async charge(input: { amount: number }, ctx: StepContext): Promise<{ chargeId: string }> {
    return { chargeId: \`ch_\${ctx.stepId}_\${input.amount}\` }
  }
}
`,
      "effect.ts": blockAfter(readme, "## Quickstart (Effect)"),
      // the server's address and token, which the README's block leaves to the reader
      "durable-workflow.ts": `declare const baseUrl: string
declare const token: string
${blockAfter(readme, "## Durable Workflow")}`,
      "tsconfig.json": JSON.stringify({ extends: "../tsconfig.json", compilerOptions: { noUnusedLocals: false }, include: ["*.ts"] }),
      // a NestJS app's relative imports name no extension: resolved as its bundler or CommonJS would
      "nest/tsconfig.json": JSON.stringify({
        extends: "../../tsconfig.json",
        compilerOptions: { module: "preserve", moduleResolution: "bundler", experimentalDecorators: true, emitDecoratorMetadata: true },
        include: ["*.ts"]
      })
    }
    for (const [name, text] of Object.entries(files)) {
      await mkdir(path.dirname(path.join(dir, name)), { recursive: true })
      await writeFile(path.join(dir, name), text)
    }
    for (const project of [dir, path.join(dir, "nest")]) {
      await run(process.execPath, [path.join(repoRoot, "node_modules/typescript/bin/tsc"), "-p", project], { cwd: repoRoot, timeout: 110_000 })
    }
  }, 120_000)

  it("the promise quickstart runs and prints the reply its comment shows", async () => {
    const { writeFile } = await import("node:fs/promises")
    const file = path.join(dir, "promise-run.ts")
    await writeFile(file, blockAfter(readme, "## Quickstart (promises)"))
    const { stdout } = await run(path.join(repoRoot, "node_modules/.bin/tsx"), ["--conditions=source", file], {
      cwd: repoRoot,
      env: { ...process.env, NODE_OPTIONS: "" },
      timeout: 50_000
    })
    expect(stdout).toMatch(/_tag: 'StepResult'/)
    expect(stdout).toMatch(/status: 'completed'/)
    expect(stdout).toMatch(/output: \{ chargeId: 'ch_s1' \}/)
  }, 60_000)
})
