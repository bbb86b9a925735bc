/**
 * The `durable_workflow.protocol.Value` datum ↔ JS values, with the number policy of the public
 * codec module (see `DurableWorkflowCodec.ts`). Internal failures are thrown as
 * {@link EncodeFailure} / {@link MalformedDatum} and turned into typed errors by the caller.
 *
 * @internal
 */
import { isInt64, MalformedDatum, type Reader, type Writer } from "./binary.js"

/** Union branch indexes of `Value.value`, in schema order. */
const Branch = { Null: 0, Boolean: 1, Long: 2, Double: 3, Bytes: 4, String: 5, Array: 6, Map: 7 } as const

/**
 * Values nest at most this deep (a guard against cyclic input on encode and against hostile frames
 * on decode; the Python SDK's recursion limit is of the same order).
 *
 * @internal
 */
export const MAX_DEPTH = 1000

const doubleBrand: unique symbol = Symbol.for("effect-durable-worker/DurableWorkflowCodec/Double")

/**
 * A number that travels as an Avro `double` even when it is integral (`new Double(7)` is the double
 * 7.0, `7` alone is the long 7). Decoding returns one for every double whose value is a safe
 * integer, so decode → encode keeps the type. It acts as its number under arithmetic
 * (`valueOf`) and `JSON.stringify` (`toJSON`). Re-exported by `DurableWorkflowCodec`.
 *
 * @since 0.1.0
 * @category models
 */
export class Double {
  readonly [doubleBrand] = true
  constructor(readonly value: number) {}
  /** Arithmetic and comparisons see the number. */
  valueOf(): number {
    return this.value
  }
  /** `JSON.stringify` writes the number. */
  toJSON(): number {
    return this.value
  }
  /** Shown as `Double(7)`. */
  toString(): string {
    return `Double(${String(this.value)})`
  }
}

/**
 * Whether a value is a {@link Double} (recognised by a registered symbol brand, so it also works
 * across duplicated copies of this module). Re-exported by `DurableWorkflowCodec`.
 *
 * @since 0.1.0
 * @category guards
 */
export const isDouble = (value: unknown): value is Double =>
  typeof value === "object" && value !== null && (value as { [doubleBrand]?: unknown })[doubleBrand] === true

/**
 * The codes of encode failures.
 *
 * @internal
 */
export type EncodeFailureCode = "integer_overflow" | "non_finite_float" | "invalid_map_key" | "unsupported_value_type"

/**
 * An unencodable value; `path` is filled in while unwinding.
 *
 * @internal
 */
export class EncodeFailure {
  readonly path: Array<string | number> = []
  constructor(readonly code: EncodeFailureCode, readonly reason: string) {}
}

const describe = (value: unknown): string => {
  if (value === undefined) return "undefined"
  if (typeof value === "function") return "a function"
  if (typeof value === "symbol") return "a symbol"
  if (typeof value === "object" && value !== null) {
    const name = (value as object).constructor?.name
    return name ? `an instance of ${name}` : "an object"
  }
  return typeof value
}

const isPlainObject = (value: object): boolean => {
  const proto = Object.getPrototypeOf(value)
  return proto === Object.prototype || proto === null
}

const hasLoneSurrogate = (value: string): boolean => {
  const wellFormed = (value as { isWellFormed?: () => boolean }).isWellFormed
  if (wellFormed !== undefined) return !wellFormed.call(value)
  return /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(value)
}

const writeDoubleBranch = (writer: Writer, value: number): void => {
  if (!Number.isFinite(value)) {
    throw new EncodeFailure("non_finite_float", `${String(value)} has no representation in the payload format`)
  }
  writer.writeLong(Branch.Double)
  writer.writeDouble(value)
}

const writeKey = (writer: Writer, key: unknown): void => {
  if (typeof key !== "string") {
    throw new EncodeFailure("invalid_map_key", `map keys must be strings, got ${describe(key)}`)
  }
  if (hasLoneSurrogate(key)) {
    throw new EncodeFailure("invalid_map_key", "map key contains a lone UTF-16 surrogate and is not valid Unicode")
  }
  writer.writeString(key)
}

const withSegment = (failure: unknown, segment: string | number): unknown => {
  if (failure instanceof EncodeFailure) failure.path.unshift(segment)
  return failure
}

/**
 * Writes one `Value` datum (union branch index, then the branch's datum).
 *
 * @internal
 */
