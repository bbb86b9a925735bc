import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import { createHash } from "node:crypto"
import { mkdir, readFile, writeFile } from "node:fs/promises"
import * as path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import * as Codec from "../../../protocol/DurableWorkflowCodec.js"

/**
 * Where payloads above the threshold are kept. `put` stores the UTF-8 bytes of the base64 blob and
 * returns its URI; `get` reads them back.
 *
 * @since 0.1.0
 * @category models
 */
export interface ExternalStorageDriver {
  readonly put: (data: Uint8Array, meta: { readonly sha256: string; readonly codec: string }) => Effect.Effect<{ readonly uri: string; readonly expiresAt?: string }, unknown>
  readonly get: (uri: string) => Effect.Effect<Uint8Array, unknown>
}

/**
 * An externally stored payload did not match its reference (size or SHA-256).
 *
 * @since 0.1.0
 * @category errors
 */
export class ExternalPayloadIntegrityError extends Schema.TaggedError<ExternalPayloadIntegrityError>()(
  "ExternalPayloadIntegrityError",
  { uri: Schema.String, message: Schema.String }
) {}

/**
 * A driver on the local filesystem: `file://` URIs, `<root>/<codec>/<sha[:2]>/<sha>`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const localFilesystem = (root: string): ExternalStorageDriver => ({
  put: (data, meta) =>
    Effect.tryPromise(async () => {
      const file = path.join(root, meta.codec, meta.sha256.slice(0, 2), meta.sha256)
      await mkdir(path.dirname(file), { recursive: true })
      await writeFile(file, data)
      return { uri: pathToFileURL(file).href }
    }),
  get: (uri) => Effect.tryPromise(async () => new Uint8Array(await readFile(fileURLToPath(uri))))
})

/** 80 % of the server's default `max_payload_bytes` (2 MiB): larger payloads are logged. */
const PAYLOAD_WARNING_BYTES = Math.floor(0.8 * 2_097_152)

const sha256 = (data: Uint8Array) => createHash("sha256").update(data).digest("hex")

/** Outbound: an envelope, externalised above the threshold. @internal */
export const encodeOutbound = (
  value: unknown,
  driver: ExternalStorageDriver | undefined,
  thresholdBytes: number | undefined
): Effect.Effect<unknown, unknown> =>
  Effect.gen(function*() {
    const blob = yield* Either.mapLeft(Codec.encodeBlob(value), (e) => e as unknown)
    if (blob.length >= PAYLOAD_WARNING_BYTES && (driver === undefined || thresholdBytes === undefined || blob.length <= thresholdBytes)) {
      yield* Effect.logWarning(
        `an encoded payload is ${blob.length} bytes, at least 80% of the server's default 2 MiB payload limit; ` +
          "consider external storage (externalStorage + externalStorageThresholdBytes)"
      )
    }
    if (driver === undefined || thresholdBytes === undefined) return { codec: Codec.codec, blob }
    const data = new TextEncoder().encode(blob)
    if (data.length <= thresholdBytes) return { codec: Codec.codec, blob }
    const digest = sha256(data)
    const stored = yield* driver.put(data, { sha256: digest, codec: Codec.codec })
    return {
      codec: Codec.codec,
      external_storage: {
        schema: "durable-workflow.v2.external-payload-reference.v1",
        uri: stored.uri,
        sha256: digest,
        size_bytes: data.length,
        codec: Codec.codec,
        ...(stored.expiresAt === undefined ? {} : { expires_at: stored.expiresAt })
      }
    }
  })

/** A bounded LRU of fetched payloads (128 entries, 16 MiB). @internal */
export class PayloadCache {
  private readonly entries = new Map<string, string>()
  private bytes = 0
  constructor(readonly maxEntries = 128, readonly maxBytes = 16 * 1024 * 1024) {}
  get(key: string): string | undefined {
    const hit = this.entries.get(key)
    if (hit !== undefined) {
      this.entries.delete(key)
      this.entries.set(key, hit)
    }
    return hit
  }
  set(key: string, blob: string): void {
    if (blob.length > this.maxBytes) return
    this.entries.set(key, blob)
    this.bytes += blob.length
    while (this.entries.size > this.maxEntries || this.bytes > this.maxBytes) {
      const [oldest, value] = this.entries.entries().next().value as [string, string]
      this.entries.delete(oldest)
      this.bytes -= value.length
    }
  }
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** Fetches and verifies one reference, returning the inline envelope. @internal */
const fetchReference = (reference: Record<string, unknown>, envelopeCodec: unknown, driver: ExternalStorageDriver | undefined, cache: PayloadCache) =>
  Effect.gen(function*() {
    const uri = String(reference["uri"])
    if (driver === undefined) {
      return yield* new ExternalPayloadIntegrityError({ uri, message: `payload ${uri} is in external storage, but no external storage driver is configured` })
    }
    const key = JSON.stringify([uri, reference["sha256"], reference["size_bytes"], reference["codec"]])
    const cached = cache.get(key)
    const codec = envelopeCodec ?? reference["codec"]
    if (cached !== undefined) return { codec, blob: cached }
    const data = yield* driver.get(uri)
    if (data.length !== reference["size_bytes"]) {
      return yield* new ExternalPayloadIntegrityError({ uri, message: `external payload ${uri} is ${data.length} bytes, its reference says ${String(reference["size_bytes"])}` })
    }
    if (sha256(data) !== reference["sha256"]) {
      return yield* new ExternalPayloadIntegrityError({ uri, message: `external payload ${uri} does not match its SHA-256 ${String(reference["sha256"])}` })
    }
    const blob = new TextDecoder().decode(data)
    cache.set(key, blob)
    return { codec, blob }
  })

/** Inbound: replaces every `{ codec, external_storage }` envelope in a value by its inline form. @internal */
export const resolveInbound = (
  value: unknown,
  driver: ExternalStorageDriver | undefined,
  cache: PayloadCache
): Effect.Effect<unknown, unknown> => {
  if (Array.isArray(value)) return Effect.forEach(value, (item) => resolveInbound(item, driver, cache))
  if (!isRecord(value)) return Effect.succeed(value)
  if (isRecord(value["external_storage"])) return fetchReference(value["external_storage"], value["codec"], driver, cache)
  return Effect.map(
    Effect.forEach(Object.entries(value), ([k, v]) => Effect.map(resolveInbound(v, driver, cache), (r) => [k, r] as const)),
    (entries) => Object.fromEntries(entries)
  )
}
