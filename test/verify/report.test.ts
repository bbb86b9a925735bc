import { assert, describe, it } from "@effect/vitest"
import * as Either from "effect/Either"
import * as ReplayReport from "../../src/core/ReplayReport.js"

const caseOf = (id: string, status: ReplayReport.Status, family?: string) =>
  ReplayReport.makeCase({ id, status, reason: status === "replayed" ? "none" : status === "drifted" ? "expectation_mismatch" : "replay_error", family })

describe("rule 6: verdict → promotion decision", () => {
  it("maps each verdict to its decision", () => {
    assert.strictEqual(ReplayReport.promotionDecisionFor("ok"), "safe_to_promote")
    assert.strictEqual(ReplayReport.promotionDecisionFor("warning"), "review_before_promote")
    assert.strictEqual(ReplayReport.promotionDecisionFor("drifted"), "block_until_compatible")
    assert.strictEqual(ReplayReport.promotionDecisionFor("failed"), "block_and_investigate")
  })

  it("an unknown verdict blocks and investigates", () => {
    for (const verdict of ["", "OK", "passed", "toString", "__proto__"]) {
      assert.strictEqual(ReplayReport.promotionDecisionFor(verdict), "block_and_investigate", verdict)
    }
  })
})

describe("rule 6: status → verdict", () => {
  it("replayed is ok, drifted is drifted, failed is failed", () => {
    assert.strictEqual(ReplayReport.verdictOfStatus("replayed"), "ok")
    assert.strictEqual(ReplayReport.verdictOfStatus("drifted"), "drifted")
    assert.strictEqual(ReplayReport.verdictOfStatus("failed"), "failed")
  })

  it("a case carries the verdict and promotion decision of its status", () => {
    const drifted = caseOf("a", "drifted")
    assert.strictEqual(drifted.verdict, "drifted")
    assert.strictEqual(drifted.promotion_decision, "block_until_compatible")
    const ok = caseOf("b", "replayed")
    assert.strictEqual(ok.verdict, "ok")
    assert.strictEqual(ok.promotion_decision, "safe_to_promote")
    const failed = caseOf("c", "failed")
    assert.strictEqual(failed.verdict, "failed")
    assert.strictEqual(failed.promotion_decision, "block_and_investigate")
  })
})