export const writeValue = (writer: Writer, value: unknown, depth: number): void => {
  switch (typeof value) {
    case "boolean":
      writer.writeLong(Branch.Boolean)
      writer.writeRaw(value ? TRUE : FALSE)
      return
    case "number":
      if (Number.isSafeInteger(value) && !Object.is(value, -0)) {
        writer.writeLong(Branch.Long)
        writer.writeLong(value)
      } else {
        writeDoubleBranch(writer, value)
      }
      return
    case "bigint":
      if (!isInt64(value)) {
        throw new EncodeFailure("integer_overflow", `${value} is outside the signed 64-bit range of an Avro long`)
      }
      writer.writeLong(Branch.Long)
      writer.writeBigLong(value)
      return
    case "string":
      if (hasLoneSurrogate(value)) {
        throw new EncodeFailure("unsupported_value_type", "string contains a lone UTF-16 surrogate and is not valid Unicode")
      }
      writer.writeLong(Branch.String)
      writer.writeString(value)
      return
    case "object": {
      if (value === null) {
        writer.writeLong(Branch.Null)
        return
      }
      if (isDouble(value)) {
        if (typeof value.value !== "number") {
          throw new EncodeFailure("unsupported_value_type", `Double must wrap a number, got ${describe(value.value)}`)
        }
        writeDoubleBranch(writer, value.value)
        return
      }
      if (value instanceof Uint8Array) {
        writer.writeLong(Branch.Bytes)
        writer.writeBytes(value)
        return
      }
      if (depth >= MAX_DEPTH) {
        throw new EncodeFailure("unsupported_value_type", `value nests deeper than ${MAX_DEPTH} levels (is it cyclic?)`)
      }
      if (Array.isArray(value)) {
        writer.writeLong(Branch.Array)
        const length = value.length
        if (length > 0) {
          writer.writeLong(length)
          for (let i = 0; i < length; i++) {
            try {
              writeValue(writer, value[i], depth + 1)
            } catch (failure) {
              throw withSegment(failure, i)
            }
          }
        }
        writer.writeLong(0)
        return
      }
      if (value instanceof Map) {
        writer.writeLong(Branch.Map)
        if (value.size > 0) {
          writer.writeLong(value.size)
          for (const [key, item] of value) {
            writeKey(writer, key)
            try {
              writeValue(writer, item, depth + 1)
            } catch (failure) {
              throw withSegment(failure, String(key))
            }
          }
        }
        writer.writeLong(0)
        return
      }
      if (isPlainObject(value)) {
        const symbols = Object.getOwnPropertySymbols(value)
        for (const symbol of symbols) {
          if (Object.prototype.propertyIsEnumerable.call(value, symbol)) {
            throw new EncodeFailure("invalid_map_key", `map keys must be strings, got ${symbol.toString()}`)
          }
        }
        const record = value as Record<string, unknown>
        const keys = Object.keys(record).filter((key) => record[key] !== undefined)
        writer.writeLong(Branch.Map)
        if (keys.length > 0) {
          writer.writeLong(keys.length)
          for (const key of keys) {
            writeKey(writer, key)
            try {
              writeValue(writer, record[key], depth + 1)
            } catch (failure) {
              throw withSegment(failure, key)
            }
          }
        }
        writer.writeLong(0)
        return
      }
      throw new EncodeFailure(
        "unsupported_value_type",
        `${describe(value)} has no payload representation; convert it to null, boolean, number, bigint, Double, string, Uint8Array, array, Map or plain object first`
      )
    }
    default:
      throw new EncodeFailure("unsupported_value_type", `${describe(value)} has no payload representation`)
  }
}

const TRUE = Uint8Array.of(1)
const FALSE = Uint8Array.of(0)

/**
 * How integral doubles are decoded: `"wrap"` (lossless, a {@link Double}) or `"number"` (a
 * plain number, which re-encodes as a long).
 *
 * @internal
 */
export type IntegralDoubles = "wrap" | "number"

const setKey = (target: Record<string, unknown>, key: string, value: unknown): void => {
  if (key === "__proto__") {
    Object.defineProperty(target, key, { value, writable: true, enumerable: true, configurable: true })
  } else {
    target[key] = value
  }
}

/** Reads the count of the next block; a negative count is followed by the block's byte size. */
const readBlockCount = (reader: Reader, what: string): number => {
  const count = reader.readLong(`${what} block count`)
  if (typeof count !== "number") throw new MalformedDatum(`${what} block count ${count} is out of range`)
  if (count >= 0) {
    if (count > reader.remaining) throw new MalformedDatum(`truncated ${what}: block of ${count} items`)
    return count
  }
  reader.readLength(`${what} block size`)
  if (-count > reader.remaining) throw new MalformedDatum(`truncated ${what}: block of ${-count} items`)
  return -count
}

/**
 * Reads one `Value` datum.
 *
 * @internal
 */
export const readValue = (reader: Reader, depth: number, integralDoubles: IntegralDoubles): unknown => {
  const branch = reader.readLong("union branch")
  switch (branch) {
    case Branch.Null:
      return null
    case Branch.Boolean: {
      const byte = reader.readByte("boolean")
      if (byte > 1) throw new MalformedDatum(`invalid boolean byte 0x${byte.toString(16)}`)
      return byte === 1
    }
    case Branch.Long:
      return reader.readLong("long")
    case Branch.Double: {
      const value = reader.readDouble("double")
      if (!Number.isFinite(value)) throw new MalformedDatum(`non-finite double ${String(value)}`)
      if (integralDoubles === "wrap" && Number.isSafeInteger(value) && !Object.is(value, -0)) {
        return new Double(value)
      }
      return value
    }
    case Branch.Bytes:
      return reader.readBytes("bytes")
    case Branch.String:
      return reader.readString("string")
    case Branch.Array: {
      if (depth >= MAX_DEPTH) throw new MalformedDatum(`value nests deeper than ${MAX_DEPTH} levels`)
      const items: Array<unknown> = []
      for (let count = readBlockCount(reader, "array"); count !== 0; count = readBlockCount(reader, "array")) {
        for (let i = 0; i < count; i++) items.push(readValue(reader, depth + 1, integralDoubles))
      }
      return items
    }
    case Branch.Map: {
      if (depth >= MAX_DEPTH) throw new MalformedDatum(`value nests deeper than ${MAX_DEPTH} levels`)
      const entries: Record<string, unknown> = {}
      for (let count = readBlockCount(reader, "map"); count !== 0; count = readBlockCount(reader, "map")) {
        for (let i = 0; i < count; i++) {
          const key = reader.readString("map key")
          setKey(entries, key, readValue(reader, depth + 1, integralDoubles))
        }
      }
      return entries
    }
    default:
      throw new MalformedDatum(`unknown union branch ${String(branch)}`)
  }
}
