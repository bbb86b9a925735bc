/**
 * Verifying a corpus of recorded histories before a deploy: a directory (or a list) of history
 * files, each replayed against the code about to ship, into one `durable-workflow.v2.replay-diff`
 * report (`ReplayReport`). The `effect-durable-worker verify` command runs this.
 *
 * Three kinds of file, told apart by their schema field:
 *
 * - `"fixture_schema": "durable-workflow.golden-history.v1"`: the Durable Workflow runtimes' shared
 *   golden-history fixtures (`source` with `runtime` and `version`; `cases`, each with `name`,
 *   `family`, `workflow_type`, `start_input`, `history` and an `expected` first command). Case ids
 *   are `<runtime>@<version>::<name>`, as upstream names them.
 * - `"schema": "effect-durable-worker.durable-workflow-history.v1"`: one Durable Workflow workflow
 *   task as a worker replayed it and the commands it answered (what `ReplayCapture` writes):
 *   `{ workflow_type, workflow_id, run_id, task_queue, payload_codec, arguments, history_events,
 *   commands }`, payloads encoded as on the wire (an accepted-update task also `workflow_update_id`,
 *   replayed as that update).
 * - `"schema": "effect-durable-worker.nestjs-durable-history.v1"`: one nestjs-durable workflow turn:
 *   `{ workflow, run_id, task, decision }`, `task` the turn's JSON payload as the engine delivered it
 *   and `decision` the JSON decision the worker answered (see {@link NestDurableHistory}).
 *
 * A file that is not JSON, has none of these schemas, or does not match its schema is a `failed`
 * case (`bundle_invalid`: `<unparseable:file>`, `<schema-drift:file>`, `<source-missing:file>`); a
 * directory without any `.json` file is the `failed` case `<no-fixtures>`.
 *
 * @since 0.3.0
 */
import * as FileSystem from "@effect/platform/FileSystem"
import * as Path from "@effect/platform/Path"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as ParseResult from "effect/ParseResult"
import * as Predicate from "effect/Predicate"
import * as Schema from "effect/Schema"
import type { DurableWorkflow } from "./DurableWorkflow.js"
import { type Command, decodeArgs } from "./internal/durableWorkflow/replay.js"
import { messageOf } from "./internal/errors.js"
import * as DW from "./internal/verify/durableWorkflow.js"
import {
  DurableWorkflowHistory,
  durableWorkflowHistorySchema,
  GoldenHistoryCase,
  GoldenHistoryFixture,
  NestDurableHistory,
  nestDurableHistorySchema
} from "./internal/verify/files.js"
import { caseError } from "./internal/verify/shared.js"
import * as Nest from "./internal/verify/workflow.js"
import * as ReplayReport from "./ReplayReport.js"
import { isWorkflow, type Workflow } from "./Workflow.js"

export {
  /**
   * The schema of a recorded Durable Workflow workflow task.
   *
   * @since 0.3.0
   * @category schemas
   */
  DurableWorkflowHistory,
  /**
   * `"effect-durable-worker.durable-workflow-history.v1"`.
   *
   * @since 0.3.0
   * @category constants
   */
  durableWorkflowHistorySchema,
  /**
   * The schema of a `durable-workflow.golden-history.v1` fixture file.
   *
   * @since 0.3.0
   * @category schemas
   */
  GoldenHistoryFixture,
  /**
   * The schema of a recorded nestjs-durable workflow turn.
   *
   * @since 0.3.0
   * @category schemas
   */
  NestDurableHistory,
  /**
   * `"effect-durable-worker.nestjs-durable-history.v1"`.
   *
   * @since 0.3.0
   * @category constants
   */
  nestDurableHistorySchema
}

/**
 * What a corpus is verified against: Durable Workflow definitions and nestjs-durable workflows
 * (either may be empty; a history of a kind with no definitions is a `failed` case).
 *
 * @since 0.3.0
 * @category models
 */
