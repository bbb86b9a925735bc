import * as Effect from "effect/Effect"
import * as Predicate from "effect/Predicate"
import * as Schema from "effect/Schema"
import * as Codec from "../../../wire/DurableWorkflowCodec.js"
import {
  type ExternalStorageDriver,
  ExternalPayloadIntegrityError,
  type ExternalStorageError,
  retrieve,
  store
} from "../../DurableWorkflowExternalStorage.js"

export type { ExternalStorageDriver } from "../../DurableWorkflowExternalStorage.js"

/** 80 % of the server's default `max_payload_bytes` (2 MiB): larger payloads are logged. */
const PAYLOAD_WARNING_BYTES = Math.floor(0.8 * 2_097_152)

/**
 * Outbound: an inline envelope as it is sent, or in external storage (a reference envelope) when its
 * blob is above the threshold. An inline blob near the server's default payload limit is logged.
 * @internal
 */
export const storeOutbound = (
  envelope: Codec.PayloadEnvelope,
  driver: ExternalStorageDriver | undefined,
  thresholdBytes: number | undefined
): Effect.Effect<Codec.PayloadEnvelope | { readonly codec: string; readonly external_storage: Codec.ExternalPayloadReference }, ExternalStorageError> =>
  Effect.gen(function*() {
    const { blob, codec } = envelope
    if (blob.length >= PAYLOAD_WARNING_BYTES && (driver === undefined || thresholdBytes === undefined || blob.length <= thresholdBytes)) {
      yield* Effect.logWarning(
        `an encoded payload is ${blob.length} bytes, at least 80% of the server's default 2 MiB payload limit; ` +
          "consider external storage (externalStorage + externalStorageThresholdBytes)"
      )
    }
    if (driver === undefined || thresholdBytes === undefined) return envelope
    if (new TextEncoder().encode(blob).length <= thresholdBytes) return envelope
    const reference = yield* store(driver, blob, codec)
    return { codec, external_storage: reference }
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

/** Fetches and verifies one reference, returning the inline envelope. @internal */
const fetchReference = (raw: Record<string, unknown>, envelopeCodec: unknown, driver: ExternalStorageDriver | undefined, cache: PayloadCache) =>
  Effect.gen(function*() {
    const uri = String(raw["uri"])
    if (driver === undefined) {
      return yield* new ExternalPayloadIntegrityError({
        uri,
        message: `payload ${uri} is in external storage, but no external storage driver is configured (externalStorage)`
      })
    }
    const reference = yield* Effect.mapError(
      Schema.decodeUnknown(Codec.ExternalPayloadReference)(raw),
      (error) => new ExternalPayloadIntegrityError({ uri, message: `invalid external payload reference for ${uri}: ${error.message}` })
    )
    const key = JSON.stringify([reference.uri, reference.sha256, reference.size_bytes, reference.codec])
    const codec = envelopeCodec ?? reference.codec
    const cached = cache.get(key)
    if (cached !== undefined) return { codec, blob: cached }
    const blob = yield* retrieve(driver, reference)
    cache.set(key, blob)
    return { codec, blob }
  })

/** Inbound: replaces every `{ codec, external_storage }` envelope in a value by its inline form. @internal */
export const resolveInbound = (
  value: unknown,
  driver: ExternalStorageDriver | undefined,
  cache: PayloadCache
): Effect.Effect<unknown, ExternalStorageError | ExternalPayloadIntegrityError> => {
  if (Array.isArray(value)) return Effect.forEach(value, (item) => resolveInbound(item, driver, cache))
  if (!Predicate.isRecord(value)) return Effect.succeed(value)
  if (Predicate.isRecord(value["external_storage"])) return fetchReference(value["external_storage"], value["codec"], driver, cache)
  return Effect.map(
    Effect.forEach(Object.entries(value), ([k, v]) => Effect.map(resolveInbound(v, driver, cache), (r) => [k, r] as const)),
    (entries) => Object.fromEntries(entries)
  )
}
