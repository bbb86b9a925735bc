import { assert, describe, it } from "@effect/vitest"
import * as Core from "@dudousxd/nestjs-durable-core"
import * as UpstreamTransport from "@dudousxd/nestjs-durable-transport-bullmq"
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import { readFileSync } from "node:fs"
import * as Descriptor from "../../src/transport/bullmq/internal/descriptor.js"

const fixtureText = (name: string): string =>
  readFileSync(new URL(`../fixtures/nestjs-durable/${name}`, import.meta.url), "utf8")

const descriptorFixture = (name: string): Descriptor.WorkerDescriptor =>
  Schema.decodeUnknownSync(Descriptor.WorkerDescriptor)(JSON.parse(fixtureText(name)))

/** Standard FNV-1a-64 over a byte sequence, written independently of the module under test. */
const fnv1a64Bytes = (bytes: Uint8Array): string => {
  let h = 14695981039346656037n
  for (const b of bytes) {
    h = BigInt.asUintN(64, (h ^ BigInt(b)) * 1099511628211n)
  }
  return h.toString(16).padStart(16, "0")
}

/** The SDKs' variant: one multiply per UTF-16 code unit, after XOR-ing its little-endian byte pair. */
const fnv1a64Utf16Le = (text: string): string => {
  const bytes = Buffer.from(text, "utf16le")
  let h = 14695981039346656037n
  for (let i = 0; i < bytes.length; i += 2) {
    h = BigInt.asUintN(64, (h ^ BigInt(bytes[i]!) ^ BigInt(bytes[i + 1]!)) * 1099511628211n)
  }
  return h.toString(16).padStart(16, "0")
}

const base: Descriptor.WorkerDescriptor = {
  instanceId: "ts-host-1",
  runtime: "node",
  sdk: { name: "effect-durable-worker", version: "0.1.0" },
  protocol: { version: 1, range: [1, 1] },
  capabilities: ["saga", "signals"],
  workflows: ["checkout", "refund"],
  steps: ["billing.charge", "billing.refund"],
  partition: "acme",
  namespace: "prod",
  startedAt: 1_752_710_400_000
}

