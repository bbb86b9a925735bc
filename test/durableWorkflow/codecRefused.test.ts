/**
 * Durable Workflow values the codec refuses: a workflow output, continue-as-new arguments, a query
 * or update result with no Avro form fails at once, non-retryably, as `unserializable_output`
 * naming the path to the bad value (activity results: activity.test.ts).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as DurableWorkflow from "../../src/core/DurableWorkflow.js"
import { QUEUE, setup, startWorker, until } from "./support.js"

type Styles = Readonly<Record<"Effect" | "generator" | "async", DurableWorkflow.DurableWorkflow>>

const returning = (name: string, output: () => unknown): Styles => ({
  Effect: DurableWorkflow.make(name, () => Effect.sync(output)),
  generator: DurableWorkflow.fromGenerator(name, function*() {
    return output()
  }),
  async: DurableWorkflow.fromAsync(name, async () => output())
})

const onlyCommand = (wf: DurableWorkflow.DurableWorkflow) =>
  Effect.map(DurableWorkflow.replay(wf, [], { input: [] }), (outcome) => {
    assert.lengthOf(outcome.commands, 1, JSON.stringify(outcome.commands))
    return outcome.commands[0] as Record<string, unknown>
  })

const assertRefused = (command: Record<string, unknown>, message: RegExp) => {
  assert.strictEqual(command["type"], "fail_workflow")
  assert.strictEqual(command["exception_type"], "unserializable_output")
  assert.strictEqual(command["exception_class"], "effect-durable-worker.unserializable_output")
  assert.strictEqual(command["non_retryable"], true)
  assert.match(String(command["message"]), message)
}

describe("workflow outputs the codec refuses", () => {
  for (const [style, wf] of Object.entries(returning("refused.date", () => ({ items: [1, { "odd key": new Date(0) }] })))) {
    it.effect(`fail the workflow non-retryably, naming the path (${style})`, () =>
      Effect.gen(function*() {
        assertRefused(
          yield* onlyCommand(wf),
          /^the output of workflow "refused\.date" cannot be encoded by the Durable Workflow codec: .* at \$\.items\[1\]\["odd key"\] \(unsupported_value_type\)$/
        )
      }))
  }

  it.effect("every kind of refused value, each named by its path", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<readonly [unknown, RegExp]> = [
        [{ n: Number.NaN }, /at \$\.n \(non_finite_float\)$/],
        [[2n ** 64n], /at \$\[0\] \(integer_overflow\)$/],
        [{ f: () => 1 }, /at \$\.f \(unsupported_value_type\)$/],
        [[undefined], /at \$\[0\] \(unsupported_value_type\)$/],
        [Symbol("s"), /at \$ \(unsupported_value_type\)$/]
      ]
      for (const [output, message] of cases) {
        assertRefused(yield* onlyCommand(DurableWorkflow.make("refused.kinds", () => Effect.succeed(output))), message)
      }
      // a cycle names where it starts, not the whole path down to the depth limit
      const cyclic: Record<string, unknown> = {}
      cyclic["self"] = cyclic
      const command = yield* onlyCommand(DurableWorkflow.make("refused.cycle", () => Effect.succeed(cyclic)))
      assertRefused(command, /nests deeper than 1000 levels \(is it cyclic\?\) at \$(\.self){16}… \(unsupported_value_type\)$/)
    }))

  it.effect("continue-as-new arguments the codec refuses fail the workflow the same way", () =>
    Effect.gen(function*() {
      const wf = DurableWorkflow.make("refused.continue", (ctx) => Effect.succeed(ctx.continueAsNew([{ at: new Map([[1, 2]]) }])))
      assertRefused(yield* onlyCommand(wf), /^the continue-as-new arguments of workflow "refused\.continue" .* at \$\[0\]\.at \(invalid_map_key\)$/)
    }))

  it.scoped("a live workflow task answers it with the fail_workflow command, not a task failure", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      yield* startWorker(server, { durableWorkflows: [returning("refused.live", () => ({ when: new Date(0) })).Effect] })
      server.enqueueWorkflowTask({ workflowType: "refused.live", taskQueue: QUEUE, input: [] })
      yield* until(server, () => server.completedWorkflowTasks.length + server.failedWorkflowTasks.length === 1)
      assert.lengthOf(server.failedWorkflowTasks, 0)
      const [command] = server.completedWorkflowTasks[0]!.commands
      assertRefused(command!, /at \$\.when \(unsupported_value_type\)$/)
    }))
})

const stateful = DurableWorkflow.make("refused.state", (ctx) =>
  Effect.gen(function*() {
    ctx.onQuery("when", () => ({ at: new Date(0) }))
    ctx.onQuery("fine", () => ({ at: 0 }))
    ctx.onUpdate("bump", () => ({ big: [1n, 2n ** 63n] }))
    yield* ctx.waitCondition(() => false)
  }), { updates: { bump: [] } })

describe("query and update results the codec refuses", () => {
  it.effect("an update result fails the update non-retryably, naming the path", () =>
    Effect.gen(function*() {
      const { command } = yield* DurableWorkflow.replayUpdate(stateful, [], { name: "bump" }, { input: [] })
      assert.strictEqual(command["type"], "fail_update")
      assert.strictEqual(command["exception_type"], "unserializable_output")
      assert.strictEqual(command["non_retryable"], true)
      assert.match(String(command["message"]), /^the result of update "bump" cannot be encoded .* at \$\.big\[1\] \(integer_overflow\)$/)
    }))

  it.effect("an offline query result fails the query as query_result_encode_failed", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual(yield* DurableWorkflow.replayQuery(stateful, [], "fine", { input: [] }), { at: 0 })
      const error = yield* Effect.flip(DurableWorkflow.replayQuery(stateful, [], "when", { input: [] }))
      assert.strictEqual(error._tag, "QueryFailed")
      assert.strictEqual((error as DurableWorkflow.QueryFailed).reason, "query_result_encode_failed")
      assert.match(error.message, /^the result of query "when" cannot be encoded .* at \$\.at \(unsupported_value_type\)$/)
    }))

  it.scoped("a live query task fails with the path named", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      yield* startWorker(server, { durableWorkflows: [stateful] })
      server.enqueueQueryTask({ workflowType: "refused.state", queryName: "when", taskQueue: QUEUE })
      yield* until(server, () => server.failedQueryTasks.length === 1)
      const failure = server.failedQueryTasks[0]!.body["failure"] as Record<string, unknown>
      assert.strictEqual(failure["reason"], "query_result_encode_failed")
      assert.strictEqual(failure["type"], "unserializable_output")
      assert.match(String(failure["message"]), /at \$\.at \(unsupported_value_type\)$/)
    }))

  it.scoped("a live accepted-update task answers fail_update, not a task failure", () =>
    Effect.gen(function*() {
      const { server } = yield* setup()
      yield* startWorker(server, { durableWorkflows: [stateful] })
      server.enqueueWorkflowTask({
        workflowType: "refused.state",
        taskQueue: QUEUE,
        input: [],
        updateId: "u-1",
        historyEvents: [{ event_type: "UpdateAccepted", payload: { update_id: "u-1", update_name: "bump", arguments: null } }]
      })
      yield* until(server, () => server.completedWorkflowTasks.length + server.failedWorkflowTasks.length === 1)
      assert.lengthOf(server.failedWorkflowTasks, 0)
      const commands = server.completedWorkflowTasks[0]!.commands
      assert.deepStrictEqual(commands.map((c) => [c["type"], c["exception_type"], c["non_retryable"]]), [["fail_update", "unserializable_output", true]])
      assert.notProperty(commands[0]!, "result")
    }))
})
