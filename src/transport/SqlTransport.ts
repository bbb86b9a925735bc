/**
 * The SQL transport: a broker-less transport on the nestjs-durable engine's own DB transport tables
 * (`@dudousxd/nestjs-durable-transport-db`), on PostgreSQL and on MySQL/MariaDB.
 *
 * - one subscription per registered step name: the rows of `<prefix>_transport_tasks` whose `grp` is
 *   the step's routing token (`:` sanitised, `@partition` suffixed);
 * - a claim takes at most as many rows as the worker has permits for, oldest first, with
 *   `SELECT … FOR UPDATE SKIP LOCKED` in one short transaction, and stamps them with a per-claim
 *   `claimed_by` and `claimed_at` (epoch ms) — the engine's lease contract (`lease`, default 30 s);
 * - the lease is renewed while a step runs (every `lease / 3`), so a step longer than the lease is not
 *   claimed a second time;
 * - a result is written as the engine reads it, and the task row is deleted in the same transaction,
 *   only while this claim still owns it — so a re-dispatched retry is never swallowed by a leftover
 *   task row, and a lost connection leaves the task either done once or claimable again;
 * - completions are written in batches, per token: one written alone goes at once, and those that
 *   arrive while a write is in flight go together in the next one (on PostgreSQL one statement, on
 *   MySQL one transaction), each still guarded by its own claim; a batch that fails is written again
 *   one completion at a time, so each gets its own outcome and nothing is lost;
 * - a completing task can take the next row of its token in the same statement/transaction (the
 *   runtime's `completeAndTakeNext`), so a busy subscription needs no separate claim round trip;
 * - on PostgreSQL an insert trigger (created with the tables) `NOTIFY`s the step's token and idle
 *   pollers `LISTEN`, so new work is picked up at once; polling every `pollInterval` stays as the
 *   fallback (expired leases, missed notifications) and is all there is on MySQL;
 * - on MySQL/MariaDB a claim or completion that InnoDB picks as a deadlock victim (concurrent SKIP
 *   LOCKED claims can be) was rolled back and is retried at once;
 * - there is no worker registry in the DB transport: registration creates the tables (`autoCreate`)
 *   and starts listening, deregistration has nothing to remove.
 *
 * What remains, as in the engine's own transport: delivery is at least once (a worker that dies
 * mid-step leaves its row leased until `lease` passes, then another worker runs the same `stepId`
 * again); an engine re-dispatch (`remoteRedispatchMs`, `redispatchPending`) while the old row still
 * exists is dropped by the engine's `ON CONFLICT DO NOTHING` — the old row's run then answers; the
 * DB transport carries no workflow turns, no cancellations and no heartbeats. If the `LISTEN`
 * connection is lost, idle subscriptions are found by the `pollInterval` fallback until it is listened
 * again (after 100 ms, backing off to 5 s), and every poller looks once when it is.
 *
 * @since 0.1.0
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { randomBytes } from "node:crypto"
import { SqlError } from "@effect/sql/SqlError"
import type * as PgClient from "@effect/sql-pg/PgClient"
import * as Clock from "effect/Clock"
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as ConfigError from "effect/ConfigError"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Predicate from "effect/Predicate"
import * as Queue from "effect/Queue"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as FailureRun from "../core/internal/failureRun.js"
import { withReason } from "../core/internal/errors.js"
import { definedOnly, optional } from "../core/internal/options.js"
import * as NestDurableProtocol from "../protocol/NestDurableProtocol.js"
import type { NestReply } from "../protocol/NestDurableProtocol.js"
import { routingToken } from "../protocol/NestDurableProtocol.js"
import { logMalformed } from "../protocol/internal/malformed.js"
import * as Protocol from "../seam/Protocol.js"
import * as WorkerMetrics from "../seam/WorkerMetrics.js"
import * as Batcher from "./internal/batcher.js"
import { dialectOfUrl, type Resolved, resolve, resolvePool, SqlConfigError, urlShape } from "./sql/internal/config.js"
import {
  byCreatedAt,
  mysqlWrittenSize,
  type RowPayload,
  type TaskRow,
  tooLargeResultRow,
  toPayload,
  toResultRow
} from "./sql/internal/rows.js"
import type { ResultRow } from "./sql/internal/statements.js"
import {
  dialectLabel,
  describeTarget,
  hasErrorCode,
  isConnectionLost,
  locationFields,
  NAME,
  refusalOf,
  retryLostConnection,
  sqlMessageOf
} from "./sql/internal/connection.js"
import * as Refusals from "./internal/connectErrors.js"
import { namingVariables } from "./internal/options.js"
import { MissingDriverError, missingDriverError, MYSQL_PACKAGES, POSTGRES_PACKAGES } from "./internal/drivers.js"

export { MissingDriverError } from "./internal/drivers.js"
import type * as Listen from "./sql/internal/listen.js"
import * as Statements from "./sql/internal/statements.js"
import * as Conflict from "./sql/internal/conflict.js"
import { ResultConflict } from "./sql/internal/conflict.js"
import * as UnknownClaims from "./sql/internal/unknownClaims.js"
import { waitFor } from "./internal/startup.js"
import {
  Delivery,
  Poller,
  Registration,
  RegistrationError,
  Transport,
  TransportError,
  type WorkerDescription
} from "../seam/Transport.js"
import type { ConnectionOptions, PostgresConnectionOptions, SqlTransportOptions } from "./sql/internal/options.js"

export type { ConnectionOptions, SqlTransportOptions } from "./sql/internal/options.js"

/**
 * The SQL dialects the engine's DB transport supports.
 *
 * @since 0.1.0
 * @category models
 */
export type Dialect = Statements.Dialect

/**
 * A connected client: the `SqlClient`, its dialect and, on PostgreSQL, `LISTEN`: a stream of the
 * channel's payloads that fails when its connection is lost (it is then started again).
 *
 * @since 0.1.0
 * @category models
 */
export interface Connection {
  readonly sql: SqlClient.SqlClient
  readonly dialect: Dialect
  readonly listen: Option.Option<(channel: string) => Stream.Stream<string, SqlError>>
}

export { dialectOfUrl, SqlConfigError } from "./sql/internal/config.js"


