/**
 * `npm run bench`: no-op steps over Redis/BullMQ at concurrency 1, 16 and 64 — this worker against a
 * plain `bullmq` Worker that adds one result job per task, and against the upstream TS worker
 * `@dudousxd/durable-worker@0.8.0` — on the same Redis, in alternating runs, each on a fresh prefix.
 * A fourth run, the client ceiling (this worker's BullMQ calls in a bare loop), shows how much of the
 * ratio the BullMQ client itself allows. Prints steps/s (median of the rounds) and the ratios (the
 * median over the rounds of each round's ratio) as a markdown table.
 *
 * Before the rounds of each concurrency, every peer serves an uncounted warm-up run, so no peer's
 * first round pays for compiling code the others already warmed (they share the process).
 *
 * BENCH_N (default 10000) tasks per run, BENCH_ROUNDS (default 5) rounds, BENCH_WARMUP (default
 * 2000; 0 for none) tasks per warm-up run, BENCH_CONCURRENCY (default "1,16,64"), REDIS_HOST /
 * REDIS_PORT.
 */
import { randomUUID } from "node:crypto"
import * as ceiling from "./peers/clientCeiling.js"
import * as ours from "./peers/ours.js"
import type { PeerOptions, RunningPeer } from "./peers/peer.js"
import * as plain from "./peers/plainBullmq.js"
import * as upstream from "./peers/upstream.js"
import { deletePrefixKeys, runLoad } from "./support/load.js"

interface Peer {
  readonly name: string
  readonly start: (options: PeerOptions) => Promise<RunningPeer>
}

const peers: ReadonlyArray<Peer> = [
  { name: "effect-durable-worker", start: ours.start },
  { name: "plain bullmq", start: plain.start },
  { name: "upstream durable-worker", start: upstream.start },
  { name: "bullmq client ceiling", start: ceiling.start }
]

const n = Number(process.env.BENCH_N ?? 10_000)
const rounds = Number(process.env.BENCH_ROUNDS ?? 5)
const warmup = Number(process.env.BENCH_WARMUP ?? 2000)
const levels = (process.env.BENCH_CONCURRENCY ?? "1,16,64").split(",").map(Number)
const stepName = "bench.noop"

const median = (values: ReadonlyArray<number>) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)]!
}

const once = async (peer: Peer, concurrency: number, tasks: number) => {
  const prefix = `bench-${randomUUID().slice(0, 8)}`
  const running = await peer.start({ prefix, concurrency, stepName })
  try {
    const result = await runLoad({ prefix, stepName, n: tasks })
    if (result.results !== tasks) throw new Error(`${peer.name}: ${result.results} results for ${tasks} tasks`)
    return result.stepsPerSec
  } finally {
    await running.stop()
    await deletePrefixKeys(prefix)
  }
}

export const main = async () => {
  console.log(
    `no-op steps over BullMQ: ${n} tasks per run, ${rounds} alternating rounds after a ${warmup}-task warm-up; median steps/s, and ratios as the median of each round's ratio\n`
  )
  const rows: Array<string> = []
  for (const concurrency of levels) {
    const samples = new Map<string, Array<number>>(peers.map((p) => [p.name, []]))
    if (warmup > 0) for (const peer of peers) await once(peer, concurrency, warmup)
    for (let round = 0; round < rounds; round++) {
      // alternate the order so no peer always runs on a warmer Redis
      const order = round % 2 === 0 ? peers : [...peers].reverse()
      for (const peer of order) {
        const stepsPerSec = await once(peer, concurrency, n)
        samples.get(peer.name)!.push(stepsPerSec)
        console.log(`  c=${concurrency} round ${round + 1} ${peer.name}: ${Math.round(stepsPerSec)} steps/s`)
      }
    }
    const [mine, bull, up, best] = peers.map((p) => samples.get(p.name)!)
    // a ratio compares the runs of one round (seconds apart), then takes the median over the rounds:
    // the host's speed drifts between rounds far more than within one
    const ratio = (a: ReadonlyArray<number>, b: ReadonlyArray<number>) =>
      `${median(a.map((x, round) => x / b[round]!)).toFixed(2)}x`
    const steps = (a: ReadonlyArray<number>) => Math.round(median(a))
    rows.push(
      `| ${concurrency} | ${steps(mine!)} | ${steps(bull!)} | ${steps(up!)} | ${steps(best!)} | ${ratio(mine!, bull!)} | ${
        ratio(mine!, up!)
      } | ${ratio(best!, up!)} | ${ratio(mine!, best!)} |`
    )
  }
  console.log(
    "\n| concurrency | effect-durable-worker | plain bullmq | upstream durable-worker | client ceiling | vs plain | vs upstream | ceiling vs upstream | share of ceiling |"
  )
  console.log("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
  for (const row of rows) console.log(row)
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().then(() => process.exit(0), (error) => {
    console.error(error)
    process.exit(1)
  })
}
