/**
 * Row mapping between the engine's DB transport tables and the step wire: a claimed task row becomes
 * the `RemoteTask` payload the engine's own worker rebuilds, a `StepResult` becomes the result row
 * the engine reads back.
 *
 * @since 0.1.0
 * @internal
 */
import { messageOf } from "../../../core/internal/errors.js"
import { resultTooLarge, type StepResult } from "../../../wire/StepProtocol.js"
import type { ResultRow } from "./statements.js"

/** A claimed task row as a driver returns it (PostgreSQL bigints come back as strings). */
export interface TaskRow {
  readonly step_id: string
  readonly run_id: string
  readonly seq: number | string
  readonly name: string
  readonly grp: string
  readonly input: string | null
  readonly attempt: number | string
  readonly created_at: number | string
}

/** The step task a row carries, or why it cannot be read. */
export type RowPayload =
  | { readonly _tag: "Task"; readonly payload: Record<string, unknown> }
  | {
    readonly _tag: "Unreadable"
    readonly identity: { readonly runId: string; readonly seq: number; readonly stepId: string }
    readonly detail: string
  }

/**
 * Rebuilds the task the way the engine's DB worker does: `{runId, seq, stepId, name, group, input,
 * attempt}`, `input` parsed from its JSON text (absent when the column is NULL). `traceparent`,
 * `context`, `priority` and `transport` are not stored by the engine, so they are absent.
 */
export const toPayload = (row: TaskRow): RowPayload => {
  const base = {
    runId: row.run_id,
    seq: Number(row.seq),
    stepId: row.step_id,
    name: row.name,
    group: row.grp
  }
  let input: unknown
  if (row.input !== null && row.input !== undefined) {
    try {
      input = JSON.parse(row.input)
    } catch (error) {
      return {
        _tag: "Unreadable",
        identity: { runId: base.runId, seq: base.seq, stepId: base.stepId },
        detail: `the input column of task ${row.step_id} is not JSON (${messageOf(error)})`
      }
    }
  }
  return {
    _tag: "Task",
    payload: input === undefined
      ? { ...base, attempt: Number(row.attempt) }
      : { ...base, input, attempt: Number(row.attempt) }
  }
}

/**
 * The result row for a step result: `output` / `error` as JSON text or NULL, `started_at` the pickup
 * time. `events` have no column in the engine's table and are not stored (its own worker drops them
 * too).
 */
export const toResultRow = (result: StepResult, createdAt: number): ResultRow => ({
  stepId: result.stepId,
  runId: result.runId,
  seq: result.seq,
  status: result.status,
  output: result.output === undefined ? null : JSON.stringify(result.output),
  error: result.error === undefined ? null : JSON.stringify(result.error),
  startedAt: result.startedAt ?? null,
  createdAt
})

/**
 * The most bytes a result row can take in a MySQL statement: its text columns in UTF-8 with every
 * character the text protocol escapes (`\0 \b \t \n \r \x1a " ' \\`) counted twice, the step id
 * three times (the batch's guarded delete names it twice), and room for its numbers and the
 * placeholders' text. A statement bigger than the server's `max_allowed_packet` is refused and the
 * connection dropped, so a row is measured before it is sent.
 */
export const mysqlWrittenSize = (row: ResultRow): number =>
  3 * quotedSize(row.stepId) + quotedSize(row.runId) + quotedSize(row.status) + quotedSize(row.output) +
  quotedSize(row.error) + ROW_OVERHEAD

/** The numbers of a result row (as decimal text) and its share of the statement's text, at most. */
const ROW_OVERHEAD = 256

/** A string value as an escaped, quoted literal, at most (NULL for null). */
const quotedSize = (value: string | null): number => {
  if (value === null) return 4
  let escaped = 0
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i)
    if (c === 0 || c === 8 || c === 9 || c === 10 || c === 13 || c === 26 || c === 34 || c === 39 || c === 92) escaped++
  }
  return Buffer.byteLength(value) + escaped + 2
}

/**
 * The result row that answers a step whose own row is too large for the database: the step fails,
 * not retryable (the same output would be refused again), with `message`; `output` is dropped.
 */
export const tooLargeResultRow = (row: ResultRow, message: string): ResultRow => ({
  ...row,
  status: "failed",
  output: null,
  error: JSON.stringify(resultTooLarge(message))
})

/** Sorts claimed rows oldest first (PostgreSQL's `RETURNING` keeps no order). */
export const byCreatedAt = (a: TaskRow, b: TaskRow): number => Number(a.created_at) - Number(b.created_at)
