/**
 * The Durable Workflow payload codec: every workflow argument, activity result, query result and
 * command payload on the worker plane is an Avro *single-object* frame of the fixed schema
 * `durable_workflow.protocol.Value` (`C3 01` ‖ CRC-64-AVRO fingerprint `e2a33dff55802237` ‖ datum),
 * carried as standard base64 inside a `{ "codec": "avro", "blob": "…" }` envelope. `"avro"` is the only
 * payload codec of protocol 1.1; anything else is `unsupported_payload_codec`.
 *
 * ## JS values ↔ `Value`
 *
 * | JS (encode accepts)                                  | Avro branch | JS (decode returns)               |
 * | ---------------------------------------------------- | ----------- | --------------------------------- |
 * | `null`                                               | null        | `null`                            |
 * | `boolean`                                            | boolean     | `boolean`                         |
 * | `number` that is a safe integer (not `-0`)           | long        | `number` when a safe integer      |
 * | `bigint` in −2^63 … 2^63−1 (else `integer_overflow`) | long        | `bigint` outside the safe range   |
 * | any other finite `number`, or a {@link Double}        | double      | `number`; a {@link Double} when it is a safe integer other than `-0` |
 * | `NaN` / `±Infinity`                                  | `non_finite_float` | —                          |
 * | `Uint8Array` (incl. `Buffer`)                        | bytes       | `Uint8Array` (a copy)             |
 * | `string` (well-formed UTF-16)                        | string      | `string`                          |
 * | array                                                | array       | array                             |
 * | plain object or `Map` with string keys               | map         | plain object, keys in wire order¹ |
 *
 * So integers and doubles stay distinct both ways: `7` is a long, `double(7)` and `7.5` are doubles,
 * and a decoded double whose value is a safe integer comes back as a {@link Double} (which behaves as
 * its number under arithmetic and `JSON.stringify`), so decoding then encoding gives back the same
 * bytes (for frames written the usual way: one block per array/map, minimal varints, and — ¹ since
 * JS objects list integer-like keys such as `"1"` first — no integer-like key after another key;
 * `Map` inputs keep any order on encode). `-0` encodes as a double (a long cannot carry its sign). Integral numbers beyond
 * `Number.MAX_SAFE_INTEGER` are already approximations and encode as doubles; use `bigint` for exact
 * 64-bit integers. Object properties whose value is `undefined` are skipped (as JSON does);
 * `undefined` anywhere else, functions, symbols, class instances (`Date`, `Set`, …), symbol or
 * non-string map keys (`invalid_map_key`) and values nested deeper than 1000 levels are refused.
 *
 * Every function returns an `Either` (usable directly in `Effect.gen`) and never throws.
 *
 * @since 0.1.0
 */
import * as Either from "effect/Either"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import { decodeBase64, encodeBase64 } from "./internal/avro/base64.js"
import { MalformedDatum, Reader, Writer } from "./internal/avro/binary.js"
import { crc64Avro, fingerprintBytesLE, toHex } from "./internal/avro/fingerprint.js"
import { parsingCanonicalForm, valueSchemaJson } from "./internal/avro/schema.js"
import { Double, EncodeFailure, type IntegralDoubles, MAX_DEPTH, readValue, writeValue } from "./internal/avro/value.js"

/**
 * `Double` forces an Avro `double` for an integral number and is what integral doubles decode to;
 * `isDouble` recognises one.
 *
 * @example
 * encodeEnvelope({ ratio: double(7) }) // ratio is a double, not the long 7
 *
 * @since 0.1.0
 * @category models
 */
export { Double, isDouble } from "./internal/avro/value.js"

/**
 * Wraps a number so it encodes as an Avro `double`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const double = (value: number): Double => new Double(value)

/**
 * The only payload codec of Durable Workflow 2.0.
 *
 * @since 0.1.0
 * @category constants
 */
export const codec = "avro" as const

/**
 * Full name of the payload schema.
 *
 * @since 0.1.0
 * @category constants
 */
export const schemaName = "durable_workflow.protocol.Value"

/**
 * The payload schema as published (`durable_workflow.protocol.Value.v1.avsc`), as JSON text.
 *
 * @since 0.1.0
 * @category constants
 */
export const schemaJson: string = valueSchemaJson

/**
 * The schema's Avro Parsing Canonical Form, the text the fingerprint is computed over.
 *
 * @since 0.1.0
 * @category constants
 */
export const schemaCanonicalForm: string = parsingCanonicalForm(JSON.parse(valueSchemaJson))

