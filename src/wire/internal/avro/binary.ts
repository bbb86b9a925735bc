/**
 * Avro binary primitives: zig-zag varint longs, little-endian doubles, length-prefixed bytes and
 * UTF-8 strings. The writer grows as needed; the reader signals malformed input by throwing
 * {@link MalformedDatum}, which the codec turns into a typed failure at its boundary.
 *
 * @internal
 */

const INT64_MIN = -(2n ** 63n)
const INT64_MAX = 2n ** 63n - 1n
/** Below this magnitude the zig-zag value of a number stays an exact double (< 2^53). */
const NUMBER_FAST_LIMIT = 2 ** 52

/** @internal */
export const isInt64 = (value: bigint): boolean => value >= INT64_MIN && value <= INT64_MAX

const utf8Encoder = new TextEncoder()
const utf8Decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true })

/**
 * Malformed binary input, with the reason. Thrown by {@link Reader}, caught by the codec.
 *
 * @internal
 */
export class MalformedDatum {
  constructor(readonly reason: string) {}
}

/**
 * An append-only byte buffer with Avro primitive writers.
 *
 * @internal
 */
export class Writer {
  private buffer: Uint8Array
  private view: DataView
  private position = 0

  constructor(initialCapacity = 256) {
    this.buffer = new Uint8Array(initialCapacity)
    this.view = new DataView(this.buffer.buffer)
  }

  private ensure(extra: number): void {
    const needed = this.position + extra
    if (needed <= this.buffer.length) return
    let capacity = this.buffer.length * 2
    while (capacity < needed) capacity *= 2
    const next = new Uint8Array(capacity)
    next.set(this.buffer.subarray(0, this.position))
    this.buffer = next
    this.view = new DataView(next.buffer)
  }

  /** Raw bytes, no length prefix. */
  writeRaw(bytes: Uint8Array): void {
    this.ensure(bytes.length)
    this.buffer.set(bytes, this.position)
    this.position += bytes.length
  }

  /** A long given as a JS safe integer. */
  writeLong(value: number): void {
    if (value >= NUMBER_FAST_LIMIT || value <= -NUMBER_FAST_LIMIT) {
      this.writeBigLong(BigInt(value))
      return
    }
    let zigzag = value >= 0 ? value * 2 : -value * 2 - 1
    this.ensure(10)
    while (zigzag >= 0x80) {
      this.buffer[this.position++] = (zigzag % 0x80) | 0x80
      zigzag = Math.floor(zigzag / 0x80)
    }
    this.buffer[this.position++] = zigzag
  }

  /** A long given as a bigint already checked to be within int64. */
  writeBigLong(value: bigint): void {
    let zigzag = BigInt.asUintN(64, (value << 1n) ^ (value >> 63n))
    this.ensure(10)
    while (zigzag >= 0x80n) {
      this.buffer[this.position++] = Number(zigzag & 0x7fn) | 0x80
      zigzag >>= 7n
    }
    this.buffer[this.position++] = Number(zigzag)
  }

  /** An IEEE-754 double, little-endian. */
  writeDouble(value: number): void {
    this.ensure(8)
    this.view.setFloat64(this.position, value, true)
    this.position += 8
  }

  /** Length-prefixed bytes. */
  writeBytes(bytes: Uint8Array): void {
    this.writeLong(bytes.length)
    this.writeRaw(bytes)
  }

  /** A length-prefixed UTF-8 string (the caller has checked it is well-formed UTF-16). */
  writeString(value: string): void {
    const length = value.length
    if (length < 64) {
      let ascii = true
      for (let i = 0; i < length; i++) {
        if (value.charCodeAt(i) >= 0x80) {
          ascii = false
          break
        }
      }
      if (ascii) {
        this.writeLong(length)
        this.ensure(length)
        for (let i = 0; i < length; i++) this.buffer[this.position++] = value.charCodeAt(i)
        return
      }
    }
    this.writeBytes(utf8Encoder.encode(value))
  }

