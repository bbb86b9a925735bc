/**
 * The replay-diff report (`durable-workflow.v2.replay-diff`, schema version 1): what replaying
 * recorded histories against the code about to be deployed came to, case by case and as one verdict a
 * CI gate acts on. The shape and its rules are the ones the Durable Workflow runtimes publish (the
 * Python SDK's `replay_verify`, workflow-php's `ReplayDiff`), so a report from this library reads
 * like theirs; nestjs-durable histories are reported in the same shape.
 *
 * - A case's `status` is `replayed` (the code answered what was expected), `drifted` (it answered
 *   something else: `expectation_mismatch`, or it asked for another operation than history recorded:
 *   `shape_mismatch`, with the `divergence`) or `failed` (the case could not be replayed at all:
 *   `replay_error`, or the history file was unreadable: `bundle_invalid`).
 * - Its `verdict` follows: `replayed` → `ok`, `drifted` → `drifted`, `failed` → `failed`.
 * - A verdict's `promotion_decision`: `ok` → `safe_to_promote`, `warning` → `review_before_promote`,
 *   `drifted` → `block_until_compatible`, `failed` and anything unknown → `block_and_investigate`.
 * - The report's verdict is the strictest of its cases' (`ok` < `warning` < `drifted` < `failed`);
 *   no case at all is `failed` (no evidence is never safe), and so is a required family without a
 *   case. Its `status` is `failed` when a case failed, a required family is missing or there is no
 *   case, else `drifted` when a case drifted, else `replayed`.
 *
 * This module is pure: it builds and checks reports. Replaying is `DurableWorkflow.verify` and
 * `Workflow.verify`; reading a directory of history files is `ReplayVerify`.
 *
 * @since 0.3.0
 */
import * as Schema from "effect/Schema"

/**
 * The report's schema name.
 *
 * @since 0.3.0
 * @category constants
 */
export const schema = "durable-workflow.v2.replay-diff" as const

/**
 * The report's schema version.
 *
 * @since 0.3.0
 * @category constants
 */
export const schemaVersion = 1 as const

/**
 * The schema of the shared golden-history fixtures every Durable Workflow runtime replays.
 *
 * @since 0.3.0
 * @category constants
 */
export const goldenHistoryFixtureSchema = "durable-workflow.golden-history.v1" as const

/**
 * The families the upstream golden-history corpus covers and upstream's `verify_golden_history`
 * requires by default. Pass them as `requiredFamilies` to gate on the same coverage.
 *
 * @since 0.3.0
 * @category constants
 */
export const goldenHistoryFamilies: ReadonlyArray<string> = [
  "activity",
  "saga-compensation",
  "signal-update",
  "version-marker",
  "wait-condition"
]

/**
 * What replaying one case came to.
 *
 * @since 0.3.0
 * @category schemas
 */
export const Status = Schema.Literal("replayed", "drifted", "failed")

/**
 * @since 0.3.0
 * @category models
 */
export type Status = typeof Status.Type

/**
 * The promotion-facing verdict (`warning` comes from gates that report it, e.g. integrity warnings;
 * replaying alone never gives it).
 *
 * @since 0.3.0
 * @category schemas
 */
export const Verdict = Schema.Literal("ok", "warning", "drifted", "failed")

/**
 * @since 0.3.0
 * @category models
 */
export type Verdict = typeof Verdict.Type

/**
 * What a promotion gate should do with a verdict.
 *
 * @since 0.3.0
 * @category schemas
 */
export const PromotionDecision = Schema.Literal(
  "safe_to_promote",
  "review_before_promote",
  "block_until_compatible",
  "block_and_investigate"
)

/**
 * @since 0.3.0
 * @category models
 */
export type PromotionDecision = typeof PromotionDecision.Type

/**
 * Why a case is not plainly `replayed`: `none`, `expectation_mismatch` (replay answered something
 * else than recorded), `shape_mismatch` (the code asked for another operation than history holds),
 * `replay_error` (replay could not run: unregistered workflow, undecodable payload, a defect),
 * `bundle_invalid` (the history file could not be read).
 *
 * @since 0.3.0
 * @category schemas
 */
export const Reason = Schema.Literal("none", "expectation_mismatch", "shape_mismatch", "replay_error", "bundle_invalid")

/**
 * @since 0.3.0
 * @category models
 */
export type Reason = typeof Reason.Type

/**
 * Where the code parted from history: the workflow sequence, what the code asked for there
 * (`expected_shape`), what history recorded (`recorded_event_types`), and the replayer's message.
 *
 * @since 0.3.0
 * @category schemas
 */
export const Divergence = Schema.Struct({
  workflow_sequence: Schema.NullOr(Schema.Number),
  expected_shape: Schema.NullOr(Schema.String),
  recorded_event_types: Schema.Array(Schema.String),
  message: Schema.String
})