const fingerprintLE = fingerprintBytesLE(crc64Avro(new TextEncoder().encode(schemaCanonicalForm)))

/**
 * The schema's CRC-64-AVRO fingerprint as the 8 frame bytes in wire order, hex — computed from
 * {@link schemaCanonicalForm} at load; equals the published `e2a33dff55802237`.
 *
 * @since 0.1.0
 * @category constants
 */
export const fingerprint: string = toHex(fingerprintLE)

/**
 * The single-object encoding marker, `C3 01`.
 *
 * @since 0.1.0
 * @category constants
 */
export const singleObjectMagic: Uint8Array = Uint8Array.of(0xc3, 0x01)

const HEADER_LENGTH = 10
const header = new Uint8Array(HEADER_LENGTH)
header.set(singleObjectMagic, 0)
header.set(fingerprintLE, 2)

/**
 * A value as it comes out of {@link decode}.
 *
 * @since 0.1.0
 * @category models
 */
export type Value =
  | null
  | boolean
  | number
  | bigint
  | Double
  | string
  | Uint8Array
  | ReadonlyArray<Value>
  | { readonly [key: string]: Value }

/**
 * A JS value that has no `Value` representation. `path` locates it inside the encoded value (array
 * indexes and map keys, outermost first; empty for the value itself).
 *
 * @since 0.1.0
 * @category errors
 */
export class PayloadEncodeError extends Schema.TaggedError<PayloadEncodeError>()("PayloadEncodeError", {
  code: Schema.Literal("integer_overflow", "non_finite_float", "invalid_map_key", "unsupported_value_type"),
  path: Schema.Array(Schema.Union(Schema.String, Schema.Number)),
  message: Schema.String
}) {}

/**
 * A payload that cannot be decoded. `code` is the protocol's: `invalid_payload_framing` (bad base64,
 * wrong magic, short or truncated frame, trailing bytes, unknown union branch, non-finite double,
 * invalid UTF-8), `unsupported_payload_schema` (a fingerprint other than `Value` v1) or
 * `unsupported_payload_codec` (a codec other than `"avro"`, or none).
 *
 * @since 0.1.0
 * @category errors
 */
export class PayloadDecodeError extends Schema.TaggedError<PayloadDecodeError>()("PayloadDecodeError", {
  code: Schema.Literal("invalid_payload_framing", "unsupported_payload_schema", "unsupported_payload_codec"),
  message: Schema.String
}) {}

/**
 * Options of the decoders. `integralDoubles: "number"` returns integral doubles as plain numbers
 * (convenient, but re-encoding them gives longs); the default `"wrap"` returns {@link Double}s.
 *
 * @since 0.1.0
 * @category models
 */
export interface DecodeOptions {
  readonly integralDoubles?: IntegralDoubles
}

const renderPath = (path: ReadonlyArray<string | number>): string =>
  path.length === 0 ? "" : ` at ${path.map((segment) => `[${JSON.stringify(segment)}]`).join("")}`

/**
 * Encodes a JS value as a single-object frame (header and datum).
 *
 * @since 0.1.0
 * @category encoding
 */
export const encode = (value: unknown): Either.Either<Uint8Array, PayloadEncodeError> => {
  const writer = new Writer()
  writer.writeRaw(header)
  try {
    writeValue(writer, value, 0)
  } catch (failure) {
    if (failure instanceof EncodeFailure) {
      return Either.left(
        new PayloadEncodeError({
          code: failure.code,
          path: failure.path,
          message: `${failure.code}: ${failure.reason}${renderPath(failure.path)}`
        })
      )
    }
    return Either.left(
      new PayloadEncodeError({
        code: "unsupported_value_type",
        path: [],
        message: `unsupported_value_type: the value could not be read while encoding (${String(failure)})`
      })
    )
  }
  return Either.right(writer.finish())
}

const framing = (reason: string): Either.Either<never, PayloadDecodeError> =>
  Either.left(new PayloadDecodeError({ code: "invalid_payload_framing", message: `invalid_payload_framing: ${reason}` }))

const looksLikeJson = (bytes: Uint8Array): boolean => {
  let i = 0
  while (i < bytes.length && (bytes[i] === 0x20 || bytes[i] === 0x09 || bytes[i] === 0x0a || bytes[i] === 0x0d)) i++
  const first = bytes[i]
  // { [ " digits - n(ull) t(rue) f(alse)
  return first !== undefined && (first === 0x7b || first === 0x5b || first === 0x22 || first === 0x2d ||
    (first >= 0x30 && first <= 0x39) || first === 0x6e || first === 0x74 || first === 0x66)
}

