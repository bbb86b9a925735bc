import { assert, describe, it } from "@effect/vitest"
import * as Either from "effect/Either"
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { parseArgs } from "../../src/cli/main.js"
import * as ReplayReport from "../../src/core/ReplayReport.js"
import * as ReplayVerify from "../../src/core/ReplayVerify.js"
import { greet, order } from "../fixtures/replay-cases/workflows.js"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..")
const cases = path.join(root, "test", "fixtures", "replay-cases")
const tsx = path.join(root, "node_modules", ".bin", "tsx")
const bin = path.join(root, "src", "cli", "bin.ts")

/** Runs the command line in a child process, as `npx effect-durable-worker ...` would (from the TypeScript source). */
const cli = (...args: Array<string>) =>
  new Promise<{ readonly code: number; readonly stdout: string; readonly stderr: string }>((resolve) => {
    execFile(tsx, ["--conditions=source", bin, ...args], { cwd: root, timeout: 60_000 }, (error, stdout, stderr) => {
      resolve({ code: error === null ? 0 : typeof error.code === "number" ? error.code : -1, stdout, stderr })
    })
  })

const reportOf = (text: string) => Either.getOrThrow(ReplayReport.decode(JSON.parse(text)))

describe("effect-durable-worker verify", () => {
  it("prints the report and exits 0 when every history replays", async () => {
    const { code, stderr, stdout } = await cli("verify", "--workflows", "./test/fixtures/replay-cases/workflows.ts", "test/fixtures/replay-cases/passing")
    assert.strictEqual(code, 0, stderr)
    const report = reportOf(stdout)
    assert.strictEqual(report.status, "replayed")
    assert.deepStrictEqual(report.cases.map((c) => [c.id, c.status]), [
      ["durable-workflow.run-dw-1", "replayed"],
      ["nestjs-durable.run-1", "replayed"]
    ])
  })

  it("exits 1 on a drifted history, naming it in the report", async () => {
    const { code, stdout } = await cli("verify", "--workflows", path.join(cases, "workflows.ts"), path.join(cases, "drifted"))
    assert.strictEqual(code, 1)
    const report = reportOf(stdout)
    assert.strictEqual(report.status, "drifted")
    assert.strictEqual(report.promotion_decision, "block_until_compatible")
    assert.deepStrictEqual(report.cases.map((c) => [c.id, c.status, c.reason]), [
      ["durable-workflow.run-dw-1", "replayed", "none"],
      ["nestjs-durable.run-1", "replayed", "none"],
      ["nestjs-durable.run-2", "drifted", "expectation_mismatch"]
    ])
  })

  it("writes the report with --output, and exits 1 on failed (a required family missing)", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "verify-cli-"))
    try {
      const output = path.join(dir, "reports", "replay.json")
      const { code, stdout, stderr } = await cli(
        "verify",
        "--workflows=./test/fixtures/replay-cases/workflows.ts",
        "--required-families",
        "activity",
        "--output",
        output,
        "test/fixtures/replay-cases/passing"
      )
      assert.strictEqual(code, 1, stderr)
      assert.strictEqual(stdout, "")
      const report = reportOf(fs.readFileSync(output, "utf8"))
      assert.strictEqual(report.status, "failed")
      assert.deepStrictEqual(report.missing_families, ["activity"])
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  })

  it("exits 1 on a directory without histories (<no-fixtures>)", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "verify-cli-"))
    try {
      const { code, stdout } = await cli("verify", "--workflows", "./test/fixtures/replay-cases/workflows.ts", dir)
      assert.strictEqual(code, 1)
      assert.strictEqual(reportOf(stdout).cases[0]!.id, "<no-fixtures>")
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  })

  it("exits 2 on usage errors: no --workflows, an unknown option, a module without definitions or that cannot load", async () => {
    const missing = await cli("verify", "test/fixtures/replay-cases/passing")
    assert.strictEqual(missing.code, 2)
    assert.match(missing.stderr, /--workflows <module> is required/)
    const unknown = await cli("verify", "--workflow", "x.js", "dir")
    assert.strictEqual(unknown.code, 2)
    assert.match(unknown.stderr, /unknown option --workflow/)
    const empty = await cli("verify", "--workflows", "./test/fixtures/replay-cases/empty.ts", "test/fixtures/replay-cases/passing")
    assert.strictEqual(empty.code, 2)
    assert.match(empty.stderr, /exports no DurableWorkflow or Workflow definitions/)
    const absent = await cli("verify", "--workflows", "./test/fixtures/replay-cases/nope.js", "test/fixtures/replay-cases/passing")
    assert.strictEqual(absent.code, 2)
    assert.match(absent.stderr, /cannot load the workflows module/)
    // no command at all (a CI step whose arguments came out empty) fails rather than passing
    const bare = await cli()
    assert.strictEqual(bare.code, 2)
    assert.match(bare.stderr, /^effect-durable-worker: no command given \(the command is "verify"\)\n\nUsage: /)
    // a mistyped history directory is the command's mistake, not a drift
    const nowhere = await cli("verify", "--workflows", "./test/fixtures/replay-cases/workflows.ts", "test/fixtures/replay-cases/nowhere")
    assert.strictEqual(nowhere.code, 2)
    assert.match(nowhere.stderr, /the history directory test\/fixtures\/replay-cases\/nowhere does not exist/)
    // a path without ./ is a package's name to import(): said
    const pathless = await cli("verify", "--workflows", "test/fixtures/replay-cases/workflows", "test/fixtures/replay-cases/passing")
    assert.strictEqual(pathless.code, 2)
    assert.match(pathless.stderr, /\(a path needs \.\/ in front: \.\/test\/fixtures\/replay-cases\/workflows\)/)
    const file = await cli("verify", "--workflows", "./test/fixtures/replay-cases/workflows.ts", "test/fixtures/replay-cases/workflows.ts")
    assert.strictEqual(file.code, 2)
    assert.match(file.stderr, /the history directory test\/fixtures\/replay-cases\/workflows\.ts is not a directory that can be read/)
  })
})

