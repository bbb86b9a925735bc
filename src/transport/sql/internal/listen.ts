/**
 * PostgreSQL `LISTEN` on a connection of its own, opened with `pg` directly.
 *
 * `@effect/sql-pg`'s shared listener attaches its error handler only after the connection is up and
 * swallows every error afterwards: a backend killed while it starts crashes the process (an `error`
 * event with no listener), and one killed later leaves a stream that never ends and never delivers
 * again. Here the handler is attached before connecting and stays for the connection's life, and a
 * lost connection fails the stream, so the caller can listen again.
 */
import { SqlError } from "@effect/sql/SqlError"
import type * as PgClient from "@effect/sql-pg/PgClient"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import * as Stream from "effect/Stream"
import pg from "pg"
import * as WorkerMetrics from "../../../seam/WorkerMetrics.js"

/** How long closing the connection may take before it is left to the socket's own teardown. */
const CLOSE_TIMEOUT = Duration.seconds(1)

/** The `pg.Client` settings of a `PgClient`'s configuration (its pool's settings). */
export const clientConfig = (config: PgClient.PgClientConfig): pg.ClientConfig => ({
  connectionString: config.url === undefined ? undefined : Redacted.value(config.url),
  host: config.host,
  port: config.port,
  database: config.database,
  user: config.username,
  password: config.password === undefined ? undefined : Redacted.value(config.password),
  ssl: config.ssl,
  application_name: config.applicationName,
  connectionTimeoutMillis: config.connectTimeout === undefined
    ? undefined
    : Duration.toMillis(Duration.decode(config.connectTimeout)),
  // a peer that vanishes without a reset is noticed too
  keepAlive: true,
  ...(config.stream === undefined ? {} : { stream: config.stream }),
  ...(config.types === undefined ? {} : { types: config.types })
})

/** A connection being opened or open, and whether it is being closed on purpose (its end is then no loss). */
interface Listening {
  readonly client: pg.Client
  closing: boolean
}

const close = (listening: Listening) => {
  listening.closing = true
  return listening.client.end().catch(() => undefined)
}

/**
 * Waits for `end` up to {@link CLOSE_TIMEOUT}, then leaves it. Interruptible inside: it runs as a
 * release, which is not, and a timeout could not cut a wait that cannot be interrupted, so a database
 * gone mid-close would hold the stop (or the next LISTEN) for as long as `end` hangs.
 *
 * @internal
 */
export const closeWithin = (end: () => Promise<unknown>): Effect.Effect<void> =>
  Effect.asVoid(Effect.timeoutOption(Effect.interruptible(Effect.promise(end)), CLOSE_TIMEOUT))

/**
 * The payloads notified on `channel`, on a dedicated connection opened when the stream starts and
 * closed when it ends. The stream fails with a {@link SqlError} when the connection cannot be opened
 * or is lost; it never ends on its own otherwise.
 */
export const listen = (config: pg.ClientConfig) => (channel: string): Stream.Stream<string, SqlError> =>
  Stream.asyncScoped<string, SqlError>((emit) =>
    Effect.acquireRelease(
      Effect.async<Listening, SqlError>((resume) => {
        const listening: Listening = { client: new pg.Client(config), closing: false }
        const { client } = listening
        // an `error` can be followed by an `end` before the stream is closed: one loss, counted once
        let counted = false
        const lost = (cause: unknown) => {
          if (listening.closing) return
          if (!counted) {
            counted = true
            WorkerMetrics.connectionLost("sql")
          }
          void emit.fail(new SqlError({ cause, message: `the LISTEN ${channel} connection was lost` }))
        }
        // attached before connecting and never removed: no error of this connection goes unhandled
        client.on("error", lost)
        client.on("end", () => lost(new Error("Connection ended")))
        client.on("notification", (message) => {
          if (message.channel === channel && message.payload !== undefined) void emit.single(message.payload)
        })
        client.connect()
          .then(() => client.query(`LISTEN ${pg.escapeIdentifier(channel)}`))
          .then(
            () => resume(Effect.succeed(listening)),
            (cause) => {
              void close(listening)
              resume(Effect.fail(new SqlError({ cause, message: `could not LISTEN ${channel}` })))
            }
          )
        return Effect.sync(() => void close(listening))
      }),
      (listening) => closeWithin(() => close(listening))
    )
  )