/**
 * @since 0.3.0
 * @category models
 */
export type Divergence = typeof Divergence.Type

/**
 * An error in a case: its class (the error's tag or name) and message; extra keys are kept.
 *
 * @since 0.3.0
 * @category schemas
 */
export const CaseError = Schema.Struct(
  { class: Schema.String, message: Schema.String },
  Schema.Record({ key: Schema.String, value: Schema.Unknown })
)

/**
 * @since 0.3.0
 * @category models
 */
export type CaseError = typeof CaseError.Type

/**
 * One case of the report. `expected` is what the history says the code should answer and
 * `observed` what it answered (both `null` when there was nothing to compare); `source` is the
 * fixture's `source` block, or what a captured history says of the worker that recorded it.
 *
 * @since 0.3.0
 * @category schemas
 */
export const CaseReport = Schema.Struct({
  id: Schema.String,
  status: Status,
  verdict: Verdict,
  promotion_decision: PromotionDecision,
  reason: Reason,
  workflow_type: Schema.NullOr(Schema.String),
  family: Schema.NullOr(Schema.String),
  source: Schema.NullOr(Schema.Record({ key: Schema.String, value: Schema.Unknown })),
  divergence: Schema.NullOr(Divergence),
  expected: Schema.NullOr(Schema.Unknown),
  observed: Schema.NullOr(Schema.Unknown),
  error: Schema.NullOr(CaseError)
})

/**
 * @since 0.3.0
 * @category models
 */
export type CaseReport = typeof CaseReport.Type

/**
 * What the verdict rests on: how many fixture files and cases were read, the families required,
 * those a case covered and those missing.
 *
 * @since 0.3.0
 * @category schemas
 */
export const Evidence = Schema.Struct({
  fixture_count: Schema.Int,
  case_count: Schema.Int,
  required_families: Schema.Array(Schema.String),
  covered_families: Schema.Array(Schema.String),
  missing_families: Schema.Array(Schema.String)
})

/**
 * @since 0.3.0
 * @category models
 */
export type Evidence = typeof Evidence.Type

/**
 * Counts: fixture files, cases, and cases per status.
 *
 * @since 0.3.0
 * @category schemas
 */
export const Summary = Schema.Struct({
  fixtures: Schema.Int,
  cases: Schema.Int,
  replayed: Schema.Int,
  drifted: Schema.Int,
  failed: Schema.Int
})

/**
 * @since 0.3.0
 * @category models
 */
export type Summary = typeof Summary.Type

/**
 * The report. `missing_families` repeats `evidence.missing_families` at the top level, where the
 * Python runtime puts it.
 *
 * @since 0.3.0
 * @category schemas
 */
export const ReplayDiffReport = Schema.Struct({
  schema: Schema.Literal(schema),
  schema_version: Schema.Literal(schemaVersion),
  status: Status,
  verdict: Verdict,
  promotion_decision: PromotionDecision,
  fixture_schema: Schema.String,
  evidence: Evidence,
  summary: Summary,
  missing_families: Schema.Array(Schema.String),
  cases: Schema.Array(CaseReport)
})

/**
 * @since 0.3.0
 * @category models
 */
export type ReplayDiffReport = typeof ReplayDiffReport.Type

const decisions: Record<string, PromotionDecision> = {
  ok: "safe_to_promote",
  warning: "review_before_promote",
  drifted: "block_until_compatible",
  failed: "block_and_investigate"
}

/**
 * The promotion decision for a verdict; an unknown verdict is `block_and_investigate`, so a
 * mistyped or future verdict never lets a build through.
 *
 * @since 0.3.0
 * @category rules
 */
export const promotionDecisionFor = (verdict: string): PromotionDecision =>
  Object.hasOwn(decisions, verdict) ? decisions[verdict]! : "block_and_investigate"

const rank: Record<string, number> = { ok: 0, warning: 1, drifted: 2, failed: 3 }

/**
 * The strictest of several verdicts (`ok` < `warning` < `drifted` < `failed`, an unknown one counting
 * as `failed`); none at all is `failed`.
 *
 * @since 0.3.0
 * @category rules
 */
export const aggregateVerdicts = (verdicts: Iterable<string>): Verdict => {
  let worst: Verdict | undefined
  for (const verdict of verdicts) {
    const known: Verdict = Object.hasOwn(rank, verdict) ? verdict as Verdict : "failed"
    if (worst === undefined || rank[known]! > rank[worst]!) worst = known
  }
  return worst ?? "failed"
}

/**
 * A case's verdict from its status: `replayed` → `ok`, `drifted` → `drifted`, `failed` → `failed`.
 *
 * @since 0.3.0
 * @category rules
 */