const DEFAULT_POLL = Duration.millis(500)
const DEFAULT_POLL_NOTIFIED = Duration.seconds(5)
const LISTEN_PROBES = 2_000
/** A lost `LISTEN` is tried again after 100 ms, doubling up to 5 s; a minute without loss starts over. */
const LISTEN_RETRY = Schedule.exponential(Duration.millis(100)).pipe(
  Schedule.union(Schedule.spaced(Duration.seconds(5))),
  Schedule.resetAfter(Duration.minutes(1))
)

const transportError = (operation: string) => (cause: unknown) => {
  // every failed statement of the task path becomes its error here once: counted where it lost its connection
  if (isConnectionLost(cause)) WorkerMetrics.connectionLost(NAME)
  // a refused statement (the user lost a grant, or never had it) or a refused login on a new
  // connection (the password changed, the user dropped or locked since the start) fails the same way
  // every time: the worker stops with it rather than polling on as if it served
  const refused = refusalOf(cause)
  if (refused === undefined) {
    return new TransportError({ transport: NAME, operation, message: `${operation} failed: ${sqlMessageOf(cause)}`, cause })
  }
  const message = refused.kind === "authentication"
    ? `${operation} failed: the database refused the worker's login on a new connection (${refused.answer}); check ` +
      "that the user and password in DATABASE_URL (or the url / username / password options) are still valid: " +
      "changed since the worker started, they end the run"
    : `${operation} failed: the database refused it (${refused.answer}); grant the worker's user SELECT, ` +
      "INSERT, UPDATE and DELETE on the durable tables"
  return new TransportError({ transport: NAME, operation, message, cause, fatal: true })
}

/** A completion on its way to the database: the result row, the claim it needs, and whether to claim a next row. */
interface Completing extends Statements.Completion {
  readonly takeNext: boolean
  /** The row's size as a MySQL statement writes it, where the packet limit applies: measured once. */
  readonly size?: number | undefined
}

/** What became of a completion: written (or `lost`: its claim had gone), and the row claimed for it, if any. */
interface Completed {
  readonly lost: boolean
  readonly next?: { readonly row: TaskRow; readonly claim: string } | undefined
}

type CompleteError = TransportError | ResultConflict

/** A row of {@link Statements.completeBatchPostgres}: a completed task, or a task claimed with the batch. */
type BatchRow =
  | { readonly kind: "done"; readonly step_id: string; readonly claim: string; readonly inserted: boolean }
  | ({ readonly kind: "next" } & TaskRow)

/**
 * `withTransaction` turns a failed COMMIT or ROLLBACK (a lost connection) into a defect: make it a
 * failure again, so the caller retries and nothing is lost (the transaction either committed or not).
 */
const commitFailed = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | SqlError, R> =>
  Effect.catchSomeDefect(effect, (defect) => defect instanceof SqlError ? Option.some(Effect.fail(defect)) : Option.none())

/** Rows affected, from a driver's raw result (node-pg `rowCount`, mysql2 `affectedRows`). */
const affected = (raw: unknown): number => {
  const result = raw as { rowCount?: number | null; affectedRows?: number }
  return Number(result.rowCount ?? result.affectedRows ?? 0)
}

/** MySQL/MariaDB reported a deadlock or a lock wait timeout: the transaction was rolled back. */
const isLockConflict = (error: unknown): boolean => {
  if (!(error instanceof SqlError)) return false
  const code = (error.cause as { code?: unknown } | undefined)?.code
  return code === "ER_LOCK_DEADLOCK" || code === "ER_LOCK_WAIT_TIMEOUT"
}

/** A MySQL transaction picked as a deadlock victim held nothing once rolled back: it is tried again at once. */
const retryLockConflict = { times: 3, while: isLockConflict } as const

/** The protocol of a row that cannot be read: a non-retryable `malformed_task` failure. */
const unreadableProtocol = (
  row: Extract<RowPayload, { _tag: "Unreadable" }>,
  base: Protocol.Protocol<NestReply>
): Protocol.Protocol<NestReply> => ({
  ...base,
  process: () =>
    Effect.as(
      logMalformed("step", row.detail, row.identity),
      Protocol.reply<NestReply>({
        _tag: "StepResult",
        result: {
          ...row.identity,
          status: "failed",
          error: { message: `malformed step task: ${row.detail}`, code: "malformed_task", retryable: false }
        }
      }, false)
    )
})

