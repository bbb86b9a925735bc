/**
 * The nestjs-durable engine's remote protocol: step tasks and workflow turns, which share queues
 * and are told apart by shape; what a worker answers (a step result or a workflow decision); and the
 * engine's routing tokens, which every broker of the engine names its queues and groups by.
 *
 * @since 0.2.0
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import { decodeStepTask, isWorkflowTaskShape, type StepResult } from "../wire/StepProtocol.js"
import {
  decodeWorkflowTask,
  encodeWorkflowDecision,
  type WorkflowDecision,
  type WorkflowStepEvent,
  type WorkflowTask
} from "../wire/WorkflowProtocol.js"
import { unencodable } from "../wire/internal/json.js"
import { processStep } from "../core/Step.js"
import { nestDurableHistorySchema } from "../core/internal/verify/files.js"
import * as ReplayCapture from "../core/ReplayCapture.js"
import { processWorkflowTask } from "../core/Workflow.js"
import * as Protocol from "../seam/Protocol.js"
import type { Handlers, Outcome } from "../seam/Protocol.js"
import { logMalformed } from "./internal/malformed.js"

/**
 * What a worker sends back to the nestjs-durable engine: a step result (`<P>-results`) or a
 * workflow decision (`<P>-decisions`).
 *
 * @since 0.2.0
 * @category models
 */
export type NestReply =
  | { readonly _tag: "StepResult"; readonly result: StepResult }
  | { readonly _tag: "WorkflowDecision"; readonly decision: WorkflowDecision }

/** A step's reply counts as a success for the controller only when the step completed. */
const stepReply = (result: StepResult): Outcome<NestReply> =>
  Protocol.reply({ _tag: "StepResult", result }, result.status === "completed")
const decisionReply = (decision: WorkflowDecision): Outcome<NestReply> => Protocol.reply({ _tag: "WorkflowDecision", decision })

const runStep = <R>(handlers: Handlers<R>, payload: unknown) =>
  Either.match(decodeStepTask(payload), {
    onRight: (task) => Effect.flatMap(processStep(handlers.steps, task), (result) => Effect.succeed(stepReply(result))),
    // a task that names no run cannot be answered: the runtime's line about its rejection says why
    onLeft: (error): Effect.Effect<Outcome<NestReply>> =>
      error.identity === undefined
        ? Effect.succeed(Protocol.reject(error.message))
        : Effect.as(
          logMalformed("step", error.detail, error.identity),
          stepReply({
            ...error.identity,
            status: "failed",
            error: { message: error.message, code: "malformed_task", retryable: false }
          })
        )
  })

/**
 * The turn as a history file for `verify` (when the capture in force samples it): the payload as it
 * was delivered, and the decision as it goes on the wire.
 */
const captureTurn = (payload: unknown, task: WorkflowTask, decision: WorkflowDecision) =>
  ReplayCapture.capture(Effect.gen(function*() {
    const answered = yield* encodeWorkflowDecision(decision)
    return {
      schema: nestDurableHistorySchema,
      workflow: task.workflow,
      run_id: task.runId,
      captured_at: yield* ReplayCapture.capturedAt,
      source: { runtime: "effect-durable-worker", protocol: "nestjs-durable" },
      task: payload,
      decision: answered
    } satisfies ReplayCapture.CapturedHistory
  }))

/**
 * A turn's local-step events as its delivery's `progress` is handed them: the end of each local step
 * (`completed` or `failed`), which the engine persists as a local checkpoint at once, so a step
 * finished before the worker dies mid-turn is history on the next turn, not run again.
 *
 * A step's `running` event is not sent, unlike the upstream Python worker's: the engine consumes step
 * events and decisions on separate queues, and its `running` checkpoint overwrites a completed one.
 * A `running` applied after the turn's decision (the step's `completed` behind it, or already
 * applied) leaves the step out of the next turn's history, which then runs it again, in a run where
 * no worker died (the 10,000-op replay test met it). The end of a step only ever re-persists what the
 * decision's `recordStep` holds.
 *
 * Their `events` are JSON-safe already; a `completed` event whose output JSON cannot carry is not
 * sent: the turn fails on that output (`unserializable_output`), and the checkpoint the engine would
 * persist from it would hold what JSON made of it, or nothing. `progress` must not throw; one that
 * does costs the event, never the turn (the replay contains it).
 */
