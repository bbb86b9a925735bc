/**
 * The `effect-durable-worker` command line, as an Effect program: argument parsing and the
 * `verify` command (load the definitions a module exports, replay every history file of a directory,
 * print or write the report, answer with an exit code).
 *
 * @since 0.3.0
 */
import * as FileSystem from "@effect/platform/FileSystem"
import * as Path from "@effect/platform/Path"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import { pathToFileURL } from "node:url"
import { messageOf } from "../core/internal/errors.js"
import * as ReplayReport from "../core/ReplayReport.js"
import * as ReplayVerify from "../core/ReplayVerify.js"

/**
 * The command line was not understood (an unknown flag, a missing argument) or its module could not
 * be used; the command exits with 2 and prints the message and the usage.
 *
 * @since 0.3.0
 * @category errors
 */
export class UsageError extends Schema.TaggedError<UsageError>()("UsageError", { message: Schema.String }) {}

/**
 * The usage text.
 *
 * @since 0.3.0
 * @category constants
 */
export const usage = `Usage: effect-durable-worker verify --workflows <module> [options] <history-dir>

Replays every history file (*.json) of <history-dir> against the workflow definitions <module>
exports and prints the durable-workflow.v2.replay-diff report (JSON).

  --workflows <module>          a module (path or package) exporting DurableWorkflow definitions
                                and/or nestjs-durable Workflow definitions; repeatable
  --output <file>               write the report to <file> instead of printing it
  --required-families <a,b,..>  families that must each have a case (a missing one fails the report)
  --partition <name>            the partition the nestjs-durable worker runs with (default "default")
  -h, --help                    this text
  -v, --version                 the package's version

Exit codes: 0 every case replayed; 1 the report is drifted or failed; 2 usage error.`

/**
 * A parsed `verify` command.
 *
 * @since 0.3.0
 * @category models
 */
export interface VerifyCommand {
  readonly _tag: "Verify"
  readonly directory: string
  readonly modules: ReadonlyArray<string>
  readonly output: string | undefined
  readonly requiredFamilies: ReadonlyArray<string>
  readonly partition: string | undefined
}

/**
 * What a command line asks for.
 *
 * @since 0.3.0
 * @category models
 */
export type Command = VerifyCommand | { readonly _tag: "Help" } | { readonly _tag: "Version" }

const valued = new Set(["--workflows", "--output", "--required-families", "--partition"])

/**
 * Parses the arguments after the program name.
 *
 * @since 0.3.0
 * @category parsing
 */
export const parseArgs = (argv: ReadonlyArray<string>): Either.Either<Command, UsageError> => {
  const usageError = (message: string) => Either.left(new UsageError({ message }))
  if (argv.includes("-h") || argv.includes("--help")) return Either.right({ _tag: "Help" })
  // no command is a mistake, not a request for help: a CI step whose arguments came out empty must
  // fail, not pass having verified nothing
  if (argv.length === 0) return usageError("no command given (the command is \"verify\")")
  // only in the command's place: `verify -v …` (read as "verbose") printed the version and passed a
  // CI step that verified nothing
  if (argv[0] === "-v" || argv[0] === "--version") return Either.right({ _tag: "Version" })
  const [command, ...rest] = argv
  if (command !== "verify") return usageError(`unknown command ${JSON.stringify(command)} (the command is "verify")`)
  const modules: Array<string> = []
  const positional: Array<string> = []
  let output: string | undefined
  let partition: string | undefined
  let families: Array<string> = []
  for (let i = 0; i < rest.length; i++) {
    const arg = rest[i]!
    const eq = arg.startsWith("--") ? arg.indexOf("=") : -1
    const flag = eq === -1 ? arg : arg.slice(0, eq)
    if (flag.startsWith("-") && flag !== "-") {
      if (!valued.has(flag)) {
        return usageError(
          `unknown option ${flag}${flag === "-v" || flag === "--version" ? " (the version: effect-durable-worker --version)" : ""}`
        )
      }
      const value = eq === -1 ? rest[++i] : arg.slice(eq + 1)
      // `--workflows --output x` would take "--output" for the module
      if (value === undefined || value.trim() === "" || (eq === -1 && value.startsWith("--"))) {
        return usageError(`${flag} needs a value`)
      }
      if (flag === "--workflows") modules.push(value)
      else if (flag === "--output") output = value
      else if (flag === "--partition") partition = value
      else {
        families = value.split(",").map((f) => f.trim()).filter((f) => f !== "")
        // an empty list would require nothing, and the run pass on any histories
        if (families.length === 0) return usageError(`${flag} needs at least one family, got ${JSON.stringify(value)}`)
      }
    } else {
      positional.push(arg)
    }
  }
  if (modules.length === 0) return usageError("--workflows <module> is required")
  if (positional.length !== 1) {
    return usageError(positional.length === 0 ? "the history directory is missing" : `one history directory expected, got ${positional.join(" ")}`)
  }
  return Either.right({ _tag: "Verify", directory: positional[0]!, modules, output, requiredFamilies: families, partition })
}

/** A path or a bare package name, as `import()` takes it from the current directory. */
const specifierOf = (path: Path.Path, module: string): string =>
  module.startsWith(".") || path.isAbsolute(module) || /\.[cm]?[jt]sx?$/.test(module)
    ? pathToFileURL(path.resolve(module)).href
    : module