/**
 * Builds the transport service over a connection that each registration acquires (and closes with
 * its scope); `target` names the database in logs and errors. Its options are checked first: an
 * unknown key or a bad value fails with an {@link SqlConfigError} naming the option.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  options: SqlTransportOptions,
  connect: Effect.Effect<Connection, RegistrationError, Scope.Scope>,
  target: string
): Effect.Effect<Transport["Type"], SqlConfigError> => Effect.map(resolve(options), (config) => build(config, connect, target))

/** The transport over checked options. */
const build = (
  config: Resolved,
  connect: Effect.Effect<Connection, RegistrationError, Scope.Scope>,
  target: string
): Transport["Type"] => {
  const { autoCreate, batchSize, lease, partition, prefix, renewInterval } = config
  const name = `sql ${target} prefix ${prefix}`
  const protocol = NestDurableProtocol.make({ partition })

  const register = (worker: WorkerDescription): Effect.Effect<Registration, RegistrationError, Scope.Scope> =>
    Effect.gen(function*() {
      yield* WorkerMetrics.connectionsLostFrom(NAME)
      const connection = yield* (config.waitForBroker
        ? waitFor(connect, (error) => isRefusal(error) ? undefined : `the database at ${target} to answer`, {
          describe: (error) => error.message
        })
        : connect)
      const { dialect, listen } = connection
      // the application's client may rename result columns (`transformResultNames: String.snakeToCamel`)
      // or query names: every statement here reads and writes the engine's own column names
      const sql = connection.sql.withoutTransforms()
      const names = Statements.names(prefix)
      const run = <A extends object = Record<string, unknown>>(statement: Statements.Sql) =>
        sql.unsafe<A>(statement.text, statement.params as Array<unknown>)
      const wantsNotify = dialect === "postgres" && config.notify && Option.isSome(listen)
      if (autoCreate) yield* createSchema(sql, dialect, names, wantsNotify, target)
      else yield* waitForTables(sql, dialect, names)
      // without autoCreate the trigger may be missing: then nothing would ever notify, so poll as often as the engine
      const notifying = wantsNotify && (autoCreate || (yield* triggerExists(sql, names)))
      if (wantsNotify && !notifying) {
        yield* Effect.logWarning(
          `no ${names.notifyTrigger} trigger on ${names.tasks} (autoCreate is off): new tasks are found by polling only`
        )
      }
      const pollInterval = config.pollInterval ?? (notifying ? DEFAULT_POLL_NOTIFIED : DEFAULT_POLL)
      // MySQL refuses a statement over max_allowed_packet and drops the connection: a result that big
      // could never be written, and its task would run again every lease
      const packetLimit = dialect === "mysql" ? yield* readPacketLimit(sql) : undefined
      const rowLimit = packetLimit === undefined ? undefined : packetLimit - STATEMENT_HEADROOM

      const workflows = Protocol.names(worker.handlers.workflows)
      if (workflows.length > 0) {
        yield* Effect.logWarning(
          `the SQL transport carries step tasks only; workflows ${workflows.join(", ")} are not served over it`
        )
      }
      const tokens = Array.from(
        new Set(Protocol.names(worker.handlers.steps).map((step) => routingToken(step, partition)))
      )
      const wakes = new Map<string, Queue.Queue<void>>()
      for (const token of tokens) wakes.set(token, yield* Queue.sliding<void>(1))
      if (notifying && Option.isSome(listen) && tokens.length > 0) {
        yield* startListening(listen.value, (payload) => run(Statements.notify(names, payload)), names.channel, wakes)
      }

      // a completion that finds an earlier result of its step waiting tries again, for up to a lease
      const untilNoConflict = Conflict.untilNoConflict({ lease, results: names.results })
      // replicas may share a workerId (one DURABLE_WORKER_ID for all): a nonce per registration keeps
      // their claims apart, so releasing one's claim by its id never frees rows another one serves
      const nonce = randomBytes(6).toString("hex")
      let claims = 0
      const nextClaim = () => `${worker.workerId}#${nonce}.${(++claims).toString(36)}`

      // a claim whose statement failed may have been committed all the same: released in the
      // background once the database answers, or let go after a lease (see sql/internal/unknownClaims.ts)
      const releaseUnknownClaim = yield* UnknownClaims.make({
        lease,
        tasks: names.tasks,
        release: (lost, rows) => Effect.map(run(Statements.releaseClaims(dialect, names, lost, rows)).raw, affected),
        isRefusal: (error) => refusalOf(error) !== undefined
      })

      const release = (stepId: string, claim: string, grp: string) =>
        run(Statements.release(dialect, names, { stepId, claim })).raw.pipe(
          Effect.zipRight(notifying ? Effect.ignore(run(Statements.notify(names, grp))) : Effect.void),
          Effect.asVoid,
          Effect.mapError(transportError(`giving task ${stepId} back`))
        )

      /**
       * Gives back a row claimed alongside a completion that no completion took. If that fails, the
       * row goes to the releaser of unknown claims (by itself: the rest of its claim is served), which
       * tries again and says what it released, rather than the row sitting out a lease unsaid.
       */
      const giveBackUntaken = (stepId: string, claim: string, grp: string) =>
        Effect.catchAll(release(stepId, claim, grp), () => releaseUnknownClaim(claim, stepId))

      /**
       * Writes a batch of completions of one token, and with them claims one more row for each that
       * asks for it: on PostgreSQL in one statement, on MySQL in one transaction (optimistically: if a
       * claim was lost or an earlier result waits, it is rolled back and each completion is written
       * alone, as the per-task transaction always did).
       */
      const writeBatch = (token: string): Batcher.RunBatch<Completing, Completed, CompleteError> => (items) =>
        Effect.gen(function*() {
          const wanted = Math.min(batchSize, items.reduce((n, item) => (item.takeNext ? n + 1 : n), 0))
          const now = yield* Clock.currentTimeMillis
          const next = wanted === 0
            ? undefined
            : { grp: token, claim: nextClaim(), now, staleBefore: now - Duration.toMillis(lease), limit: wanted }
          const written = yield* (dialect === "postgres" ? writePostgres(items, next) : writeMysql(items, next)).pipe(
            // a batch that failed may have been committed, its claimed rows with it (unless the
            // database refused it)
            Effect.tapError((error) => next === undefined || refusalOf(error) !== undefined ? Effect.void : releaseUnknownClaim(next.claim))
          )
          if (written === undefined) return yield* Effect.forEach(items, (item) => writeMysqlAlone(item).pipe(Effect.exit))
          const [outcomes, claimed] = written
          // every claimed row goes to a completion that asked for one, or straight back
          const rows = [...claimed].sort(byCreatedAt)
          let handed = 0
          const exits = items.map((item, i): Exit.Exit<Completed, CompleteError> => {
            const outcome = outcomes[i]!
            if (outcome === "conflict") return Exit.fail(new ResultConflict({ stepId: item.row.stepId }))
            const row = item.takeNext && handed < rows.length ? rows[handed++] : undefined
            return Exit.succeed({ lost: outcome === "lost", next: row === undefined ? undefined : { row, claim: next!.claim } })
          })
          for (const row of rows.slice(handed)) yield* giveBackUntaken(row.step_id, next!.claim, row.grp)
          return exits
        }).pipe(Effect.mapError((error) => transportError("writing a batch of results")(error)))

      type Outcome = "written" | "lost" | "conflict"

      const writePostgres = (items: ReadonlyArray<Completing>, next: Statements.NextClaim | undefined) =>
        Effect.map(
          run<BatchRow>(Statements.completeBatchPostgres(names, items, next)),
          (rows): readonly [ReadonlyArray<Outcome>, ReadonlyArray<TaskRow>] => {
            const done = new Map<string, boolean>()
            const claimed: Array<TaskRow> = []
            for (const row of rows) {
              if (row.kind === "done") done.set(`${row.step_id}\u0000${row.claim}`, row.inserted === true)
              else claimed.push(row)
            }
            const outcomes = items.map(({ claim, row }): Outcome => {
              const inserted = done.get(`${row.stepId}\u0000${claim}`)
              return inserted === undefined ? "lost" : inserted ? "written" : "conflict"
            })
            return [outcomes, claimed]
          }
        )

      /**
       * MySQL: a transaction on one reserved connection, its statements sent as few multi-statement
       * round trips (text protocol): `body` starts with `BEGIN` and ends with `COMMIT` or `ROLLBACK`;
       * if it fails anywhere, the transaction is rolled back (a deadlock victim already was) and the
       * connection returned. InnoDB deadlock victims are retried at once.
       */
      const mysqlTransaction = <A, E>(body: (send: (statements: ReadonlyArray<Statements.Sql | string>) => Effect.Effect<ReadonlyArray<unknown>, SqlError>) => Effect.Effect<A, E | SqlError>) =>
        Effect.scoped(
          Effect.flatMap(sql.reserve, (conn) => {
            const send = (statements: ReadonlyArray<Statements.Sql | string>) => {
              const texts: Array<string> = []
              const params: Array<unknown> = []
              for (const statement of statements) {
                if (typeof statement === "string") texts.push(statement)
                else {
                  texts.push(statement.text)
                  for (const param of statement.params) params.push(param)
                }
              }
              return conn.executeUnprepared(texts.join(";\n"), params, undefined)
            }
            return body(send).pipe(Effect.onError(() => Effect.ignore(conn.executeUnprepared("ROLLBACK", [], undefined))))
          })
        ).pipe(Effect.retry(retryLockConflict))

      /**
       * MySQL: the batch in one transaction of two round trips — `BEGIN`, the guarded delete, the
       * results and (with `next`) the claim's `SELECT … FOR UPDATE SKIP LOCKED`; then the claim's
       * `UPDATE` and `COMMIT`. `undefined` when it was rolled back instead: a claim was lost, or an
       * earlier result waits (the counts tell).
       */
      const writeMysql = (items: ReadonlyArray<Completing>, next: Statements.NextClaim | undefined) =>
        mysqlTransaction((send) =>
          Effect.gen(function*() {
            const results = yield* send([
              "BEGIN",
              Statements.deleteClaimedBatch(names, items),
              Statements.insertResultsMysql(names, items.map((item) => item.row)),
              ...(next === undefined ? [] : [Statements.claimSelectMysql(names, next)])
            ])
            if (affected(results[1]) !== items.length || affected(results[2]) !== items.length) {
              yield* send(["ROLLBACK"])
              return undefined
            }
            const claimed = next === undefined ? [] : (results[3] as ReadonlyArray<TaskRow>)
            yield* send(claimed.length === 0 ? ["COMMIT"] : [claimUpdate(next!, claimed), "COMMIT"])
            return [items.map((): Outcome => "written"), claimed] as const
          })
        )

      const claimUpdate = (args: Statements.NextClaim, rows: ReadonlyArray<TaskRow>) =>
        Statements.claimUpdateMysql(names, { claim: args.claim, now: args.now, stepIds: rows.map((r) => r.step_id) })

      /** One completion in its own transaction: delete the owned task row, then insert the result unless one waits. */
      const writeMysqlAlone = (item: Completing) =>
        sql.withTransaction(
          Effect.gen(function*() {
            const deleted = affected(yield* run(Statements.deleteClaimed("mysql", names, { stepId: item.row.stepId, claim: item.claim })).raw)
            if (deleted === 0) return { lost: true } satisfies Completed
            const inserted = affected(yield* run(Statements.insertResultMysql(names, item.row)).raw)
            if (inserted === 0) return yield* new ResultConflict({ stepId: item.row.stepId })
            return { lost: false } satisfies Completed
          })
        ).pipe(
          Effect.retry(retryLockConflict),
          commitFailed,
          Effect.mapError((error) => error._tag === "ResultConflict" ? error : transportError(`writing the result of task ${item.row.stepId}`)(error))
        )

      /** MySQL: a claim in two round trips — `BEGIN` and the `SELECT … FOR UPDATE SKIP LOCKED`, then the `UPDATE` and `COMMIT`. */
      const claimMysql = (args: Statements.NextClaim) =>
        mysqlTransaction((send) =>
          Effect.gen(function*() {
            const [, rows] = yield* send(["BEGIN", Statements.claimSelectMysql(names, args)])
            const claimed = rows as ReadonlyArray<TaskRow>
            yield* send(claimed.length === 0 ? ["COMMIT"] : [claimUpdate(args, claimed), "COMMIT"])
            return claimed
          })
        )

      const completers = new Map<string, (item: Completing) => Effect.Effect<Completed, CompleteError>>()
      for (const token of tokens) {
        completers.set(
          token,
          yield* Batcher.make({
            run: writeBatch(token),
            maxItems: batchSize,
            // a MySQL batch is one statement round trip: together its rows stay under the packet limit
            size: rowLimit === undefined ? undefined : (item: Completing) => item.size ?? mysqlWrittenSize(item.row),
            maxSize: rowLimit,
            // a row claimed for a completion whose caller stopped waiting goes back at once
            unclaimed: (completed: Completed) =>
              completed.next === undefined
                ? Effect.void
                : giveBackUntaken(completed.next.row.step_id, completed.next.claim, completed.next.row.grp)
          })
        )
      }

      /**
       * Says what became of a task whose result found no row under its claim: gone (completed, by an
       * earlier attempt of this very answer whose outcome was lost with the connection, or by the
       * worker that took it over), or held by another claim (its lease ran out and it was taken over).
       */
      const lostClaim = (stepId: string, claim: string) =>
        run<{ readonly claimed_by: string | null }>(Statements.taskClaim(dialect, names, stepId)).pipe(
          Effect.flatMap((rows) =>
            Effect.logWarning(
              rows.length === 0
                ? `task ${stepId} was already completed (by an earlier attempt of this answer whose outcome was lost with ` +
                  "the connection, or by a worker that took it over): nothing more was written"
                : `the claim ${claim} on task ${stepId} was lost: its lease ran out and ${
                  rows[0]!.claimed_by === null ? "it waits to be claimed again" : "another worker holds it"
                }; this result is dropped and the task is answered by whoever runs it next`
            )
          ),
          Effect.catchAll((error) => Effect.logWarning(withReason(`the claim on task ${stepId} was lost; its state could not be read`, error)))
        )

      /**
       * The result row of a step whose result is too large for the database: a non-retryable failure
       * saying so (logged as an error), so the step is answered once rather than run again every
       * lease. `size` is the row's measured size; `refused`: the server refused it although that
       * measure was under the limit read at registration, so that limit is out of date and is not
       * named as the server's.
       */
      const tooLarge = (row: ResultRow, size: number, refused: boolean) => {
        const why = refused
          ? `MySQL refused it (ER_NET_PACKET_TOO_LARGE) at ${size} bytes as written, under the max_allowed_packet of ` +
            `${packetLimit} bytes this worker read when it registered: the server's limit was lowered since (a worker ` +
            "reads it again when it restarts)"
          : `${size} bytes as written, over the database's max_allowed_packet (${packetLimit} bytes, ` +
            `${STATEMENT_HEADROOM} of them kept for the statement)`
        const message = `the result of task ${row.stepId} is too large for ${names.results}: ${why}; keep large outputs ` +
          "elsewhere (object storage, a table of your own) and return a reference to them, or raise max_allowed_packet on the server"
        return Effect.as(Effect.logError(message), tooLargeResultRow(row, message))
      }

      /**
       * The row as it can be written, with its size where the packet limit applies (for the batch to
       * read, not measure again): one over the limit becomes {@link tooLarge}'s answer.
       */
      const fitted = (row: ResultRow): Effect.Effect<{ readonly row: ResultRow; readonly size?: number | undefined }> => {
        if (rowLimit === undefined) return Effect.succeed({ row })
        const size = mysqlWrittenSize(row)
        return size <= rowLimit ? Effect.succeed({ row, size }) : Effect.map(tooLarge(row, size, false), (small) => ({ row: small }))
      }

      const toDelivery = (row: TaskRow, claim: string): Delivery<NestReply> => {
        const parsed = toPayload(row)
        const stepId = row.step_id
        const owned = { stepId, claim }
        const completer = completers.get(row.grp)!
        const attempt = (reply: NestReply, takeNext: boolean) =>
          Effect.gen(function*() {
            if (reply._tag !== "StepResult") {
              return yield* new TransportError({
                transport: NAME,
                operation: "complete",
                message: "the SQL transport carries no workflow turns; a workflow decision cannot be written",
                fatal: true
              })
            }
            const { row: result, size } = yield* fitted(toResultRow(reply.result, yield* Clock.currentTimeMillis))
            const completed = yield* completer({ row: result, claim, takeNext, size }).pipe(
              // refused all the same (the limit was lowered since the registration read it): answered
              // as too large, once, rather than failed again at every redelivery
              Effect.catchIf(
                (error) => packetLimit !== undefined && isPacketTooLarge(error),
                () => Effect.flatMap(tooLarge(result, size ?? mysqlWrittenSize(result), true), (small) => completer({ row: small, claim, takeNext }))
              )
            )
            if (completed.lost) yield* lostClaim(stepId, claim)
            return completed
          })
        const submit = (reply: NestReply, takeNext: boolean) => untilNoConflict(stepId, attempt(reply, takeNext))
        return Delivery.make<NestReply>({
          id: `${names.tasks}#${stepId}`,
          payload: parsed._tag === "Task" ? parsed.payload : row,
          protocol: parsed._tag === "Task" ? protocol : unreadableProtocol(parsed, protocol),
          keepAlive: Option.some({
            interval: renewInterval,
            renew: Effect.flatMap(Clock.currentTimeMillis, (now) =>
              run(Statements.renew(dialect, names, { ...owned, now })).raw).pipe(
                Effect.mapError(transportError(`renewing the lease of task ${stepId}`)),
                Effect.flatMap((raw) =>
                  affected(raw) > 0 ? Effect.void : Effect.fail(
                    new TransportError({
                      transport: NAME,
                      operation: "renew lease",
                      message: `the claim on task ${stepId} was lost: its lease ran out and another worker took it over`,
                      fatal: true
                    })
                  )
                )
              )
          }),
          // the DB transport has no control plane: a cancelled run is never announced to workers
          complete: (reply) => Effect.asVoid(submit(reply, false)),
          completeAndTakeNext: (reply) =>
            Effect.map(submit(reply, true), (completed) =>
              completed.next === undefined
                ? Option.none()
                : Option.some(toDelivery(completed.next.row, completed.next.claim))),
          reject: () =>
            Effect.suspend(() => run(Statements.deleteClaimed(dialect, names, owned)).raw).pipe(
              Effect.mapError(transportError(`deleting task ${stepId}`)),
              // a delete that found nothing left the row where it was: said, not passed over
              Effect.flatMap((raw) =>
                affected(raw) > 0 ? Effect.void : Effect.logWarning(
                  `task ${stepId} could not be deleted: the claim ${claim} no longer holds it (its lease ran out and ` +
                    "another worker took it over, or it is gone); whoever holds it answers it"
                )
              )
            ),
          // built when used: most deliveries are never given back
          abandon: Effect.suspend(() => release(stepId, claim, row.grp))
        })
      }

      const claimRows = (grp: string, claim: string, limit: number) =>
        Effect.gen(function*() {
          const now = yield* Clock.currentTimeMillis
          const staleBefore = now - Duration.toMillis(lease)
          if (dialect === "postgres") {
            return yield* run<TaskRow>(Statements.claimPostgres(names, { grp, claim, now, staleBefore, limit }))
          }
          // InnoDB may pick concurrent SKIP LOCKED claims as deadlock victims: the claim was rolled back, so
          // nothing is held and it is retried at once
          return yield* claimMysql({ grp, claim, now, staleBefore, limit })
        })

      const pollers: Array<Poller> = tokens.map((token) => {
        const wake = wakes.get(token)!
        let maybeMore = true
        return Poller.make({
          name: `table ${names.tasks} grp ${token}`,
          pool: protocol.pools.step,
          ready: Effect.suspend(() =>
            maybeMore
              ? Effect.void
              : notifying
              ? Effect.asVoid(Effect.timeoutOption(Queue.take(wake), pollInterval))
              : Effect.sleep(pollInterval)
          ),
          poll: (max) =>
            Effect.gen(function*() {
              // a notification from now on means "look again", even if it arrives during this claim
              yield* Queue.takeAll(wake)
              const limit = Math.min(max, batchSize)
              if (limit <= 0) return []
              const claim = nextClaim()
              const rows = yield* claimRows(token, claim, limit).pipe(
                // the claim may have been committed all the same (unless the database refused it)
                Effect.tapError((error) => refusalOf(error) === undefined ? releaseUnknownClaim(claim) : Effect.void),
                Effect.mapError(transportError(`claiming tasks from ${names.tasks}`))
              )
              maybeMore = rows.length === limit
              return [...rows].sort(byCreatedAt).map((row) => toDelivery(row, claim))
            })
        })
      })

      return Registration.make({ pollers })
    })

  return { name, protocol, register }
}

