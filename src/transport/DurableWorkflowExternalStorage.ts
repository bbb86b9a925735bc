/**
 * External payload storage for the Durable Workflow transport: where payloads above the
 * `externalStorageThresholdBytes` go, and where inbound `{ codec, external_storage }` references
 * are read from.
 *
 * - {@link ExternalStorageDriver}: the driver seam (`put` bytes, `get` them back by reference);
 * - {@link localFilesystem}: `file://` URIs under a root directory;
 * - {@link s3}: S3 (or any S3-compatible server) through `@aws-sdk/client-s3` v3, an optional peer
 *   dependency loaded on first use;
 * - {@link make}: a driver from two promise-returning functions, for any other store (GCS, Azure
 *   Blob, a database, …);
 * - {@link store} / {@link retrieve}: what the transport does with a driver, including the size and
 *   SHA-256 check on every read.
 *
 * The bytes stored are the UTF-8 bytes of the payload's base64 blob, addressed by their SHA-256:
 * `<codec>/<sha[:2]>/<sha>` under the driver's root or prefix.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Predicate from "effect/Predicate"
import * as Schema from "effect/Schema"
import { createHash } from "node:crypto"
import { mkdir, readFile, writeFile } from "node:fs/promises"
import * as path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import { messageOf } from "../core/internal/errors.js"
import type { ExternalPayloadReference } from "../wire/DurableWorkflowCodec.js"

export type { ExternalPayloadReference } from "../wire/DurableWorkflowCodec.js"

/**
 * The `schema` of every external payload reference.
 *
 * @since 0.1.0
 * @category constants
 */
export const referenceSchema = "durable-workflow.v2.external-payload-reference.v1" as const

/**
 * Storing or reading an external payload failed (the store is unreachable, the object is missing,
 * the URI belongs to another store, the driver's SDK is not installed, …).
 *
 * @since 0.1.0
 * @category errors
 */
export class ExternalStorageError extends Schema.TaggedError<ExternalStorageError>()(
  "ExternalStorageError",
  {
    operation: Schema.Literal("put", "get"),
    /** The reference's URI (`get`), or the location written to when known (`put`). */
    uri: Schema.optional(Schema.String),
    message: Schema.String,
    cause: Schema.optional(Schema.Defect)
  }
) {}

/**
 * An externally stored payload did not match its reference (size or SHA-256), or it is referenced
 * while no driver is configured.
 *
 * @since 0.1.0
 * @category errors
 */
export class ExternalPayloadIntegrityError extends Schema.TaggedError<ExternalPayloadIntegrityError>()(
  "ExternalPayloadIntegrityError",
  { uri: Schema.String, message: Schema.String }
) {}

/**
 * Where a driver put a payload.
 *
 * @since 0.1.0
 * @category models
 */
export interface StoredPayload {
  readonly uri: string
  /** ISO-8601, when the store expires objects; sent as the reference's `expires_at`. */
  readonly expiresAt?: string
}

/**
 * What `put` is told about the bytes it stores.
 *
 * @since 0.1.0
 * @category models
 */
export interface PayloadMetadata {
  /** Lower-case hex SHA-256 of the bytes. */
  readonly sha256: string
  /** The payload codec, e.g. `avro`. */
  readonly codec: string
}

/**
 * A store for payloads too large to travel inline. `put` keeps the bytes and answers their URI;
 * `get` reads them back for a reference (the caller checks size and SHA-256, see {@link retrieve}).
 *
 * Build one with {@link localFilesystem}, {@link s3} or {@link make}, or implement it directly.
 *
 * @since 0.1.0
 * @category models
 */
export interface ExternalStorageDriver {
  readonly put: (data: Uint8Array, metadata: PayloadMetadata) => Effect.Effect<StoredPayload, ExternalStorageError>
  readonly get: (reference: ExternalPayloadReference) => Effect.Effect<Uint8Array, ExternalStorageError>
}

/**
 * A driver written with promises, for {@link make}.
 *
 * @since 0.1.0
 * @category models
 */
