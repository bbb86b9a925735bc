/**
 * The package as a user gets it: packed with `npm pack` (its `prepack` builds it) and installed from
 * the tarball into a throwaway project with `npm install --offline`, peers pinned to the versions of
 * this repository's `package-lock.json` (the npm cache `npm ci` filled holds every one of them).
 *
 * Shared by `test/package/install.test.ts` and `bench/startup.ts`.
 */
import { execFile } from "node:child_process"
import { cp, mkdir, readFile, stat, symlink, writeFile } from "node:fs/promises"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"

const execFileAsync = promisify(execFile)

/**
 * `execFile`, failing with everything the command printed (tsc reports its errors on stdout). A
 * `timeout` kills the command (SIGKILL) once it has run that long, so a test that gives up on it
 * leaves no process behind.
 */
export const run = async (
  file: string,
  args: ReadonlyArray<string>,
  options: { cwd?: string; env?: NodeJS.ProcessEnv; maxBuffer?: number; timeout?: number } = {}
) => {
  try {
    return await execFileAsync(file, args, { ...options, killSignal: "SIGKILL" })
  } catch (error) {
    const { stdout, stderr } = error as { stdout?: string; stderr?: string }
    throw new Error(`${file} ${args.join(" ")} failed in ${options.cwd ?? process.cwd()}:\n${stdout ?? ""}${stderr ?? ""}`)
  }
}

/** The repository's root (this file is `test/package/pack.ts`). */
export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")

/** The project's own TypeScript compiler, the one the package itself is built with. */
export const tscBin = path.join(repoRoot, "node_modules/typescript/bin/tsc")

/**
 * The environment for child `npm`/`node` processes: without the `npm_*` variables of an enclosing
 * `npm run` (they would configure the inner npm as the outer script), and without `NODE_OPTIONS`
 * (a loader the runner installed must not load into the user's project), keeping the npm cache.
 */
export const cleanEnv = (extra: Record<string, string> = {}): NodeJS.ProcessEnv => {
  const env: NodeJS.ProcessEnv = {}
  for (const [key, value] of Object.entries(process.env)) {
    if (key.toLowerCase().startsWith("npm_") && key.toLowerCase() !== "npm_config_cache") continue
    if (key === "NODE_OPTIONS" || key.startsWith("VITEST") || key === "TSX_TSCONFIG_PATH") continue
    env[key] = value
  }
  return { ...env, ...extra }
}

/** What the packing needs of the checkout (`files` of package.json and the build's inputs). */
const STAGED = [
  "package.json",
  "README.md",
  "LICENSE",
  "CHANGELOG.md",
  "examples",
  "docs",
  "bench/HISTORY.md",
  "scripts",
  "src",
  "tsconfig.json",
  "tsconfig.build.json"
]

/**
 * `npm pack` the working tree into `destination` and return the tarball's path. The tree is copied
 * to a staging directory first (its `node_modules` linked), so the `prepack` build does not remove
 * and rewrite the checkout's `dist/` under another process reading it.
 */
export const packProject = async (destination: string): Promise<string> => {
  const staging = path.join(destination, "staging")
  await mkdir(staging, { recursive: true })
  for (const entry of STAGED) {
    const from = path.join(repoRoot, entry)
    const exists = await stat(from).then(() => true, () => false)
    if (exists) {
      await mkdir(path.dirname(path.join(staging, entry)), { recursive: true })
      await cp(from, path.join(staging, entry), { recursive: true })
    }
  }
  await symlink(path.join(repoRoot, "node_modules"), path.join(staging, "node_modules"), "dir")
  const { stdout } = await run("npm", ["pack", "--json", "--pack-destination", destination], {
    cwd: staging,
    env: cleanEnv(),
    maxBuffer: 64 * 1024 * 1024
  })
  // the JSON report follows whatever the prepack build printed
  const report = JSON.parse(stdout.slice(stdout.indexOf("[\n"))) as Array<{ filename: string }>
  return path.join(destination, report[0]!.filename)
}

interface LockEntry {
  readonly version?: string
  readonly resolved?: string
  readonly integrity?: string
  readonly optional?: boolean
  readonly dependencies?: Record<string, string>
  readonly optionalDependencies?: Record<string, string>
  readonly peerDependencies?: Record<string, string>
  readonly peerDependenciesMeta?: Record<string, { readonly optional?: boolean }>
  readonly [key: string]: unknown
}

let lock: Record<string, LockEntry> | undefined
const repoLock = async (): Promise<Record<string, LockEntry>> =>
  lock ??= (JSON.parse(await readFile(path.join(repoRoot, "package-lock.json"), "utf8")) as {
    packages: Record<string, LockEntry>
  }).packages

/** `name@version` as this repository's `package-lock.json` installs it. */
export const pinned = async (name: string): Promise<string> => {
  const version = (await repoLock())[`node_modules/${name}`]?.version
  if (version === undefined) throw new Error(`${name} is not in package-lock.json`)
  return `${name}@${version}`
}

