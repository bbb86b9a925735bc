// Builds the package in two formats, both with declarations (one per module, beside the code: the
// entries' declarations name the modules' by path, and TypeScript needs no JavaScript file beside a
// declaration). tsc compiles once into dist/tsc (staged, removed at the end).
//
// - dist/esm: the ES modules, bundled by esbuild from the public entry points with code splitting.
//   Node's ES module loader pays for every file it resolves, reads and links: importing `/bullmq` as
//   some fifty files cost about half again what the same code costs as a few chunks. Splitting keeps
//   one copy of every module across the entry points (one `Transport` tag, one `FatalError` class,
//   whichever entries an application imports), and keeps a driver's import in the chunks only its
//   transport's entry reaches, so the core and the facade still load no driver. Source maps chain
//   back to src/.
// - dist/cjs: the same modules as CommonJS, one file each, by TypeScript's own CommonJS emit, so a
//   CommonJS application (NestJS's default tsconfig) requires the package on any Node 20. CommonJS has
//   no code splitting to keep module identity across entries with.
import { build } from "esbuild"
import { execFileSync } from "node:child_process"
import { copyFile, mkdir, readdir, readFile, rm, writeFile } from "node:fs/promises"
import * as path from "node:path"
import ts from "typescript"

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

// A CommonJS module has no import.meta: its URL is made from __filename, once, on the line of the
// "use strict" TypeScript starts the module with (so every other line stays where the source map says).
const IMPORT_META_URL = "__importMetaUrl"
const STRICT = `"use strict";`
let modules = 0
for await (const file of files(staged)) {
  const relative = path.relative(staged, file)
  if (file.endsWith(".d.ts") || file.endsWith(".d.ts.map")) {
    for (const dir of [esm, cjs]) {
      await mkdir(path.dirname(path.join(dir, relative)), { recursive: true })
      await copyFile(file, path.join(dir, relative))
    }
  } else if (file.endsWith(".js")) {
    await writeCommonJs(relative)
    modules++
  }
}

/**
 * `src/<module>.ts` as `dist/cjs/<module>.js`, by TypeScript's own CommonJS emit: an import of an ES
 * module compiled to CommonJS (Effect's, this package's) is that module's exports object itself, read
 * as plain properties. (esbuild's emit copied every import into an object of getters, once per
 * importing file: a lookup and a call on every use, on the task path too.) `import()` becomes
 * `require()`, so one copy of each module is loaded.
 */
async function writeCommonJs(relative) {
  const source = path.join(root, "src", relative.replace(/\.js$/, ".ts"))
  const target = path.join(cjs, relative)
  const text = await readFile(source, "utf8")
  const usesMeta = text.includes("import.meta.url")
  const { outputText, sourceMapText } = ts.transpileModule(usesMeta ? text.replaceAll("import.meta.url", IMPORT_META_URL) : text, {
    fileName: source,
    compilerOptions: {
      module: ts.ModuleKind.CommonJS,
      target: ts.ScriptTarget.ES2022,
      esModuleInterop: true,
      isolatedModules: true,
      sourceMap: true
    }
  })
  const map = JSON.parse(sourceMapText)
  map.file = path.basename(target)
  map.sources = [path.relative(path.dirname(target), source)]
  await mkdir(path.dirname(target), { recursive: true })
  // an executable's `#!` line stays the first
  const shebang = outputText.startsWith("#!") ? outputText.slice(0, outputText.indexOf("\n") + 1) : ""
  const body = outputText.slice(shebang.length)
  if (usesMeta && !body.startsWith(STRICT)) throw new Error(`${relative}: TypeScript's CommonJS emit no longer starts with ${STRICT}`)
  await writeFile(
    target,
    usesMeta
      ? `${shebang}${STRICT} const ${IMPORT_META_URL} = require("node:url").pathToFileURL(__filename).href;${body.slice(STRICT.length)}`
      : outputText
  )
  await writeFile(`${target}.map`, JSON.stringify(map))
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
  // the chunks read as the modules do; the source maps name the files and lines
  minify: false,
  // Not keepNames: it wraps every function the code creates, closures on the task path included, in
  // a call that sets its name (the in-memory task path ran at half speed). Where two modules of a
  // chunk declare one name, esbuild renames one (`make2`): harmless for a function, not for a class,
  // whose name is read in messages, hence the check below.
  keepNames: false,
  legalComments: "none",
  metafile: true,
  logLevel: "warning"
})
const outputs = Object.keys(bundled.metafile.outputs).filter((file) => file.endsWith(".js"))
for (const output of outputs) {
  const code = await readFile(path.join(root, output), "utf8")
  // a class `Name2` where the chunk also declares `Name` (a class named with a number alone is not)
  const declared = new Set([...code.matchAll(/^(?:var|let|const|function|class) ([\w$]+)/gm)].map((match) => match[1]))
  const renamed = [...code.matchAll(/^var (([\w$]+?)\d+) = class\b/gm)].filter((match) => declared.has(match[2]))
  if (renamed.length > 0) {
    throw new Error(
      `${output}: the bundle renamed ${renamed.map((match) => `class ${match[1]}`).join(", ")} (two modules of one chunk ` +
        `declare the same name); rename one of them in src/`
    )
  }
}

await rm(staged, { recursive: true, force: true })
await writeFile(path.join(esm, "package.json"), JSON.stringify({ type: "module", sideEffects: false }) + "\n")
await writeFile(path.join(cjs, "package.json"), JSON.stringify({ type: "commonjs", sideEffects: false }) + "\n")
console.log(`built dist/esm (${ENTRIES.length} entry points in ${outputs.length} files) and dist/cjs (${modules} modules)`)