export interface Definitions<R = never> {
  readonly durableWorkflows?: Iterable<DurableWorkflow<R>> | undefined
  readonly workflows?: Iterable<Workflow<any, any, R>> | undefined
}

/**
 * Options of a verification: the report's (`requiredFamilies`) and the nestjs-durable worker's
 * `partition`.
 *
 * @since 0.3.0
 * @category models
 */
export interface VerifyOptions extends ReplayReport.ReportOptions {
  readonly partition?: string | undefined
}

/**
 * A history file: its name (for case ids) and its text.
 *
 * @since 0.3.0
 * @category models
 */
export interface HistoryFile {
  readonly name: string
  readonly content: string
}

type Parsed =
  | { readonly _tag: "Durable"; readonly case: DW.DurableWorkflowCase }
  | { readonly _tag: "Nest"; readonly case: Nest.WorkflowCase }
  | { readonly _tag: "Invalid"; readonly report: ReplayReport.CaseReport }

const schemaError = (file: string, error: ParseResult.ParseError) =>
  ReplayReport.invalidBundle(`<schema-drift:${file}>`, {
    class: "FixtureSchemaError",
    message: `${file} does not match its schema: ${ParseResult.TreeFormatter.formatErrorSync(error)}`
  })

const stem = (file: string) => file.replace(/\.json$/i, "")

const goldenCases = (file: string, json: Record<string, unknown>): Array<Parsed> => {
  const source = json["source"]
  if (!Predicate.isRecord(source) || typeof source["runtime"] !== "string" || source["runtime"] === "" ||
    typeof source["version"] !== "string" || source["version"] === "") {
    return [{
      _tag: "Invalid",
      report: ReplayReport.invalidBundle(`<source-missing:${file}>`, {
        class: "FixtureSchemaError",
        message: `${file} is missing source.runtime or source.version`
      })
    }]
  }
  const fixture = Schema.decodeUnknownEither(GoldenHistoryFixture)(json)
  if (Either.isLeft(fixture)) return [{ _tag: "Invalid", report: schemaError(file, fixture.left) }]
  const { runtime, version } = fixture.right.source
  const codec = fixture.right.source["payload_codec"]
  return fixture.right.cases.flatMap((raw, i): Array<Parsed> => {
    const decoded = Schema.decodeUnknownEither(GoldenHistoryCase)(raw)
    const id = `${runtime}@${version}::${Predicate.isRecord(raw) && typeof raw["name"] === "string" ? raw["name"] : "<unnamed>"}`
    if (Either.isLeft(decoded)) {
      return [{
        _tag: "Invalid",
        report: ReplayReport.invalidBundle(`<schema-drift:${file}#${i}>`, {
          class: "FixtureSchemaError",
          message: `case ${i} of ${file} does not match the golden-history case shape: ${ParseResult.TreeFormatter.formatErrorSync(decoded.left)}`
        })
      }]
    }
    const c = decoded.right
    return [{
      _tag: "Durable",
      case: {
        id,
        history: c.history,
        workflowType: c.workflow_type ?? undefined,
        startInput: c.start_input ?? [],
        expected: c.expected ?? undefined,
        family: c.family ?? undefined,
        source: fixture.right.source,
        ...(typeof codec === "string" ? { payloadCodec: codec } : {})
      }
    }]
  })
}

