/**
 * Effect's logs into any logger with `info`, `warn`, `error` and `debug` methods (pino, winston,
 * the NestJS `Logger`, `console`): each log line becomes one call, its message first and its
 * annotations (`workerId`, `runId`, `stepId`, ...) and cause in an object after it.
 *
 * @since 0.3.0
 */
import * as Cause from "effect/Cause"
import * as HashMap from "effect/HashMap"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"

/**
 * What the adapter calls: any object with these four methods.
 *
 * @since 0.3.0
 * @category models
 */
export interface LoggerLike {
  readonly info: (message: string, ...rest: Array<unknown>) => unknown
  readonly warn: (message: string, ...rest: Array<unknown>) => unknown
  readonly error: (message: string, ...rest: Array<unknown>) => unknown
  readonly debug: (message: string, ...rest: Array<unknown>) => unknown
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
export const make = (target: LoggerLike): Logger.Logger<unknown, void> =>
  Logger.make(({ annotations, cause, logLevel, message }) => {
    const fields: Record<string, unknown> = {}
    for (const [key, value] of HashMap.toEntries(annotations)) fields[key] = value
    if (!Cause.isEmpty(cause)) fields["cause"] = Cause.pretty(cause)
    const line = text(message)
    const rest = Object.keys(fields).length === 0 ? [] : [fields]
    try {
      switch (logLevel._tag) {
        case "Fatal":
        case "Error":
          target.error(line, ...rest)
          break
        case "Warning":
          target.warn(line, ...rest)
          break
        case "Info":
          target.info(line, ...rest)
          break
        case "None":
          break
        default:
          target.debug(line, ...rest)
      }
    } catch {
      // a logger that throws does not stop the worker
    }
  })

/**
 * Replaces Effect's default logger with one writing to `target`.
 *
 * @since 0.3.0
 * @category layers
 */
export const layer = (target: LoggerLike): Layer.Layer<never> => Logger.replace(Logger.defaultLogger, make(target))
