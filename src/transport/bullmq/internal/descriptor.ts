/**
 * The nestjs-durable worker handshake: the descriptor a worker advertises under
 * `<P>-worker-descriptor:<T>:<I>`, its content hash (the ETag carried by every heartbeat), and the
 * worker-liveness value written under `<P>-worker-heartbeat:<T>:<I>`. Pure data and functions.
 *
 * @since 0.1.0
 * @internal
 */
import * as Schema from "effect/Schema"
import { VERSION } from "../../../core/internal/version.js"

/**
 * The runtimes a descriptor or status may name.
 *
 * @since 0.1.0
 */
export const WorkerRuntime = Schema.Literal("node", "python")

/**
 * One announced workflow registration. Absent fields are omitted, never defaulted.
 *
 * @since 0.1.0
 */
export const WorkflowRegistration = Schema.Struct({
  name: Schema.String,
  version: Schema.optional(Schema.String),
  group: Schema.optional(Schema.String),
  requires: Schema.optional(Schema.Array(Schema.String)),
  origin: Schema.optional(Schema.String)
})

/**
 * One announced workflow registration.
 *
 * @since 0.1.0
 */
export type WorkflowRegistration = typeof WorkflowRegistration.Type

/**
 * The handshake descriptor, fields in wire order: `instanceId, runtime, sdk, protocol, capabilities,
 * workflows, steps, [registrations], [partition], [namespace], startedAt`.
 *
 * @since 0.1.0
 */
export const WorkerDescriptor = Schema.Struct({
  instanceId: Schema.String,
  runtime: WorkerRuntime,
  sdk: Schema.Struct({ name: Schema.String, version: Schema.String }),
  protocol: Schema.Struct({ version: Schema.Int, range: Schema.Tuple(Schema.Int, Schema.Int) }),
  capabilities: Schema.Array(Schema.String),
  workflows: Schema.Array(Schema.String),
  steps: Schema.Array(Schema.String),
  registrations: Schema.optional(Schema.Array(WorkflowRegistration)),
  partition: Schema.optional(Schema.String),
  namespace: Schema.optional(Schema.String),
  startedAt: Schema.Number
})

/**
 * A worker's handshake descriptor.
 *
 * @since 0.1.0
 */
export type WorkerDescriptor = typeof WorkerDescriptor.Type

/**
 * A descriptor as an older peer may send it: only `instanceId` and `runtime` are certain; the rest is
 * filled with legacy-v1 defaults before hashing.
 *
 * @since 0.1.0
 */
export type RawWorkerDescriptor =
  & Pick<WorkerDescriptor, "instanceId" | "runtime">
  & { readonly [K in Exclude<keyof WorkerDescriptor, "instanceId" | "runtime">]?: WorkerDescriptor[K] | undefined }

/**
 * The wire-protocol band of this protocol generation: version 1, range `[1, 1]`.
 *
 * @since 0.1.0
 */
export const PROTOCOL_V1: WorkerDescriptor["protocol"] = { version: 1, range: [1, 1] }

/**
 * The capability set every v1 worker advertises, in its canonical order.
 *
 * @since 0.1.0
 */
export const V1_CAPABILITIES: ReadonlyArray<string> = [
  "saga",
  "signals",
  "search-attributes",
  "priority",
  "entities",
  "child-workflows",
  "singleton",
  "schedules",
  "continue-as-new",
  "queries",
  "cancellation"
]

/**
 * The `sdk` this library advertises unless told otherwise.
 *
 * @since 0.1.0
 */
export const DEFAULT_SDK: WorkerDescriptor["sdk"] = { name: "effect-durable-worker", version: VERSION }

const sortedUnique = (values: Iterable<string>): Array<string> => Array.from(new Set(values)).sort()

/**
 * Options for {@link buildDescriptor}.
 *
 * @since 0.1.0
 */
export interface DescriptorOptions {
  readonly instanceId: string
  /** Step handler names as registered (unsanitised). */
  readonly steps: Iterable<string>
  /** Workflow names, or registrations carrying version / group / requires / origin. */
  readonly workflows?: Iterable<string | WorkflowRegistration> | undefined
  /** Epoch ms the worker started; a restart changes the hash. */
  readonly startedAt: number
  readonly partition?: string | undefined
  readonly namespace?: string | undefined
  readonly runtime?: WorkerDescriptor["runtime"] | undefined
  readonly sdk?: WorkerDescriptor["sdk"] | undefined
}

/**
 * Build this worker's descriptor: keys in wire order, `workflows`/`steps` sorted and de-duplicated,
 * the v1 protocol and capability baseline, `registrations` (sorted by name) only when there are
 * workflows, `partition` omitted when empty and `namespace` omitted when empty or `"default"`.
 *
 * @since 0.1.0
 */