/** Creates the tables, the index and (PostgreSQL, notify) the insert trigger, like the engine's `autoCreate`. */
const createSchema = (
  sql: SqlClient.SqlClient,
  dialect: Dialect,
  names: Statements.Names,
  trigger: boolean,
  target: string
) => {
  const [tasks, results, index] = Statements.createSchema(dialect, names)
  const exec = (text: string, params: ReadonlyArray<unknown> = []) => sql.unsafe(text, params as Array<unknown>).raw
  const attempt = dialect === "postgres"
    ? commitFailed(sql.withTransaction(
      Effect.gen(function*() {
        const lock = Statements.schemaLock(names)
        yield* exec(lock.text, lock.params)
        yield* exec(tasks!)
        yield* exec(results!)
        yield* exec(index!)
        if (trigger) for (const statement of Statements.createNotifyTrigger(names)) yield* exec(statement)
      })
    ))
    : Effect.gen(function*() {
      yield* exec(tasks!)
      yield* exec(results!)
      // MySQL has no CREATE INDEX IF NOT EXISTS: the index already there fails it, as in the engine;
      // any other failure (a missing INDEX grant) would leave the claims without their index
      yield* Effect.catchIf(exec(index!), isDuplicateIndex, () => Effect.void)
    })
  // a concurrent CREATE TABLE IF NOT EXISTS (the engine's, or another worker's) can race ours and fail
  // once the other one commits; by then its table exists, so retrying at once succeeds. A refusal
  // answers the same every time.
  return attempt.pipe(
    Effect.retry({ times: 5, while: (cause) => refusalOf(cause) === undefined }),
    Effect.mapError((cause) => {
      const refusal = refusalOf(cause)
      const tables = `${names.tasks} / ${names.results}`
      if (refusal === undefined) {
        return new RegistrationError({
          transport: NAME,
          message: `could not create ${tables} (${sqlMessageOf(cause)}); create the tables with the engine (or a ` +
            "migration) and set autoCreate: false, or see the cause",
          cause
        })
      }
      const { database, user } = grantee(target)
      const grant = dialect === "postgres"
        ? "grant the worker's user CREATE on the schema the tables go in (PostgreSQL 15 and later no longer grant " +
          `CREATE on schema public to every user: GRANT CREATE ON SCHEMA public TO ${user})`
        : `grant the worker's user CREATE and INDEX on the database (GRANT CREATE, INDEX ON ${database}.* TO ${user})`
      const error = Refusals.toError(
        NAME,
        refusal,
        `${dialectLabel(dialect)} at ${target}, creating ${tables} (autoCreate),`,
        {
          authentication: "check the user and password",
          permission: `${grant}, or create the tables with the engine (or a migration) and set autoCreate: false`
        },
        cause
      )
      return new RegistrationError({ transport: NAME, message: error.message, cause: error })
    })
  )
}

