import { execFileSync } from "node:child_process"
import { existsSync } from "node:fs"
import { describe, expect, it } from "vitest"

// Builds dist/ and loads the package through its own `exports` map, as an installed copy would.
describe("package", () => {
  it("builds ESM and CommonJS with types, and resolves the entry points through `exports`", () => {
    execFileSync("npm", ["run", "build"], { stdio: "pipe" })
    for (const format of ["esm", "cjs"]) {
      for (const entry of ["index", "promise", "bullmq", "sqs", "postgres", "mysql", "durable-workflow"]) {
        for (const file of [`${entry}.js`, `${entry}.d.ts`]) expect(existsSync(`dist/${format}/${file}`), `${format}/${file}`).toBe(true)
      }
    }
    const probe = `
      const root = await import("effect-durable-worker")
      const promise = await import("effect-durable-worker/promise")
      const worker = new promise.Worker({ handleSignals: false, logLevel: "None" })
      worker.step("echo", (input) => input)
      const result = await worker.processTask({ runId: "r", seq: 0, name: "echo", stepId: "r:0", group: "echo", input: 7, attempt: 1 })
      console.log(JSON.stringify({ keys: Object.keys(root).sort(), output: result.output, fatal: typeof promise.FatalError }))
    `
    const out = execFileSync("node", ["--input-type=module", "-e", probe], { encoding: "utf8" })
    const parsed = JSON.parse(out.trim().split("\n").at(-1)!)
    expect(parsed.output).toBe(7)
    expect(parsed.fatal).toBe("function")
    expect(parsed.keys).toEqual(expect.arrayContaining(["FatalError", "InMemoryTransport", "Step", "Transport", "Worker"]))
  }, 120_000)
})