  /** A copy of everything written so far. */
  finish(): Uint8Array {
    return this.buffer.slice(0, this.position)
  }
}

/**
 * A cursor over Avro binary input.
 *
 * @internal
 */
export class Reader {
  private readonly view: DataView
  position: number

  constructor(readonly bytes: Uint8Array, start: number) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength)
    this.position = start
  }

  /** Bytes left to read. */
  get remaining(): number {
    return this.bytes.length - this.position
  }

  /** One raw byte. */
  readByte(what: string): number {
    if (this.position >= this.bytes.length) throw new MalformedDatum(`truncated ${what}`)
    return this.bytes[this.position++]!
  }

  /**
   * A zig-zag varint long: a number when it is a safe integer, otherwise a bigint. At most ten
   * bytes, and the value must fit in 64 bits.
   */
  readLong(what: string): number | bigint {
    const bytes = this.bytes
    const start = this.position
    // Fast path: up to 7 bytes (49 bits) is exact in double arithmetic.
    let value = 0
    let multiplier = 1
    for (let i = 0; i < 7; i++) {
      if (this.position >= bytes.length) throw new MalformedDatum(`truncated ${what}`)
      const byte = bytes[this.position++]!
      value += (byte & 0x7f) * multiplier
      if ((byte & 0x80) === 0) return value % 2 === 0 ? value / 2 : -(value + 1) / 2
      multiplier *= 0x80
    }
    this.position = start
    let zigzag = 0n
    let shift = 0n
    for (let i = 0; i < 10; i++) {
      if (this.position >= bytes.length) throw new MalformedDatum(`truncated ${what}`)
      const byte = bytes[this.position++]!
      if (i === 9 && byte > 1) throw new MalformedDatum(`${what} does not fit in 64 bits`)
      zigzag |= BigInt(byte & 0x7f) << shift
      if ((byte & 0x80) === 0) {
        const decoded = (zigzag >> 1n) ^ -(zigzag & 1n)
        return decoded >= BigInt(Number.MIN_SAFE_INTEGER) && decoded <= BigInt(Number.MAX_SAFE_INTEGER)
          ? Number(decoded)
          : decoded
      }
      shift += 7n
    }
    throw new MalformedDatum(`${what} varint is longer than 10 bytes`)
  }

  /** A non-negative length or count that cannot exceed what is left. */
  readLength(what: string): number {
    const length = this.readLong(what)
    if (typeof length !== "number" || length < 0) throw new MalformedDatum(`invalid ${what} ${String(length)}`)
    if (length > this.remaining) throw new MalformedDatum(`truncated ${what}: needs ${length} bytes, ${this.remaining} left`)
    return length
  }

  /** An IEEE-754 double, little-endian. */
  readDouble(what: string): number {
    if (this.remaining < 8) throw new MalformedDatum(`truncated ${what}`)
    const value = this.view.getFloat64(this.position, true)
    this.position += 8
    return value
  }

  /** Length-prefixed bytes, copied out of the input. */
  readBytes(what: string): Uint8Array {
    const length = this.readLength(`${what} length`)
    const out = new Uint8Array(length)
    out.set(this.bytes.subarray(this.position, this.position + length))
    this.position += length
    return out
  }

  /** A length-prefixed string that must be valid UTF-8. */
  readString(what: string): string {
    const length = this.readLength(`${what} length`)
    const bytes = this.bytes
    const start = this.position
    const end = start + length
    this.position = end
    if (length < 64) {
      let out = ""
      let i = start
      for (; i < end; i++) {
        const byte = bytes[i]!
        if (byte >= 0x80) break
        out += String.fromCharCode(byte)
      }
      if (i === end) return out
    }
    try {
      return utf8Decoder.decode(bytes.subarray(start, end))
    } catch {
      throw new MalformedDatum(`${what} is not valid UTF-8`)
    }
  }
}
