/**
 * A worker process for the live-step-event test: the promise facade on the BullMQ transport, serving
 * workflow `charge-once` (see {@link chargeOnce}): its first `sideEffect` prints `charged`, its
 * second prints `blocked` and never settles, so the turn is never answered and the process is killed
 * in the middle of it.
 *
 * Arguments: prefix, redis url.
 */
import { redis, Worker } from "../../src/promise.js"
import { chargeOnce } from "./chargeOnce.js"

const [prefix, url] = process.argv.slice(2)
const say = (line: string) => process.stdout.write(`${line}\n`)

const worker = new Worker({ handleSignals: false, logLevel: "None", workerId: `killed-${process.pid}` })
worker.workflow(
  "charge-once",
  chargeOnce(() => say("charged"), () => {
    say("blocked")
    return new Promise<never>(() => {})
  })
)
worker.run(redis({ prefix: prefix!, url: url!, stalledIntervalMs: 60_000 })).catch((error: unknown) => {
  process.stderr.write(`worker failed: ${String(error)}\n`)
  process.exit(1)
})
