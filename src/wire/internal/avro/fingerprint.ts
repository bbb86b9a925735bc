/**
 * CRC-64-AVRO, the 64-bit Rabin fingerprint the Avro specification defines for schema
 * fingerprints (used by single-object encoding).
 *
 * @internal
 */

const EMPTY = 0xc15d213aa4d7a795n
const MASK = 0xffffffffffffffffn

const table: ReadonlyArray<bigint> = (() => {
  const out: Array<bigint> = []
  for (let i = 0; i < 256; i++) {
    let fp = BigInt(i)
    for (let j = 0; j < 8; j++) {
      fp = (fp >> 1n) ^ (EMPTY & -(fp & 1n) & MASK)
    }
    out.push(fp)
  }
  return out
})()

/**
 * The CRC-64-AVRO fingerprint of some bytes, as an unsigned 64-bit integer.
 *
 * @internal
 */
export const crc64Avro = (bytes: Uint8Array): bigint => {
  let fp = EMPTY
  for (const byte of bytes) {
    fp = (fp >> 8n) ^ table[Number((fp ^ BigInt(byte)) & 0xffn)]!
  }
  return fp
}

/**
 * A fingerprint as the 8 bytes single-object encoding writes: little-endian.
 *
 * @internal
 */
export const fingerprintBytesLE = (fingerprint: bigint): Uint8Array => {
  const out = new Uint8Array(8)
  let fp = fingerprint
  for (let i = 0; i < 8; i++) {
    out[i] = Number(fp & 0xffn)
    fp >>= 8n
  }
  return out
}

/**
 * Lower-case hex of bytes, in order.
 *
 * @internal
 */
export const toHex = (bytes: Uint8Array): string =>
  Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("")
