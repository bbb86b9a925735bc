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