const load = (path: Path.Path, module: string) =>
  Effect.tryPromise({
    try: () => import(specifierOf(path, module)) as Promise<unknown>,
    catch: (error) => {
      // "dir/wf" is a package's name to import(): a path meant there needs its ./
      const bare = specifierOf(path, module) === module && (error as { code?: unknown }).code === "ERR_MODULE_NOT_FOUND"
      return new UsageError({
        message: `cannot load the workflows module ${module}: ${messageOf(error)}${
          bare && module.includes("/") && !module.startsWith("@") ? ` (a path needs ./ in front: ./${module})` : ""
        }`
      })
    }
  })

/**
 * Runs a `verify` command: the report, and the exit code it calls for.
 *
 * @since 0.3.0
 * @category commands
 */
export const verify = (
  command: VerifyCommand
): Effect.Effect<{ readonly report: ReplayReport.ReplayDiffReport; readonly exitCode: 0 | 1 }, UsageError, FileSystem.FileSystem | Path.Path> =>
  Effect.gen(function*() {
    const path = yield* Path.Path
    const fs = yield* FileSystem.FileSystem
    // a directory that is not there is a mistyped command (exit 2), not a drift (exit 1); one that
    // holds no history is the report's <no-fixtures> failure
    if (!(yield* Effect.orElseSucceed(fs.exists(command.directory), () => false))) {
      return yield* new UsageError({ message: `the history directory ${command.directory} does not exist` })
    }
    // a file given there (the workflows module, the arguments swapped) is the same kind of mistake
    if (!(yield* Effect.orElseSucceed(Effect.as(fs.readDirectory(command.directory), true), () => false))) {
      return yield* new UsageError({ message: `the history directory ${command.directory} is not a directory that can be read` })
    }
    const loaded = yield* Effect.forEach(command.modules, (module) => load(path, module))
    const found = loaded.map(ReplayVerify.definitionsOf)
    const durableWorkflows = [...new Set(found.flatMap((d) => d.durableWorkflows))]
    const workflows = [...new Set(found.flatMap((d) => d.workflows))]
    if (durableWorkflows.length === 0 && workflows.length === 0) {
      return yield* new UsageError({
        message: `${command.modules.join(", ")} exports no DurableWorkflow or Workflow definitions ` +
          "(export them by name, in an array or object, or as the default export)"
      })
    }
    const report = yield* ReplayVerify.verifyDirectory(command.directory, { durableWorkflows, workflows }, {
      requiredFamilies: command.requiredFamilies,
      partition: command.partition
    })
    const text = JSON.stringify(report, null, 2)
    if (command.output === undefined) {
      yield* Console.log(text)
    } else {
      const written = yield* Effect.either(
        Effect.zipRight(
          fs.makeDirectory(path.dirname(path.resolve(command.output)), { recursive: true }),
          fs.writeFileString(command.output, text + "\n")
        )
      )
      if (Either.isLeft(written)) {
        return yield* new UsageError({ message: `cannot write the report to ${command.output}: ${messageOf(written.left)}` })
      }
      yield* Console.error(`replay report (${report.status}, ${report.summary.cases} cases) written to ${command.output}`)
    }
    return { report, exitCode: ReplayReport.exitCode(report) }
  })

/**
 * The version in the `package.json` of this package, found from `from` (a directory of its own
 * files) upwards: the executable runs from `dist/esm/cli`, the repository's tests from `src/cli`.
 *
 * @since 0.3.0
 * @category commands
 */
export const packageVersion = (from: string): Effect.Effect<string | undefined, never, FileSystem.FileSystem | Path.Path> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    for (let dir = from; ; dir = path.dirname(dir)) {
      const text = yield* fs.readFileString(path.join(dir, "package.json")).pipe(Effect.option)
      if (text._tag === "Some") {
        const manifest = yield* Effect.option(Effect.try(() => JSON.parse(text.value) as { name?: unknown; version?: unknown }))
        if (manifest._tag === "Some" && manifest.value.name === "effect-durable-worker") {
          return typeof manifest.value.version === "string" ? manifest.value.version : undefined
        }
      }
      if (path.dirname(dir) === dir) return undefined
    }
  })

/**
 * The whole command line: parses `argv` (the arguments after the program name), runs the command
 * and answers with the exit code (0 replayed, 1 drifted or failed, 2 usage error). Never fails.
 * `directory` is the executable's own, where `--version` looks for the package's version.
 *
 * @since 0.3.0
 * @category commands
 */
export const main = (
  argv: ReadonlyArray<string>,
  directory?: string
): Effect.Effect<0 | 1 | 2, never, FileSystem.FileSystem | Path.Path> =>
  Either.match(parseArgs(argv), {
    onLeft: (error) => Effect.as(Console.error(`effect-durable-worker: ${error.message}\n\n${usage}`), 2 as const),
    onRight: (command) =>
      command._tag === "Help"
        ? Effect.as(Console.log(usage), 0 as const)
        : command._tag === "Version"
        ? Effect.flatMap(
          directory === undefined ? Effect.succeed(undefined) : packageVersion(directory),
          (version) =>
            version === undefined
              ? Effect.as(Console.error("effect-durable-worker: the package's version could not be found"), 2 as const)
              : Effect.as(Console.log(version), 0 as const)
        )
        : verify(command).pipe(
          Effect.map((done) => done.exitCode),
          Effect.catchTag("UsageError", (error) => Effect.as(Console.error(`effect-durable-worker: ${error.message}`), 2 as const))
        )
  })