const stepEnds = (task: Protocol.Task) => (event: WorkflowStepEvent): void => {
  if (event.phase === "running") return
  if (event.phase === "completed" && event.output !== undefined && unencodable(event.output) !== undefined) return
  // a throw is contained where the replay hands events to its sink (best-effort, never the turn's)
  task.progress!(event)
}

const runTurn = <R>(
  handlers: Handlers<R>,
  payload: unknown,
  partition: string | undefined,
  onStepEvent?: ((event: WorkflowStepEvent) => void) | undefined
) =>
  Either.match(decodeWorkflowTask(payload), {
    onRight: (task) =>
      processWorkflowTask(handlers.workflows, task, { partition, onStepEvent }).pipe(
        Effect.tap((decision) => captureTurn(payload, task, decision)),
        Effect.map(decisionReply),
        Effect.annotateLogs({ runId: task.runId, workflow: task.workflow, taskId: task.taskId })
      ),
    // a task that names no run cannot be answered: the runtime's line about its rejection says why
    onLeft: (error): Effect.Effect<Outcome<NestReply>> =>
      error.identity === undefined
        ? Effect.succeed(Protocol.reject(error.message))
        : Effect.as(
          logMalformed("workflow", error.detail, error.identity),
          decisionReply({
            ...error.identity,
            status: "failed",
            commands: [],
            error: { message: error.message, code: "malformed_task" }
          })
        )
  })

/**
 * The run and step a step-task payload names, when it names them, with its routing group. Read by
 * hand rather than decoded: transports read it for every task they take.
 *
 * @since 0.2.0
 * @category identity
 */
export const stepIdentity = (
  payload: unknown
): { readonly runId: string; readonly seq: number; readonly stepId: string; readonly group: string | undefined } | undefined => {
  if (typeof payload !== "object" || payload === null || isWorkflowTaskShape(payload)) return undefined
  const { runId, seq, stepId, group } = payload as Record<string, unknown>
  return typeof runId === "string" && Number.isInteger(seq) && typeof stepId === "string"
    ? { runId, seq: seq as number, stepId, group: typeof group === "string" ? group : undefined }
    : undefined
}

/**
 * The run (and task id) a workflow-turn payload names, when it is one, with its routing group.
 *
 * @since 0.2.0
 * @category identity
 */
export const turnIdentity = (
  payload: unknown
): { readonly runId: string; readonly taskId: string | undefined; readonly group: string | undefined } | undefined => {
  if (!isWorkflowTaskShape(payload)) return undefined
  const { runId, taskId, group } = payload as Record<string, unknown>
  return typeof runId === "string"
    ? { runId, taskId: typeof taskId === "string" ? taskId : undefined, group: typeof group === "string" ? group : undefined }
    : undefined
}

/** A step of a cancelled run fails for good; a turn of one is answered `cancelled`. */
const cancelledReply = (payload: unknown): Option.Option<NestReply> => {
  const turn = turnIdentity(payload)
  if (turn !== undefined) {
    return turn.taskId === undefined ? Option.none() : Option.some({
      _tag: "WorkflowDecision",
      decision: { taskId: turn.taskId, runId: turn.runId, status: "cancelled", commands: [] }
    })
  }
  const step = stepIdentity(payload)
  return step === undefined ? Option.none() : Option.some({
    _tag: "StepResult",
    result: {
      runId: step.runId,
      seq: step.seq,
      stepId: step.stepId,
      status: "failed",
      error: { message: `run ${step.runId} was cancelled`, code: "cancelled", retryable: false }
    }
  })
}

