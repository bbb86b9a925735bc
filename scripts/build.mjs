// Builds the package in two formats from one tsc compile (staged in dist/tsc, removed at the end):
//
// - dist/esm: the ES modules, bundled by esbuild from the public entry points with code splitting.
//   Node's ES module loader pays about a millisecond per file (resolve, read, link) on top of running
//   it: importing `/bullmq` as some fifty files cost about twice what the same code costs as a few
//   chunks. Splitting keeps one copy of every module across the entry points (one `Transport` tag,
//   one `FatalError` class, whichever entries an application imports), and keeps a driver's import in
//   the chunks only its transport's entry reaches, so the core and the facade still load no driver.
//   Source maps chain back to src/.
// - dist/cjs: the same modules as CommonJS, one file each (esbuild transpiling tsc's output), so a
//   CommonJS application (NestJS's default tsconfig) requires the package on any Node 20. CommonJS has
//   no code splitting to keep module identity across entries with, and `require` of a file is cheap.
//
// Declarations stay one per module in both formats, beside the code (the entries' declarations name
// the modules' by path; TypeScript needs no JavaScript file beside a declaration).
import { build, transform } from "esbuild"
import { execFileSync } from "node:child_process"
import { copyFile, mkdir, readdir, readFile, rm, writeFile } from "node:fs/promises"
import * as path from "node:path"

const root = path.resolve(import.meta.dirname ?? path.dirname(new URL(import.meta.url).pathname), "..")
// staged at the same depth under dist/ as esm/ and cjs/, so a declaration map's path back to src/
// holds for the copies in both
const staged = path.join(root, "dist/tsc")
const esm = path.join(root, "dist/esm")
const cjs = path.join(root, "dist/cjs")

/** The package's entry points (`exports` and `bin`), as paths under src/ without the extension. */
const ENTRIES = ["index", "promise", "bullmq", "sqs", "postgres", "mysql", "durable-workflow", "cli/bin"]

await rm(path.join(root, "dist"), { recursive: true, force: true })
execFileSync(process.execPath, [
  path.join(root, "node_modules/typescript/bin/tsc"),
  "-p",
  path.join(root, "tsconfig.build.json"),
  "--outDir",
  staged
], { stdio: "inherit" })

const files = async function*(dir) {
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name)
    if (entry.isDirectory()) yield* files(full)
    else yield full
  }
}

// a CommonJS module has no import.meta: its URL is made from __filename where a module asks for it
const IMPORT_META_URL = "__importMetaUrl"
let modules = 0
for await (const file of files(staged)) {
  const relative = path.relative(staged, file)
  if (file.endsWith(".d.ts") || file.endsWith(".d.ts.map")) {
    for (const dir of [esm, cjs]) {
      await mkdir(path.dirname(path.join(dir, relative)), { recursive: true })
      await copyFile(file, path.join(dir, relative))
    }
  } else if (file.endsWith(".js")) {
    const target = path.join(cjs, relative)
    await mkdir(path.dirname(target), { recursive: true })
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
    modules++
  }
}

const bundled = await build({
  absWorkingDir: root,
  entryPoints: ENTRIES.map((entry) => path.join(staged, `${entry}.js`)),
  outbase: staged,
  outdir: esm,
  bundle: true,
  splitting: true,
  format: "esm",
  platform: "node",
  target: "node20",
  // every package (Effect, the drivers) stays an import: peers are the application's to provide
  packages: "external",
  chunkNames: "internal/[name]-[hash]",
  sourcemap: true,
  // src/ ships in the package: the maps point to it rather than carry a copy
  sourcesContent: false,
  // one module per public concept stays readable in the chunks and in stack traces
  minify: false,
  keepNames: true,
  legalComments: "none",
  metafile: true,
  logLevel: "warning"
})
const chunks = Object.keys(bundled.metafile.outputs).filter((file) => file.endsWith(".js")).length

await rm(staged, { recursive: true, force: true })
await writeFile(path.join(esm, "package.json"), JSON.stringify({ type: "module", sideEffects: false }) + "\n")
await writeFile(path.join(cjs, "package.json"), JSON.stringify({ type: "commonjs", sideEffects: false }) + "\n")
console.log(`built dist/esm (${ENTRIES.length} entry points in ${chunks} files) and dist/cjs (${modules} modules)`)
