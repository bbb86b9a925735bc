/**
 * Which driver errors are an authentication or a permission answer of the server, so a failed start
 * names them as such instead of "could not connect". Each broker's answer is read by its own
 * marker: a Redis reply prefix, a PostgreSQL SQLSTATE, a MySQL error number, an AWS error name,
 * an HTTP status.
 *
 * @internal
 */
import { messageOf } from "../../core/internal/errors.js"
import { AuthenticationError, PermissionError } from "../../seam/TransportError.js"

/** The first answer `classify` finds in `error` or its causes (SQL clients wrap the driver's error). */
export const inChain = <A>(error: unknown, classify: (error: unknown) => A | undefined): A | undefined => {
  for (let current = error, depth = 0; typeof current === "object" && current !== null && depth < 6; depth++) {
    const found = classify(current)
    if (found !== undefined) return found
    current = (current as { cause?: unknown }).cause
  }
  return undefined
}

/** What kind of refusal a server's answer is, and the answer itself (its code and message). */
export interface Refusal {
  readonly kind: "authentication" | "permission"
  /** The server's answer as shown to the user, e.g. `WRONGPASS invalid username-password pair`. */
  readonly answer: string
}

const field = (error: unknown, name: string): unknown =>
  typeof error === "object" && error !== null ? (error as Record<string, unknown>)[name] : undefined

/** Redis: `WRONGPASS` / `NOAUTH` (and `ERR invalid password` of servers before 6) refuse the login, `NOPERM` an ACL rule. */
export const redis = (error: unknown): Refusal | undefined => {
  const message = messageOf(error).replace(/^Ready check failed: /, "")
  if (/^(WRONGPASS|NOAUTH)\b/.test(message) || /^ERR (invalid password|AUTH <password> called without any password)/.test(message)) {
    return { kind: "authentication", answer: message }
  }
  if (/^NOPERM\b/.test(message)) return { kind: "permission", answer: message }
  return undefined
}

/** PostgreSQL SQLSTATEs: 28000 invalid authorization, 28P01 invalid password; 42501 insufficient privilege. */
export const postgres = (error: unknown): Refusal | undefined => {
  const code = field(error, "code")
  if (code === "28P01" || code === "28000") return { kind: "authentication", answer: `${messageOf(error)} (SQLSTATE ${code})` }
  if (code === "42501") return { kind: "permission", answer: `${messageOf(error)} (SQLSTATE ${code})` }
  return undefined
}

/**
 * A database server's answer that the database named does not exist (PostgreSQL 3D000, MySQL
 * `ER_BAD_DB_ERROR` 1049): the server is there, so "check that it is running" would mislead.
 */
export const missingDatabase = (error: unknown): string | undefined => {
  const code = field(error, "code")
  if (code === "3D000") return `${messageOf(error)} (SQLSTATE 3D000)`
  if (field(error, "errno") === 1049 || code === "ER_BAD_DB_ERROR") return `${messageOf(error)} (ER_BAD_DB_ERROR, 1049)`
  return undefined
}

/** MySQL / MariaDB error numbers of a refused login, and of a refused database, table or privilege. */
const MYSQL_AUTH = new Map<number, string>([
  [1045, "ER_ACCESS_DENIED_ERROR"],
  [1698, "ER_ACCESS_DENIED_NO_PASSWORD_ERROR"],
  [1251, "ER_NOT_SUPPORTED_AUTH_MODE"],
  [1862, "ER_MUST_CHANGE_PASSWORD_LOGIN"]
])
const MYSQL_PERMISSION = new Map<number, string>([
  [1044, "ER_DBACCESS_DENIED_ERROR"],
  [1142, "ER_TABLEACCESS_DENIED_ERROR"],
  [1143, "ER_COLUMNACCESS_DENIED_ERROR"],
  [1227, "ER_SPECIFIC_ACCESS_DENIED_ERROR"],
  [1370, "ER_PROCACCESS_DENIED_ERROR"]
])

export const mysql = (error: unknown): Refusal | undefined => {
  const errno = field(error, "errno")
  const code = field(error, "code")
  const number = typeof errno === "number"
    ? errno
    : [...MYSQL_AUTH, ...MYSQL_PERMISSION].find(([, name]) => name === code)?.[0]
  if (number === undefined) return undefined
  const name = MYSQL_AUTH.get(number) ?? MYSQL_PERMISSION.get(number)
  if (name === undefined) return undefined
  const answer = `${messageOf(error)} (${name}, ${number})`
  return MYSQL_AUTH.has(number) ? { kind: "authentication", answer } : { kind: "permission", answer }
}

/** AWS error names (the SDK's `name`, the service's `Code`) of refused or missing credentials. */
const AWS_AUTH = new Set([
  "InvalidClientTokenId",
  "SignatureDoesNotMatch",
  "UnrecognizedClientException",
  "InvalidSignatureException",
  "IncompleteSignature",
  "MissingAuthenticationToken",
  "MissingAuthenticationTokenException",
  "ExpiredToken",
  "ExpiredTokenException",
  "RequestExpired",
  "InvalidAccessKeyId",
  "InvalidSecurity",
  "AuthFailure",
  "CredentialsProviderError"
])
/** AWS error names of a request the credentials may not make. */
const AWS_PERMISSION = new Set([
  "AccessDenied",
  "AccessDeniedException",
  "AWS.SimpleQueueService.AccessDenied",
  "KmsAccessDenied",
  "KMS.AccessDeniedException",
  "UnauthorizedOperation",
  "OptInRequired"
])

export const aws = (error: unknown): Refusal | undefined => {
  const name = field(error, "name")
  const code = field(error, "Code")
  const id = [name, code].find((n): n is string => typeof n === "string" && (AWS_AUTH.has(n) || AWS_PERMISSION.has(n)))
  if (id === undefined) return undefined
  const answer = `${id}: ${messageOf(error)}`
  return AWS_AUTH.has(id) ? { kind: "authentication", answer } : { kind: "permission", answer }
}

/** An HTTP status: 401 refuses the credentials, 403 the operation. */
export const http = (status: number, message: string): Refusal | undefined =>
  status === 401
    ? { kind: "authentication", answer: `HTTP 401${message === "" ? "" : `: ${message}`}` }
    : status === 403
    ? { kind: "permission", answer: `HTTP 403${message === "" ? "" : `: ${message}`}` }
    : undefined

/**
 * The typed error of a refusal: `what` says who refused (e.g. "Redis at redis://127.0.0.1:6379"),
 * `check` what the user should look at for each kind.
 */
export const toError = (
  transport: string,
  refusal: Refusal,
  what: string,
  check: { readonly authentication: string; readonly permission: string },
  cause: unknown
): AuthenticationError | PermissionError =>
  refusal.kind === "authentication"
    ? new AuthenticationError({
      transport,
      message: `${what} refused the credentials (authentication failed: ${refusal.answer}); ${check.authentication}`,
      cause
    })
    : new PermissionError({
      transport,
      message: `${what} refused the operation (permission denied: ${refusal.answer}); ${check.permission}`,
      cause
    })
