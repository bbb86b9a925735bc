/**
 * `npx tsx bench/profile.ts [ours|plain] [concurrency] [tasks]`: one peer alone over the local Redis,
 * for a CPU profile of the task path (`node --cpu-prof --import tsx bench/profile.ts …`). Prints
 * steps/s and this process's CPU time per task; the load producer is the same for every peer.
 */
import { randomUUID } from "node:crypto"
import * as ours from "./peers/ours.js"
import * as plain from "./peers/plainBullmq.js"
import { deletePrefixKeys, runLoad } from "./support/load.js"

const [which = "ours", concurrencyArg = "64", tasksArg = "20000"] = process.argv.slice(2)
const peer = which === "plain" ? plain : ours
const concurrency = Number(concurrencyArg)
const n = Number(tasksArg)
const stepName = "bench.noop"

for (const label of ["warm-up", "measured"]) {
  const prefix = `prof-${randomUUID().slice(0, 8)}`
  const running = await peer.start({ prefix, concurrency, stepName })
  const before = process.cpuUsage()
  const result = await runLoad({ prefix, stepName, n: label === "warm-up" ? Math.min(n, 5_000) : n })
  const cpu = process.cpuUsage(before)
  await running.stop()
  await deletePrefixKeys(prefix)
  console.log(`${which} c=${concurrency} ${label}: ${Math.round(result.stepsPerSec)} steps/s, ${Math.round((cpu.user + cpu.system) / result.results)} µs CPU per task`)
}
process.exit(0)