export interface PromiseExternalStorageDriver {
  readonly put: (data: Uint8Array, metadata: PayloadMetadata, signal: AbortSignal) => Promise<StoredPayload>
  readonly get: (reference: ExternalPayloadReference, signal: AbortSignal) => Promise<Uint8Array>
}

/** A driver could not read the object a reference points to. */
const readFailed = (uri: string, cause: unknown) =>
  new ExternalStorageError({ operation: "get", uri, message: `could not read external payload ${uri}: ${messageOf(cause)}`, cause })

/**
 * A driver from promise-returning functions (a GCS, Azure Blob or in-house store). A rejection
 * becomes an {@link ExternalStorageError}; the signal aborts when the worker interrupts the call.
 *
 * @example
 * ```ts
 * const gcs = make({
 *   put: async (data, { sha256, codec }) => {
 *     const name = `payloads/${codec}/${sha256.slice(0, 2)}/${sha256}`
 *     await bucket.file(name).save(data)
 *     return { uri: `gs://${bucket.name}/${name}` }
 *   },
 *   get: async (reference) => (await bucket.file(new URL(reference.uri).pathname.slice(1)).download())[0]
 * })
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (driver: PromiseExternalStorageDriver): ExternalStorageDriver => ({
  put: (data, metadata) =>
    Effect.tryPromise({
      try: (signal) => driver.put(data, metadata, signal),
      catch: (cause) =>
        new ExternalStorageError({ operation: "put", message: `could not store an external payload: ${messageOf(cause)}`, cause })
    }),
  get: (reference) =>
    Effect.tryPromise({
      try: (signal) => driver.get(reference, signal),
      catch: (cause) => readFailed(reference.uri, cause)
    })
})

/**
 * The content address of a payload below a root or prefix: `<codec>/<sha[:2]>/<sha>`.
 *
 * @since 0.1.0
 * @category utils
 */
export const objectKey = (metadata: PayloadMetadata): string =>
  `${metadata.codec}/${metadata.sha256.slice(0, 2)}/${metadata.sha256}`

const checkAddressable = (operation: "put", metadata: PayloadMetadata) =>
  /^[0-9a-f]{64}$/.test(metadata.sha256) && /^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(metadata.codec)
    ? Effect.void
    : Effect.fail(
      new ExternalStorageError({
        operation,
        message: `refusing to store a payload under codec ${JSON.stringify(metadata.codec)} and SHA-256 ` +
          `${JSON.stringify(metadata.sha256)}: both become part of the object's path (expected a 64-digit lower-case hex digest and a codec name of letters, digits, ".", "_", "-")`
      })
    )

/**
 * A driver on the local filesystem: `file://` URIs, `<root>/<codec>/<sha[:2]>/<sha>`. Reading
 * accepts any `file://` URI (a reference written by another worker sharing the directory).
 *
 * @since 0.1.0
 * @category constructors
 */
export const localFilesystem = (root: string): ExternalStorageDriver => ({
  put: (data, metadata) =>
    Effect.zipRight(
      checkAddressable("put", metadata),
      Effect.tryPromise({
        try: async () => {
          const file = path.join(path.resolve(root), objectKey(metadata))
          await mkdir(path.dirname(file), { recursive: true })
          await writeFile(file, data)
          return { uri: pathToFileURL(file).href }
        },
        catch: (cause) =>
          new ExternalStorageError({
            operation: "put",
            message: `could not write an external payload below ${root}: ${messageOf(cause)}`,
            cause
          })
      })
    ),
  get: (reference) =>
    Effect.tryPromise({
      try: async () => new Uint8Array(await readFile(fileURLToPath(reference.uri))),
      catch: (cause) => readFailed(reference.uri, cause)
    })
})

/**
 * The part of an `@aws-sdk/client-s3` v3 `S3Client` the driver uses: `send`. Structural, so that
 * this module's types do not need the optional SDK.
 *
 * @since 0.1.0
 * @category models
 */
export interface S3ClientLike {
  readonly send: (command: any, options?: { readonly abortSignal?: AbortSignal }) => Promise<any>
}

/**
 * Options of {@link s3}.
 *
 * @since 0.1.0
 * @category models
 */
