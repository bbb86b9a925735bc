/**
 * Reading the process's memory use and memory limit from cgroup v2, cgroup v1 and procfs files.
 * Every read that fails (missing file, unreadable file, garbage content) yields `undefined`, so a
 * caller falls through to the next source; nothing here fails or dies.
 *
 * @internal
 */
import type * as FileSystem from "@effect/platform/FileSystem"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as path from "node:path"

/** Values at or above this are "no limit" (the cgroup v1 sentinel is about 2^63). */
export const UNLIMITED_THRESHOLD = 2 ** 62

/** Where the memory files of this process's cgroup live (each `undefined` when absent). */
export interface CgroupDirs {
  readonly v2: string | undefined
  readonly v1: string | undefined
}

/** Reads a file as text; `None` on any error. */
const readText = (fs: FileSystem.FileSystem, file: string): Effect.Effect<Option.Option<string>> =>
  fs.readFileString(file).pipe(Effect.option)

const exists = (fs: FileSystem.FileSystem, file: string): Effect.Effect<boolean> =>
  fs.exists(file).pipe(Effect.orElseSucceed(() => false))

/** Parses a file holding one non-negative integer; `undefined` on empty, `max` or non-integer content. */
export const parseIntFile = (text: string): number | undefined => {
  const trimmed = text.trim()
  return /^\d+$/.test(trimmed) ? Number(trimmed) : undefined
}

/** Parses `memory.stat` (`key value` lines) into a map of integer values. */
export const parseStat = (text: string): ReadonlyMap<string, number> => {
  const out = new Map<string, number>()
  for (const line of text.split("\n")) {
    const [key, value] = line.trim().split(/\s+/)
    if (key !== undefined && value !== undefined && /^\d+$/.test(value)) out.set(key, Number(value))
  }
  return out
}

/** Parses the `VmRSS:` line of `/proc/self/status` into bytes. */
export const parseVmRss = (text: string): number | undefined => {
  const match = /^VmRSS:\s*(\d+)\s*kB/m.exec(text)
  return match?.[1] === undefined ? undefined : Number(match[1]) * 1024
}

/** The cgroup paths of this process from `/proc/self/cgroup`: the v2 path and the v1 memory-controller path. */
export const parseProcCgroup = (text: string): { readonly v2: string | undefined; readonly v1Memory: string | undefined } => {
  let v2: string | undefined
  let v1Memory: string | undefined
  for (const line of text.split("\n")) {
    const first = line.indexOf(":")
    const second = line.indexOf(":", first + 1)
    if (first < 0 || second < 0) continue
    const id = line.slice(0, first)
    const controllers = line.slice(first + 1, second)
    const rel = line.slice(second + 1).trim()
    if (rel === "") continue
    if (id === "0" && controllers === "") v2 = rel
    else if (controllers.split(",").includes("memory")) v1Memory = rel
  }
  return { v2, v1Memory }
}

const within = (dir: string, rel: string): string => path.join(dir, ...rel.split("/").filter((s) => s !== ""))

/**
 * Finds this process's cgroup directories under `root`:
 *
 * - v2: the mount root `sys/fs/cgroup` when it holds `memory.current` (a container with a cgroup
 *   namespace), else `sys/fs/cgroup/<rel>` from the `0::<rel>` line of `proc/self/cgroup` when that
 *   holds `memory.current` (a systemd or docker host), else none;
 * - v1: `sys/fs/cgroup/memory/<rel>` from the `memory` line of `proc/self/cgroup` when that holds
 *   `memory.usage_in_bytes`, else the v1 mount root when it does (a container), else none.
 */
export const resolveDirs = (fs: FileSystem.FileSystem, root: string): Effect.Effect<CgroupDirs> =>
  Effect.gen(function*() {
    const mount = path.join(root, "sys", "fs", "cgroup")
    const v1Mount = path.join(mount, "memory")
    const own = Option.match(yield* readText(fs, path.join(root, "proc", "self", "cgroup")), {
      onNone: () => ({ v2: undefined, v1Memory: undefined }),
      onSome: parseProcCgroup
    })
    let v2: string | undefined
    if (yield* exists(fs, path.join(mount, "memory.current"))) v2 = mount
    else if (own.v2 !== undefined) {
      const dir = within(mount, own.v2)
      if (yield* exists(fs, path.join(dir, "memory.current"))) v2 = dir
    }
    let v1: string | undefined
    if (own.v1Memory !== undefined) {
      const dir = within(v1Mount, own.v1Memory)
      if (yield* exists(fs, path.join(dir, "memory.usage_in_bytes"))) v1 = dir
    }
    if (v1 === undefined && (yield* exists(fs, path.join(v1Mount, "memory.usage_in_bytes")))) v1 = v1Mount
    return { v2, v1 }
  })

