/**
 * The SQL the worker side of the nestjs-durable DB transport runs, per dialect, as plain text and
 * parameter lists (no I/O). Tables, columns and DDL are the engine's own
 * (`@dudousxd/nestjs-durable-transport-db`): `<prefix>_transport_tasks` and
 * `<prefix>_transport_results`, the `(grp, status, created_at)` index, `varchar(191)` keys, epoch-ms
 * `bigint` stamps and JSON text payloads.
 *
 * @since 0.1.0
 * @internal
 */

/** The two dialects the engine's DB transport supports. */
export type Dialect = "postgres" | "mysql"

/** Every name derived from a table prefix. */
export interface Names {
  readonly tasks: string
  readonly results: string
  readonly index: string
  /** PostgreSQL only: the channel the insert trigger notifies, its function and its trigger. */
  readonly channel: string
  readonly notifyFunction: string
  readonly notifyTrigger: string
}

/** The engine's default table prefix. */
export const DEFAULT_PREFIX = "durable"

/** Longest prefix accepted: every derived name must fit PostgreSQL's 63-byte identifiers. */
export const MAX_PREFIX_LENGTH = 40

/** Why a prefix cannot be used, or `undefined` when it can. */
export const invalidPrefix = (prefix: string): string | undefined =>
  /^[A-Za-z0-9_-]+$/.test(prefix) && prefix.length <= MAX_PREFIX_LENGTH
    ? undefined
    : `table prefix "${prefix}" must be 1-${MAX_PREFIX_LENGTH} characters of A-Z, a-z, 0-9, "_" or "-"`

/** The names for a prefix (validate it with {@link invalidPrefix} first). */
export const names = (prefix: string): Names => ({
  tasks: `${prefix}_transport_tasks`,
  results: `${prefix}_transport_results`,
  index: `${prefix}_transport_tasks_grp_idx`,
  channel: `${prefix}_transport_tasks`,
  notifyFunction: `${prefix}_transport_tasks_notify`,
  notifyTrigger: `${prefix}_transport_tasks_notify`
})

/** Quotes an identifier: `"x"` on PostgreSQL, `` `x` `` on MySQL. */
export const quote = (dialect: Dialect, id: string): string =>
  dialect === "postgres" ? `"${id.replaceAll("\"", "\"\"")}"` : `\`${id.replaceAll("`", "``")}\``

/** The `i`-th (1-based) placeholder: `$i` on PostgreSQL, `?` on MySQL. */
const ph = (dialect: Dialect, i: number): string => dialect === "postgres" ? `$${i}` : "?"

/** A statement and its parameters. */
export interface Sql {
  readonly text: string
  readonly params: ReadonlyArray<unknown>
}

/** The columns a claim reads (all but the lease and status). */
export const TASK_COLUMNS = ["step_id", "run_id", "seq", "name", "grp", "input", "attempt", "created_at"] as const

/** The result columns, in the order the engine's transport writes them. */
export const RESULT_COLUMNS = ["step_id", "run_id", "seq", "status", "output", "error", "started_at", "created_at"] as const

/**
 * The schema, exactly as the engine's `autoCreate` makes it: both tables, then the task index. On
 * PostgreSQL the index uses `IF NOT EXISTS`; on MySQL an existing index makes it fail, which the
 * caller ignores (as the engine does).
 */
export const createSchema = (dialect: Dialect, n: Names): ReadonlyArray<string> => {
  const q = (id: string) => quote(dialect, id)
  const str = "varchar(191)"
  const txt = dialect === "postgres" ? "text" : "longtext"
  return [
    `CREATE TABLE IF NOT EXISTS ${q(n.tasks)} (
        ${q("step_id")} ${str} PRIMARY KEY,
        ${q("run_id")} ${str} NOT NULL,
        ${q("seq")} integer NOT NULL,
        ${q("name")} ${str} NOT NULL,
        ${q("grp")} ${str} NOT NULL,
        ${q("input")} ${txt},
        ${q("attempt")} integer NOT NULL,
        ${q("status")} varchar(32) NOT NULL,
        ${q("claimed_by")} ${str},
        ${q("claimed_at")} bigint,
        ${q("created_at")} bigint NOT NULL
      )`,
    `CREATE TABLE IF NOT EXISTS ${q(n.results)} (
        ${q("step_id")} ${str} PRIMARY KEY,
        ${q("run_id")} ${str} NOT NULL,
        ${q("seq")} integer NOT NULL,
        ${q("status")} varchar(32) NOT NULL,
        ${q("output")} ${txt},
        ${q("error")} ${txt},
        ${q("started_at")} bigint,
        ${q("claimed_by")} ${str},
        ${q("claimed_at")} bigint,
        ${q("created_at")} bigint NOT NULL
      )`,
    `CREATE INDEX ${dialect === "postgres" ? "IF NOT EXISTS " : ""}${q(n.index)} ON ${q(n.tasks)} (${q("grp")}, ${
      q("status")
    }, ${q("created_at")})`
  ]
}

