/**
 * The promise facade's process signals. One SIGTERM and one SIGINT listener serve every facade worker
 * running with `handleSignals` in the process, so that their stops are one shutdown:
 *
 * - a signal the application also listens for (NestJS's `enableShutdownHooks()`, its own
 *   `process.on`) is the application's: it stops the workers from its shutdown hook. Reacting to it
 *   as well would race that hook, and the application's own re-sent signal (NestJS re-sends it once
 *   its hooks are done) would read as a second signal and cut the drain short;
 * - otherwise the first signal stops every worker gracefully and a second one interrupts their
 *   running work;
 * - a signal asks the process to end, and the listener kept Node from ending it: once the last worker
 *   has drained and deregistered, the process exits (0, or 1 when a run failed), as Effect's
 *   `NodeRuntime.runMain` exits after its teardown. Without this a process that anything else keeps
 *   alive (an HTTP server, a pool) would outlive its worker until it is killed.
 */
import { isInterruptedException } from "effect/Cause"

/** A worker the signals stop. */
export interface SignalTarget {
  readonly stop: () => Promise<void>
  readonly forceStop: () => Promise<void>
  /** Writes through the worker's own logger and level. */
  readonly log: (level: "Info" | "Warning", message: string) => void
}

const SIGNALS = ["SIGTERM", "SIGINT"] as const

const running = new Set<SignalTarget>()
/** The first signal the workers took as theirs, while any runs. */
let received: NodeJS.Signals | undefined
let failed = false

const onSignal = (signal: NodeJS.Signals): void => {
  if (process.listenerCount(signal) > 1) {
    for (const target of running) {
      target.log("Info", `${signal}: left to the application's own ${signal} handler, which stops the worker (worker.stop())`)
    }
    return
  }
  const first = received === undefined
  received ??= signal
  for (const target of running) {
    if (first) target.log("Info", `${signal}: stopping gracefully (send it again to interrupt running work)`)
    else target.log("Warning", `${signal} again: interrupting running work`)
    // run() reports the stop's outcome
    ;(first ? target.stop() : target.forceStop()).catch(() => undefined)
  }
}

/**
 * Runs `run` with SIGTERM and SIGINT stopping `target` (as the module's documentation says), and,
 * when a signal stopped the last running worker, exits the process once the caller has seen the run
 * settle.
 */
export const withSignals = async (target: SignalTarget, run: () => Promise<void>): Promise<void> => {
  // first in line: an application's handler may remove itself as it runs (NestJS's does), and the
  // count of listeners must be read before it has
  if (running.size === 0) for (const signal of SIGNALS) process.prependListener(signal, onSignal)
  running.add(target)
  try {
    await run()
  } catch (error) {
    // a runUntil stopped by the signal rejects with an interruption: that is the stop, not a failure
    if (!isInterruptedException(error)) failed = true
    throw error
  } finally {
    running.delete(target)
    if (running.size === 0) {
      for (const signal of SIGNALS) process.off(signal, onSignal)
      const code = failed ? 1 : 0
      const exit = received !== undefined
      received = undefined
      failed = false
      // after the caller's own continuation of `run()` (a microtask) has run
      if (exit) setImmediate(() => process.exit(code))
    }
  }
}
