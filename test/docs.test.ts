import * as path from "node:path"
import { describe, expect, it } from "vitest"
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