const durableCase = (file: string, json: unknown): Parsed => {
  const decoded = Schema.decodeUnknownEither(DurableWorkflowHistory)(json)
  if (Either.isLeft(decoded)) return { _tag: "Invalid", report: schemaError(file, decoded.left) }
  const h = decoded.right
  const codec = h.payload_codec === undefined ? "avro" : h.payload_codec
  let startInput: ReadonlyArray<unknown> | undefined
  if (h.arguments !== undefined && h.arguments !== null) {
    try {
      startInput = decodeArgs(h.arguments, codec)
    } catch (error) {
      return {
        _tag: "Invalid",
        report: ReplayReport.makeCase({
          id: stem(file),
          status: "failed",
          reason: "replay_error",
          workflowType: h.workflow_type,
          family: h.family,
          source: h.source,
          error: { ...caseError(error), message: `the recorded start input does not decode: ${messageOf(error)}` }
        })
      }
    }
  }
  return {
    _tag: "Durable",
    case: {
      id: stem(file),
      history: h.history_events,
      workflowType: h.workflow_type,
      startInput: startInput ?? [],
      workflowId: h.workflow_id,
      runId: h.run_id,
      updateId: h.workflow_update_id,
      taskQueue: h.task_queue,
      ...(h.payload_codec === undefined ? {} : { payloadCodec: h.payload_codec }),
      ...(h.commands === undefined ? {} : { expectedCommands: h.commands as ReadonlyArray<Command> }),
      family: h.family,
      source: h.source
    }
  }
}

const nestCase = (file: string, json: unknown): Parsed => {
  const decoded = Schema.decodeUnknownEither(NestDurableHistory)(json)
  if (Either.isLeft(decoded)) return { _tag: "Invalid", report: schemaError(file, decoded.left) }
  const h = decoded.right
  return {
    _tag: "Nest",
    case: { id: stem(file), task: h.task, ...(h.decision === undefined ? {} : { decision: h.decision }), family: h.family, source: h.source }
  }
}

/** Tells a file's kind by its schema field and reads its cases. */
const parse = (file: HistoryFile): Array<Parsed> => {
  let json: unknown
  try {
    json = JSON.parse(file.content)
  } catch (error) {
    return [{
      _tag: "Invalid",
      report: ReplayReport.invalidBundle(`<unparseable:${file.name}>`, { class: classOfParse(error), message: messageOf(error) })
    }]
  }
  if (Predicate.isRecord(json) && json["fixture_schema"] === ReplayReport.goldenHistoryFixtureSchema) return goldenCases(file.name, json)
  if (Predicate.isRecord(json) && json["schema"] === durableWorkflowHistorySchema) return [durableCase(file.name, json)]
  if (Predicate.isRecord(json) && json["schema"] === nestDurableHistorySchema) return [nestCase(file.name, json)]
  const found = Predicate.isRecord(json) ? json["fixture_schema"] ?? json["schema"] : undefined
  return [{
    _tag: "Invalid",
    report: ReplayReport.invalidBundle(`<schema-drift:${file.name}>`, {
      class: "FixtureSchemaError",
      message: `${file.name} must declare fixture_schema=${ReplayReport.goldenHistoryFixtureSchema}, or schema=` +
        `${durableWorkflowHistorySchema} or ${nestDurableHistorySchema}; found ${JSON.stringify(found ?? null)}`
    })
  }]
}

const classOfParse = (error: unknown) => (error instanceof Error ? error.name : "SyntaxError")

/**
 * Verifies history files given by name and content (see the module for the kinds), in the order
 * given, into one report whose `summary.fixtures` is the number of files. Never fails.
 *
 * @since 0.3.0
 * @category verify
 */
export const verifyFiles = <R = never>(
  definitions: Definitions<R>,
  files: ReadonlyArray<HistoryFile>,
  options: VerifyOptions = {}
): Effect.Effect<ReplayReport.ReplayDiffReport, never, R> =>
  Effect.gen(function*() {
    if (files.length === 0) {
      return ReplayReport.make([
        ReplayReport.invalidBundle("<no-fixtures>", { class: "FileNotFoundError", message: "no history files were given" })
      ], options)
    }
    const durable = [...(definitions.durableWorkflows ?? [])]
    const workflows = [...(definitions.workflows ?? [])]
    const cases: Array<ReplayReport.CaseReport> = []
    for (const file of files) {
      for (const parsed of parse(file)) {
        cases.push(
          parsed._tag === "Invalid"
            ? parsed.report
            : parsed._tag === "Durable"
            ? yield* DW.verifyCase(durable, parsed.case)
            : yield* Nest.verifyCase(workflows, parsed.case, options)
        )
      }
    }
    return ReplayReport.make(cases, { ...options, fixtureCount: files.length })
  })

