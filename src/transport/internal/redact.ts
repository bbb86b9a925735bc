/**
 * Keeping secrets out of messages: the password of a connection URL, tokens and keys. Every message
 * a transport builds from a URL or from a driver's error goes through here, so a secret never
 * reaches a log line, an error or a heartbeat.
 *
 * @internal
 */
import * as Redacted from "effect/Redacted"

/**
 * A secret option: a plain string, or an Effect `Redacted` (what `Config.redacted` reads), which
 * keeps it out of logs until the connection is opened.
 *
 * @since 0.3.0
 */
export type Secret = string | Redacted.Redacted<string>

/** The value of a secret option, or `undefined`. */
export const reveal = (secret: Secret | undefined): string | undefined =>
  secret === undefined ? undefined : Redacted.isRedacted(secret) ? Redacted.value(secret) : secret

/** Whether a value is a secret option (a string or a `Redacted`). */
export const isSecret = (value: unknown): value is Secret => typeof value === "string" || Redacted.isRedacted(value)

/** What a password is shown as. */
export const MASK = "****"

/**
 * `text` with the password of every URL in it masked (`scheme://user:****@host`); a URL with a
 * user and no password keeps its user.
 */
export const redactUrl = (text: string): string => text.replace(/(\/\/[^/@\s:]*):[^@/\s]*@/g, `$1:${MASK}@`)

/**
 * `text` with URL passwords masked and every occurrence of `secrets` (tokens, keys, passwords)
 * replaced by the mask. Secrets shorter than 4 characters are left alone: masking them would
 * garble the message and hide nothing.
 */
export const redact = (text: string, secrets: ReadonlyArray<string | undefined> = []): string => {
  let out = redactUrl(text)
  for (const secret of secrets) {
    if (secret !== undefined && secret.length >= 4) out = out.split(secret).join(MASK)
  }
  return out
}

/**
 * The password (or token) of a connection URL, so it can be masked where it appears without its
 * URL (a driver that echoes it); `undefined` when the URL has none.
 */
export const passwordOf = (url: string | undefined): string | undefined => {
  if (url === undefined) return undefined
  try {
    const password = new URL(url).password
    return password === "" ? undefined : decodeURIComponent(password)
  } catch {
    return undefined
  }
}

/**
 * A driver's error as a cause that is safe to keep: its name, code and message (secrets masked),
 * and its own cause the same way, without the driver's fields (a Redis reply error keeps the
 * command it answered, `AUTH` and its password included; an HTTP error keeps its request headers).
 */
export const safeCause = (error: unknown, secrets: ReadonlyArray<string | undefined> = [], depth = 0): Error => {
  const record = typeof error === "object" && error !== null ? (error as Record<string, unknown>) : {}
  const message = error instanceof Error || typeof record["message"] === "string" ? String(record["message"]) : String(error)
  const safe = new Error(redact(message, secrets))
  if (typeof record["name"] === "string") safe.name = record["name"]
  for (const key of ["code", "errno", "status", "$fault"]) {
    const value = record[key]
    if (typeof value === "string" || typeof value === "number") (safe as unknown as Record<string, unknown>)[key] = value
  }
  safe.stack = `${safe.name}: ${safe.message}`
  if (depth < 4 && record["cause"] !== undefined) safe.cause = safeCause(record["cause"], secrets, depth + 1)
  return safe
}
