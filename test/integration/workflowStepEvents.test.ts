/**
 * Live step events on the real nestjs-durable engine over Redis/BullMQ: a local step finished in a
 * turn the worker never answers (its process is killed in the middle of the turn) is persisted by
 * the engine from the step's live event, so the next turn, served by a fresh worker, has it in its
 * history and does not run it again.
 */

import { fileURLToPath } from "node:url"
import { afterAll, assert, describe, it } from "vitest"
import { chargeOnce } from "../support/chargeOnce.js"
import { spawnSource } from "../support/local.js"
import { engines, plain, serveFacade } from "../support/workflowWorkers.js"

const fleet = engines()
afterAll(() => fleet.closeAll())

/** The engine re-dispatches a turn left unanswered this long after the worker's last run beat (5 s apart). */
const SILENCE_MS = 6_000

describe("a local step of a turn the worker dies in", () => {
  it("is persisted from its live event, and the next turn, on a fresh worker, does not run it again", async () => {
    const engine = await fleet.start({ engine: { remoteAdvanceSilenceMs: SILENCE_MS } })
    engine.remote("charge-once")
    const { child, exited, output } = spawnSource(
      fileURLToPath(new URL("../support/stepEventWorker.ts", import.meta.url)),
      [engine.prefix, `redis://${engine.connection.host}:${engine.connection.port}`]
    )
    let charges = 0
    let pending = ""
    let blocked: () => void = () => {}
    const blockedSeen = new Promise<void>((resolve) => (blocked = resolve))
    child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
      pending += chunk
      for (let at = pending.indexOf("\n"); at >= 0; at = pending.indexOf("\n")) {
        const line = pending.slice(0, at)
        pending = pending.slice(at + 1)
        if (line === "charged") charges++
        if (line === "blocked") blocked()
      }
    })
    try {
      await engine.waitForWorkerGroup("charge-once", { timeoutMs: 30_000 })
      const runId = await engine.start("charge-once", {})
      await Promise.race([
        blockedSeen,
        exited.then(() => Promise.reject(new Error(`the worker process exited: ${output()}`)))
      ])
      assert.strictEqual(charges, 1)
      // Give the engine a moment to persist the charge from its event (not a timing assertion: a
      // worker that streams no event just gets killed after it, and the run then shows it).
      await engine.waitForCheckpoint(runId, 0, { status: "completed", timeoutMs: 3_000 }).catch(() => undefined)
      child.kill("SIGKILL")
      await exited

      const checkpointsAtDeath = (await engine.checkpoints(runId)).map(plain)

      // a fresh worker serves the turn the engine re-dispatches once the run has gone silent
      const served = fleet.track(await serveFacade(engine, (worker) => {
        worker.workflow("charge-once", chargeOnce(() => charges++, async () => "finished"))
      }, { workflows: ["charge-once"] }))
      const result = await engine.waitForRun(runId, { timeoutMs: SILENCE_MS + 20_000 })
      assert.strictEqual(result.status, "completed", JSON.stringify(result.error))
      assert.deepStrictEqual(result.output, { receipt: "receipt-1", finished: "finished" })
      // the charge ran once: in the killed worker, not again in the fresh one
      assert.strictEqual(charges, 1)
      // because the charge was a local checkpoint already when the worker died
      assert.deepInclude(checkpointsAtDeath[0], { seq: 0, name: "sideEffect", kind: "local", status: "completed", output: "receipt-1" })
      await served.stop()
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL")
    }
  }, 60_000)
})
