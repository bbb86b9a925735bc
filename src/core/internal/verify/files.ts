import * as Schema from "effect/Schema"

/** @internal */
export const nestDurableHistorySchema = "effect-durable-worker.nestjs-durable-history.v1" as const

/** @internal */
export const durableWorkflowHistorySchema = "effect-durable-worker.durable-workflow-history.v1" as const

const Source = Schema.Record({ key: Schema.String, value: Schema.Unknown })

/**
 * A recorded nestjs-durable workflow turn (schema `effect-durable-worker.nestjs-durable-history.v1`):
 * the `task` exactly as the engine delivered it (the JSON payload of the turn, history included) and
 * the `decision` the worker answered it with (the JSON it sent; absent: only replayability is
 * checked). `workflow` and `run_id` repeat the task's, for people and tools reading the file.
 *
 * @internal
 */
export const NestDurableHistory = Schema.Struct({
  schema: Schema.Literal(nestDurableHistorySchema),
  workflow: Schema.String,
  run_id: Schema.String,
  captured_at: Schema.optional(Schema.String),
  family: Schema.optional(Schema.NullOr(Schema.String)),
  source: Schema.optional(Source),
  task: Schema.Unknown,
  decision: Schema.optional(Schema.Unknown)
})

/** @internal */
export type NestDurableHistory = typeof NestDurableHistory.Type

/**
 * A recorded Durable Workflow workflow task (schema
 * `effect-durable-worker.durable-workflow-history.v1`): the task's ids, its root `payload_codec`, the
 * start input as the task carried it (`arguments`, encoded), every history event the worker replayed
 * (`history_events`, all pages, payloads encoded) and the `commands` it answered (as sent). An
 * accepted-update task carries its `workflow_update_id` and the one command it answered.
 *
 * @internal
 */
export const DurableWorkflowHistory = Schema.Struct({
  schema: Schema.Literal(durableWorkflowHistorySchema),
  workflow_type: Schema.String,
  workflow_id: Schema.optional(Schema.String),
  run_id: Schema.optional(Schema.String),
  workflow_update_id: Schema.optional(Schema.String),
  task_queue: Schema.optional(Schema.String),
  payload_codec: Schema.optional(Schema.NullOr(Schema.String)),
  captured_at: Schema.optional(Schema.String),
  family: Schema.optional(Schema.NullOr(Schema.String)),
  source: Schema.optional(Source),
  arguments: Schema.optional(Schema.Unknown),
  history_events: Schema.Array(Schema.Unknown),
  commands: Schema.optional(Schema.Array(Schema.Record({ key: Schema.String, value: Schema.Unknown })))
})

/** @internal */
export type DurableWorkflowHistory = typeof DurableWorkflowHistory.Type

/**
 * One case of a golden-history fixture.
 *
 * @internal
 */
export const GoldenHistoryCase = Schema.Struct({
  name: Schema.optional(Schema.String),
  family: Schema.optional(Schema.NullOr(Schema.String)),
  workflow_type: Schema.optional(Schema.NullOr(Schema.String)),
  start_input: Schema.optional(Schema.NullOr(Schema.Array(Schema.Unknown))),
  history: Schema.Unknown,
  expected: Schema.optional(Schema.NullOr(Schema.Struct(
    { command_type: Schema.String },
    Schema.Record({ key: Schema.String, value: Schema.Unknown })
  )))
})

/**
 * A `durable-workflow.golden-history.v1` fixture: the runtime that recorded it (`source`, with
 * `runtime`, `version` and, for newer fixtures, the `payload_codec`) and its cases.
 *
 * @internal
 */
export const GoldenHistoryFixture = Schema.Struct({
  fixture_schema: Schema.Literal("durable-workflow.golden-history.v1"),
  source: Schema.Struct(
    { runtime: Schema.NonEmptyString, version: Schema.NonEmptyString },
    Schema.Record({ key: Schema.String, value: Schema.Unknown })
  ),
  cases: Schema.Array(Schema.Unknown)
})