/** The user and database of a target as `describeTarget` names it, for a GRANT the user can paste. */
const grantee = (target: string): { readonly user: string; readonly database: string } => {
  try {
    const url = new URL(target)
    return {
      user: url.username === "" ? "<user>" : decodeURIComponent(url.username),
      database: url.pathname.length > 1 ? decodeURIComponent(url.pathname.slice(1)) : "<database>"
    }
  } catch {
    return { user: "<user>", database: "<database>" }
  }
}

/** MySQL's answer to an index that exists already: 1061 ER_DUP_KEYNAME. */
const isDuplicateIndex = (error: unknown) => hasErrorCode(error, ["ER_DUP_KEYNAME", 1061])

/** Whether a failed connect is the database refusing the worker (never waited out). */
const isRefusal = (error: RegistrationError) =>
  typeof error.cause === "object" && error.cause !== null &&
  ["AuthenticationError", "PermissionError"].includes((error.cause as { _tag?: unknown })._tag as string)

/** A missing table: PostgreSQL 42P01 undefined_table, MySQL 1146 ER_NO_SUCH_TABLE. */
const isMissingTable = (error: unknown) => hasErrorCode(error, ["42P01", "ER_NO_SUCH_TABLE", 1146])

/**
 * Without autoCreate the engine (or a migration) makes the tables: a worker started first waits for
 * them, logged once, retried with a capped backoff, instead of failing its start.
 */
