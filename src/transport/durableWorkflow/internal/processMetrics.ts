import { hostname } from "node:os"

/**
 * `process_metrics` of register and heartbeat bodies: uptime, pid, start time, current resident
 * set, CPU percent since the previous sample (instantaneous, not lifetime), host.
 *
 * @internal
 */
export const makeSampler = (now: () => number) => {
  const startedAt = now() - Math.round(process.uptime() * 1000)
  let last = { wall: startedAt, cpu: 0 }
  return (): Record<string, unknown> => {
    const wall = now()
    const usage = process.cpuUsage()
    const cpu = (usage.user + usage.system) / 1000 // ms
    const elapsed = wall - last.wall
    const percent = elapsed > 0 ? Math.min(100, Math.max(0, ((cpu - last.cpu) / elapsed) * 100)) : 0
    last = { wall, cpu }
    return {
      process_uptime_seconds: Math.max(0, Math.floor((wall - startedAt) / 1000)),
      process_id: process.pid,
      process_started_at: new Date(startedAt).toISOString(),
      memory_bytes: process.memoryUsage.rss(),
      cpu_percent: Math.round(percent * 100) / 100,
      host: hostname().slice(0, 255)
    }
  }
}