/** PostgreSQL: serialises concurrent schema set-ups of one prefix for the rest of the transaction. */
export const schemaLock = (n: Names): Sql => ({ text: "SELECT pg_advisory_xact_lock(hashtext($1))", params: [n.tasks] })

const literal = (text: string) => `'${text.replaceAll("'", "''")}'`

/**
 * PostgreSQL: a trigger that sends `pg_notify(<prefix>_transport_tasks, grp)` for every inserted task
 * row (the engine itself never notifies), created if missing. A conflicting `ON CONFLICT DO NOTHING`
 * insert inserts no row and notifies nothing. The notification is delivered at commit.
 */
export const createNotifyTrigger = (n: Names): ReadonlyArray<string> => [
  `CREATE OR REPLACE FUNCTION ${quote("postgres", n.notifyFunction)}() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  PERFORM pg_notify(${literal(n.channel)}, NEW."grp");
  RETURN NULL;
END
$fn$`,
  `DO $do$
BEGIN
  IF NOT EXISTS (
    SELECT 1 FROM pg_trigger
    WHERE tgname = ${literal(n.notifyTrigger)} AND tgrelid = ${literal(quote("postgres", n.tasks))}::regclass
  ) THEN
    CREATE TRIGGER ${quote("postgres", n.notifyTrigger)} AFTER INSERT ON ${quote("postgres", n.tasks)}
      FOR EACH ROW EXECUTE PROCEDURE ${quote("postgres", n.notifyFunction)}();
  END IF;
END
$do$`
]

/** PostgreSQL: one row when the insert trigger exists on the tasks table. */
export const triggerExists = (n: Names): Sql => ({
  text: "SELECT 1 AS found FROM pg_trigger WHERE tgname = $1 AND tgrelid = to_regclass($2)",
  params: [n.notifyTrigger, quote("postgres", n.tasks)]
})

/** PostgreSQL: wakes the listeners of a routing token (used when a task is given back). */
export const notify = (n: Names, grp: string): Sql => ({ text: "SELECT pg_notify($1, $2)", params: [n.channel, grp] })

const columnList = (dialect: Dialect, columns: ReadonlyArray<string>, table?: string) =>
  columns.map((c) => (table === undefined ? "" : `${table}.`) + quote(dialect, c)).join(", ")

const leaseFree = (dialect: Dialect, staleIndex: number) =>
  `(${quote(dialect, "claimed_at")} IS NULL OR ${quote(dialect, "claimed_at")} < ${ph(dialect, staleIndex)})`

/**
 * PostgreSQL: the two halves of a claim, as a CTE body and a statement: `pick` selects up to `limit`
 * un-leased rows of a token oldest first, skipping locked ones (and the step ids of `except`, an
 * array parameter); `stamp` stamps the rows `picked` with the claim and the time and returns them.
 * The numbers are the parameters' positions.
 */
const pickAndStamp = (
  n: Names,
  p: {
    readonly claim: number
    readonly now: number
    readonly grp: number
    readonly staleBefore: number
    readonly limit: string
    readonly except?: number
  }
) => {
  const q = (id: string) => quote("postgres", id)
  const except = p.except === undefined ? "" : ` AND ${q("step_id")} <> ALL($${p.except}::varchar[])`
  return {
    pick: `
  SELECT ${q("step_id")} FROM ${q(n.tasks)}
  WHERE ${q("grp")} = $${p.grp} AND ${leaseFree("postgres", p.staleBefore)}${except}
  ORDER BY ${q("created_at")} ASC LIMIT ${p.limit}
  FOR UPDATE SKIP LOCKED
`,
    stamp: `UPDATE ${q(n.tasks)} AS t SET ${q("claimed_by")} = $${p.claim}, ${q("claimed_at")} = $${p.now}
FROM picked WHERE t.${q("step_id")} = picked.${q("step_id")}
RETURNING ${columnList("postgres", TASK_COLUMNS, "t")}`
  }
}