const waitForTables = (sql: SqlClient.SqlClient, dialect: Dialect, names: Statements.Names) =>
  Effect.forEach([names.tasks, names.results], (table) =>
    waitFor(
      sql.unsafe(`SELECT 1 FROM ${Statements.quote(dialect, table)} WHERE 1 = 0`).pipe(Effect.retry(retryLostConnection)),
      (cause) => isMissingTable(cause) ? `table ${table} to be created (by the engine's autoCreate or a migration)` : undefined
    ).pipe(
      Effect.mapError((cause) =>
        new RegistrationError({
          transport: NAME,
          message: `could not read ${table} (${sqlMessageOf(cause)}); check the worker's access to the database`,
          cause
        })
      )
    ), { discard: true })

/** Room kept in a MySQL packet for a completion's statement text and the claim sent with it. */
const STATEMENT_HEADROOM = 16 * 1024

/** MySQL: the server's `max_allowed_packet`, the largest statement it accepts (bytes). */
const readPacketLimit = (sql: SqlClient.SqlClient) =>
  sql.unsafe<{ limit: unknown }>("SELECT @@max_allowed_packet AS `limit`").pipe(
    Effect.map((rows) => Number(rows[0]?.limit)),
    Effect.retry(retryLostConnection),
    Effect.mapError((cause) =>
      new RegistrationError({
        transport: NAME,
        message: `could not read the server's max_allowed_packet (${sqlMessageOf(cause)}); check the worker's access to the database`,
        cause
      })
    )
  )

/** MySQL refused a statement bigger than its max_allowed_packet: 1153 ER_NET_PACKET_TOO_LARGE. */
const isPacketTooLarge = (error: unknown) => hasErrorCode(error, ["ER_NET_PACKET_TOO_LARGE", 1153])

