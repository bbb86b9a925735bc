/**
 * `npm run bench:redis`: the work Redis does per task for each peer, counted in machine instructions
 * rather than timed. `npm run bench` times the peers on a shared 2-core machine whose speed drifts
 * within a run; this counts what each peer's calls cost the Redis server, a figure that is the same
 * from one run to the next (to a fraction of a per cent) whatever else the machine does.
 *
 * It starts its own `redis-server` on a free 127.0.0.1 port under valgrind's callgrind tool (which
 * counts every instruction the server executes), and stops it by its PID at the end. For each
 * concurrency and peer it
 *
 * 1. enqueues the tasks (as `npm run bench` does) and counts what that cost the server: the
 *    producer's share, the same for every peer;
 * 2. starts the peer, lets it serve a fifth of the queue (its connections made, its scripts loaded),
 *    then counts the server's instructions until the last result is on the results queue, divided
 *    by the tasks served in that span.
 *
 * Prints, per task, thousands of instructions: the producer's and each peer's, and how many times
 * the server's whole work for a task (producer and peer) under the plain BullMQ worker is that under
 * this worker and under the client ceiling.
 * Needs `valgrind` (with `callgrind_control`) and `redis-server` on the PATH; without them it says so
 * and exits 0. `REDIS_WORK_N` (default 1000) tasks per run, `REDIS_WORK_CONCURRENCY` (default
 * "1,16,64"), `REDIS_WORK_ROUNDS` (default 2: the second shows the count repeats).
 */
import { Queue } from "bullmq"
import { type ChildProcess, execFile } from "node:child_process"
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises"
import * as os from "node:os"
import * as path from "node:path"
import { promisify } from "node:util"
import { resultsQueue } from "../src/transport/bullmq/internal/naming.js"
import { freePort, startRedisServer } from "../test/support/local.js"
import * as ceiling from "./peers/clientCeiling.js"
import * as ours from "./peers/ours.js"
import type { BenchConnection, PeerOptions, RunningPeer } from "./peers/peer.js"
import * as plain from "./peers/plainBullmq.js"
import * as upstream from "./peers/upstream.js"
import { deletePrefixKeys, enqueueTasks } from "./support/load.js"

const exec = promisify(execFile)
const n = Number(process.env.REDIS_WORK_N ?? 1000)
const levels = (process.env.REDIS_WORK_CONCURRENCY ?? "1,16,64").split(",").map(Number)
const rounds = Number(process.env.REDIS_WORK_ROUNDS ?? 2)
const stepName = "bench.noop"
// a run waits this long at most for its results (valgrind slows the server some fifty times)
const runTimeoutMs = 300_000

const peers: ReadonlyArray<{ readonly name: string; readonly start: (options: PeerOptions) => Promise<RunningPeer> }> = [
  { name: "effect-durable-worker", start: ours.start },
  { name: "plain bullmq", start: plain.start },
  { name: "upstream durable-worker", start: upstream.start },
  { name: "bullmq client ceiling", start: ceiling.start }
]

const k = (instructions: number) => (instructions / 1000).toFixed(1)
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

const missing = async (): Promise<string | undefined> => {
  for (const command of ["valgrind", "callgrind_control", "redis-server"]) {
    const found = await exec("sh", ["-c", `command -v ${command}`]).then(() => true, () => false)
    if (!found) return `${command} is not on the PATH`
  }
  return undefined
}

/** A `redis-server` under callgrind, on a free loopback port, keeping nothing on disk; its dumps go to `dir`. */
class CountedRedis {
  private dumps = 0
  private constructor(readonly child: ChildProcess, readonly dir: string, readonly connection: BenchConnection) {}

  static async start(dir: string): Promise<CountedRedis> {
    const port = await freePort()
    const child = await startRedisServer(port, {
      under: ["valgrind", "--tool=callgrind", `--callgrind-out-file=${path.join(dir, "redis.callgrind")}`]
    })
    return new CountedRedis(child, dir, { host: "127.0.0.1", port })
  }

  /** Starts counting from zero. */
  async zero(): Promise<void> {
    await exec("callgrind_control", ["-z", String(this.child.pid)])
  }