/** Where Node would find `name` required from the package installed at `from` ("" = the root). */
const resolveIn = (packages: Record<string, LockEntry>, from: string, name: string): string | undefined => {
  for (let at = from;; at = at.slice(0, Math.max(0, at.lastIndexOf("/node_modules/")))) {
    const candidate = at === "" ? `node_modules/${name}` : `${at}/node_modules/${name}`
    if (packages[candidate] !== undefined) return candidate
    if (at === "") return undefined
  }
}

/**
 * The part of this repository's lockfile that installing `names` needs: each package at the place
 * npm put it here, with every package it depends on (dependencies, optional dependencies and the
 * peers npm installs), so the tree, and every version in it, is the one `npm ci` installed.
 */
const lockFor = async (names: ReadonlyArray<string>): Promise<Record<string, LockEntry>> => {
  const packages = await repoLock()
  // a package is optional when every chain that reaches it has an optional edge
  const required = new Set<string>()
  const reached = new Set<string>()
  const visit = (from: string, name: string, optional: boolean) => {
    const at = resolveIn(packages, from, name)
    if (at === undefined) {
      if (optional) return
      throw new Error(`${name} (needed by ${from || "the project"}) is not in package-lock.json`)
    }
    if (optional ? reached.has(at) : required.has(at)) return
    reached.add(at)
    if (!optional) required.add(at)
    const entry = packages[at]!
    for (const dep of Object.keys(entry.dependencies ?? {})) visit(at, dep, optional)
    for (const dep of Object.keys(entry.optionalDependencies ?? {})) visit(at, dep, true)
    for (const dep of Object.keys(entry.peerDependencies ?? {})) {
      if (entry.peerDependenciesMeta?.[dep]?.optional !== true) visit(at, dep, optional)
    }
  }
  for (const name of names) visit("", name, false)
  const subset: Record<string, LockEntry> = {}
  for (const at of [...reached].sort()) {
    // the repository's dev/peer flags describe its own tree, not this one
    const { dev: _dev, devOptional: _devOptional, peer: _peer, optional: _optional, ...entry } = packages[at]!
    subset[at] = required.has(at) ? entry : { ...entry, optional: true }
  }
  return subset
}

/** Options of {@link installProject}. */
export interface ProjectOptions {
  /** The packed tarball, installed as `effect-durable-worker`; none installs only `packages`. */
  readonly tarball?: string
  /** Further packages by name, at the versions of the repository's lockfile. */
  readonly packages: ReadonlyArray<string>
  /** Fields merged into the project's package.json (e.g. `type`). */
  readonly manifest?: Record<string, unknown>
}

/**
 * Make a project in `dir` with `packages` (as the repository's lockfile pins them) and install the
 * tarball into it with `npm install <tarball>`, from the npm cache.
 *
 * The npm cache `npm ci` filled holds every tarball of the lockfile, but not the registry documents
 * npm reads to resolve a version, so `npm install bullmq@5.81.5 --offline` finds nothing. The
 * packages therefore come from a lockfile cut from the repository's (`npm ci --offline`), and the
 * tarball, which has no dependencies of its own, is then installed beside them as a user installs
 * it, its peers already there. npm checks the tarball's peer ranges against the registry's document
 * of each peer (npm 11 reads it even for a peer already installed), so that step is
 * `--prefer-offline`: the documents come from the registry `npm ci` uses, the first time only, and
 * every tarball from the cache.
 */
export const installProject = async (dir: string, options: ProjectOptions): Promise<void> => {
  await mkdir(dir, { recursive: true })
  const packages = await lockFor(options.packages)
  const dependencies = Object.fromEntries(
    options.packages.map((name) => [name, packages[`node_modules/${name}`]!.version!])
  )
  const manifest = { name: path.basename(dir), version: "0.0.0", private: true, ...options.manifest, dependencies }
  await writeFile(path.join(dir, "package.json"), JSON.stringify(manifest, null, 2) + "\n")
  await writeFile(
    path.join(dir, "package-lock.json"),
    JSON.stringify(
      {
        name: manifest.name,
        version: manifest.version,
        lockfileVersion: 3,
        requires: true,
        packages: { "": { name: manifest.name, version: manifest.version, dependencies }, ...packages }
      },
      null,
      2
    ) + "\n"
  )
  const npm = (args: ReadonlyArray<string>, cache: "--offline" | "--prefer-offline") =>
    run("npm", [...args, cache, "--no-audit", "--no-fund", "--no-update-notifier", "--loglevel=error"], {
      cwd: dir,
      env: cleanEnv(),
      maxBuffer: 64 * 1024 * 1024
    })
  await npm(["ci"], "--offline")
  if (options.tarball !== undefined) await npm(["install", options.tarball], "--prefer-offline")
}

/** How many packages a project's `node_modules` holds (the lockfile's entries, as npm counts them). */
export const packageCount = async (dir: string): Promise<number> => {
  const lockfile = JSON.parse(await readFile(path.join(dir, "package-lock.json"), "utf8")) as {
    packages: Record<string, unknown>
  }
  return Object.keys(lockfile.packages).filter((key) => key.includes("node_modules/")).length
}

/** The bytes under `dir` as `du -sb` counts them (apparent size, directories included). */
export const treeBytes = async (dir: string): Promise<number> => {
  const { stdout } = await run("du", ["-sb", dir])
  return Number(stdout.split(/\s/)[0])
}
