import * as FileSystem from "@effect/platform/FileSystem"
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as os from "node:os"
import * as path from "node:path"
import * as Memory from "../../src/services/Memory.js"

/** A file's text, or `DIR` for a directory where a file is expected (reading it fails). */
const DIR = Symbol("dir")
type Tree = Readonly<Record<string, string | typeof DIR>>

/** Writes a fixture file-system tree into a scoped temp dir and returns its root. */
const fixture = (tree: Tree) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const root = yield* fs.makeTempDirectoryScoped({ prefix: "cgroup-fixture-" })
    for (const [file, content] of Object.entries(tree)) {
      const full = path.join(root, file)
      if (content === DIR) {
        yield* fs.makeDirectory(full, { recursive: true })
      } else {
        yield* fs.makeDirectory(path.dirname(full), { recursive: true })
        yield* fs.writeFileString(full, content)
      }
    }
    return root
  }).pipe(Effect.orDie)

const noPeak = Effect.succeed(undefined)

/** Builds the live services over a fixture tree. */
const memoryAt = (tree: Tree, options: Omit<Memory.MemoryOptions, "root"> = {}) =>
  Effect.gen(function*() {
    const root = yield* fixture(tree)
    const services = yield* Memory.make({ processPeak: noPeak, ...options, root })
    return { root, ...services }
  })

const V2 = "sys/fs/cgroup"
const V1 = "sys/fs/cgroup/memory"