/**
 * PostgreSQL: the whole claim in one statement (one short transaction): pick up to `limit` un-leased
 * rows of the token oldest first with `FOR UPDATE SKIP LOCKED`, stamp them with the claim and the
 * time, return them.
 */
export const claimPostgres = (
  n: Names,
  args: { readonly grp: string; readonly claim: string; readonly now: number; readonly staleBefore: number; readonly limit: number }
): Sql => {
  const claim = pickAndStamp(n, { claim: 1, now: 2, grp: 3, staleBefore: 4, limit: String(Math.max(1, Math.trunc(args.limit))) })
  return {
    text: `WITH picked AS (${claim.pick})
${claim.stamp}`,
    params: [args.claim, args.now, args.grp, args.staleBefore]
  }
}

/** MySQL, first statement of the claim transaction: lock up to `limit` un-leased rows, oldest first. */
export const claimSelectMysql = (
  n: Names,
  args: { readonly grp: string; readonly staleBefore: number; readonly limit: number }
): Sql => {
  const q = (id: string) => quote("mysql", id)
  return {
    text: `SELECT ${columnList("mysql", TASK_COLUMNS)} FROM ${q(n.tasks)}
WHERE ${q("grp")} = ? AND ${leaseFree("mysql", 2)}
ORDER BY ${q("created_at")} ASC LIMIT ${Math.max(1, Math.trunc(args.limit))}
FOR UPDATE SKIP LOCKED`,
    params: [args.grp, args.staleBefore]
  }
}

/** MySQL, second statement of the claim transaction: stamp the locked rows with the claim. */
export const claimUpdateMysql = (
  n: Names,
  args: { readonly claim: string; readonly now: number; readonly stepIds: ReadonlyArray<string> }
): Sql => ({
  text: `UPDATE ${quote("mysql", n.tasks)} SET ${quote("mysql", "claimed_by")} = ?, ${quote("mysql", "claimed_at")} = ?
WHERE ${quote("mysql", "step_id")} IN (${args.stepIds.map(() => "?").join(", ")})`,
  params: [args.claim, args.now, ...args.stepIds]
})

/** Extends a claim's lease; touches nothing when the claim was lost (0 rows). */
export const renew = (dialect: Dialect, n: Names, args: { readonly stepId: string; readonly claim: string; readonly now: number }): Sql => ({
  text: `UPDATE ${quote(dialect, n.tasks)} SET ${quote(dialect, "claimed_at")} = ${ph(dialect, 1)}
WHERE ${quote(dialect, "step_id")} = ${ph(dialect, 2)} AND ${quote(dialect, "claimed_by")} = ${ph(dialect, 3)}`,
  params: [args.now, args.stepId, args.claim]
})

/** Gives a claimed row back (shutdown): it is claimable again at once. */
export const release = (dialect: Dialect, n: Names, args: { readonly stepId: string; readonly claim: string }): Sql => ({
  text: `UPDATE ${quote(dialect, n.tasks)} SET ${quote(dialect, "claimed_by")} = NULL, ${quote(dialect, "claimed_at")} = NULL
WHERE ${quote(dialect, "step_id")} = ${ph(dialect, 1)} AND ${quote(dialect, "claimed_by")} = ${ph(dialect, 2)}`,
  params: [args.stepId, args.claim]
})

/**
 * Releases every row held by one of `claims`: the rows of claims whose statements failed but may
 * have been committed all the same (their answers lost with the connection), which no delivery holds;
 * and each of `rows` (a step id still held by its claim) whose give-back failed, by itself, as the
 * rest of its claim is served. At least one of the two is not empty.
 */