describe("rule 6: aggregation", () => {
  it("several verdicts aggregate to the strictest, in any order", () => {
    assert.strictEqual(ReplayReport.aggregateVerdicts(["ok", "ok"]), "ok")
    assert.strictEqual(ReplayReport.aggregateVerdicts(["ok", "warning", "ok"]), "warning")
    assert.strictEqual(ReplayReport.aggregateVerdicts(["warning", "drifted", "ok"]), "drifted")
    assert.strictEqual(ReplayReport.aggregateVerdicts(["drifted", "failed", "warning"]), "failed")
    assert.strictEqual(ReplayReport.aggregateVerdicts(["failed", "ok"]), "failed")
    assert.strictEqual(ReplayReport.aggregateVerdicts(["drifted", "ok"]), "drifted")
  })

  it("no evidence at all is failed", () => {
    assert.strictEqual(ReplayReport.aggregateVerdicts([]), "failed")
  })

  it("an unknown verdict counts as failed", () => {
    assert.strictEqual(ReplayReport.aggregateVerdicts(["ok", "mystery"]), "failed")
  })

  it("a report of replayed cases is replayed / ok / safe_to_promote and exits 0", () => {
    const report = ReplayReport.make([caseOf("a", "replayed", "activity"), caseOf("b", "replayed")])
    assert.strictEqual(report.status, "replayed")
    assert.strictEqual(report.verdict, "ok")
    assert.strictEqual(report.promotion_decision, "safe_to_promote")
    assert.strictEqual(ReplayReport.exitCode(report), 0)
  })

  it("one drifted case makes the report drifted / block_until_compatible, exit 1", () => {
    const report = ReplayReport.make([caseOf("a", "replayed"), caseOf("b", "drifted"), caseOf("c", "replayed")])
    assert.strictEqual(report.status, "drifted")
    assert.strictEqual(report.verdict, "drifted")
    assert.strictEqual(report.promotion_decision, "block_until_compatible")
    assert.strictEqual(ReplayReport.exitCode(report), 1)
  })

  it("one failed case makes the report failed even beside drifted ones, exit 1", () => {
    const report = ReplayReport.make([caseOf("a", "drifted"), caseOf("b", "failed"), caseOf("c", "replayed")])
    assert.strictEqual(report.status, "failed")
    assert.strictEqual(report.verdict, "failed")
    assert.strictEqual(report.promotion_decision, "block_and_investigate")
    assert.strictEqual(ReplayReport.exitCode(report), 1)
  })

  it("a report without cases is failed", () => {
    const report = ReplayReport.make([])
    assert.strictEqual(report.status, "failed")
    assert.strictEqual(report.verdict, "failed")
    assert.strictEqual(report.promotion_decision, "block_and_investigate")
    assert.strictEqual(ReplayReport.exitCode(report), 1)
  })

  it("a required family without a case fails the report and is listed as missing", () => {
    const cases = [caseOf("a", "replayed", "activity"), caseOf("b", "replayed", "signal-update")]
    const report = ReplayReport.make(cases, { requiredFamilies: ["signal-update", "activity", "wait-condition"] })
    assert.strictEqual(report.status, "failed")
    assert.strictEqual(report.verdict, "failed")
    assert.deepStrictEqual(report.missing_families, ["wait-condition"])
    assert.deepStrictEqual(report.evidence, {
      fixture_count: 0,
      case_count: 2,
      required_families: ["activity", "signal-update", "wait-condition"],
      covered_families: ["activity", "signal-update"],
      missing_families: ["wait-condition"]
    })
    const covered = ReplayReport.make(cases, { requiredFamilies: ["activity", "signal-update"] })
    assert.strictEqual(covered.status, "replayed")
    assert.deepStrictEqual(covered.missing_families, [])
  })

  it("summary counts fixtures, cases and cases per status", () => {
    const report = ReplayReport.make(
      [caseOf("a", "replayed"), caseOf("b", "drifted"), caseOf("c", "drifted"), caseOf("d", "failed")],
      { fixtureCount: 3 }
    )
    assert.deepStrictEqual(report.summary, { fixtures: 3, cases: 4, replayed: 1, drifted: 2, failed: 1 })
  })

  it("merging reports re-aggregates their cases and required families", () => {
    const a = ReplayReport.make([caseOf("a", "replayed", "activity")], { requiredFamilies: ["activity"], fixtureCount: 1 })
    const b = ReplayReport.make([caseOf("b", "drifted")], { fixtureCount: 2 })
    const merged = ReplayReport.merge([a, b])
    assert.strictEqual(merged.status, "drifted")
    assert.strictEqual(merged.summary.fixtures, 3)
    assert.deepStrictEqual(merged.evidence.required_families, ["activity"])
    assert.deepStrictEqual(merged.cases.map((c) => c.id), ["a", "b"])
  })
})

describe("the report schema", () => {
  it("names durable-workflow.v2.replay-diff version 1 and decodes what make builds", () => {
    const report = ReplayReport.make([
      caseOf("a", "replayed", "activity"),
      ReplayReport.invalidBundle("<unparseable:x.json>", { class: "SyntaxError", message: "bad" })
    ])
    assert.strictEqual(report.schema, "durable-workflow.v2.replay-diff")
    assert.strictEqual(report.schema_version, 1)
    assert.strictEqual(report.fixture_schema, "durable-workflow.golden-history.v1")
    const decoded = ReplayReport.decode(JSON.parse(JSON.stringify(report)))
    assert.isTrue(Either.isRight(decoded))
    assert.deepStrictEqual(Either.getOrThrow(decoded), report)
    assert.deepStrictEqual(Object.keys(report.cases[0]!).sort(), [
      "divergence",
      "error",
      "expected",
      "family",
      "id",
      "observed",
      "promotion_decision",
      "reason",
      "source",
      "status",
      "verdict",
      "workflow_type"
    ])
  })

  it("refuses another schema, another version and an unknown status", () => {
    const report = JSON.parse(JSON.stringify(ReplayReport.make([caseOf("a", "replayed")])))
    assert.isTrue(Either.isLeft(ReplayReport.decode({ ...report, schema: "durable-workflow.v2.replay-simulation.report" })))
    assert.isTrue(Either.isLeft(ReplayReport.decode({ ...report, schema_version: 2 })))
    assert.isTrue(Either.isLeft(ReplayReport.decode({ ...report, status: "passed" })))
  })

  it("an invalid bundle is failed / bundle_invalid", () => {
    const c = ReplayReport.invalidBundle("<no-fixtures>", { class: "FileNotFoundError", message: "none" })
    assert.strictEqual(c.status, "failed")
    assert.strictEqual(c.reason, "bundle_invalid")
    assert.strictEqual(c.verdict, "failed")
  })
})