export interface S3Options {
  /** The bucket payloads are written to; references to other buckets are refused on read. */
  readonly bucket: string
  /** Key prefix (no leading or trailing `/` needed). Objects go to `<prefix>/<codec>/<sha[:2]>/<sha>`. */
  readonly prefix?: string | undefined
  /**
   * A client to use (owned by the caller). Without it the driver builds one on first use from
   * {@link S3Options.clientConfig}.
   */
  readonly client?: S3ClientLike | undefined
  /**
   * An `S3ClientConfig` for the client the driver builds: `region`, `endpoint`, `credentials`,
   * `forcePathStyle: true` for most S3-compatible servers. Default: the AWS SDK's own resolution
   * (environment, profile). Typed loosely so that this module's types do not need the optional SDK.
   */
  readonly clientConfig?: object | undefined
}

/** Loads `@aws-sdk/client-s3` (an optional peer dependency); fails with the import error. */
const loadS3 = Effect.tryPromise({ try: () => import("@aws-sdk/client-s3"), catch: (cause) => cause })

const missingSdk = (operation: "put" | "get", uri: string, cause: unknown) =>
  new ExternalStorageError({
    operation,
    uri,
    message: "the S3 external storage driver needs the optional peer dependency @aws-sdk/client-s3 (v3); " +
      `install it with npm install @aws-sdk/client-s3 (${messageOf(cause)})`,
    cause
  })

const trimSlashes = (text: string) => text.replace(/^\/+|\/+$/g, "")

/**
 * Parses `s3://bucket/key`.
 *
 * @since 0.1.0
 * @category utils
 */
export const parseS3Uri = (uri: string): { readonly bucket: string; readonly key: string } | undefined => {
  const match = /^s3:\/\/([^/]+)\/(.+)$/.exec(uri)
  return match === null ? undefined : { bucket: match[1]!, key: match[2]! }
}