/** PostgreSQL: whether the insert trigger is on the tasks table (false when the table is missing too). */
const triggerExists = (sql: SqlClient.SqlClient, names: Statements.Names) => {
  const statement = Statements.triggerExists(names)
  return sql.unsafe<{ found: unknown }>(statement.text, statement.params as Array<unknown>).pipe(
    Effect.map((rows) => rows.length > 0),
    Effect.retry(retryLostConnection),
    Effect.mapError((cause) =>
      new RegistrationError({
        transport: NAME,
        message: `could not read ${names.tasks}'s triggers (${sqlMessageOf(cause)}); check the worker's access to the database`,
        cause
      })
    )
  )
}

/** The `LISTEN` probe never came back: the subscription is not known to be live. */
class ListenNotLive extends Schema.TaggedError<ListenNotLive>()("ListenNotLive", { channel: Schema.String }) {
  override get message() {
    return `none of ${LISTEN_PROBES} probe notifications came back on LISTEN ${this.channel}`
  }
}

/**
 * Listens on the tasks channel for the registration's lifetime and wakes the poller of each notified
 * token. A subscription is live once a probe notification comes back; then every poller is woken too,
 * since what was inserted while no one listened notified no one. A lost subscription is listened again
 * after {@link LISTEN_RETRY}; meanwhile the pollers poll.
 *
 * Returns once the first subscription is live, or has failed (logged; polling carries on, and a
 * lost connection is listened again in the background). A subscription whose probe never comes back is
 * not tried again.
 */
const startListening = (
  listen: (channel: string) => Stream.Stream<string, SqlError>,
  notify: (payload: string) => Effect.Effect<unknown, SqlError>,
  channel: string,
  wakes: ReadonlyMap<string, Queue.Queue<void>>
) =>
  Effect.gen(function*() {
    /** Done when the first subscription is live or has failed. */
    const first = yield* Deferred.make<void>()
    // an array, not `wakes.values()`: that iterator would be spent by the first wake-up
    const everyWake = Array.from(wakes.values())
    const wakeAll = Effect.forEach(everyWake, (wake) => Queue.offer(wake, undefined), { discard: true })
    /** A database away for an hour must not write a warning every retry. */
    const outage = FailureRun.make()
    const subscription = Effect.gen(function*() {
      const probe = ` listening ${Math.random().toString(36).slice(2)}`
      const live = yield* Deferred.make<void>()
      const serve = listen(channel).pipe(
        Stream.runForEach((payload) => {
          if (payload === probe) return Deferred.succeed(live, undefined)
          const wake = wakes.get(payload)
          return wake === undefined ? Effect.void : Queue.offer(wake, undefined)
        }),
        // a stream that ends has stopped listening just as one that fails
        Effect.zipRight(Effect.fail(new SqlError({ message: `the LISTEN ${channel} stream ended` })))
      )
      // probe back to back (one round trip each, no timer, so it also works under a TestClock) until
      // the probe comes back, for a bounded number of tries
      const probing = Effect.ignore(notify(probe)).pipe(Effect.repeat(Schedule.recurs(LISTEN_PROBES - 1)))
      const confirm = Effect.raceFirst(Deferred.await(live), Effect.zipRight(probing, new ListenNotLive({ channel }))).pipe(
        Effect.zipRight(wakeAll),
        Effect.zipRight(outage.worked(() => `LISTEN ${channel} is back`)),
        Effect.zipRight(Deferred.succeed(first, undefined))
      )
      // serving only ends by failing; confirming only ends by failing or confirming
      yield* Effect.all([serve, confirm], { concurrency: 2, discard: true })
    })
    yield* subscription.pipe(
      Effect.tapError((error) =>
        Effect.zipRight(
          Deferred.succeed(first, undefined),
          outage.failed(
            `LISTEN ${channel} is down (${sqlMessageOf(error)}); idle subscriptions poll until it is back ` +
              "(until then, further failures are debug lines)",
            () => `LISTEN ${channel} is still down (${sqlMessageOf(error)})`
          )
        )
      ),
      // a lost connection is worth another try; a live one that delivers nothing (a pooler in
      // transaction mode, say) would only flood the server with probes
      Effect.retry({ schedule: LISTEN_RETRY, while: (error) => !(error instanceof ListenNotLive) }),
      Effect.catchAll(() =>
        Effect.logWarning(`LISTEN ${channel} delivers no notifications; new tasks are found by polling alone`)
      ),
      Effect.forkScoped
    )
    yield* Deferred.await(first)
  })

/**
 * The transport over the application's own `SqlClient` (PostgreSQL or MySQL/MariaDB), which it does
 * not close. `LISTEN` is used when a `PgClient` is in the context too (as `PgClient.layer` provides).
 * Building it fails with an {@link SqlConfigError} when an option is unknown or invalid (connection
 * options are the client's own, so they are unknown here).
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: SqlTransportOptions = {}): Layer.Layer<Transport, SqlConfigError, SqlClient.SqlClient> =>
  Layer.effect(
    Transport,
    Effect.gen(function*() {
      const config = yield* resolve(options)
      const sql = yield* SqlClient.SqlClient
      const pg = yield* Effect.serviceOption(PgClientTag)
      const dialect = sql.onDialectOrElse({
        pg: () => "postgres" as const,
        mysql: () => "mysql" as const,
        orElse: () => undefined
      })
      const connection: Effect.Effect<Connection, RegistrationError> = dialect === undefined
        ? Effect.fail(
          new RegistrationError({
            transport: NAME,
            message: "the SqlClient in context is neither PostgreSQL nor MySQL; the engine's DB transport supports only these"
          })
        )
        : Effect.succeed({ sql, dialect, listen: Option.map(pg, listenLazily) })
      return build(config, connection, dialect ?? "sql")
    })
  )

/**
 * What a SQL dialect brings to the transport: its name and how it connects. The dialect modules
 * (`effect-durable-worker/postgres`, `effect-durable-worker/mysql`) each fill one in, so this module
 * loads neither driver.
 *
 * @since 0.3.0
 * @category models
 */
export interface Driver<Options extends ConnectionOptions = ConnectionOptions> {
  readonly dialect: Dialect
  readonly connect: (options: Options) => Effect.Effect<Connection, RegistrationError, Scope.Scope>
}