export const verdictOfStatus = (status: Status): Verdict =>
  status === "replayed" ? "ok" : status === "drifted" ? "drifted" : "failed"

/**
 * What a case is made of; {@link makeCase} derives its verdict and promotion decision.
 *
 * @since 0.3.0
 * @category models
 */
export interface CaseInput {
  readonly id: string
  readonly status: Status
  readonly reason: Reason
  readonly workflowType?: string | null | undefined
  readonly family?: string | null | undefined
  readonly source?: Readonly<Record<string, unknown>> | null | undefined
  readonly divergence?: Divergence | null | undefined
  readonly expected?: unknown
  readonly observed?: unknown
  readonly error?: CaseError | null | undefined
}

/**
 * A case report, its verdict and promotion decision derived from its status.
 *
 * @since 0.3.0
 * @category constructors
 */
export const makeCase = (input: CaseInput): CaseReport => {
  const verdict = verdictOfStatus(input.status)
  return {
    id: input.id,
    status: input.status,
    verdict,
    promotion_decision: promotionDecisionFor(verdict),
    reason: input.reason,
    workflow_type: input.workflowType ?? null,
    family: input.family ?? null,
    source: input.source ?? null,
    divergence: input.divergence ?? null,
    expected: input.expected === undefined ? null : input.expected,
    observed: input.observed === undefined ? null : input.observed,
    error: input.error ?? null
  }
}

/**
 * A `failed` / `bundle_invalid` case for a history file that could not be used (upstream's ids:
 * `<unparseable:file>`, `<schema-drift:file>`, `<source-missing:file>`, `<no-fixtures>`).
 *
 * @since 0.3.0
 * @category constructors
 */
export const invalidBundle = (id: string, error: CaseError): CaseReport =>
  makeCase({ id, status: "failed", reason: "bundle_invalid", error })

/**
 * Options of {@link make}.
 *
 * @since 0.3.0
 * @category models
 */
export interface ReportOptions {
  /** Families that must each have a case; a missing one fails the report. Default none. */
  readonly requiredFamilies?: Iterable<string> | undefined
  /** How many fixture files the cases came from (default 0: cases given directly). */
  readonly fixtureCount?: number | undefined
}

/**
 * Aggregates cases into the report (see the module's rules).
 *
 * @since 0.3.0
 * @category constructors
 */
export const make = (cases: ReadonlyArray<CaseReport>, options: ReportOptions = {}): ReplayDiffReport => {
  const required = [...new Set(options.requiredFamilies ?? [])].sort()
  const covered = [...new Set(cases.flatMap((c) => (c.family === null ? [] : [c.family])))].sort()
  const missing = required.filter((family) => !covered.includes(family))
  const count = (status: Status) => cases.filter((c) => c.status === status).length
  const summary: Summary = {
    fixtures: options.fixtureCount ?? 0,
    cases: cases.length,
    replayed: count("replayed"),
    drifted: count("drifted"),
    failed: count("failed")
  }
  const verdict = aggregateVerdicts([...cases.map((c) => c.verdict), ...(missing.length > 0 ? ["failed"] : [])])
  const status: Status = summary.failed > 0 || missing.length > 0 || cases.length === 0
    ? "failed"
    : summary.drifted > 0
    ? "drifted"
    : "replayed"
  return {
    schema,
    schema_version: schemaVersion,
    status,
    verdict,
    promotion_decision: promotionDecisionFor(verdict),
    fixture_schema: goldenHistoryFixtureSchema,
    evidence: {
      fixture_count: summary.fixtures,
      case_count: cases.length,
      required_families: required,
      covered_families: covered,
      missing_families: missing
    },
    summary,
    missing_families: missing,
    cases
  }
}

/**
 * Combines reports (e.g. the Durable Workflow and the nestjs-durable halves of one corpus) into
 * one, re-aggregated over all their cases and the union of their required families.
 *
 * @since 0.3.0
 * @category constructors
 */
export const merge = (reports: ReadonlyArray<ReplayDiffReport>): ReplayDiffReport =>
  make(reports.flatMap((r) => r.cases), {
    requiredFamilies: reports.flatMap((r) => r.evidence.required_families),
    fixtureCount: reports.reduce((n, r) => n + r.summary.fixtures, 0)
  })

/**
 * The exit code a CI step should end with: 1 when the report is `drifted` or `failed`, else 0.
 *
 * @since 0.3.0
 * @category rules
 */
export const exitCode = (report: ReplayDiffReport): 0 | 1 => (report.status === "replayed" ? 0 : 1)

/**
 * Decodes a report (one from this library or another runtime's), e.g. to gate on it in a script.
 *
 * @since 0.3.0
 * @category decoding
 */
export const decode = Schema.decodeUnknownEither(ReplayDiffReport)