  /** The instructions the server ran since the last `zero` or `instructions`. */
  async instructions(): Promise<number> {
    await exec("callgrind_control", ["-d", String(this.child.pid)])
    this.dumps++
    const name = `redis.callgrind.${this.dumps}`
    const files = await readdir(this.dir)
    if (!files.includes(name)) throw new Error(`callgrind wrote no ${name} (found ${files.join(", ")})`)
    const text = await readFile(path.join(this.dir, name), "utf8")
    const total = /^(?:totals|summary): (\d+)/m.exec(text)
    if (total === null) throw new Error(`no instruction total in ${name}`)
    return Number(total[1])
  }

  /** Stops the server (by the PID this process started) and waits for it to exit. */
  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return
    const exited = new Promise<void>((resolve) => this.child.once("exit", () => resolve()))
    this.child.kill("SIGTERM")
    const timer = setTimeout(() => this.child.kill("SIGKILL"), 30_000)
    await exited
    clearTimeout(timer)
  }
}

interface Count {
  /** Instructions per task of the producer's enqueueing. */
  readonly producer: number
  /** Instructions per task of the peer serving. */
  readonly peer: number
}

const once = async (redis: CountedRedis, peer: (typeof peers)[number], concurrency: number): Promise<Count> => {
  const connection = redis.connection
  const prefix = `work-${Math.random().toString(16).slice(2, 10)}`
  const results = new Queue(resultsQueue(prefix), { connection })
  try {
    await results.count()
    await redis.zero()
    await enqueueTasks({ prefix, stepName, n, connection })
    const producer = (await redis.instructions()) / n
    const running = await peer.start({ prefix, concurrency, stepName, connection })
    try {
      const t0 = performance.now()
      const waitFor = async (count: number) => {
        let served = await results.count()
        while (served < count) {
          if (performance.now() - t0 > runTimeoutMs) throw new Error(`${peer.name}: ${served} of ${n} results within ${runTimeoutMs / 1000} s`)
          await sleep(20)
          served = await results.count()
        }
        return served
      }
      await waitFor(Math.ceil(n / 5))
      await redis.zero()
      const from = await results.count()
      await waitFor(n)
      const instructions = await redis.instructions()
      return { producer, peer: instructions / (n - from) }
    } finally {
      await running.stop()
    }
  } finally {
    await results.close()
    await deletePrefixKeys(prefix, connection)
  }
}

const main = async () => {
  const why = await missing()
  if (why !== undefined) {
    console.log(`bench:redis counts Redis's instructions under valgrind; ${why}, so it does nothing here.`)
    return
  }
  const dir = await mkdtemp(path.join(os.tmpdir(), "edw-redis-work-"))
  const redis = await CountedRedis.start(dir)
  console.error(`redis-server under callgrind on 127.0.0.1:${redis.connection.port} (pid ${redis.child.pid})`)
  try {
    console.log(`Redis instructions per task, thousands: ${n} tasks per run, ${rounds} rounds at each concurrency\n`)
    console.log(`| concurrency | round | producer | ${peers.map((p) => p.name).join(" | ")} | plain ÷ this worker, producer included | plain ÷ client ceiling, producer included |`)
    console.log(`| ---: | ---: | ---: | ${peers.map(() => "---:").join(" | ")} | ---: | ---: |`)
    for (const concurrency of levels) {
      for (let round = 1; round <= rounds; round++) {
        const counts = new Map<string, Count>()
        for (const peer of peers) {
          const count = await once(redis, peer, concurrency)
          counts.set(peer.name, count)
          console.error(`  c=${concurrency} round ${round} ${peer.name}: ${k(count.peer)}k, producer ${k(count.producer)}k`)
        }
        const producer = [...counts.values()].reduce((sum, c) => sum + c.producer, 0) / counts.size
        const whole = (name: string) => counts.get(name)!.peer + producer
        console.log(
          `| ${concurrency} | ${round} | ${k(producer)} | ${peers.map((p) => k(counts.get(p.name)!.peer)).join(" | ")} | ${
            (whole("plain bullmq") / whole("effect-durable-worker")).toFixed(2)
          }x | ${(whole("plain bullmq") / whole("bullmq client ceiling")).toFixed(2)}x |`
        )
      }
    }
  } finally {
    await redis.stop()
    await rm(dir, { recursive: true, force: true })
  }
}

main().then(() => process.exit(0), (error) => {
  console.error(error)
  process.exit(1)
})