describe("bullmq descriptor", () => {
  describe("fixtures", () => {
    for (const name of ["descriptor.json", "descriptor-registrations.json"]) {
      it(`decodes ${name} and re-encodes it byte for byte`, () => {
        const decoded = descriptorFixture(name)
        const encoded = Schema.encodeSync(Descriptor.WorkerDescriptor)(decoded)
        assert.strictEqual(JSON.stringify(encoded, null, 2) + "\n", fixtureText(name))
      })
    }

    it("hashes descriptor.json to the golden ETag", () => {
      assert.strictEqual(Descriptor.descriptorHash(descriptorFixture("descriptor.json")), "44c6793c8eb7089f")
    })

    it("hashes descriptor-registrations.json to the golden ETag", () => {
      assert.strictEqual(Descriptor.descriptorHash(descriptorFixture("descriptor-registrations.json")), "8923307c940a5dde")
    })

    it("changes the hash when registrations are removed", () => {
      const { registrations, ...without } = descriptorFixture("descriptor-registrations.json")
      assert.isDefined(registrations)
      const hash = Descriptor.descriptorHash(without)
      assert.notStrictEqual(hash, "8923307c940a5dde")
      assert.match(hash, /^[0-9a-f]{16}$/)
    })

    it("decodes the heartbeat fixture as the handshake form whose ETag is descriptor.json's", () => {
      const text = fixtureText("heartbeat-status.json")
      const beat = Schema.decodeUnknownSync(Descriptor.LifecycleHeartbeat)(JSON.parse(text))
      assert.strictEqual(JSON.stringify(Schema.encodeSync(Descriptor.LifecycleHeartbeat)(beat), null, 2) + "\n", text)
      assert.strictEqual(beat.status, "up")
      assert.strictEqual(beat.ts, 1_752_710_460_000)
      assert.strictEqual(beat.descriptorHash, Descriptor.descriptorHash(descriptorFixture("descriptor.json")))
      // The runtime liveness value carries a WorkerStatus object, so the fixture's string status is not one.
      assert.isTrue(Either.isLeft(Schema.decodeUnknownEither(Descriptor.WorkerHeartbeatValue)(JSON.parse(text))))
    })
  })

  describe("descriptorHash", () => {
    it("is insensitive to list order, duplicates and key insertion order", () => {
      const h = Descriptor.descriptorHash(base)
      const shuffled: Descriptor.WorkerDescriptor = {
        startedAt: base.startedAt,
        namespace: "prod",
        partition: "acme",
        steps: ["billing.refund", "billing.charge", "billing.refund"],
        workflows: ["refund", "checkout", "checkout"],
        capabilities: ["signals", "saga", "signals"],
        protocol: { range: [1, 1], version: 1 },
        sdk: { version: "0.1.0", name: "effect-durable-worker" },
        runtime: "node",
        instanceId: "ts-host-1"
      }
      assert.strictEqual(Descriptor.descriptorHash(shuffled), h)
    })

    it("is insensitive to registration order and duplicate registrations", () => {
      const d = descriptorFixture("descriptor-registrations.json")
      const regs = [...d.registrations!]
      const reordered = {
        ...d,
        registrations: [
          { origin: "flip-python-db", requires: ["saga", "saga"], group: "pipeline@acme", version: "2", name: "pipeline" },
          regs[0]!,
          regs[0]!
        ]
      }
      assert.strictEqual(Descriptor.descriptorHash(reordered), "8923307c940a5dde")
    })

    it("changes with every content field", () => {
      const h = Descriptor.descriptorHash(base)
      const variants: ReadonlyArray<Descriptor.RawWorkerDescriptor> = [
        { ...base, instanceId: "ts-host-2" },
        { ...base, runtime: "python" },
        { ...base, sdk: { name: "other", version: "0.1.0" } },
        { ...base, sdk: { name: "effect-durable-worker", version: "0.1.1" } },
        { ...base, protocol: { version: 2, range: [1, 1] } },
        { ...base, protocol: { version: 1, range: [1, 2] } },
        { ...base, capabilities: ["saga"] },
        { ...base, workflows: ["checkout"] },
        { ...base, steps: ["billing.charge"] },
        { ...base, partition: "other" },
        { ...base, partition: undefined },
        { ...base, namespace: undefined },
        { ...base, startedAt: base.startedAt + 1 },
        { ...base, registrations: [] },
        { ...base, registrations: [{ name: "checkout" }] },
        { ...base, registrations: [{ name: "checkout", version: "1" }] },
        { ...base, registrations: [{ name: "checkout", group: "checkout@acme" }] },
        { ...base, registrations: [{ name: "checkout", requires: ["saga"] }] },
        { ...base, registrations: [{ name: "checkout", origin: "x" }] }
      ]
      const hashes = new Set([h, ...variants.map(Descriptor.descriptorHash)])
      assert.strictEqual(hashes.size, variants.length + 1)
    })

    it("fills legacy-v1 defaults for absent protocol, capabilities, sdk, lists and startedAt", () => {
      const legacy: Descriptor.RawWorkerDescriptor = { instanceId: "py-old-1", runtime: "python" }
      const explicit: Descriptor.RawWorkerDescriptor = {
        instanceId: "py-old-1",
        runtime: "python",
        sdk: { name: "unknown", version: "0" },
        protocol: { version: 1, range: [1, 1] },
        capabilities: [...Descriptor.V1_CAPABILITIES].reverse(),
        workflows: [],
        steps: [],
        startedAt: 0
      }
      assert.strictEqual(Descriptor.descriptorHash(legacy), Descriptor.descriptorHash(explicit))
      // An explicit empty capability list is a modern worker advertising nothing, not a legacy one.
      assert.notStrictEqual(Descriptor.descriptorHash({ ...explicit, capabilities: [] }), Descriptor.descriptorHash(legacy))
    })

    it("agrees with the engine's hash on descriptors without registrations", () => {
      const samples: ReadonlyArray<Descriptor.RawWorkerDescriptor> = [
        base,
        descriptorFixture("descriptor.json"),
        { instanceId: "py-old-1", runtime: "python" },
        { ...base, steps: ["ünï:cødé", "😀.step"], partition: "ténant" }
      ]
      for (const d of samples) {
        assert.strictEqual(Descriptor.descriptorHash(d), Core.descriptorHash(d as Core.RawWorkerDescriptor))
      }
    })

    it("emits the canonical projection with nulls for absent optionals", () => {
      const { partition: _p, namespace: _n, ...bare } = base
      assert.strictEqual(
        JSON.stringify(Descriptor.canonicalDescriptor({ ...bare, registrations: [{ name: "w", requires: ["b", "a", "b"] }] })),
        "{\"instanceId\":\"ts-host-1\",\"runtime\":\"node\",\"sdk\":{\"name\":\"effect-durable-worker\",\"version\":\"0.1.0\"}," +
          "\"protocol\":{\"version\":1,\"range\":[1,1]},\"capabilities\":[\"saga\",\"signals\"]," +
          "\"workflows\":[\"checkout\",\"refund\"],\"steps\":[\"billing.charge\",\"billing.refund\"]," +
          "\"registrations\":[{\"name\":\"w\",\"version\":null,\"group\":null,\"requires\":[\"a\",\"b\"],\"origin\":null}]," +
          "\"partition\":null,\"namespace\":null,\"startedAt\":1752710400000}"
      )
    })
  })

  describe("fnv1a64Utf16", () => {
    it("matches the standard FNV-1a-64 vectors on ASCII", () => {
      assert.strictEqual(Descriptor.fnv1a64Utf16(""), "cbf29ce484222325")
      assert.strictEqual(Descriptor.fnv1a64Utf16("a"), "af63dc4c8601ec8c")
      assert.strictEqual(Descriptor.fnv1a64Utf16("foobar"), "85944171f73967e8")
      const ascii = JSON.stringify(base)
      assert.strictEqual(Descriptor.fnv1a64Utf16(ascii), fnv1a64Bytes(Buffer.from(ascii, "utf8")))
    })

    it("hashes non-ASCII text per UTF-16 code unit, not per UTF-8 byte", () => {
      for (const text of ["é", "ü", "Ā", "€uro", "日本語", "😀", "a😀b", "\u00ff\u0100", "\uffff"]) {
        assert.strictEqual(Descriptor.fnv1a64Utf16(text), fnv1a64Utf16Le(text), text)
        assert.notStrictEqual(Descriptor.fnv1a64Utf16(text), fnv1a64Bytes(Buffer.from(text, "utf8")), text)
      }
    })

    it("hashes a non-ASCII descriptor over the UTF-16 code units of its canonical JSON", () => {
      const d = { ...base, steps: ["ünï:cødé", "😀.step"], partition: "ténant" }
      assert.strictEqual(Descriptor.descriptorHash(d), fnv1a64Utf16Le(JSON.stringify(Descriptor.canonicalDescriptor(d))))
    })
  })

  describe("buildDescriptor", () => {
    it("builds the wire shape in key order with the v1 baseline", () => {
      const d = Descriptor.buildDescriptor({
        instanceId: "ts-demo-1",
        steps: ["payments.charge-card"],
        partition: "acme",
        startedAt: 1_795_977_973_578,
        sdk: { name: "@dudousxd/nestjs-durable-transport-bullmq", version: "0" }
      })
      assert.strictEqual(
        JSON.stringify(d),
        "{\"instanceId\":\"ts-demo-1\",\"runtime\":\"node\",\"sdk\":{\"name\":\"@dudousxd/nestjs-durable-transport-bullmq\",\"version\":\"0\"}," +
          "\"protocol\":{\"version\":1,\"range\":[1,1]},\"capabilities\":[\"saga\",\"signals\",\"search-attributes\",\"priority\"," +
          "\"entities\",\"child-workflows\",\"singleton\",\"schedules\",\"continue-as-new\",\"queries\",\"cancellation\"]," +
          "\"workflows\":[],\"steps\":[\"payments.charge-card\"],\"partition\":\"acme\",\"startedAt\":1795977973578}"
      )
      // The live value the engine transport advertised with these inputs.
      assert.strictEqual(Descriptor.descriptorHash(d), "0a802bd52f5353aa")
      assert.deepStrictEqual(
        d,
        UpstreamTransport.buildWorkerDescriptor({
          instanceId: "ts-demo-1",
          steps: ["payments.charge-card"],
          partition: "acme",
          startedAt: 1_795_977_973_578
        }) as unknown as Descriptor.WorkerDescriptor
      )
    })

    it("sorts and de-duplicates steps and workflows; defaults runtime and sdk", () => {
      const d = Descriptor.buildDescriptor({ instanceId: "i", steps: ["b", "a:x", "b"], workflows: ["z", "y", "z"], startedAt: 1 })
      assert.deepStrictEqual(d.steps, ["a:x", "b"])
      assert.deepStrictEqual(d.workflows, ["y", "z"])
      assert.strictEqual(d.runtime, "node")
      assert.deepStrictEqual(d.sdk, Descriptor.DEFAULT_SDK)
      assert.deepStrictEqual(d.capabilities, [...Descriptor.V1_CAPABILITIES])
      assert.strictEqual(d.capabilities.length, 11)
    })

    it("announces registrations only when there are workflows, omitting absent fields", () => {
      const none = Descriptor.buildDescriptor({ instanceId: "i", steps: ["s"], startedAt: 1 })
      assert.isFalse("registrations" in none)
      const empty = Descriptor.buildDescriptor({ instanceId: "i", steps: ["s"], workflows: [], startedAt: 1 })
      assert.isFalse("registrations" in empty)
      const some = Descriptor.buildDescriptor({
        instanceId: "i",
        steps: [],
        workflows: ["pipeline", { name: "extraction", group: "extraction@acme", requires: ["signals", "saga", "saga"] }],
        startedAt: 1
      })
      assert.deepStrictEqual(some.workflows, ["extraction", "pipeline"])
      assert.strictEqual(
        JSON.stringify(some.registrations),
        "[{\"name\":\"extraction\",\"group\":\"extraction@acme\",\"requires\":[\"saga\",\"signals\"]},{\"name\":\"pipeline\"}]"
      )
      assert.deepStrictEqual(Object.keys(some), [
        "instanceId",
        "runtime",
        "sdk",
        "protocol",
        "capabilities",
        "workflows",
        "steps",
        "registrations",
        "startedAt"
      ])
    })

    it("omits an empty partition and an empty or default namespace", () => {
      for (const partition of [undefined, ""]) {
        for (const namespace of [undefined, "", "default"]) {
          const d = Descriptor.buildDescriptor({ instanceId: "i", steps: ["s"], startedAt: 1, partition, namespace })
          assert.isFalse("partition" in d)
          assert.isFalse("namespace" in d)
        }
      }
      const d = Descriptor.buildDescriptor({ instanceId: "i", steps: ["s"], startedAt: 1, partition: "p", namespace: "n" })
      assert.deepStrictEqual(Object.keys(d).slice(-3), ["partition", "namespace", "startedAt"])
    })

    it("builds a descriptor the Schema accepts", () => {
      const d = Descriptor.buildDescriptor({ instanceId: "i", steps: ["s"], workflows: ["w"], startedAt: 1, namespace: "n" })
      assert.deepStrictEqual(Schema.decodeUnknownSync(Descriptor.WorkerDescriptor)(JSON.parse(JSON.stringify(d))), d)
    })
  })

  describe("heartbeat value", () => {
    const status: Descriptor.WorkerStatus = {
      runtime: "node",
      concurrency: { mode: "fixed", limit: 1 },
      inFlight: 0,
      rssBytes: 78_512_128,
      rssLimitBytes: 25_276_502_016,
      rssPct: 0.31
    }

    it("writes {ts, status, descriptorHash} in that order", () => {
      const text = Descriptor.heartbeatValue({ ts: 1_795_977_973_581, status, descriptorHash: "0a802bd52f5353aa" })
      assert.strictEqual(
        text,
        "{\"ts\":1795977973581,\"status\":{\"runtime\":\"node\",\"concurrency\":{\"mode\":\"fixed\",\"limit\":1},\"inFlight\":0," +
          "\"rssBytes\":78512128,\"rssLimitBytes\":25276502016,\"rssPct\":0.31},\"descriptorHash\":\"0a802bd52f5353aa\"}"
      )
    })

    it("omits absent measurements and is read back by the engine transport", () => {
      const minimal: Descriptor.WorkerStatus = { concurrency: { mode: "adaptive", limit: 3, min: 1, max: 16 }, inFlight: 2 }
      const text = Descriptor.heartbeatValue({ ts: 1_752_710_460_000, status: minimal, descriptorHash: "44c6793c8eb7089f" })
      assert.strictEqual(
        text,
        "{\"ts\":1752710460000,\"status\":{\"concurrency\":{\"mode\":\"adaptive\",\"limit\":3,\"min\":1,\"max\":16},\"inFlight\":2}," +
          "\"descriptorHash\":\"44c6793c8eb7089f\"}"
      )
      const parsed = UpstreamTransport.parseHeartbeatValue(text)
      assert.strictEqual(parsed.lastBeatAt, 1_752_710_460_000)
      assert.deepStrictEqual(parsed.status as unknown, minimal)
      assert.strictEqual(parsed.descriptorHash, "44c6793c8eb7089f")
    })

    it("decodes a status with the memory block and rejects a malformed one", () => {
      const full = {
        ts: 1_752_710_460_000,
        status: {
          runtime: "python",
          concurrency: { mode: "adaptive", limit: 3, min: 1, max: 16 },
          inFlight: 2,
          rssBytes: 612_368_384,
          rssLimitBytes: 2_147_483_648,
          rssPct: 28.51,
          cpuPct: 143.2,
          throughputPerMin: 38.1,
          p95Ms: 5120,
          lastAdjust: { at: 1_752_710_458_000, from: 2, to: 3, reason: "grow" },
          memory: {
            source: "cgroup_v2_working_set",
            idleUsageBytes: 210_763_776,
            gate: "open",
            admitPct: 75,
            resumePct: 65,
            waiting: 0,
            deferrals: 4,
            headroomTicks: 7,
            lastDeferredAt: 1_752_710_400_123,
            stepCostBytes: { handle_FAILURE_RISK: 301_989_888 }
          }
        },
        descriptorHash: "44c6793c8eb7089f"
      }
      const decoded = Schema.decodeUnknownSync(Descriptor.WorkerHeartbeatValue)(full)
      assert.strictEqual(Descriptor.heartbeatValue(decoded), JSON.stringify(full))
      const bad = (status: unknown) =>
        Either.isLeft(Schema.decodeUnknownEither(Descriptor.WorkerHeartbeatValue)({ ts: 1, status, descriptorHash: "x" }))
      assert.isTrue(bad({ inFlight: 0 }))
      assert.isTrue(bad({ concurrency: { mode: "elastic", limit: 1 }, inFlight: 0 }))
      assert.isTrue(bad({ concurrency: { mode: "fixed", limit: 1 }, inFlight: 0, lastAdjust: { at: 1, from: 1, to: 2, reason: "why" } }))
      assert.isTrue(bad({ concurrency: { mode: "fixed", limit: 1 }, inFlight: 0, memory: {} }))
      assert.isFalse(bad({ concurrency: { mode: "fixed", limit: 1 }, inFlight: 0 }))
    })
  })
})