/**
 * Decodes a single-object frame.
 *
 * @since 0.1.0
 * @category decoding
 */
export const decode = (
  frame: Uint8Array,
  options?: DecodeOptions
): Either.Either<Value, PayloadDecodeError> => {
  if (!(frame instanceof Uint8Array)) return framing("the payload is not bytes")
  if (frame.length < 2 || frame[0] !== 0xc3 || frame[1] !== 0x01) {
    if (frame.length === 0) return framing("the payload is empty")
    return framing(
      looksLikeJson(frame)
        ? "the payload looks like JSON text; Durable Workflow 2.0 payloads are Avro single-object frames (C3 01 …)"
        : "the payload does not start with the Avro single-object marker C3 01"
    )
  }
  if (frame.length < HEADER_LENGTH) {
    return framing(`the frame is ${frame.length} bytes, shorter than the 10-byte single-object header`)
  }
  for (let i = 2; i < HEADER_LENGTH; i++) {
    if (frame[i] !== header[i]) {
      return Either.left(
        new PayloadDecodeError({
          code: "unsupported_payload_schema",
          message: `unsupported_payload_schema: schema fingerprint ${toHex(frame.subarray(2, HEADER_LENGTH))} is not ${schemaName} v1 (${fingerprint})`
        })
      )
    }
  }
  if (frame.length === HEADER_LENGTH) return framing("the frame has a header but no datum")
  const reader = new Reader(frame, HEADER_LENGTH)
  let value: unknown
  try {
    value = readValue(reader, 0, options?.integralDoubles ?? "wrap")
  } catch (failure) {
    if (failure instanceof MalformedDatum) return framing(failure.reason)
    return framing(`the datum could not be read (${String(failure)})`)
  }
  if (reader.remaining !== 0) return framing(`${reader.remaining} trailing byte(s) after the datum`)
  return Either.right(value as Value)
}

/**
 * Encodes a JS value as a base64 blob (the `blob` of an envelope).
 *
 * @since 0.1.0
 * @category encoding
 */
export const encodeBlob = (value: unknown): Either.Either<string, PayloadEncodeError> =>
  Either.map(encode(value), encodeBase64)

/**
 * Decodes a base64 blob whose codec is already known to be `"avro"`. Only canonical padded
 * standard base64 is accepted.
 *
 * @since 0.1.0
 * @category decoding
 */
export const decodeBlob = (blob: string, options?: DecodeOptions): Either.Either<Value, PayloadDecodeError> => {
  if (typeof blob !== "string") return framing("the blob is not a string")
  const bytes = decodeBase64(blob)
  if (bytes === undefined) {
    return framing(
      looksLikeJson(new TextEncoder().encode(blob.slice(0, 16)))
        ? "the blob is JSON text, not base64; Durable Workflow 2.0 payloads are base64 Avro frames"
        : "the blob is not padded standard base64"
    )
  }
  return decode(bytes, options)
}

/**
 * Checks a payload codec, e.g. a task's root `payload_codec` or an envelope's `codec`: it must be
 * exactly `"avro"`; missing, `null` and every other codec fail with `unsupported_payload_codec`.
 * `subject` names what carried it, for the message.
 *
 * @since 0.1.0
 * @category decoding
 */
export const requireAvroCodec = (
  value: unknown,
  subject = "payload"
): Either.Either<typeof codec, PayloadDecodeError> => {
  if (value === codec) return Either.right(codec)
  const shown = value === undefined ? "missing" : value === null ? "null" : JSON.stringify(value) ?? String(value)
  return Either.left(
    new PayloadDecodeError({
      code: "unsupported_payload_codec",
      message: `unsupported_payload_codec: ${subject} codec ${shown} is not supported by Durable Workflow 2.0; only "avro" is`
    })
  )
}

/**
 * An inline payload envelope as received: `{ codec, blob }`. The codec is a string here so that a
 * foreign codec reaches {@link decodeEnvelope} and fails with `unsupported_payload_codec`.
 *
 * @since 0.1.0
 * @category schemas
 */
export const PayloadEnvelope = Schema.Struct({ codec: Schema.String, blob: Schema.String })

/**
 * @since 0.1.0
 * @category models
 */
export type PayloadEnvelope = typeof PayloadEnvelope.Type

