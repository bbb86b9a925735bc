import { assert, describe, it } from "@effect/vitest"
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import { describeIssues } from "../../src/wire/internal/issues.js"

const issuesOf = <A, I>(schema: Schema.Schema<A, I>, value: unknown): string => {
  const decoded = Schema.decodeUnknownEither(schema, { errors: "all" })(value)
  if (Either.isRight(decoded)) throw new Error("expected a failure")
  return describeIssues(decoded.left)
}

describe("describeIssues", () => {
  const Task = Schema.Struct({ runId: Schema.String, items: Schema.Array(Schema.Number), meta: Schema.Struct({ n: Schema.Number }) })

  it("names each problem by its path, nested arrays and structs included", () => {
    assert.strictEqual(
      issuesOf(Task, { items: [1, "x"], meta: { n: "2" } }),
      "runId: is missing; items[1]: Expected number, actual \"x\"; meta.n: Expected number, actual \"2\""
    )
  })

  it("a value that is not an object at all is 'an object', whatever the struct", () => {
    assert.strictEqual(issuesOf(Task, 42), "the value: Expected an object, actual 42")
  })

  it("a large value is cut, so it fills neither the log line nor the stored result", () => {
    const issues = issuesOf(Task, "y".repeat(100_000))
    assert.isAtMost(issues.length, 220)
    assert.isTrue(issues.startsWith("the value: Expected an object, actual \"yyy"), issues)
    assert.isTrue(issues.endsWith("…"), issues)
  })
})
