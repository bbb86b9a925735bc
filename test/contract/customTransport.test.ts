/**
 * A transport written from the public contract alone, as a third party would: an Effect `Queue`
 * as the broker, built with `Transport.Delivery.make`, `Transport.Poller.make` and
 * `Transport.Registration.make`, speaking `NestDurableProtocol`. It serves one nestjs-durable step
 * task and the turns of one coordinator workflow, and what comes back through each delivery's
 * `complete` is the step result and the workflow decisions the engine would read.
 *
 * Only the package's public entry point is imported.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Ref from "effect/Ref"
import { NestDurableProtocol, Protocol, Step, Transport, Worker, Workflow } from "../../src/index.js"

/** One thing the broker saw, in order. */
type Seen =
  | { readonly op: "register"; readonly steps: ReadonlyArray<string>; readonly workflows: ReadonlyArray<string> }
  | { readonly op: "deliver" | "complete"; readonly id: string }
  | { readonly op: "deregister" }

/** An answer that came back through a delivery's `complete`. */
interface Answer {
  readonly id: string
  readonly reply: NestDurableProtocol.NestReply
}

/** The test's transport: a queue of task payloads in, a queue of answers out. */
const queueTransport = Effect.gen(function*() {
  const tasks = yield* Queue.unbounded<{ readonly id: string; readonly payload: unknown }>()
  const answers = yield* Queue.unbounded<Answer>()
  const seen = yield* Ref.make<ReadonlyArray<Seen>>([])
  const note = (entry: Seen) => Ref.update(seen, (all) => [...all, entry])
  const protocol = NestDurableProtocol.make()
  let next = 0

  const delivery = (task: { readonly id: string; readonly payload: unknown }) =>
    Transport.Delivery.make<NestDurableProtocol.NestReply>({
      id: task.id,
      payload: task.payload,
      protocol,
      complete: (reply) => Effect.zipRight(note({ op: "complete", id: task.id }), Queue.offer(answers, { id: task.id, reply }))
    })

  const register = (worker: Transport.WorkerDescription) =>
    Effect.gen(function*() {
      yield* note({
        op: "register",
        steps: Protocol.names(worker.handlers.steps),
        workflows: Protocol.names(worker.handlers.workflows)
      })
      return Transport.Registration.make({
        pollers: [
          Transport.Poller.make({
            name: "test queue",
            pool: protocol.pools.step,
            poll: (max) =>
              Effect.gen(function*() {
                // only the wait is interruptible: what was taken is always handed over
                const first = yield* Queue.take(tasks).pipe(Effect.timeoutOption(worker.pollTimeout), Effect.interruptible)
                if (Option.isNone(first)) return []
                const taken = [first.value, ...(max > 1 ? yield* Queue.takeUpTo(tasks, max - 1) : [])]
                for (const task of taken) yield* note({ op: "deliver", id: task.id })
                return taken.map(delivery)
              })
          })
        ],
        deregister: note({ op: "deregister" })
      })
    })

  return {
    put: (payload: unknown) => Queue.offer(tasks, { id: `q${++next}`, payload }),
    take: Queue.take(answers),
    seen: Ref.get(seen),
    layer: Layer.succeed(Transport.Transport, { name: "test queue", protocol, register })
  }
})

const charge = Step.make("charge", (input: { readonly amount: number }, ctx) =>
  Effect.succeed({ charged: input.amount, stepId: ctx.stepId }))

/** A coordinator workflow: charge through a step, then finish with the step's output. */
const checkout = Workflow.make("checkout", (input: { readonly amount: number }, ctx) =>
  Effect.map(ctx.step("charge", { amount: input.amount }), (receipt) => ({ receipt })))

/** A step task as the engine dispatches it. */
const stepTask = { runId: "run-s", seq: 0, name: "charge", stepId: "run-s:0", group: "charge", input: { amount: 7 }, attempt: 1 }

/** A workflow turn as the engine dispatches it, over `history`. */
const turn = (taskId: string, history: ReadonlyArray<unknown>) => ({
  taskId,
  runId: "run-w",
  workflow: "checkout",
  workflowVersion: "1",
  input: { amount: 12 },
  history,
  group: "checkout",
  attempt: 1
})

describe("a transport written from the public contract", () => {
  it.scoped("serves a step task and workflow turns over a Queue; the replies come back through complete", () =>
    Effect.gen(function*() {
      const broker = yield* queueTransport
      const worker = yield* Worker.make({ steps: [charge], workflows: [checkout], concurrency: 2, pollTimeout: "1 second" })
      const running = yield* Effect.fork(Effect.provide(worker.run, broker.layer))

      // a step task: its result
      yield* broker.put(stepTask)
      const step = yield* broker.take
      assert.strictEqual(step.id, "q1")
      assert.deepStrictEqual(step.reply, {
        _tag: "StepResult",
        result: {
          runId: "run-s",
          seq: 0,
          stepId: "run-s:0",
          status: "completed",
          output: { charged: 7, stepId: "run-s:0" },
          ...(step.reply._tag === "StepResult" ? { startedAt: step.reply.result.startedAt } : {})
        }
      })

      // the workflow's first turn: the decision calls the step (in the default partition, as no group was given)
      yield* broker.put(turn("run-w:wf:1", []))
      const first = yield* broker.take
      assert.strictEqual(first.reply._tag, "WorkflowDecision")
      if (first.reply._tag !== "WorkflowDecision") return
      assert.strictEqual(first.reply.decision.taskId, "run-w:wf:1")
      assert.strictEqual(first.reply.decision.runId, "run-w")
      assert.strictEqual(first.reply.decision.status, "continue")
      assert.deepStrictEqual(first.reply.decision.commands, [
        { kind: "call", seq: 0, name: "charge", group: "default", input: { amount: 12 } }
      ])

      // the next turn, with the step's result in history: the workflow completes with it
      yield* broker.put(turn("run-w:wf:2", [{ seq: 0, kind: "call", name: "charge", output: { charged: 12 } }]))
      const second = yield* broker.take
      assert.strictEqual(second.reply._tag, "WorkflowDecision")
      if (second.reply._tag !== "WorkflowDecision") return
      assert.strictEqual(second.reply.decision.taskId, "run-w:wf:2")
      assert.strictEqual(second.reply.decision.status, "completed")
      assert.deepStrictEqual(second.reply.decision.commands, [])
      assert.deepStrictEqual(second.reply.decision.output, { receipt: { charged: 12 } })

      yield* worker.stop
      yield* Fiber.join(running)
      assert.deepStrictEqual(yield* broker.seen, [
        { op: "register", steps: ["charge"], workflows: ["checkout"] },
        { op: "deliver", id: "q1" },
        { op: "complete", id: "q1" },
        { op: "deliver", id: "q2" },
        { op: "complete", id: "q2" },
        { op: "deliver", id: "q3" },
        { op: "complete", id: "q3" },
        { op: "deregister" }
      ])
    }))
})
