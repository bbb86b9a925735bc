import { execFile } from "node:child_process"
import { promisify } from "node:util"
import { describe, expect, it } from "vitest"

const exec = promisify(execFile)

// `npm run docs` builds the API reference from the JSDoc of the entry points (typedoc.json). Run
// here without writing it, any warning an error: a `{@link}` to a name that is gone, an entry point
// that no longer resolves, a comment typedoc cannot read.
describe("API reference", () => {
  it("generates from the JSDoc of every entry point with no warning", async () => {
    const run = exec(process.execPath, ["node_modules/typedoc/bin/typedoc", "--emit", "none", "--treatWarningsAsErrors"], {
      maxBuffer: 16 * 1024 * 1024
    })
    const { stdout, stderr } = await run.catch((error: { stdout?: string; stderr?: string }) => {
      throw new Error(`typedoc failed:\n${error.stdout ?? ""}${error.stderr ?? ""}`)
    })
    expect(`${stdout}${stderr}`).not.toMatch(/\[warning\]|\[error\]/)
  }, 180_000)
})