/**
 * A driver on S3 or an S3-compatible server: objects at `<prefix>/<codec>/<sha[:2]>/<sha>`, URIs
 * `s3://<bucket>/<key>`.
 *
 * `@aws-sdk/client-s3` v3 is an optional peer dependency: it is imported on the first `put`/`get`
 * (install it to use this driver), so workers that never use S3 do not need it. A client the driver
 * builds lives as long as the process (its idle sockets do not keep the process alive); pass your own
 * `client` to control its lifetime.
 *
 * @example
 * ```ts
 * const storage = s3({ bucket: "payloads", prefix: "dw", clientConfig: { region: "eu-west-1" } })
 * DurableWorkflowTransport.layer({ baseUrl, taskQueue, externalStorage: storage, externalStorageThresholdBytes: 256_000 })
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const s3 = (options: S3Options): ExternalStorageDriver => {
  const prefix = trimSlashes(options.prefix ?? "")
  const keyOf = (metadata: PayloadMetadata) => (prefix === "" ? objectKey(metadata) : `${prefix}/${objectKey(metadata)}`)
  // the SDK import and the client are made once, on first use
  const sdk = Effect.runSync(Effect.cached(loadS3))
  const build = Effect.flatMap(sdk, (module) =>
    Effect.try(() => new module.S3Client((options.clientConfig ?? {}) as import("@aws-sdk/client-s3").S3ClientConfig)))
  const client: Effect.Effect<S3ClientLike, unknown> = options.client !== undefined
    ? Effect.succeed(options.client)
    : Effect.runSync(Effect.cached(build))
  const send = (operation: "put" | "get", uri: string, command: (module: typeof import("@aws-sdk/client-s3")) => unknown) =>
    Effect.gen(function*() {
      const module = yield* Effect.mapError(sdk, (cause) => missingSdk(operation, uri, cause))
      const s3Client = yield* Effect.mapError(client, (cause) =>
        new ExternalStorageError({
          operation,
          uri,
          message: `could not create the S3 client from clientConfig: ${messageOf(cause)}`,
          cause
        }))
      return yield* Effect.tryPromise({
        try: (signal) => s3Client.send(command(module), { abortSignal: signal }),
        catch: (cause) =>
          operation === "get" ? readFailed(uri, cause) : new ExternalStorageError({
            operation,
            uri,
            message: `could not store an external payload at ${uri}: ${messageOf(cause)}`,
            cause
          })
      })
    })
  return {
    put: (data, metadata) =>
      Effect.gen(function*() {
        yield* checkAddressable("put", metadata)
        const key = keyOf(metadata)
        const uri = `s3://${options.bucket}/${key}`
        yield* send("put", uri, (module) =>
          new module.PutObjectCommand({
            Bucket: options.bucket,
            Key: key,
            Body: data,
            ContentLength: data.length,
            ContentType: "application/octet-stream",
            Metadata: { sha256: metadata.sha256, codec: metadata.codec }
          }))
        return { uri }
      }),
    get: (reference) =>
      Effect.gen(function*() {
        const location = parseS3Uri(reference.uri)
        if (location === undefined || location.bucket !== options.bucket) {
          return yield* new ExternalStorageError({
            operation: "get",
            uri: reference.uri,
            message: `external payload ${reference.uri} is not in this driver's bucket s3://${options.bucket}/; ` +
              "configure a driver for the store the reference points to"
          })
        }
        const answer = yield* send("get", reference.uri, (module) => new module.GetObjectCommand({ Bucket: location.bucket, Key: location.key }))
        const body = Predicate.isRecord(answer) ? answer["Body"] : undefined
        if (!Predicate.hasProperty(body, "transformToByteArray") || !Predicate.isFunction(body.transformToByteArray)) {
          return yield* new ExternalStorageError({ operation: "get", uri: reference.uri, message: `S3 returned no body for ${reference.uri}` })
        }
        const read = body.transformToByteArray as () => Promise<Uint8Array>
        return yield* Effect.tryPromise({
          try: () => read.call(body),
          catch: (cause) =>
            new ExternalStorageError({
              operation: "get",
              uri: reference.uri,
              message: `could not read the body of external payload ${reference.uri}: ${messageOf(cause)}`,
              cause
            })
        })
      })
  }
}

const sha256Hex = (data: Uint8Array) => createHash("sha256").update(data).digest("hex")

/**
 * Stores one base64 blob through a driver and answers its reference (`size_bytes` and `sha256` of
 * the blob's UTF-8 bytes).
 *
 * @since 0.1.0
 * @category combinators
 */
export const store = (
  driver: ExternalStorageDriver,
  blob: string,
  codec: string
): Effect.Effect<ExternalPayloadReference, ExternalStorageError> =>
  Effect.gen(function*() {
    const data = new TextEncoder().encode(blob)
    const digest = sha256Hex(data)
    const stored = yield* driver.put(data, { sha256: digest, codec })
    return {
      schema: referenceSchema,
      uri: stored.uri,
      sha256: digest,
      size_bytes: data.length,
      codec,
      ...(stored.expiresAt === undefined ? {} : { expires_at: stored.expiresAt })
    }
  })

/**
 * Reads a reference through a driver and checks the bytes against its `size_bytes` and `sha256`;
 * answers the base64 blob.
 *
 * @since 0.1.0
 * @category combinators
 */
export const retrieve = (
  driver: ExternalStorageDriver,
  reference: ExternalPayloadReference
): Effect.Effect<string, ExternalStorageError | ExternalPayloadIntegrityError> =>
  Effect.gen(function*() {
    const data = yield* driver.get(reference)
    if (data.length !== reference.size_bytes) {
      return yield* new ExternalPayloadIntegrityError({
        uri: reference.uri,
        message: `external payload ${reference.uri} is ${data.length} bytes, its reference says ${reference.size_bytes}; ` +
          "the object was changed or truncated after it was stored"
      })
    }
    if (sha256Hex(data) !== reference.sha256.toLowerCase()) {
      return yield* new ExternalPayloadIntegrityError({
        uri: reference.uri,
        message: `external payload ${reference.uri} does not match its SHA-256 ${reference.sha256}; ` +
          "the object was changed after it was stored"
      })
    }
    return new TextDecoder().decode(data)
  })
