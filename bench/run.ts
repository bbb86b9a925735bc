/**
 * `npm run bench`: no-op steps over Redis/BullMQ at concurrency 1, 16 and 64 — this worker against a
 * plain `bullmq` Worker that adds one result job per task, and against the upstream TS worker
 * `@dudousxd/durable-worker@0.8.0` — on the same Redis, in alternating runs, each on a fresh prefix.
 * A fourth run, the client ceiling (this worker's BullMQ calls in a bare loop), shows how much of the
 * ratio the BullMQ client itself allows. A fifth is this worker again from its CommonJS build (as a
 * NestJS application requires it), against the ES module build. Prints steps/s (median of the rounds) and the ratios (the
 * median over the rounds of each round's ratio) as a markdown table, then a second table of the CPU
 * time each peer cost per task (medians): this process (the peer and the load producer, which is the
 * same for every peer) and Redis (its server's own count, `INFO cpu`).
 *
 * Before the rounds of each concurrency, every peer serves an uncounted warm-up run, so no peer's
 * first round pays for compiling code the others already warmed (they share the process). The
 * order rotates from round to round, so that no peer runs twice in a row.
 *
 * BENCH_N (default 10000) tasks per run, BENCH_ROUNDS (default 5) rounds, BENCH_WARMUP (default
 * 2000; 0 for none) tasks per warm-up run, BENCH_CONCURRENCY (default "1,16,64"), REDIS_HOST /
 * REDIS_PORT.
 */
import { Redis } from "ioredis"
import { randomUUID } from "node:crypto"
import * as ceiling from "./peers/clientCeiling.js"
import * as ours from "./peers/ours.js"
import { benchConnection, type PeerOptions, type RunningPeer } from "./peers/peer.js"
import * as plain from "./peers/plainBullmq.js"
import * as upstream from "./peers/upstream.js"
import { deletePrefixKeys, runLoad } from "./support/load.js"
import { median, roundRatio } from "./support/stats.js"

interface Peer {
  readonly name: string
  readonly start: (options: PeerOptions) => Promise<RunningPeer>
}

const peers: ReadonlyArray<Peer> = [
  { name: "effect-durable-worker", start: ours.start },
  { name: "plain bullmq", start: plain.start },
  { name: "upstream durable-worker", start: upstream.start },
  { name: "bullmq client ceiling", start: ceiling.start },
  { name: "effect-durable-worker (CommonJS)", start: ours.startCommonJs }
]

const n = Number(process.env.BENCH_N ?? 10_000)
const rounds = Number(process.env.BENCH_ROUNDS ?? 5)
const warmup = Number(process.env.BENCH_WARMUP ?? 2000)
const levels = (process.env.BENCH_CONCURRENCY ?? "1,16,64").split(",").map(Number)
const stepName = "bench.noop"

/** What one run measured: its rate, and the CPU time per task of this process and of Redis (µs). */
interface Sample {
  readonly stepsPerSec: number
  readonly nodeMicros: number
  readonly redisMicros: number
}

/** The CPU seconds the Redis server has used so far, as it reports them. */
const redisCpuSeconds = async (redis: Redis) => {
  const info = await redis.info("cpu")
  const field = (name: string) => Number(new RegExp(`^${name}:([0-9.]+)`, "m").exec(info)?.[1] ?? NaN)
  return field("used_cpu_user") + field("used_cpu_sys")
}

const once = async (peer: Peer, concurrency: number, tasks: number, redis: Redis): Promise<Sample> => {
  const prefix = `bench-${randomUUID().slice(0, 8)}`
  const running = await peer.start({ prefix, concurrency, stepName })
  try {
    const redisBefore = await redisCpuSeconds(redis)
    const nodeBefore = process.cpuUsage()
    const result = await runLoad({ prefix, stepName, n: tasks })
    const node = process.cpuUsage(nodeBefore)
    const redisSeconds = (await redisCpuSeconds(redis)) - redisBefore
    if (result.results !== tasks) throw new Error(`${peer.name}: ${result.results} results for ${tasks} tasks`)
    return {
      stepsPerSec: result.stepsPerSec,
      nodeMicros: (node.user + node.system) / tasks,
      redisMicros: (redisSeconds * 1e6) / tasks
    }
  } finally {
    await running.stop()
    await deletePrefixKeys(prefix)
  }
}