/**
 * A step that died of a defect fails as a worker's crash would on the upstream worker (BullMQ's
 * failed job, reported retryable): the engine retries it as its attempts allow. A turn that did
 * fails its run, as any exception of a turn does (`worker_defect`).
 */
const crashedReply = (payload: unknown, message: string): Option.Option<NestReply> => {
  const error = { message: `the worker crashed on this task (a defect, not the handler's): ${message}`, code: "worker_defect" }
  const turn = turnIdentity(payload)
  if (turn !== undefined) {
    return turn.taskId === undefined ? Option.none() : Option.some({
      _tag: "WorkflowDecision",
      decision: { taskId: turn.taskId, runId: turn.runId, status: "failed", commands: [], error }
    })
  }
  const step = stepIdentity(payload)
  return step === undefined ? Option.none() : Option.some({
    _tag: "StepResult",
    result: { runId: step.runId, seq: step.seq, stepId: step.stepId, status: "failed", error: { ...error, retryable: true } }
  })
}

/**
 * The pool of the engine's tasks: steps and workflow turns share queues, so they share the
 * worker's `concurrency`.
 *
 * @since 0.2.0
 * @category pools
 */
export const pools = { step: Protocol.pool("step", "concurrency") } as const

/**
 * The protocol. `partition` is the one a workflow's `call` without a group is sent with.
 *
 * @since 0.2.0
 * @category constructors
 */
export const make = (options: { readonly partition?: string | undefined } = {}): Protocol.Protocol<NestReply> => ({
  name: "nestjs-durable",
  serves: ["steps", "workflows"],
  pools,
  label: (payload) => {
    const workflow = isWorkflowTaskShape(payload)
    const name = (payload as { name?: unknown; workflow?: unknown } | null)?.[workflow ? "workflow" : "name"]
    return { kind: workflow ? "workflow" : "step", name: typeof name === "string" ? name : undefined }
  },
  // a turn streams its local steps where the delivery's broker carries progress events
  process: (handlers, task) =>
    task.progress !== undefined && isWorkflowTaskShape(task.payload)
      ? runTurn(handlers, task.payload, options.partition, stepEnds(task))
      : processPayload(handlers, task.payload, options),
  cancelled: cancelledReply,
  crashed: crashedReply
})

/**
 * Runs one task payload without any broker, as a poller's delivery would be run: the step result
 * or workflow decision, or `Reject` with the reason when the payload is not a task at all.
 *
 * @since 0.2.0
 * @category running
 */
export const processPayload = <R>(handlers: Handlers<R>, payload: unknown, options: { readonly partition?: string | undefined } = {}) =>
  isWorkflowTaskShape(payload) ? runTurn(handlers, payload, options.partition) : runStep(handlers, payload)

/**
 * True for a namespace / tenant / partition value that means "none": absent, `""` or `"default"`.
 *
 * @since 0.2.0
 * @category routing
 */
export const isDefaultScope = (value: string | undefined): value is undefined | "" | "default" =>
  value === undefined || value === "" || value === "default"

/**
 * Makes a handler name usable in a queue name: every `:` becomes `-` (`.` is kept).
 *
 * @since 0.2.0
 * @category routing
 */
export const sanitizeQueueToken = (name: string): string => name.replaceAll(":", "-")

/**
 * Suffixes a base routing token with its tenant: `<base>@<tenant>`, or `base` alone when the tenant
 * is absent, empty or `"default"`.
 *
 * @since 0.2.0
 * @category routing
 */
export const tenantGroup = (base: string, tenant?: string | undefined): string =>
  isDefaultScope(tenant) ? base : `${base}@${tenant}`

/**
 * The routing token a worker consumes for one registered handler name:
 * `tenantGroup(sanitizeQueueToken(name), partition)`.
 *
 * @since 0.2.0
 * @category routing
 */
export const routingToken = (name: string, partition?: string | undefined): string =>
  tenantGroup(sanitizeQueueToken(name), partition)
