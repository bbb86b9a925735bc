/**
 * What a schema found wrong with a value, on one line: each problem as its path and what is wrong
 * there (`runId: is missing; input.items[2]: Expected number, actual "x"`). It goes into log lines
 * and into the failed results the orchestrator shows, where the tree of the whole schema's type
 * would bury the one field that matters.
 *
 * @internal
 */
import * as ParseResult from "effect/ParseResult"

const pathOf = (path: ReadonlyArray<PropertyKey>): string =>
  path.reduce<string>(
    (text, key) => typeof key === "number" ? `${text}[${key}]` : text === "" ? String(key) : `${text}.${String(key)}`,
    ""
  )

/** The longest account of one problem: a value sent whole (a large payload) would fill the log line and the stored result. */
const MAX_LENGTH = 200

/** A struct's whole type, where the value is not an object at all, is "an object". */
const messageOf = (message: string): string => {
  const text = message.replace(/\s*\n\s*/g, " ").replace(/^Expected \{.*?\}, actual /, "Expected an object, actual ")
  return text.length > MAX_LENGTH ? `${text.slice(0, MAX_LENGTH - 1)}…` : text
}

/** @internal */
export const describeIssues = (error: ParseResult.ParseError): string =>
  ParseResult.ArrayFormatter.formatErrorSync(error)
    .map((issue) => `${issue.path.length === 0 ? "the value" : pathOf(issue.path)}: ${messageOf(issue.message)}`)
    .join("; ")