export const main = async () => {
  console.log(
    `no-op steps over BullMQ: ${n} tasks per run, ${rounds} rounds (the order rotating) after a ${warmup}-task warm-up; median steps/s, and ratios as the median of each round's ratio\n`
  )
  const rows: Array<string> = []
  const cpuRows: Array<string> = []
  const redis = new Redis(benchConnection())
  for (const concurrency of levels) {
    const samples = new Map<string, Array<Sample>>(peers.map((p) => [p.name, []]))
    if (warmup > 0) for (const peer of peers) await once(peer, concurrency, warmup, redis)
    for (let round = 0; round < rounds; round++) {
      // rotate the order: each peer takes each place in turn, and none runs twice in a row (the
      // peers share this process, and a peer run right after itself finds the shared code, BullMQ's
      // and ioredis's, compiled for its own calls: some 10% faster at 64 than after another peer)
      const order = peers.map((_, i) => peers[(round + i) % peers.length]!)
      for (const peer of order) {
        const sample = await once(peer, concurrency, n, redis)
        samples.get(peer.name)!.push(sample)
        console.log(
          `  c=${concurrency} round ${round + 1} ${peer.name}: ${Math.round(sample.stepsPerSec)} steps/s, CPU per task ${
            Math.round(sample.nodeMicros)
          } µs here, ${Math.round(sample.redisMicros)} µs in Redis`
        )
      }
    }
    const [mine, bull, up, best, commonJs] = peers.map((p) => samples.get(p.name)!.map((s) => s.stepsPerSec))
    // a ratio compares the runs of one round (seconds apart), then takes the median over the rounds:
    // the host's speed drifts between rounds far more than within one
    const ratio = (a: ReadonlyArray<number>, b: ReadonlyArray<number>) => `${roundRatio(a, b).toFixed(2)}x`
    const steps = (a: ReadonlyArray<number>) => Math.round(median(a))
    rows.push(
      `| ${concurrency} | ${steps(mine!)} | ${steps(bull!)} | ${steps(up!)} | ${steps(best!)} | ${ratio(mine!, bull!)} | ${
        ratio(mine!, up!)
      } | ${ratio(best!, up!)} | ${ratio(mine!, best!)} | ${steps(commonJs!)} | ${ratio(commonJs!, mine!)} |`
    )
    const cpu = (name: string, field: "nodeMicros" | "redisMicros") => Math.round(median(samples.get(name)!.map((s) => s[field])))
    cpuRows.push(`| ${concurrency} | ${peers.map((p) => `${cpu(p.name, "nodeMicros")} / ${cpu(p.name, "redisMicros")}`).join(" | ")} |`)
  }
  redis.disconnect()
  console.log(
    "\n| concurrency | effect-durable-worker | plain bullmq | upstream durable-worker | client ceiling | vs plain | vs upstream | ceiling vs upstream | share of ceiling | effect-durable-worker, CommonJS | CommonJS vs ES module |"
  )
  console.log("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
  for (const row of rows) console.log(row)
  console.log(`\nCPU per task, µs (median): this process (peer and producer) / Redis\n`)
  console.log(`| concurrency | ${peers.map((p) => p.name).join(" | ")} |`)
  console.log(`| ---: | ${peers.map(() => "---:").join(" | ")} |`)
  for (const row of cpuRows) console.log(row)
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().then(() => process.exit(0), (error) => {
    console.error(error)
    process.exit(1)
  })
}
