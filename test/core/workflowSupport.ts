import type { HistoryEvent, PendingSignal, WorkflowCommand, WorkflowDecision, WorkflowTask } from "../../src/wire/WorkflowProtocol.js"

/** A workflow turn for `workflow` over `history` (taskId/runId fixed so decisions compare). */
export const makeTask = (
  workflow: string,
  history: ReadonlyArray<HistoryEvent> = [],
  extra: { readonly input?: unknown; readonly pendingSignals?: ReadonlyArray<PendingSignal>; readonly taskId?: string } = {}
): WorkflowTask => ({
  taskId: extra.taskId ?? "run-1:wf:00000001",
  runId: "run-1",
  workflow,
  workflowVersion: "1",
  input: extra.input,
  history,
  group: workflow,
  attempt: 1,
  ...(extra.pendingSignals === undefined ? {} : { pendingSignals: extra.pendingSignals })
})

/** How the simulated engine resolves a blocking command. */
export type Resolve = (command: WorkflowCommand) => Omit<HistoryEvent, "seq" | "kind" | "name"> | undefined

/**
 * What the engine would put in history after applying `commands`: every `recordStep` as a `step`
 * entry, and each blocking command that `resolve` resolves as its `call`/`timer`/`signal`/`child`
 * entry (names dropped where the engine drops them).
 */
export const applyCommands = (
  history: ReadonlyArray<HistoryEvent>,
  commands: ReadonlyArray<WorkflowCommand>,
  resolve: Resolve
): Array<HistoryEvent> => {
  const next = new Map(history.map((event) => [event.seq, event]))
  for (const command of commands) {
    if (command.kind === "recordStep") {
      next.set(command.seq, {
        seq: command.seq,
        kind: "step",
        name: command.name,
        ...(command.error === undefined ? { output: command.output } : { error: command.error })
      })
      continue
    }
    if (next.has(command.seq)) continue
    const resolution = resolve(command)
    if (resolution === undefined) continue
    switch (command.kind) {
      case "call":
        next.set(command.seq, { seq: command.seq, kind: "call", name: command.name, ...resolution })
        break
      case "sleep":
        next.set(command.seq, { seq: command.seq, kind: "timer", name: `sleep:${command.seq}` })
        break
      case "waitSignal":
        next.set(command.seq, { seq: command.seq, kind: "signal", ...resolution })
        break
      case "startChild":
        next.set(command.seq, { seq: command.seq, kind: "child", ...resolution })
        break
    }
  }
  return [...next.values()].sort((a, b) => a.seq - b.seq)
}

/** A decision with every `stack` removed (stacks differ between an Effect and an async body). */
export const withoutStacks = (decision: WorkflowDecision): unknown =>
  JSON.parse(JSON.stringify(decision, (key, value) => (key === "stack" ? undefined : value)))