export const buildDescriptor = (options: DescriptorOptions): WorkerDescriptor => {
  const byName = new Map<string, WorkflowRegistration>()
  for (const workflow of options.workflows ?? []) {
    const registration = typeof workflow === "string" ? { name: workflow } : workflow
    if (!byName.has(registration.name)) byName.set(registration.name, registration)
  }
  const workflows = sortedUnique(byName.keys())
  const registrations = workflows.map((name) => normalizeRegistration(byName.get(name)!))
  return {
    instanceId: options.instanceId,
    runtime: options.runtime ?? "node",
    sdk: { name: (options.sdk ?? DEFAULT_SDK).name, version: (options.sdk ?? DEFAULT_SDK).version },
    protocol: { version: PROTOCOL_V1.version, range: [PROTOCOL_V1.range[0], PROTOCOL_V1.range[1]] },
    capabilities: [...V1_CAPABILITIES],
    workflows,
    steps: sortedUnique(options.steps),
    ...(registrations.length > 0 ? { registrations } : {}),
    ...(options.partition ? { partition: options.partition } : {}),
    ...(options.namespace && options.namespace !== "default" ? { namespace: options.namespace } : {}),
    startedAt: options.startedAt
  }
}

const normalizeRegistration = (r: WorkflowRegistration): WorkflowRegistration => ({
  name: r.name,
  ...(r.version !== undefined ? { version: r.version } : {}),
  ...(r.group !== undefined ? { group: r.group } : {}),
  ...(r.requires !== undefined ? { requires: sortedUnique(r.requires) } : {}),
  ...(r.origin !== undefined ? { origin: r.origin } : {})
})

/**
 * The canonical projection the hash is taken over: legacy-v1 defaults filled in, keys in fixed order,
 * set-valued lists sorted and de-duplicated, absent optionals as `null`, and `registrations` (each
 * entry projected, then de-duplicated and sorted by its JSON) only when the descriptor has the field.
 *
 * @since 0.1.0
 */
export const canonicalDescriptor = (d: RawWorkerDescriptor): Record<string, unknown> => {
  const sdk = d.sdk ?? { name: "unknown", version: "0" }
  const protocol = d.protocol ?? PROTOCOL_V1
  const canonical: Record<string, unknown> = {
    instanceId: d.instanceId,
    runtime: d.runtime,
    sdk: { name: sdk.name, version: sdk.version },
    protocol: { version: protocol.version, range: [protocol.range[0], protocol.range[1]] },
    capabilities: sortedUnique(d.capabilities ?? V1_CAPABILITIES),
    workflows: sortedUnique(d.workflows ?? []),
    steps: sortedUnique(d.steps ?? [])
  }
  if (d.registrations !== undefined) {
    const entries = new Set(
      d.registrations.map((r) =>
        JSON.stringify({
          name: r.name,
          version: r.version ?? null,
          group: r.group ?? null,
          requires: r.requires !== undefined ? sortedUnique(r.requires) : null,
          origin: r.origin ?? null
        })
      )
    )
    canonical.registrations = Array.from(entries).sort().map((json) => JSON.parse(json) as unknown)
  }
  canonical.partition = d.partition ?? null
  canonical.namespace = d.namespace ?? null
  canonical.startedAt = d.startedAt ?? 0
  return canonical
}

const FNV64_OFFSET = 0xcbf29ce484222325n
const FNV64_PRIME = 0x100000001b3n
const U64_MASK = 0xffffffffffffffffn

/**
 * FNV-1a-64 over UTF-16 code units, as the durable SDKs compute it: for each code unit, XOR in its low
 * byte, then its high byte, then multiply once by the prime (mod 2^64). Equals byte-wise FNV-1a on
 * ASCII text only. Returns 16 lowercase hex digits.
 *
 * @since 0.1.0
 */
export const fnv1a64Utf16 = (text: string): string => {
  let hash = FNV64_OFFSET
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i)
    hash ^= BigInt(unit & 0xff)
    hash ^= BigInt(unit >>> 8)
    hash = (hash * FNV64_PRIME) & U64_MASK
  }
  return hash.toString(16).padStart(16, "0")
}

/**
 * The descriptor's ETag: {@link fnv1a64Utf16} of the compact JSON of {@link canonicalDescriptor}.
 *
 * @since 0.1.0
 */
export const descriptorHash = (d: RawWorkerDescriptor): string => fnv1a64Utf16(JSON.stringify(canonicalDescriptor(d)))

/**
 * A worker's concurrency knob: `fixed` (the configured limit) or `adaptive` (with its bounds).
 *
 * @since 0.1.0
 */
