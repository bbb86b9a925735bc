/**
 * The statistics the alternating benchmarks report: medians, and a ratio taken round by round (the
 * shared machine's speed drifts far more between rounds, seconds apart, than within one).
 */

/** The median; of an even count, the mean of the middle two. */
export const median = (values: ReadonlyArray<number>): number => {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

/** The median over the rounds of each round's `a / b` (`a[i]` and `b[i]` from round `i`). */
export const roundRatio = (a: ReadonlyArray<number>, b: ReadonlyArray<number>): number => median(a.map((x, i) => x / b[i]!))

/** The `p` quantile (0–1) by the nearest rank at or below it. */
export const percentile = (values: ReadonlyArray<number>, p: number): number =>
  [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(values.length * p))]!

/**
 * Median µs per call of `run`, measured for at least `minMs` (and at least 5 runs) after a warm-up of
 * a third of that (and at least 20 runs), so the JIT has compiled the hot paths of every case.
 */
export const medianMicros = async (run: () => Promise<unknown>, minMs: number): Promise<number> => {
  const warm = performance.now() + minMs / 3
  for (let i = 0; i < 20 || performance.now() < warm; i++) await run()
  const samples: Array<number> = []
  const until = performance.now() + minMs
  while (samples.length < 5 || performance.now() < until) {
    const started = performance.now()
    await run()
    samples.push((performance.now() - started) * 1_000)
  }
  return median(samples)
}

/** A figure in µs for a table: whole from 100, one decimal from 10, two below. */
export const formatMicros = (value: number): string =>
  value >= 100 ? value.toFixed(0) : value >= 10 ? value.toFixed(1) : value.toFixed(2)