/**
 * The transport on a dialect's own pool (opened at registration, closed at shutdown). Building it
 * fails with an {@link SqlConfigError} when an option is unknown or invalid (a `url` of another
 * dialect included), before anything connects; `run` fails fast when the database is unreachable.
 *
 * @since 0.3.0
 * @category layers
 */
export const layerDriver = <Options extends SqlTransportOptions & ConnectionOptions>(
  driver: Driver<Options>,
  options: Options
): Layer.Layer<Transport, SqlConfigError> =>
  Layer.effect(
    Transport,
    Effect.map(resolvePool(driver.dialect, options), (config) =>
      build(config, driver.connect(options), describeTarget(driver.dialect, options)))
  )

/** `@effect/sql-pg`'s tag, by its key: found in the context without loading the driver. */
const PgClientTag = Context.GenericTag<PgClient.PgClient>("@effect/sql-pg/PgClient")

/** `LISTEN` on a connection of its own (see `internal/listen`), loaded with `pg` when first listened. */
const listenLazily = (client: PgClient.PgClient) => (channel: string): Stream.Stream<string, SqlError> =>
  Stream.unwrap(
    Effect.map(
      Effect.promise((): Promise<typeof Listen> => import("./sql/internal/listen.js")),
      (listen) => listen.listen(listen.clientConfig(client.config))(channel)
    )
  )

/** The dialect's module, loaded when a layer needs it; a missing driver names the packages to install. */
const loadDriver = (dialect: Dialect): Effect.Effect<Driver, MissingDriverError> =>
  Effect.tryPromise({
    try: (): Promise<Driver> =>
      dialect === "postgres"
        ? import("./sql/postgres.js").then((module) => module.driver)
        : import("./sql/mysql.js").then((module) => module.driver),
    catch: missingDriverError(dialect === "postgres" ? POSTGRES_PACKAGES : MYSQL_PACKAGES, dialectLabel(dialect))
  })

/** The variables {@link layerConfig} reads besides `DATABASE_URL`, by the option each gives (a refusal names its variable). */
const VARIABLES = { prefix: "DURABLE_PREFIX", partition: "DURABLE_PARTITION" } as const

/**
 * The transport configured from the environment: `DATABASE_URL` (required; its scheme picks
 * PostgreSQL or MySQL/MariaDB, and says where the database is), `DURABLE_PREFIX` (default `durable`),
 * `DURABLE_PARTITION`. Explicit options win over the environment; where the database is comes from
 * `DATABASE_URL` alone (for `host`, `database` and the like in code, use `layerPostgres` / `layerMysql`).
 * `applicationName` is used on PostgreSQL and left out on MySQL/MariaDB, whose connections have no
 * such name: the dialect is the environment's choice here.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (options: LayerConfigOptions = {}): Layer.Layer<Transport, ConfigError.ConfigError | SqlConfigError | MissingDriverError> =>
  // options that are not an object are refused as the other layers refuse them, before the
  // environment is read (`resolve` checks the transport's keys only: it would refuse the pool's)
  Predicate.isRecord(options) ? fromEnvironment(options) : Layer.unwrapEffect(Effect.map(resolve(options), () => fromEnvironment(options)))

/** The options of {@link layerConfig}: the transport's, and the pool's that `DATABASE_URL` does not say. */
type LayerConfigOptions = SqlTransportOptions & Pick<PostgresConnectionOptions, "maxConnections" | "connectTimeout" | "applicationName">

/** {@link layerConfig} over options that are an object. */
const fromEnvironment = (options: LayerConfigOptions): Layer.Layer<Transport, ConfigError.ConfigError | SqlConfigError | MissingDriverError> =>
  Layer.unwrapEffect(
    Effect.map(
      Config.all({
        // read as a string (Config.redacted would mask the "missing" message too), kept redacted
        url: Config.option(Config.string("DATABASE_URL").pipe(
          Config.mapOrFail((url) =>
            Either.match(dialectOfUrl(url), {
              onLeft: (problem) => Either.left(ConfigError.InvalidData(["DATABASE_URL"], `DATABASE_URL ${problem}; it ${urlShape(url)}`)),
              onRight: (dialect) => Either.right({ url: Redacted.make(url), dialect })
            })
          )
        )),
        prefix: optional(Config.string(VARIABLES.prefix)),
        partition: optional(Config.string(VARIABLES.partition))
      }),
      (env) => {
        if (Option.isNone(env.url)) {
          return Layer.fail(
            new SqlConfigError({
              option: "url",
              message: "DATABASE_URL is not set: set it to the engine's database (postgres://user:password@host:5432/db " +
                "or mysql://user:password@host:3306/db), or give the url to SqlTransport.layerPostgres / layerMysql"
            })
          )
        }
        const url = env.url.value
        const { applicationName, ...rest } = options
        // the pool takes the URL over every field: one given here would be ignored, in silence
        const located = locationFields(rest as ConnectionOptions)
        if (located.length > 0) {
          return Layer.fail(
            new SqlConfigError({
              option: located[0]!,
              message: `${located.join(", ")} given to layerConfig, which connects where DATABASE_URL says: put ${
                located.length === 1 ? "it" : "them"
              } in DATABASE_URL, or use layerPostgres / layerMysql with the fields`
            })
          )
        }
        const merged = {
          ...definedOnly({ url: url.url, prefix: env.prefix, partition: env.partition }),
          ...definedOnly({ ...rest, applicationName: url.dialect === "postgres" ? applicationName : undefined })
        }
        // the dialect is the variable's choice: an application installed for the other one is most
        // likely looking at another database's URL, and is told which URL picked these packages
        const driver = loadDriver(url.dialect).pipe(
          Effect.mapError((missing) =>
            new MissingDriverError({
              ...missing,
              message: `DATABASE_URL is a ${url.dialect === "postgres" ? "postgres://" : "mysql://"} URL, so layerConfig() ` +
                `connects to ${dialectLabel(url.dialect)}: ${missing.message}`
            })
          )
        )
        return Layer.unwrapEffect(Effect.map(driver, (driver) => layerDriver(driver, merged))).pipe(
          Layer.mapError(namingVariables(
            VARIABLES,
            env,
            options,
            (option, message): SqlConfigError | MissingDriverError => new SqlConfigError({ option, message })
          ))
        )
      }
    )
  )
