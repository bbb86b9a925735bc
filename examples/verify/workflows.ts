/**
 * The workflows module `effect-durable-worker verify` loads: export every definition the worker
 * runs (by name, in an array or object, or as the default export). Durable Workflow definitions and
 * nestjs-durable workflows may sit side by side; each history file is replayed against its kind.
 *
 *   npx tsx --conditions=source src/cli/bin.ts verify --workflows ./examples/verify/workflows.ts ./examples/verify/histories
 *
 * (from a built package: `npx effect-durable-worker verify --workflows ./dist/workflows.js ./histories`).
 */
import { Effect } from "effect"
import { DurableWorkflow, Workflow } from "effect-durable-worker"

/** A Durable Workflow workflow: greets through an activity. */
export const greet = DurableWorkflow.make("orders.greet", (ctx, name: string) =>
  Effect.map(ctx.activity<string>("greeting.compose", [name]), (greeting) => `${greeting}!`))

/** A nestjs-durable coordinator workflow: fetch, wait a minute, store. */
export const order = Workflow.make("order", (id: string, ctx) =>
  Effect.gen(function*() {
    const item = yield* ctx.step<string>("fetch", { id })
    yield* ctx.sleep("1 minute")
    return yield* ctx.step<number>("store", { item })
  }))