export const releaseClaims = (
  dialect: Dialect,
  n: Names,
  claims: ReadonlyArray<string>,
  rows: ReadonlyArray<{ readonly claim: string; readonly stepId: string }> = []
): Sql => {
  const conditions: Array<string> = []
  const params: Array<unknown> = []
  if (claims.length > 0) {
    conditions.push(`${quote(dialect, "claimed_by")} IN (${claims.map((_, i) => ph(dialect, i + 1)).join(", ")})`)
    params.push(...claims)
  }
  for (const row of rows) {
    conditions.push(
      `(${quote(dialect, "step_id")} = ${ph(dialect, params.length + 1)} AND ${quote(dialect, "claimed_by")} = ${ph(dialect, params.length + 2)})`
    )
    params.push(row.stepId, row.claim)
  }
  return {
    text: `UPDATE ${quote(dialect, n.tasks)} SET ${quote(dialect, "claimed_by")} = NULL, ${quote(dialect, "claimed_at")} = NULL
WHERE ${conditions.join(" OR ")}`,
    params
  }
}

/** The claim a task row is held by now (none when unclaimed; no row when it is gone). */
export const taskClaim = (dialect: Dialect, n: Names, stepId: string): Sql => ({
  text: `SELECT ${quote(dialect, "claimed_by")} FROM ${quote(dialect, n.tasks)} WHERE ${quote(dialect, "step_id")} = ${ph(dialect, 1)}`,
  params: [stepId]
})

/** Deletes a claimed row (a task that cannot be answered, or the task of a result being written). */
export const deleteClaimed = (dialect: Dialect, n: Names, args: { readonly stepId: string; readonly claim: string }): Sql => ({
  text: `DELETE FROM ${quote(dialect, n.tasks)} WHERE ${quote(dialect, "step_id")} = ${ph(dialect, 1)} AND ${
    quote(dialect, "claimed_by")
  } = ${ph(dialect, 2)}`,
  params: [args.stepId, args.claim]
})

/** A result row's values, as the engine's transport reads them back. */
export interface ResultRow {
  readonly stepId: string
  readonly runId: string
  readonly seq: number
  readonly status: string
  /** JSON text or null. */
  readonly output: string | null
  /** JSON text of the `StepError`, or null. */
  readonly error: string | null
  readonly startedAt: number | null
  readonly createdAt: number
}

const resultValues = (row: ResultRow) => [
  row.stepId,
  row.runId,
  row.seq,
  row.status,
  row.output,
  row.error,
  row.startedAt,
  row.createdAt
]

/** MySQL, in the completion transaction after {@link deleteClaimed}: insert the result unless one exists. */
export const insertResultMysql = (n: Names, row: ResultRow): Sql => ({
  text: `INSERT IGNORE INTO ${quote("mysql", n.results)} (${columnList("mysql", RESULT_COLUMNS)}) VALUES (${
    RESULT_COLUMNS.map(() => "?").join(", ")
  })`,
  params: resultValues(row)
})

/** One completion of a batch: the result row and the claim that must still own the task row. */
export interface Completion {
  readonly row: ResultRow
  readonly claim: string
}

/** A claim made in the same statement or transaction as a batch of completions. */
export interface NextClaim {
  readonly grp: string
  readonly claim: string
  readonly now: number
  readonly staleBefore: number
  readonly limit: number
}

const RESULT_CASTS = ["varchar", "varchar", "integer", "varchar", "text", "text", "bigint", "bigint"] as const

/**
 * PostgreSQL: completes a batch of claimed tasks in one statement (one transaction), each exactly
 * as a single completion would: lock the task rows this batch's claims still own, insert
 * their results (idempotently) and delete the task rows whose result was inserted. With `next`, the
 * same statement also claims up to `next.limit` further rows of `next.grp` (never one of the batch's
 * own), like {@link claimPostgres}. The parameters are one array per column, so the text depends
 * only on whether there is a claim.
 *
 * Returns one row per owned task, `kind = 'done'` with `claim` and `inserted` (false: an earlier
 * result of the step still waits, nothing was written for it), and one row per newly claimed task,
 * `kind = 'next'` with the task columns. A completion without a `done` row lost its claim.
 */
export const completeBatchPostgres = (
  n: Names,
  completions: ReadonlyArray<Completion>,
  next?: NextClaim
): Sql => {
  const columns: Array<Array<unknown>> = [[], [], [], [], [], [], [], [], []]
  for (const { claim, row } of completions) {
    const values = resultValues(row)
    for (let c = 0; c < 8; c++) columns[c]!.push(values[c])
    columns[8]!.push(claim)
  }
  let texts = batchTexts.get(n)
  if (texts === undefined) {
    texts = [completeBatchPostgresText(n, false), completeBatchPostgresText(n, true)]
    batchTexts.set(n, texts)
  }
  const text = texts[next === undefined ? 0 : 1]
  return {
    text,
    params: next === undefined
      ? columns
      : [...columns, next.grp, next.staleBefore, Math.max(1, Math.trunc(next.limit)), next.claim, next.now]
  }
}

