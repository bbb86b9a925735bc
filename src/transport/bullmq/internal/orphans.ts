/**
 * Jobs locked with this worker's token that no task of this worker serves: what a command of
 * unknown outcome leaves behind. The client sends again, once it reconnects, the commands whose
 * replies the lost connection took with it; a take of the next job (BullMQ's `moveToActive`) that
 * had been applied takes another job when sent again, and the first one stays active under a lock of
 * ours that nothing renews, until the lock expires and a stalled check hands it on (tens of
 * seconds). The answer's own script recognises itself when sent again (see `jobs.ts`); this finds
 * what any other command left, by comparing the task queue's active jobs and their locks with what
 * the worker holds, and gives those back to wait at once.
 *
 * @internal
 */
import type { Worker } from "bullmq"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Queue from "effect/Queue"
import type * as Scope from "effect/Scope"
import type { Redis } from "ioredis"
import { TaskJob } from "./jobs.js"

/**
 * How long after a reconnect the orphan sweep waits, so the commands the client sent again settle first.
 *
 * @internal
 */
export const SWEEP_DELAY = Duration.seconds(1)

/**
 * Runs `sweep` {@link SWEEP_DELAY} after each time `client` reconnects (each `ready` from now on: the
 * first came before), one sweep at a time; reconnects while one waits or runs make one more sweep,
 * not one each. Until the scope closes.
 *
 * @internal
 */
export const afterEachReconnect = (
  client: Pick<Redis, "on" | "off">,
  sweep: Effect.Effect<void>
): Effect.Effect<void, never, Scope.Scope> =>
  Effect.gen(function*() {
    const reconnected = yield* Queue.sliding<void>(1)
    const onReady = () => void Queue.unsafeOffer(reconnected, undefined)
    yield* Effect.acquireRelease(
      Effect.sync(() => client.on("ready", onReady)),
      () => Effect.sync(() => client.off("ready", onReady))
    )
    yield* Queue.take(reconnected).pipe(
      Effect.zipRight(Effect.sleep(SWEEP_DELAY)),
      Effect.zipRight(sweep),
      Effect.forever,
      Effect.forkScoped
    )
  })

/** What a task queue's deliveries hold: jobs being served, and tokens with a command in flight. @internal */
export class Holdings {
  private readonly jobs = new Map<string, string>()
  private readonly inFlight = new Map<string, number>()

  /** Job `id`, locked with `token`, is served by a delivery of this worker. */
  hold(id: string, token: string): void {
    this.jobs.set(id, token)
  }

  /** Job `id` is no longer served under `token` (answered, rejected, given back, or its answer failed). */
  release(id: string, token: string): void {
    if (this.jobs.get(id) === token) this.jobs.delete(id)
  }

  /** A command that may move a job to active under `token` is in flight. */
  begin(token: string): void {
    this.inFlight.set(token, (this.inFlight.get(token) ?? 0) + 1)
  }

  /** That command has settled (and the job it took, if any, is held). */
  end(token: string): void {
    const n = (this.inFlight.get(token) ?? 1) - 1
    if (n <= 0) this.inFlight.delete(token)
    else this.inFlight.set(token, n)
  }

  /** Whether job `id` locked with `token` is this worker's business: served, or perhaps about to be. */
  accounts(id: string, token: string): boolean {
    return this.jobs.get(id) === token || this.inFlight.has(token)
  }
}

/** An active job locked with a token of this worker that nothing of it serves. @internal */
export interface Orphan {
  readonly id: string
  readonly token: string
}

const CHUNK = 500

/** A token of this worker: its prefix then a counter (another worker whose id extends ours has more after it). */
const isOurs = (token: string, prefix: string) => token.startsWith(prefix) && /^\d+$/.test(token.slice(prefix.length))

/**
 * The active jobs of `tasks` whose lock holds a token of this worker (`tokenPrefix` then its
 * counter) and which `holdings` does not account for. Reads the active list and the locks; writes nothing.
 *
 * @internal
 */
export const findOrphans = async (client: Redis, tasks: Worker, tokenPrefix: string, holdings: Holdings): Promise<Array<Orphan>> => {
  const ids = await client.lrange(tasks.keys.active!, 0, -1)
  const orphans: Array<Orphan> = []
  for (let i = 0; i < ids.length; i += CHUNK) {
    const chunk = ids.slice(i, i + CHUNK)
    const locks = await client.mget(...chunk.map((id) => `${tasks.toKey(id)}:lock`))
    // read after the locks came back: a take settled meanwhile is held by now
    chunk.forEach((id, j) => {
      const token = locks[j]
      if (typeof token === "string" && isOurs(token, tokenPrefix) && !holdings.accounts(id, token)) orphans.push({ id, token })
    })
  }
  return orphans
}

/**
 * Gives orphan job `id` back to wait, while its lock still holds `token` (BullMQ's own move, which
 * checks the lock). Resolves to false when the job is gone.
 *
 * @internal
 */
export const giveBack = async (tasks: Worker, orphan: Orphan): Promise<boolean> => {
  const job = await TaskJob.fromId(tasks as never, orphan.id)
  if (job === undefined) return false
  await job.moveToWait(orphan.token)
  return true
}
