/**
 * Strict standard base64 (RFC 4648 §4, padded): the only form a payload blob may take.
 *
 * @internal
 */

const strictBase64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/

/**
 * Bytes of a strict base64 string, or `undefined` when the text is not canonical padded base64.
 *
 * @internal
 */
export const decodeBase64 = (text: string): Uint8Array | undefined => {
  if (!strictBase64.test(text)) return undefined
  const buffer = Buffer.from(text, "base64")
  return new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength)
}

/**
 * Standard padded base64 of some bytes.
 *
 * @internal
 */
export const encodeBase64 = (bytes: Uint8Array): string =>
  Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64")