const readInt = (fs: FileSystem.FileSystem, file: string): Effect.Effect<number | undefined> =>
  readText(fs, file).pipe(Effect.map(Option.match({ onNone: () => undefined, onSome: parseIntFile })))

const readStat = (fs: FileSystem.FileSystem, file: string): Effect.Effect<ReadonlyMap<string, number>> =>
  readText(fs, file).pipe(Effect.map(Option.match({ onNone: () => new Map<string, number>(), onSome: parseStat })))

/** The usage sources, most precise first. */
export type UsageSourceName =
  | "cgroup_v2_working_set"
  | "cgroup_v2_current"
  | "cgroup_v1_working_set"
  | "cgroup_v1_usage"
  | "proc_vmrss"
  | "rusage_maxrss_peak"
  | "unavailable"

/** One usage read and where it came from. */
export interface UsageRead {
  readonly bytes: number | undefined
  readonly source: UsageSourceName
}

/**
 * Reads the current memory use: cgroup v2 `memory.current` (minus `inactive_file`), else cgroup v1
 * `memory.usage_in_bytes` (minus `total_inactive_file`), else `VmRSS`, else the process peak.
 */
export const readUsage = (
  fs: FileSystem.FileSystem,
  root: string,
  dirs: CgroupDirs,
  subtractPageCache: boolean,
  processPeak: Effect.Effect<number | undefined>
): Effect.Effect<UsageRead> =>
  Effect.gen(function*() {
    if (dirs.v2 !== undefined) {
      const current = yield* readInt(fs, path.join(dirs.v2, "memory.current"))
      if (current !== undefined && current > 0) {
        if (subtractPageCache) {
          const inactive = (yield* readStat(fs, path.join(dirs.v2, "memory.stat"))).get("inactive_file")
          if (inactive !== undefined && inactive < current) {
            return { bytes: current - inactive, source: "cgroup_v2_working_set" } as const
          }
        }
        return { bytes: current, source: "cgroup_v2_current" } as const
      }
    }
    if (dirs.v1 !== undefined) {
      const usage = yield* readInt(fs, path.join(dirs.v1, "memory.usage_in_bytes"))
      if (usage !== undefined && usage > 0) {
        if (subtractPageCache) {
          const stat = yield* readStat(fs, path.join(dirs.v1, "memory.stat"))
          const inactive = stat.get("total_inactive_file") ?? stat.get("inactive_file")
          if (inactive !== undefined && inactive < usage) {
            return { bytes: usage - inactive, source: "cgroup_v1_working_set" } as const
          }
        }
        return { bytes: usage, source: "cgroup_v1_usage" } as const
      }
    }
    const status = yield* readText(fs, path.join(root, "proc", "self", "status"))
    const rss = Option.isSome(status) ? parseVmRss(status.value) : undefined
    if (rss !== undefined && rss > 0) return { bytes: rss, source: "proc_vmrss" } as const
    const peak = yield* processPeak.pipe(Effect.catchAllDefect(() => Effect.succeed(undefined)))
    if (peak !== undefined && peak > 0) return { bytes: peak, source: "rusage_maxrss_peak" } as const
    return { bytes: undefined, source: "unavailable" } as const
  })

/** The limit sources, in the order they are tried. */
export type LimitSourceName = "cgroup_v2_memory_max" | "cgroup_v1_limit_in_bytes" | "host_total" | "unavailable"

/** One limit read and where it came from. */
export interface LimitRead {
  readonly bytes: number | undefined
  readonly source: LimitSourceName
}

const bounded = (v: number | undefined): number | undefined =>
  v !== undefined && v > 0 && v < UNLIMITED_THRESHOLD ? v : undefined

/**
 * Reads the memory limit: cgroup v2 `memory.max`, else cgroup v1 `memory.limit_in_bytes` (`max`
 * and the v1 "unlimited" sentinel fall through), else the host's total memory.
 */
export const readLimit = (
  fs: FileSystem.FileSystem,
  dirs: CgroupDirs,
  hostTotal: Effect.Effect<number | undefined>
): Effect.Effect<LimitRead> =>
  Effect.gen(function*() {
    if (dirs.v2 !== undefined) {
      const max = bounded(yield* readInt(fs, path.join(dirs.v2, "memory.max")))
      if (max !== undefined) return { bytes: max, source: "cgroup_v2_memory_max" } as const
    }
    if (dirs.v1 !== undefined) {
      const limit = bounded(yield* readInt(fs, path.join(dirs.v1, "memory.limit_in_bytes")))
      if (limit !== undefined) return { bytes: limit, source: "cgroup_v1_limit_in_bytes" } as const
    }
    const total = yield* hostTotal.pipe(Effect.catchAllDefect(() => Effect.succeed(undefined)))
    if (total !== undefined && total > 0) return { bytes: total, source: "host_total" } as const
    return { bytes: undefined, source: "unavailable" } as const
  })
