/**
 * The state machine of the concurrency controller and memory admission gate. No I/O and no clock:
 * every memory reading and timestamp is passed in, every method is synchronous, so each call is
 * atomic with respect to other fibers.
 *
 * @internal
 */
import type { ResolvedConcurrency } from "../Concurrency.js"
import type {
  AdjustReason,
  ConcurrencyStatus,
  LastAdjust,
  MemoryStatus,
  TaskKind
} from "../ConcurrencyController.js"
import type { MemorySourceName } from "../Memory.js"

/** Latency samples kept for the gradient, error rate, throughput and p95. */
export const WINDOW_SIZE = 100
/** Solo-run samples kept per step name; the cost is their maximum. */
export const COST_SAMPLES = 5
/** Weight of the old value in the long-term latency baseline. */
export const RTT_LONG_ALPHA = 0.9

/** One memory reading, taken just before a state transition. */
export interface Reading {
  readonly usage: number | undefined
  readonly source: MemorySourceName
  readonly limitBytes: number | undefined
  readonly peak: number | undefined
}

interface InFlight {
  readonly name: string | undefined
  readonly kind: TaskKind
  /** Whether it takes one of the slots the limit sizes (see `limited` of `start`). */
  readonly limited: boolean
  readonly usageAtStart: number | undefined
  readonly peakAtStart: number | undefined
  growth: number
  /** The highest usage read while it ran alone (ticks and its settle; not its start). */
  high: number | undefined
  solo: boolean
}

/**
 * The last {@link WINDOW_SIZE} step completions, oldest first, in fixed arrays: one is recorded for
 * every task, so recording allocates nothing and drops the oldest in place.
 */
class CompletionWindow {
  private readonly at = new Float64Array(WINDOW_SIZE)
  private readonly durationMs = new Float64Array(WINDOW_SIZE)
  private readonly ok = new Uint8Array(WINDOW_SIZE)
  /** Where the next completion goes (the oldest one once the window is full). */
  private next = 0
  size = 0

  push(at: number, durationMs: number, ok: boolean): void {
    this.at[this.next] = at
    this.durationMs[this.next] = durationMs
    this.ok[this.next] = ok ? 1 : 0
    this.next = (this.next + 1) % WINDOW_SIZE
    if (this.size < WINDOW_SIZE) this.size += 1
  }

  /** The index of the i-th oldest completion. */
  private slot(i: number): number {
    return (this.next - this.size + i + WINDOW_SIZE) % WINDOW_SIZE
  }

  /** The durations, ascending. */
  sortedDurations(): Array<number> {
    return Array.from({ length: this.size }, (_, i) => this.durationMs[this.slot(i)]!).sort((a, b) => a - b)
  }

  failures(): number {
    let failed = 0
    for (let i = 0; i < this.size; i++) failed += 1 - this.ok[this.slot(i)]!
    return failed
  }

  /** Milliseconds from the oldest completion to the newest. */
  spanMs(): number {
    return this.at[this.slot(this.size - 1)]! - this.at[this.slot(0)]!
  }
}