/** The two texts of {@link completeBatchPostgres}, built once per {@link Names} (a registration's). */
const batchTexts = new WeakMap<Names, readonly [string, string]>()

const completeBatchPostgresText = (n: Names, withClaim: boolean): string => {
  const q = (id: string) => quote("postgres", id)
  const unnest = [...RESULT_CASTS, "varchar"].map((cast, i) => `$${i + 1}::${cast}[]`).join(", ")
  const inputColumns = [...RESULT_COLUMNS, "claim"].map(q).join(", ")
  const taskColumns = TASK_COLUMNS.filter((c) => c !== "step_id")
  const claim = pickAndStamp(n, { grp: 10, staleBefore: 11, limit: "$12", claim: 13, now: 14, except: 1 })
  const claimPart = !withClaim ? "" : `, picked AS (${claim.pick}), claimed AS (
  ${claim.stamp}
)`
  return `WITH input (${inputColumns}) AS (
  SELECT * FROM unnest(${unnest})
), owned AS (
  SELECT t.${q("step_id")}, i.${q("claim")} FROM ${q(n.tasks)} AS t
  JOIN input AS i ON i.${q("step_id")} = t.${q("step_id")} AND i.${q("claim")} = t.${q("claimed_by")}
  FOR UPDATE OF t
), ins AS (
  INSERT INTO ${q(n.results)} (${columnList("postgres", RESULT_COLUMNS)})
  SELECT ${columnList("postgres", RESULT_COLUMNS, "i")} FROM input AS i
  JOIN owned AS o ON o.${q("step_id")} = i.${q("step_id")} AND o.${q("claim")} = i.${q("claim")}
  ON CONFLICT (${q("step_id")}) DO NOTHING
  RETURNING ${q("step_id")}
), del AS (
  DELETE FROM ${q(n.tasks)} WHERE ${q("step_id")} IN (SELECT ${q("step_id")} FROM ins) RETURNING ${q("step_id")}
)${claimPart}
SELECT 'done' AS ${q("kind")}, o.${q("step_id")}, o.${q("claim")}, (ins.${q("step_id")} IS NOT NULL) AS ${
      q("inserted")
    }, ${taskColumns.map((c) => `NULL::${c === "seq" || c === "attempt" ? "integer" : c === "created_at" ? "bigint" : "text"} AS ${q(c)}`).join(", ")}
FROM owned AS o LEFT JOIN ins ON ins.${q("step_id")} = o.${q("step_id")}${
    !withClaim ? "" : `
UNION ALL
SELECT 'next', c.${q("step_id")}, NULL, NULL, ${columnList("postgres", taskColumns, "c")} FROM claimed AS c`
  }`
}

/**
 * MySQL, first statement of a batch completion transaction: deletes the batch's task rows that its
 * claims still own. The caller compares the count with the batch size: fewer means a claim was lost
 * and the transaction is rolled back.
 */
export const deleteClaimedBatch = (n: Names, completions: ReadonlyArray<Completion>): Sql => {
  const q = (id: string) => quote("mysql", id)
  const ids = completions.map(({ row }) => row.stepId)
  return {
    text: `DELETE FROM ${q(n.tasks)} WHERE ${q("step_id")} IN (${ids.map(() => "?").join(", ")}) AND (${q("step_id")}, ${
      q("claimed_by")
    }) IN (${completions.map(() => "(?, ?)").join(", ")})`,
    params: [...ids, ...completions.flatMap(({ claim, row }) => [row.stepId, claim])]
  }
}

/**
 * MySQL, after {@link deleteClaimedBatch}: inserts the batch's results, each unless one exists. The
 * caller compares the count with the batch size: fewer means an earlier result still waits.
 */
export const insertResultsMysql = (n: Names, rows: ReadonlyArray<ResultRow>): Sql => {
  const tuple = `(${RESULT_COLUMNS.map(() => "?").join(", ")})`
  return {
    text: `INSERT IGNORE INTO ${quote("mysql", n.results)} (${columnList("mysql", RESULT_COLUMNS)}) VALUES ${
      rows.map(() => tuple).join(", ")
    }`,
    params: rows.flatMap(resultValues)
  }
}