/**
 * The envelope this library sends: `{ "codec": "avro", "blob": "<base64 frame>" }`.
 *
 * @since 0.1.0
 * @category schemas
 */
export const AvroPayloadEnvelope = Schema.Struct({ codec: Schema.Literal(codec), blob: Schema.String })

/**
 * @since 0.1.0
 * @category models
 */
export type AvroPayloadEnvelope = typeof AvroPayloadEnvelope.Type

/**
 * A reference to a payload kept in external storage (its bytes are the UTF-8 of the base64 blob).
 *
 * @since 0.1.0
 * @category schemas
 */
export const ExternalPayloadReference = Schema.Struct({
  schema: Schema.Literal("durable-workflow.v2.external-payload-reference.v1"),
  uri: Schema.String,
  sha256: Schema.String,
  size_bytes: Schema.Int.pipe(Schema.nonNegative()),
  codec: Schema.String,
  expires_at: Schema.optional(Schema.String)
})

/**
 * @since 0.1.0
 * @category models
 */
export type ExternalPayloadReference = typeof ExternalPayloadReference.Type

/**
 * An envelope whose payload lives in external storage: `{ codec, external_storage }`. It has to be
 * fetched and verified before its blob can be decoded.
 *
 * @since 0.1.0
 * @category schemas
 */
export const ExternalPayloadEnvelope = Schema.Struct({
  codec: Schema.String,
  external_storage: ExternalPayloadReference
})

/**
 * @since 0.1.0
 * @category models
 */
export type ExternalPayloadEnvelope = typeof ExternalPayloadEnvelope.Type

/**
 * Either envelope form, as it may appear in a task or a history event.
 *
 * @since 0.1.0
 * @category schemas
 */
export const AnyPayloadEnvelope = Schema.Union(PayloadEnvelope, ExternalPayloadEnvelope)

/**
 * @since 0.1.0
 * @category models
 */
export type AnyPayloadEnvelope = typeof AnyPayloadEnvelope.Type

/**
 * Encodes a JS value into the envelope sent on the wire.
 *
 * @since 0.1.0
 * @category encoding
 */
export const encodeEnvelope = (value: unknown): Either.Either<AvroPayloadEnvelope, PayloadEncodeError> =>
  Either.map(encodeBlob(value), (blob) => ({ codec, blob }))

/**
 * Decodes an inline envelope; its own `codec` must be `"avro"`.
 *
 * @since 0.1.0
 * @category decoding
 */
export const decodeEnvelope = (
  envelope: PayloadEnvelope,
  options?: DecodeOptions
): Either.Either<Value, PayloadDecodeError> =>
  typeof envelope !== "object" || envelope === null
    ? framing("the payload envelope is not an object")
    : Either.flatMap(requireAvroCodec(envelope.codec, "envelope"), () => decodeBlob(envelope.blob, options))

/**
 * Decodes a payload given either as an envelope (whose inner codec wins) or as a bare blob tagged by
 * an explicit codec (e.g. the task's `payload_codec`); a bare blob without a codec is refused.
 *
 * @since 0.1.0
 * @category decoding
 */
export const decodePayload = (
  payload: PayloadEnvelope | string,
  codecOfBareBlob?: unknown,
  options?: DecodeOptions
): Either.Either<Value, PayloadDecodeError> =>
  typeof payload === "string"
    ? Either.flatMap(requireAvroCodec(codecOfBareBlob, "bare blob"), () => decodeBlob(payload, options))
    : decodeEnvelope(payload, options)

/**
 * A schema from an inline envelope to the decoded JS value (and back, encoding as `"avro"`), for
 * message schemas that carry payloads. Failures carry the codec's message, which starts with the
 * protocol code.
 *
 * @since 0.1.0
 * @category schemas
 */
export const ValueFromEnvelope: Schema.Schema<Value, PayloadEnvelope> = Schema.transformOrFail(
  PayloadEnvelope,
  Schema.Unknown,
  {
    strict: true,
    decode: (envelope, _, ast) =>
      Either.mapLeft(decodeEnvelope(envelope), (error) => new ParseResult.Type(ast, envelope, error.message)),
    encode: (value, _, ast) =>
      Either.mapLeft(encodeEnvelope(value), (error) => new ParseResult.Type(ast, value, error.message))
  }
) as unknown as Schema.Schema<Value, PayloadEnvelope>

/**
 * How deep values may nest, on encode and decode.
 *
 * @since 0.1.0
 * @category constants
 */
export const maxDepth: number = MAX_DEPTH
