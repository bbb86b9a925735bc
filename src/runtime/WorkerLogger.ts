/**
 * Effect's logs into any logger with `info` (or NestJS's `log`), `warn`, `error` and `debug` methods
 * (pino, winston, the NestJS `Logger`, `console`): each log line becomes one call, its message first
 * and its annotations (`workerId`, `runId`, `stepId`, ...) and cause in an object after it — or that
 * object first for pino-style loggers (those with `bindings()` and `child()`), as pino takes them,
 * or, for NestJS's `Logger` (`log` and no `info`), folded into the message as JSON.
 *
 * @since 0.3.0
 */
import * as Cause from "effect/Cause"
import * as HashMap from "effect/HashMap"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"

/**
 * What the adapter calls: `warn` and `error`, and `info` or (NestJS's `Logger`) `log`; `debug` when
 * there is one (else debug lines go where info lines go).
 *
 * @since 0.3.0
 * @category models
 */
export interface LoggerLike {
  readonly info?: (...args: Array<any>) => unknown
  readonly log?: (...args: Array<any>) => unknown
  readonly warn: (...args: Array<any>) => unknown
  readonly error: (...args: Array<any>) => unknown
  readonly debug?: (...args: Array<any>) => unknown
}

/** pino-style loggers take their fields first (`logger.info(fields, message)`). */
const fieldsFirst = (target: LoggerLike): boolean =>
  typeof (target as { bindings?: unknown }).bindings === "function" &&
  typeof (target as { child?: unknown }).child === "function"

/**
 * NestJS's `Logger` (a `log`, no `info`) prints every argument after the message as a message of its
 * own, and takes a trailing string for its context: it gets one string, the fields folded into it.
 */
const messageOnly = (target: LoggerLike): boolean => target.info === undefined && typeof target.log === "function"

const json = (value: unknown): string => {
  try {
    return JSON.stringify(value) ?? String(value)
  } catch {
    return String(value)
  }
}

/** The message, then the annotations as JSON, then the cause on the lines below. */
const folded = (line: string, fields: Record<string, unknown>): string => {
  const { cause, ...annotations } = fields
  const withFields = Object.keys(annotations).length === 0 ? line : `${line} ${json(annotations)}`
  return cause === undefined ? withFields : `${withFields}\n${String(cause)}`
}

const text = (message: unknown): string =>
  Array.isArray(message) ? message.map(text).join(" ") : typeof message === "string" ? message : String(message)

/**
 * An Effect `Logger` that writes to `target`: `Fatal`/`Error` to `error`, `Warning` to `warn`,
 * `Info` to `info`, `Debug`/`Trace` to `debug`. What `target` throws is swallowed: logging must never
 * fail a task.
 *
 * @since 0.3.0
 * @category constructors
 */
export const make = (target: LoggerLike): Logger.Logger<unknown, void> => {
  const first = fieldsFirst(target)
  const single = messageOnly(target)
  const info = target.info ?? target.log ?? target.warn
  const debug = target.debug ?? info
  return Logger.make(({ annotations, cause, logLevel, message }) => {
    const write = logLevel._tag === "Fatal" || logLevel._tag === "Error"
      ? target.error
      : logLevel._tag === "Warning"
      ? target.warn
      : logLevel._tag === "Info"
      ? info
      : logLevel._tag === "None"
      ? undefined
      : debug
    if (write === undefined) return
    const fields: Record<string, unknown> = {}
    for (const [key, value] of HashMap.toEntries(annotations)) fields[key] = value
    if (!Cause.isEmpty(cause)) fields["cause"] = Cause.pretty(cause)
    const line = text(message)
    const args = Object.keys(fields).length === 0
      ? [line]
      : single
      ? [folded(line, fields)]
      : first
      ? [fields, line]
      : [line, fields]
    try {
      write.apply(target, args)
    } catch {
      // a logger that throws does not stop the worker
    }
  })
}

/**
 * Replaces Effect's default logger with one writing to `target`.
 *
 * @since 0.3.0
 * @category layers
 */
export const layer = (target: LoggerLike): Layer.Layer<never> => Logger.replace(Logger.defaultLogger, make(target))