const median = (sorted: ReadonlyArray<number>): number => {
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

/** The controller's mutable state and its transitions. */
export class ControllerCore {
  limit: number
  rttLong: number | undefined = undefined
  lastAdjust: LastAdjust | undefined = undefined
  cpuPct: number | undefined = undefined
  idleUsage: number | undefined = undefined
  headroomTicks = 0
  deferring = false
  waiting = 0
  deferrals = 0
  lastDeferredAt: number | undefined = undefined
  probePending = true
  draining = false
  /**
   * The lowest usage ever read: the process's memory without the garbage a collector has not yet
   * reclaimed. A solo run's cost is at least its highest reading above this floor (see `learn`).
   */
  usageFloor: number | undefined = undefined
  private readonly window = new CompletionWindow()
  private readonly inflight = new Map<number, InFlight>()
  private readonly stepCosts = new Map<string, Array<number>>()
  private completionsThisTick = 0
  private stallTicks = 0
  private tokenSeq = 0
  /**
   * The tasks in flight that take one of the slots the limit sizes. A task of a pool of its own (a
   * Durable Workflow workflow task under `workflowConcurrency`) is counted in flight but is no part
   * of the limit's arithmetic: another pool bounds it, and counting it would hold steps back for
   * slots they do not share.
   */
  private limitedInFlight = 0
  /** The task that started with nothing else in flight, while it still runs alone (at most one). */
  private soloRecord: InFlight | undefined = undefined

  constructor(readonly config: ResolvedConcurrency) {
    this.limit = config.limit
  }

  get inFlight(): number {
    return this.inflight.size
  }

  /** Percent of the limit in use, or `undefined` when either side is unknown. */
  usagePct(r: Reading): number | undefined {
    return r.usage === undefined || r.limitBytes === undefined || r.limitBytes <= 0
      ? undefined
      : (100 * r.usage) / r.limitBytes
  }

  /** The memory a task with this step name is expected to take: 0 for unnamed tasks (workflow turns). */
  stepCost(name: string | undefined): number {
    if (!this.config.stepCostTracking || name === undefined || name === "") return 0
    const samples = this.stepCosts.get(name)
    if (samples !== undefined) return Math.max(...samples)
    let largest = 0
    for (const s of this.stepCosts.values()) largest = Math.max(largest, ...s)
    return largest
  }

  /** The learned cost of every step name. */
  learnedCosts(): Record<string, number> {
    const out: Record<string, number> = {}
    for (const [name, samples] of this.stepCosts) out[name] = Math.max(...samples)
    return out
  }

  /** Whether the gate admits a step with this name now (rules in order; may latch/unlatch `deferring`). */
  tryAdmit(name: string | undefined, r: Reading): boolean {
    this.observe(r)
    if (this.config.mode !== "adaptive" || !this.config.ramAdmission) return true
    if (this.limitedInFlight === 0) {
      // only a reading with nothing at all in flight is the idle baseline
      if (r.usage !== undefined && this.inflight.size === 0) this.idleUsage = r.usage
      this.deferring = false
      return true
    }
    if (this.limitedInFlight >= this.limit) return false
    if (r.usage === undefined || r.limitBytes === undefined || r.limitBytes <= 0) return true
    if (this.config.stepCostTracking && this.probePending && this.stepCosts.size === 0) return false
    const newCost = this.stepCost(name)
    let projected = r.usage + newCost
    if (this.idleUsage !== undefined) {
      let reserved = newCost
      for (const record of this.inflight.values()) {
        if (record.kind === "step") reserved += this.stepCost(record.name)
      }
      projected = Math.max(projected, this.idleUsage + reserved)
    }
    const mark = this.deferring ? this.config.ramResumePct : this.config.ramAdmitPct
    const admitted = (100 * projected) / r.limitBytes <= mark
    this.deferring = !admitted
    return admitted
  }

  /**
   * Records a task as started and returns its token. `limited` is whether it takes one of the slots
   * the limit sizes (`false` for a task of a pool of its own).
   */
  start(name: string | undefined, kind: TaskKind, r: Reading, limited = true): number {
    this.observe(r)
    const solo = this.inflight.size === 0
    // only a task that started alone can still be running alone: it is no longer
    if (this.soloRecord !== undefined) this.soloRecord.solo = false
    const token = ++this.tokenSeq
    const track = solo && this.config.stepCostTracking
    const record: InFlight = {
      name,
      kind,
      limited,
      usageAtStart: track ? r.usage : undefined,
      peakAtStart: track ? r.peak : undefined,
      growth: 0,
      high: undefined,
      solo
    }
    this.soloRecord = solo ? record : undefined
    this.inflight.set(token, record)
    if (limited) this.limitedInFlight += 1
    return token
  }

  /** Records a task as finished: learns its cost if it ran alone, and (steps only) feeds the latency window. */
  settle(token: number, durationMs: number, ok: boolean, r: Reading, now: number): void {
    this.observe(r)
    const record = this.inflight.get(token)
    if (record === undefined) return
    this.forget(token, record)
    if (record.solo && r.usage !== undefined) record.high = Math.max(record.high ?? r.usage, r.usage)
    if (record.kind === "step") {
      this.probePending = false
      this.learn(record, r)
    }
    if (this.inflight.size === 0 && r.usage !== undefined) this.idleUsage = r.usage
    // only the limit's own tasks show it is not stalled: a task of a pool of its own completing (a
    // Durable Workflow workflow task) says nothing of the activities stuck in its slots
    if (record.limited) this.completionsThisTick += 1
    if (record.kind !== "step") return
    this.window.push(now, durationMs, ok)
  }

  /** Forgets a started task without any sample (it never ran). */
  release(token: number): void {
    const record = this.inflight.get(token)
    if (record !== undefined) this.forget(token, record)
  }

  private forget(token: number, record: InFlight): void {
    this.inflight.delete(token)
    if (record.limited) this.limitedInFlight -= 1
  }

  /** Lowers the usage floor to this reading when it is lower. */
  private observe(r: Reading): void {
    if (r.usage !== undefined && (this.usageFloor === undefined || r.usage < this.usageFloor)) this.usageFloor = r.usage
  }

  /**
   * Learns a solo run's cost: the largest of its tick-sampled growth, its net growth at settle and
   * its process-peak growth (B.9), and its highest reading above the usage floor. The last term is
   * for garbage-collected runtimes: a run's start reading holds the garbage of earlier runs, which
   * the run's own allocations make the collector reclaim, so its net growth can be near zero while
   * it held its full cost; five such samples would otherwise erase a true cost from the window. The
   * floor is the lowest reading ever, so this term can only overstate a cost (by whatever the
   * process keeps for good since that reading), never understate it.
   */
  private learn(record: InFlight, r: Reading): void {
    if (!this.config.stepCostTracking || !record.solo || record.name === undefined || record.name === "") return
    if (record.usageAtStart === undefined) return
    let observed = record.growth
    if (r.usage !== undefined) observed = Math.max(observed, r.usage - record.usageAtStart)
    if (r.peak !== undefined && record.peakAtStart !== undefined) {
      observed = Math.max(observed, r.peak - record.peakAtStart)
    }
    if (record.high !== undefined && this.usageFloor !== undefined) {
      observed = Math.max(observed, record.high - this.usageFloor)
    }
    const samples = this.stepCosts.get(record.name) ?? []
    samples.push(Math.max(0, Math.floor(observed)))
    if (samples.length > COST_SAMPLES) samples.shift()
    this.stepCosts.set(record.name, samples)
  }

  /** One control-loop iteration. Returns the adjustment when the limit moved. */
  tick(r: Reading, cpuPct: number | undefined, now: number): LastAdjust | undefined {
    this.cpuPct = cpuPct
    this.observe(r)
    const pct = this.usagePct(r)
    if (r.usage !== undefined) {
      for (const record of this.inflight.values()) {
        if (record.solo && record.usageAtStart !== undefined) {
          record.growth = Math.max(record.growth, r.usage - record.usageAtStart)
          record.high = Math.max(record.high ?? r.usage, r.usage)
        }
      }
      if (this.inflight.size === 0) this.idleUsage = r.usage
    }
    if (pct === undefined || pct <= this.config.ramResumePct) {
      this.headroomTicks += 1
      this.deferring = false
    } else {
      this.headroomTicks = 0
    }
    const stalled = this.completionsThisTick === 0 && this.limitedInFlight > 0
    this.stallTicks = stalled ? this.stallTicks + 1 : 0
    this.completionsThisTick = 0
    return this.config.mode === "adaptive" ? this.decide(pct, now) : undefined
  }

  private decide(pct: number | undefined, now: number): LastAdjust | undefined {
    const { config } = this
    const current = this.limit
    let next = current
    let reason: AdjustReason | undefined
    if (pct !== undefined && pct >= config.ramCeilingPct) {
      next = config.min
      reason = "ram_ceiling"
      this.headroomTicks = 0
      this.deferring = true
    } else if (
      config.cpuCeilingPct !== undefined && this.cpuPct !== undefined && this.cpuPct >= config.cpuCeilingPct
    ) {
      next = Math.max(config.min, current - 1)
      reason = "cpu_ceiling"
    } else if (this.errorRate() > 0.2 || this.stallTicks >= 2) {
      next = Math.max(config.min, current - 1)
      reason = "backpressure"
    } else {
      const g = this.gradient()
      if (g !== undefined && g < 0.7) {
        next = Math.max(config.min, Math.floor(current * g))
        reason = "shrink"
      } else if (
        g !== undefined && g >= 0.9 && this.limitedInFlight >= current * 0.8 &&
        this.headroomTicks >= config.growHeadroomTicks
      ) {
        next = Math.min(config.max, current + 1)
        reason = "grow"
      }
    }
    next = Math.min(config.max, Math.max(config.min, next))
    if (next === current || reason === undefined) return undefined
    this.lastAdjust = { at: now, from: current, to: next, reason }
    this.limit = next
    return this.lastAdjust
  }

  /** The latency gradient `min(1, rttLong / median)`; updates the long-term baseline. `undefined` with no data. */
  gradient(): number | undefined {
    if (this.window.size === 0) return undefined
    const durations = this.window.sortedDurations()
    const currentMin = durations[0]!
    this.rttLong = this.rttLong === undefined
      ? currentMin
      : RTT_LONG_ALPHA * this.rttLong + (1 - RTT_LONG_ALPHA) * currentMin
    const short = median(durations)
    return short <= 0 ? 1 : Math.min(1, this.rttLong / short)
  }

  /** Fraction of the window that failed. */
  errorRate(): number {
    if (this.window.size === 0) return 0
    return this.window.failures() / this.window.size
  }

  /** Step completions per minute over the window's span; `undefined` with fewer than two or no span. */
  throughputPerMin(): number | undefined {
    if (this.window.size < 2) return undefined
    const spanMs = this.window.spanMs()
    return spanMs <= 0 ? undefined : (this.window.size / spanMs) * 60_000
  }

  /** The 95th-percentile step duration; `undefined` with no completions. */
  p95Ms(): number | undefined {
    const n = this.window.size
    if (n === 0) return undefined
    const sorted = this.window.sortedDurations()
    return sorted[Math.min(n - 1, Math.max(0, Math.ceil(0.95 * n) - 1))]
  }

  /** The heartbeat status; absent measurements are omitted. */
  snapshot(r: Reading): ConcurrencyStatus {
    const { config } = this
    const adaptive = config.mode === "adaptive"
    const pct = this.usagePct(r)
    const throughput = this.throughputPerMin()
    const p95 = this.p95Ms()
    const costs = this.learnedCosts()
    const memory: MemoryStatus = {
      source: r.source,
      ...(this.idleUsage !== undefined ? { idleUsageBytes: this.idleUsage } : {}),
      ...(adaptive && config.ramAdmission
        ? {
          gate: this.deferring ? "deferring" as const : "open" as const,
          admitPct: config.ramAdmitPct,
          resumePct: config.ramResumePct,
          waiting: this.waiting,
          deferrals: this.deferrals,
          headroomTicks: this.headroomTicks,
          ...(this.lastDeferredAt !== undefined ? { lastDeferredAt: this.lastDeferredAt } : {})
        }
        : {}),
      ...(Object.keys(costs).length > 0 ? { stepCostBytes: costs } : {})
    }
    return {
      runtime: "node",
      concurrency: adaptive
        ? { mode: "adaptive", limit: this.limit, min: config.min, max: config.max }
        : { mode: "fixed", limit: this.limit },
      inFlight: this.inflight.size,
      ...(r.usage !== undefined ? { rssBytes: r.usage } : {}),
      ...(r.limitBytes !== undefined ? { rssLimitBytes: r.limitBytes } : {}),
      ...(pct !== undefined ? { rssPct: pct } : {}),
      ...(this.cpuPct !== undefined ? { cpuPct: this.cpuPct } : {}),
      ...(throughput !== undefined ? { throughputPerMin: throughput } : {}),
      ...(p95 !== undefined ? { p95Ms: p95 } : {}),
      ...(this.lastAdjust !== undefined ? { lastAdjust: this.lastAdjust } : {}),
      memory
    }
  }
}