export const WorkerConcurrencyStatus = Schema.Struct({
  mode: Schema.Literal("fixed", "adaptive"),
  limit: Schema.Number,
  min: Schema.optional(Schema.Number),
  max: Schema.optional(Schema.Number)
})

/**
 * The adaptive controller's most recent limit change.
 *
 * @since 0.1.0
 */
export const WorkerAdjust = Schema.Struct({
  at: Schema.Number,
  from: Schema.Number,
  to: Schema.Number,
  reason: Schema.Literal("ram_ceiling", "cpu_ceiling", "backpressure", "grow", "shrink")
})

/**
 * Where a worker's memory reading comes from.
 *
 * @since 0.1.0
 */
export const MemorySourceName = Schema.Literal(
  "custom",
  "cgroup_v2_working_set",
  "cgroup_v2_current",
  "cgroup_v1_working_set",
  "cgroup_v1_usage",
  "proc_vmrss",
  "rusage_maxrss_peak",
  "unavailable"
)

/**
 * The memory block of a status: its source always, the admission gate's numbers when adaptive with
 * memory admission, and learned per-step costs once any is known.
 *
 * @since 0.1.0
 */
export const WorkerMemoryStatus = Schema.Struct({
  source: MemorySourceName,
  idleUsageBytes: Schema.optional(Schema.Number),
  gate: Schema.optional(Schema.Literal("open", "deferring")),
  admitPct: Schema.optional(Schema.Number),
  resumePct: Schema.optional(Schema.Number),
  waiting: Schema.optional(Schema.Number),
  deferrals: Schema.optional(Schema.Number),
  headroomTicks: Schema.optional(Schema.Number),
  lastDeferredAt: Schema.optional(Schema.Number),
  stepCostBytes: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Number }))
})

/**
 * A worker's live execution snapshot (`WorkerStatus`), carried as the object `status` of the
 * liveness value. Absent measurements are omitted.
 *
 * @since 0.1.0
 */
export const WorkerStatus = Schema.Struct({
  runtime: Schema.optional(WorkerRuntime),
  concurrency: WorkerConcurrencyStatus,
  inFlight: Schema.Number,
  rssBytes: Schema.optional(Schema.Number),
  rssLimitBytes: Schema.optional(Schema.Number),
  rssPct: Schema.optional(Schema.Number),
  cpuPct: Schema.optional(Schema.Number),
  throughputPerMin: Schema.optional(Schema.Number),
  p95Ms: Schema.optional(Schema.Number),
  lastAdjust: Schema.optional(WorkerAdjust),
  memory: Schema.optional(WorkerMemoryStatus)
})

/**
 * A worker's live execution snapshot.
 *
 * @since 0.1.0
 */
export type WorkerStatus = typeof WorkerStatus.Type

/**
 * The value of `<P>-worker-heartbeat:<T>:<I>`: beat time, status snapshot, descriptor ETag.
 *
 * @since 0.1.0
 */
export const WorkerHeartbeatValue = Schema.Struct({
  ts: Schema.Number,
  status: WorkerStatus,
  descriptorHash: Schema.String
})

/**
 * The worker-liveness key's value.
 *
 * @since 0.1.0
 */
export type WorkerHeartbeatValue = typeof WorkerHeartbeatValue.Type

/**
 * The liveness key is refreshed this often (ms), first write immediately.
 *
 * @since 0.1.0
 */
export const WORKER_HEARTBEAT_INTERVAL_MS = 10_000

/**
 * TTL (seconds) of both the liveness and the descriptor key.
 *
 * @since 0.1.0
 */
export const WORKER_HEARTBEAT_TTL_SECONDS = 35

/**
 * The liveness value as JSON text, keys in wire order: `{"ts","status","descriptorHash"}`.
 *
 * @since 0.1.0
 */
export const heartbeatValue = (value: WorkerHeartbeatValue): string =>
  JSON.stringify({ ts: value.ts, status: Schema.encodeSync(WorkerStatus)(value.status), descriptorHash: value.descriptorHash })

/**
 * A worker's lifecycle as the handshake's compact heartbeat names it.
 *
 * @since 0.1.0
 */
export const WorkerLifecycle = Schema.Literal("up", "draining", "quiescing", "stopped")

/**
 * The handshake's compact heartbeat (`status` is a lifecycle string). Runtimes write the
 * {@link WorkerHeartbeatValue} form on the liveness key; this form is what the shared wire fixture holds.
 *
 * @since 0.1.0
 */
export const LifecycleHeartbeat = Schema.Struct({
  ts: Schema.Number,
  status: WorkerLifecycle,
  descriptorHash: Schema.String
})