describe("effect-durable-worker --version", () => {
  it("prints the version of the package.json it belongs to and exits 0", async () => {
    const { version } = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8")) as { version: string }
    const { code, stdout, stderr } = await cli("--version")
    assert.strictEqual(code, 0, stderr)
    assert.strictEqual(stdout, `${version}\n`)
  })
})

describe("argument parsing", () => {
  it("reads the verify command", () => {
    assert.deepStrictEqual(
      Either.getOrThrow(parseArgs(["verify", "--workflows", "a.js", "--workflows=b.js", "--partition", "eu", "--required-families", "x, y", "dir"])),
      { _tag: "Verify", directory: "dir", modules: ["a.js", "b.js"], output: undefined, requiredFamilies: ["x", "y"], partition: "eu" }
    )
    assert.deepStrictEqual(Either.getOrThrow(parseArgs(["--help"])), { _tag: "Help" })
    assert.deepStrictEqual(Either.getOrThrow(parseArgs(["--version"])), { _tag: "Version" })
    assert.deepStrictEqual(Either.getOrThrow(parseArgs(["-v"])), { _tag: "Version" })
  })

  it("takes -v only in the command's place: after verify (read as \"verbose\") it printed the version and exited 0", () => {
    const refused = parseArgs(["verify", "-v", "--workflows", "./wf.js", "drifted"])
    assert.isTrue(Either.isLeft(refused))
    assert.strictEqual(Either.getLeft(refused).pipe((o) => o._tag === "Some" ? o.value.message : ""), "unknown option -v (the version: effect-durable-worker --version)")
  })

  it("refuses a value that would verify less than asked", () => {
    const messageOf = (argv: ReadonlyArray<string>) =>
      Either.match(parseArgs(argv), { onLeft: (e) => e.message, onRight: () => "parsed" })
    // no family at all would require none, and pass on any histories
    assert.strictEqual(messageOf(["verify", "--workflows", "a.js", "--required-families", ",", "d"]), '--required-families needs at least one family, got ","')
    assert.strictEqual(messageOf(["verify", "--workflows", "a.js", "--partition", " ", "d"]), "--partition needs a value")
    // the next flag is not the module
    assert.strictEqual(messageOf(["verify", "--workflows", "--output", "x", "d"]), "--workflows needs a value")
  })

  it("refuses what it does not understand", () => {
    for (const argv of [[], ["run"], ["verify", "--workflows", "a.js"], ["verify", "--workflows", "a.js", "d1", "d2"], ["verify", "--output"], ["verify", "-x", "d"]]) {
      assert.isTrue(Either.isLeft(parseArgs(argv)), argv.join(" "))
    }
  })
})

describe("the definitions a module exports", () => {
  it("finds DurableWorkflow and Workflow definitions by name, in arrays, objects and the default export, once each", () => {
    const found = ReplayVerify.definitionsOf({ greet, all: [greet, order], default: { order, nested: [order] }, other: 1, text: "x" })
    assert.deepStrictEqual(found.durableWorkflows, [greet])
    assert.deepStrictEqual(found.workflows, [order])
    assert.deepStrictEqual(ReplayVerify.definitionsOf({ notAWorkflow: { name: "order" } }), { durableWorkflows: [], workflows: [] })
  })
})
