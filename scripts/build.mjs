// Builds the package as Effect's own packages ship: ES modules in dist/esm (tsc, with declarations),
// and the same modules as CommonJS in dist/cjs (each ESM file transpiled by esbuild, declarations
// beside it), so a CommonJS application (NestJS's default tsconfig) requires the package on any Node 20.
import { transform } from "esbuild"
import { execFileSync } from "node:child_process"
import { copyFile, mkdir, readdir, readFile, rm, writeFile } from "node:fs/promises"
import * as path from "node:path"

const root = path.resolve(import.meta.dirname ?? path.dirname(new URL(import.meta.url).pathname), "..")
const esm = path.join(root, "dist/esm")
const cjs = path.join(root, "dist/cjs")

await rm(path.join(root, "dist"), { recursive: true, force: true })
execFileSync(process.execPath, [path.join(root, "node_modules/typescript/bin/tsc"), "-p", path.join(root, "tsconfig.build.json")], {
  stdio: "inherit"
})

const files = async function*(dir) {
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name)
    if (entry.isDirectory()) yield* files(full)
    else yield full
  }
}

// a CommonJS module has no import.meta: its URL is made from __filename where a module asks for it
const IMPORT_META_URL = "__importMetaUrl"
let count = 0
for await (const file of files(esm)) {
  const target = path.join(cjs, path.relative(esm, file))
  await mkdir(path.dirname(target), { recursive: true })
  if (file.endsWith(".d.ts") || file.endsWith(".d.ts.map")) {
    // same depth under dist/, so a declaration map's path back to src/ holds for both
    await copyFile(file, target)
  } else if (file.endsWith(".js")) {
    const source = await readFile(file, "utf8")
    const usesMeta = source.includes("import.meta")
    const { code } = await transform(source, {
      format: "cjs",
      platform: "node",
      target: "node20",
      // import() of our own modules and the drivers becomes require(), so one copy of each is loaded
      supported: { "dynamic-import": false },
      ...(usesMeta
        ? {
          define: { "import.meta.url": IMPORT_META_URL },
          banner: `const ${IMPORT_META_URL} = require("node:url").pathToFileURL(__filename).href;`
        }
        : {})
    })
    await writeFile(target, code)
    count++
  }
}
await writeFile(path.join(esm, "package.json"), JSON.stringify({ type: "module", sideEffects: false }) + "\n")
await writeFile(path.join(cjs, "package.json"), JSON.stringify({ type: "commonjs", sideEffects: false }) + "\n")
console.log(`built dist/esm and dist/cjs (${count} modules)`)