/**
 * Verifies every `*.json` file of a directory (sorted by name; subdirectories are not read) with
 * {@link verifyFiles}. A directory that does not exist, or holds no `.json` file, gives the `failed`
 * case `<no-fixtures>`; a file that cannot be read, `<unparseable:file>`. Never fails.
 *
 * @example
 * import { NodeContext } from "@effect/platform-node"
 * import { Effect } from "effect"
 * import { ReplayVerify } from "effect-durable-worker"
 *
 * const report = await Effect.runPromise(
 *   ReplayVerify.verifyDirectory("./histories", { durableWorkflows: [checkout], workflows: [pipeline] })
 *     .pipe(Effect.provide(NodeContext.layer))
 * )
 *
 * @since 0.3.0
 * @category verify
 */
export const verifyDirectory = <R = never>(
  directory: string,
  definitions: Definitions<R>,
  options: VerifyOptions = {}
): Effect.Effect<ReplayReport.ReplayDiffReport, never, R | FileSystem.FileSystem | Path.Path> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const entries = yield* Effect.either(fs.readDirectory(directory))
    const names = Either.isRight(entries) ? entries.right.filter((name) => name.toLowerCase().endsWith(".json")).sort() : []
    if (names.length === 0) {
      return ReplayReport.make([
        ReplayReport.invalidBundle("<no-fixtures>", {
          class: "FileNotFoundError",
          message: Either.isLeft(entries)
            ? `the history directory ${directory} cannot be read: ${messageOf(entries.left)}`
            : `no history files (*.json) found in ${directory}`
        })
      ], options)
    }
    const files: Array<HistoryFile> = []
    const unreadable: Array<ReplayReport.CaseReport> = []
    for (const name of names) {
      const content = yield* Effect.either(fs.readFileString(path.join(directory, name)))
      if (Either.isRight(content)) files.push({ name, content: content.right })
      else unreadable.push(ReplayReport.invalidBundle(`<unparseable:${name}>`, caseError(content.left)))
    }
    const report = yield* verifyFiles(definitions, files, options)
    return unreadable.length === 0
      ? { ...report, summary: { ...report.summary, fixtures: names.length }, evidence: { ...report.evidence, fixture_count: names.length } }
      : ReplayReport.make([...unreadable, ...report.cases], { ...options, fixtureCount: names.length })
  })

const isDurableWorkflow = (u: unknown): u is DurableWorkflow<any> =>
  Predicate.isRecord(u) && u["_tag"] === "DurableWorkflow" && typeof u["name"] === "string" && Predicate.isRecord(u["body"])

/**
 * The definitions a module exports, for the command line: every export (and the `default` export's
 * members) that is a Durable Workflow definition or a nestjs-durable workflow, alone or in an
 * array or an object of them. A definition exported twice counts once.
 *
 * @since 0.3.0
 * @category loading
 */
export const definitionsOf = (moduleExports: unknown): {
  readonly durableWorkflows: ReadonlyArray<DurableWorkflow<any>>
  readonly workflows: ReadonlyArray<Workflow<any, any, any>>
} => {
  const durable = new Set<DurableWorkflow<any>>()
  const workflows = new Set<Workflow<any, any, any>>()
  const visit = (value: unknown, depth: number): void => {
    if (isDurableWorkflow(value)) durable.add(value)
    else if (isWorkflow(value)) workflows.add(value as Workflow<any, any, any>)
    else if (depth < 3 && Array.isArray(value)) value.forEach((v) => visit(v, depth + 1))
    else if (depth < 3 && Predicate.isRecord(value)) Object.values(value).forEach((v) => visit(v, depth + 1))
  }
  visit(moduleExports, 0)
  return { durableWorkflows: [...durable], workflows: [...workflows] }
}
