/**
 * The promise facade's signal handling in real processes: the exit a signal asks for happens once the
 * worker has drained, and a signal the application handles itself (as NestJS does) is left to it.
 */
import { fileURLToPath } from "node:url"
import { assert, describe, it } from "vitest"
import { spawnSource, waitFor } from "./support/local.js"

const WORKER = fileURLToPath(new URL("./support/signalWorker.ts", import.meta.url))

/** Starts the worker process, sends SIGTERM once its step began, and returns its output and exit. */
const signalledRun = async (mode: "alone" | "app-handler") => {
  const { child, exited, output } = spawnSource(WORKER, [mode], { SLEEP_MS: "800" })
  try {
    await waitFor("the step to begin", () => {
      if (child.exitCode !== null) throw new Error(`the worker exited before its step began:\n${output()}`)
      return output().includes("began\n")
    }, 30_000).catch((error: Error) => {
      throw new Error(`${error.message}:\n${output()}`)
    })
    child.kill("SIGTERM")
    const exit = await Promise.race([
      exited,
      new Promise<never>((_, reject) =>
        setTimeout(() => reject(new Error(`no exit within 20 s of SIGTERM:\n${output()}`)), 20_000).unref()
      )
    ])
    return { exit, lines: output().trim().split("\n") }
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL")
  }
}

describe("promise facade signals, in a process of their own", () => {
  it("alone: SIGTERM drains the running step, deregisters, and the process exits 0 though something else keeps it alive", async () => {
    const { exit, lines } = await signalledRun("alone")
    assert.deepStrictEqual(exit, { code: 0, signal: null }, lines.join("\n"))
    const order = ["began", "log SIGTERM: stopping gracefully (send it again to interrupt running work)", "done", "reply completed", "run settled"]
    assert.deepStrictEqual(lines.filter((line) => order.includes(line)), order, lines.join("\n"))
    assert.isFalse(lines.some((line) => line.includes("interrupting")), lines.join("\n"))
  }, 60_000)

  it("with the application's own SIGTERM hook (as NestJS's enableShutdownHooks): the hook's stop drains, its re-sent signal ends the process", async () => {
    const { exit, lines } = await signalledRun("app-handler")
    assert.deepStrictEqual(exit, { code: null, signal: "SIGTERM" }, lines.join("\n"))
    const order = ["began", "app: shutdown hooks", "done", "reply completed", "run settled", "app: hooks done"]
    assert.deepStrictEqual(lines.filter((line) => order.includes(line)), order, lines.join("\n"))
    assert.include(lines, "log SIGTERM: left to the application's own SIGTERM handler, which stops the worker (worker.stop())")
    assert.isFalse(lines.some((line) => line.includes("interrupting") || line.includes("stopping gracefully")), lines.join("\n"))
  }, 60_000)
})