describe("Memory (live sources over fixture trees)", () => {
  describe("usage", () => {
    it.scoped("cgroup v2 subtracts reclaimable page cache (inactive_file), not active_file", () =>
      Effect.gen(function*() {
        const { source } = yield* memoryAt({
          [`${V2}/memory.current`]: "500\n",
          [`${V2}/memory.stat`]: "anon 100\nactive_file 150\ninactive_file 200\n"
        })
        assert.deepStrictEqual(yield* source.sample(), { bytes: 300, source: "cgroup_v2_working_set" })
      }).pipe(Effect.provide(NodeFileSystem.layer)))

    it.scoped("cgroup v2 reports the raw charge when page-cache subtraction is off", () =>
      Effect.gen(function*() {
        const { source } = yield* memoryAt({
          [`${V2}/memory.current`]: "500\n",
          [`${V2}/memory.stat`]: "inactive_file 200\n"
        })
        assert.deepStrictEqual(yield* source.sample({ subtractPageCache: false }), {
          bytes: 500,
          source: "cgroup_v2_current"
        })
      }).pipe(Effect.provide(NodeFileSystem.layer)))

    it.scoped("cgroup v2 without a stat file uses the raw charge", () =>
      Effect.gen(function*() {
        const { source } = yield* memoryAt({ [`${V2}/memory.current`]: "500\n" })
        assert.deepStrictEqual(yield* source.sample(), { bytes: 500, source: "cgroup_v2_current" })
      }).pipe(Effect.provide(NodeFileSystem.layer)))

    it.scoped("cgroup v2 with an unreadable stat file, or inactive_file not below the charge, uses the raw charge", () =>
      Effect.gen(function*() {
        const unreadable = yield* memoryAt({ [`${V2}/memory.current`]: "500\n", [`${V2}/memory.stat`]: DIR })
        assert.deepStrictEqual(yield* unreadable.source.sample(), { bytes: 500, source: "cgroup_v2_current" })
        const oversized = yield* memoryAt({
          [`${V2}/memory.current`]: "500\n",
          [`${V2}/memory.stat`]: "inactive_file 500\n"
        })
        assert.deepStrictEqual(yield* oversized.source.sample(), { bytes: 500, source: "cgroup_v2_current" })
      }).pipe(Effect.provide(NodeFileSystem.layer)))

    it.scoped("falls back to cgroup v1 usage minus total_inactive_file", () =>
      Effect.gen(function*() {
        const { source } = yield* memoryAt({
          [`${V1}/memory.usage_in_bytes`]: "400\n",
          [`${V1}/memory.stat`]: "inactive_file 5\ntotal_inactive_file 100\n"
        })
        assert.deepStrictEqual(yield* source.sample(), { bytes: 300, source: "cgroup_v1_working_set" })
        assert.deepStrictEqual(yield* source.sample({ subtractPageCache: false }), {
          bytes: 400,
          source: "cgroup_v1_usage"
        })
      }).pipe(Effect.provide(NodeFileSystem.layer)))

    it.scoped("cgroup v1 without total_inactive_file subtracts inactive_file", () =>
      Effect.gen(function*() {
        const { source } = yield* memoryAt({
          [`${V1}/memory.usage_in_bytes`]: "400\n",
          [`${V1}/memory.stat`]: "inactive_file 50\n"
        })
        assert.deepStrictEqual(yield* source.sample(), { bytes: 350, source: "cgroup_v1_working_set" })
      }).pipe(Effect.provide(NodeFileSystem.layer)))

    it.scoped("cgroup v1 prefers the process's own memory cgroup named in /proc/self/cgroup", () =>
      Effect.gen(function*() {
        const { source } = yield* memoryAt({
          "proc/self/cgroup": "9:name=systemd:/\n4:memory:/system.slice/worker.service\n0::/\n",
          [`${V1}/memory.usage_in_bytes`]: "9000\n",
          [`${V1}/system.slice/worker.service/memory.usage_in_bytes`]: "700\n"
        })
        assert.deepStrictEqual(yield* source.sample(), { bytes: 700, source: "cgroup_v1_usage" })
      }).pipe(Effect.provide(NodeFileSystem.layer)))

    it.scoped("hybrid host, process moved into a limited v1 cgroup: usage and limit are that cgroup's, not the root's", () =>
      Effect.gen(function*() {
        // The layout of `bench/memory.ts` on a hybrid host: v2 mounted at unified/ with no memory
        // controller, the v1 root unlimited and charged for the whole host, the worker moved into
        // a child cgroup with a 512 MiB limit.
        const { limit, source } = yield* memoryAt({
          "proc/self/cgroup": "9:name=systemd:/\n4:memory:/edw-membench-42-abcd\n1:cpu:/\n0::/\n",
          [`${V2}/unified/cgroup.controllers`]: "\n",
          [`${V1}/memory.usage_in_bytes`]: "1600000000\n",
          [`${V1}/memory.limit_in_bytes`]: "9223372036854771712\n",
          [`${V1}/edw-membench-42-abcd/memory.usage_in_bytes`]: "90000000\n",
          [`${V1}/edw-membench-42-abcd/memory.stat`]: "inactive_file 1000\ntotal_inactive_file 10000000\n",
          [`${V1}/edw-membench-42-abcd/memory.limit_in_bytes`]: "536870912\n"
        })
        assert.deepStrictEqual(yield* source.sample(), { bytes: 80000000, source: "cgroup_v1_working_set" })
        assert.deepStrictEqual(yield* limit.limit, { bytes: 536870912, source: "cgroup_v1_limit_in_bytes" })
      }).pipe(Effect.provide(NodeFileSystem.layer)))

    it.scoped("cgroup v1 uses the mount root when the own cgroup is not visible (a container)", () =>
      Effect.gen(function*() {
        const { source } = yield* memoryAt({
          "proc/self/cgroup": "4:memory:/docker/abc123\n",
          [`${V1}/memory.usage_in_bytes`]: "900\n"
        })
        assert.deepStrictEqual(yield* source.sample(), { bytes: 900, source: "cgroup_v1_usage" })
      }).pipe(Effect.provide(NodeFileSystem.layer)))

    it.scoped("falls back to /proc/self/status VmRSS", () =>
      Effect.gen(function*() {
        const { source } = yield* memoryAt({
          "proc/self/status": "Name:\tnode\nVmPeak:\t 9999 kB\nVmRSS:\t    2048 kB\nVmData:\t 1 kB\n"
        })
        assert.deepStrictEqual(yield* source.sample(), { bytes: 2048 * 1024, source: "proc_vmrss" })
      }).pipe(Effect.provide(NodeFileSystem.layer)))

    it.scoped("unreadable or garbled cgroup files fall through to the next source instead of failing", () =>
      Effect.gen(function*() {
        const { source } = yield* memoryAt({
          [`${V2}/memory.current`]: DIR,
          [`${V1}/memory.usage_in_bytes`]: "not a number\n",
          "proc/self/status": "VmRSS:\t 10 kB\n"
        })
        assert.deepStrictEqual(yield* source.sample(), { bytes: 10 * 1024, source: "proc_vmrss" })
      }).pipe(Effect.provide(NodeFileSystem.layer)))

    it.scoped("the last resort is the process peak from resourceUsage", () =>
      Effect.gen(function*() {
        const root = yield* fixture({})
        const { source } = yield* Memory.make({ root })
        const sample = yield* source.sample()
        assert.strictEqual(sample.source, "rusage_maxrss_peak")
        assert.isAbove(sample.bytes ?? 0, 0)
      }).pipe(Effect.provide(NodeFileSystem.layer)))

    it.scoped("with neither cgroup nor procfs nor a peak, usage is unavailable", () =>
      Effect.gen(function*() {
        const { source } = yield* memoryAt({})
        assert.deepStrictEqual(yield* source.sample(), { bytes: undefined, source: "unavailable" })
      }).pipe(Effect.provide(NodeFileSystem.layer)))

    it.scoped("a peak reader that dies is treated as unreadable", () =>
      Effect.gen(function*() {
        const { source } = yield* memoryAt({}, { processPeak: Effect.dieMessage("boom") })
        assert.deepStrictEqual(yield* source.sample(), { bytes: undefined, source: "unavailable" })
        assert.strictEqual(yield* source.peak, undefined)
      }).pipe(Effect.provide(NodeFileSystem.layer)))
  })

  describe("cgroup v2 directory", () => {
    it.scoped("prefers the mount root when it holds the memory files (cgroup namespace)", () =>
      Effect.gen(function*() {
        const { source, limit } = yield* memoryAt({
          "proc/self/cgroup": "0::/kubepods/pod1/container\n",
          [`${V2}/memory.current`]: "500\n",
          [`${V2}/memory.max`]: "4096\n",
          [`${V2}/kubepods/pod1/container/memory.current`]: "900\n",
          [`${V2}/kubepods/pod1/container/memory.max`]: "8192\n"
        })
        assert.deepStrictEqual(yield* source.sample(), { bytes: 500, source: "cgroup_v2_current" })
        assert.deepStrictEqual(yield* limit.limit, { bytes: 4096, source: "cgroup_v2_memory_max" })
      }).pipe(Effect.provide(NodeFileSystem.layer)))

    it.scoped("resolves our own cgroup from /proc/self/cgroup when the mount root is the root cgroup", () =>
      Effect.gen(function*() {
        const { source, limit } = yield* memoryAt({
          "proc/self/cgroup": "0::/app.slice/worker.service\n",
          [`${V2}/cgroup.controllers`]: "memory\n",
          [`${V2}/app.slice/worker.service/memory.current`]: "700\n",
          [`${V2}/app.slice/worker.service/memory.stat`]: "inactive_file 100\n",
          [`${V2}/app.slice/worker.service/memory.max`]: "2048\n"
        })
        assert.deepStrictEqual(yield* source.sample(), { bytes: 600, source: "cgroup_v2_working_set" })
        assert.deepStrictEqual(yield* limit.limit, { bytes: 2048, source: "cgroup_v2_memory_max" })
      }).pipe(Effect.provide(NodeFileSystem.layer)))

    it.scoped("a v1-only /proc/self/cgroup has no cgroup v2 directory", () =>
      Effect.gen(function*() {
        const { source } = yield* memoryAt({
          "proc/self/cgroup": "4:memory:/docker/abc\n1:cpu:/docker/abc\n",
          // A stray memory.current under a path named like the v1 line must not be taken for v2.
          [`${V2}/docker/abc/memory.current`]: "123\n",
          "proc/self/status": "VmRSS:\t 4 kB\n"
        })
        assert.deepStrictEqual(yield* source.sample(), { bytes: 4096, source: "proc_vmrss" })
      }).pipe(Effect.provide(NodeFileSystem.layer)))
  })

  describe("limit", () => {
    it.scoped("prefers cgroup v2 memory.max", () =>
      Effect.gen(function*() {
        const { limit } = yield* memoryAt({
          [`${V2}/memory.current`]: "1\n",
          [`${V2}/memory.max`]: "4096\n",
          [`${V1}/memory.usage_in_bytes`]: "1\n",
          [`${V1}/memory.limit_in_bytes`]: "2048\n"
        })
        assert.deepStrictEqual(yield* limit.limit, { bytes: 4096, source: "cgroup_v2_memory_max" })
      }).pipe(Effect.provide(NodeFileSystem.layer)))

    it.scoped("v2 \"max\" (unlimited) falls back to cgroup v1", () =>
      Effect.gen(function*() {
        const { limit } = yield* memoryAt({
          [`${V2}/memory.current`]: "1\n",
          [`${V2}/memory.max`]: "max\n",
          [`${V1}/memory.usage_in_bytes`]: "1\n",
          [`${V1}/memory.limit_in_bytes`]: "2048\n"
        })
        assert.deepStrictEqual(yield* limit.limit, { bytes: 2048, source: "cgroup_v1_limit_in_bytes" })
      }).pipe(Effect.provide(NodeFileSystem.layer)))

    it.scoped("the cgroup v1 unlimited sentinel means no limit: the host total is used", () =>
      Effect.gen(function*() {
        const { limit } = yield* memoryAt({
          [`${V1}/memory.usage_in_bytes`]: "1\n",
          [`${V1}/memory.limit_in_bytes`]: "9223372036854771712\n"
        })
        const read = yield* limit.limit
        assert.deepStrictEqual(read, { bytes: os.totalmem(), source: "host_total" })
        assert.isBelow(read.bytes ?? Infinity, 2 ** 62)
      }).pipe(Effect.provide(NodeFileSystem.layer)))

    it.scoped("with no cgroup at all the limit is the host total", () =>
      Effect.gen(function*() {
        const { limit } = yield* memoryAt({ "proc/self/status": "VmRSS:\t 4 kB\n" })
        assert.deepStrictEqual(yield* limit.limit, { bytes: os.totalmem(), source: "host_total" })
      }).pipe(Effect.provide(NodeFileSystem.layer)))

    it.scoped("an unreadable memory.max falls through, and no host total means no limit", () =>
      Effect.gen(function*() {
        const { limit } = yield* memoryAt(
          { [`${V2}/memory.current`]: "1\n", [`${V2}/memory.max`]: DIR },
          { hostTotal: Effect.succeed(undefined) }
        )
        assert.deepStrictEqual(yield* limit.limit, { bytes: undefined, source: "unavailable" })
      }).pipe(Effect.provide(NodeFileSystem.layer)))

    it.scoped("the limit is read once and cached; usage is read on every sample", () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const { limit, root, source } = yield* memoryAt({
          [`${V2}/memory.current`]: "100\n",
          [`${V2}/memory.max`]: "4096\n"
        })
        assert.strictEqual((yield* limit.limit).bytes, 4096)
        assert.strictEqual((yield* source.sample()).bytes, 100)
        yield* fs.writeFileString(path.join(root, V2, "memory.max"), "8192\n")
        yield* fs.writeFileString(path.join(root, V2, "memory.current"), "200\n")
        assert.strictEqual((yield* limit.limit).bytes, 4096)
        assert.strictEqual((yield* source.sample()).bytes, 200)
      }).pipe(Effect.provide(NodeFileSystem.layer)))
  })

  it.effect("the live layer reads this machine without failing", () =>
    Effect.gen(function*() {
      const source = yield* Memory.MemorySource
      const limit = yield* Memory.MemoryLimit
      const sample = yield* source.sample()
      assert.isAbove(sample.bytes ?? 0, 0)
      assert.notStrictEqual(sample.source, "unavailable")
      assert.isAbove((yield* limit.limit).bytes ?? 0, 0)
    }).pipe(Effect.provide(Memory.layer())))

  it.effect("the test double follows what it is told, and a broken reader dies (callers must guard)", () =>
    Effect.gen(function*() {
      const source = yield* Memory.MemorySource
      const limit = yield* Memory.MemoryLimit
      const control = yield* Memory.MemoryTest
      assert.deepStrictEqual(yield* source.sample(), { bytes: 100, source: "custom" })
      assert.deepStrictEqual(yield* limit.limit, { bytes: 1000, source: "custom" })
      yield* control.setUsage(700)
      yield* control.setUsage(200)
      assert.deepStrictEqual(yield* source.sample(), { bytes: 200, source: "custom" })
      assert.strictEqual(yield* source.peak, 700)
      yield* control.breakReads("usage")
      assert.isTrue(Exit.isFailure(yield* Effect.exit(source.sample())))
      assert.strictEqual(yield* source.peak, 700)
    }).pipe(Effect.provide(Memory.layerTest({ usage: 100, limit: 1000 }))))
})
