import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import { dual } from "effect/Function"
import type { WorkflowTask } from "../../../wire/WorkflowProtocol.js"

/**
 * How often a worker beats for a run while it replays one of its turns: 5 seconds.
 *
 * @since 0.1.0
 * @category constants
 */
export const RUN_HEARTBEAT_INTERVAL: Duration.Duration = Duration.seconds(5)

/**
 * The run-scoped beat: `{ runId, seq: 0, group }` and no `stepId` (its absence is what tells the
 * engine the beat is for the run's turn, so it re-arms the run's decision deadline).
 *
 * @since 0.1.0
 * @category models
 */
export interface RunHeartbeat {
  readonly runId: string
  readonly seq: 0
  readonly group: string
}

/**
 * The pub/sub channel run-scoped beats go to: `<effectivePrefix>-heartbeat`.
 *
 * @since 0.1.0
 * @category naming
 */
export const runHeartbeatChannel = (effectivePrefix: string): string => `${effectivePrefix}-heartbeat`

/**
 * The beat for a turn's run. `group` defaults to the task's `group` (the workflow's routing token).
 *
 * @since 0.1.0
 * @category constructors
 */
export const runHeartbeat = (
  task: Pick<WorkflowTask, "runId" | "group">,
  group?: string
): RunHeartbeat => ({ runId: task.runId, seq: 0, group: group ?? task.group ?? "" })

/**
 * Options of {@link withRunHeartbeat}: the beat, how to publish it, and how often.
 *
 * @since 0.1.0
 * @category models
 */
export interface RunHeartbeatOptions<E, R> {
  readonly beat: RunHeartbeat
  readonly publish: (beat: RunHeartbeat) => Effect.Effect<void, E, R>
  readonly interval?: Duration.DurationInput | undefined
}

/**
 * Runs `self` (a workflow turn) while beating for its run: one beat at once, then one every
 * `interval` (default {@link RUN_HEARTBEAT_INTERVAL}) from the first, until `self` ends, for any
 * reason. The beat stops before `self`'s result is returned, so it stops before the decision is
 * sent. A failing or dying `publish` is ignored: the turn and later beats go on. A `publish` still
 * unanswered when the next beat is due is given up (interrupted, without waiting for it) and the
 * next one goes on time: the engine re-drives a run it has not heard of within its silence window
 * (`remoteAdvanceSilenceMs`), so neither a slow answer nor one that never comes may delay the beats.
 *
 * @since 0.1.0
 * @category combinators
 */
export const withRunHeartbeat: {
  <E2, R2>(options: RunHeartbeatOptions<E2, R2>): <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R | R2>
  <A, E, R, E2, R2>(self: Effect.Effect<A, E, R>, options: RunHeartbeatOptions<E2, R2>): Effect.Effect<A, E, R | R2>
} = dual(2, <A, E, R, E2, R2>(
  self: Effect.Effect<A, E, R>,
  options: RunHeartbeatOptions<E2, R2>
): Effect.Effect<A, E, R | R2> => {
  const interval = Duration.decode(options.interval ?? RUN_HEARTBEAT_INTERVAL)
  // bounded by the interval, and disconnected so that an uninterruptible publish is left behind
  // rather than waited for
  const beatOnce = Effect.suspend(() => options.publish(options.beat)).pipe(
    Effect.disconnect,
    Effect.timeout(interval),
    Effect.catchAllCause(() => Effect.void)
  )
  // each beat together with a wait of one interval, so they start one interval apart from the first
  // whatever each publish takes (`Schedule.spaced` counts from a publish's end; `Schedule.fixed`
  // from the first one's end)
  const loop = Effect.forever(Effect.all([beatOnce, Effect.sleep(interval)], { concurrency: 2, discard: true }))
  return Effect.scoped(Effect.zipRight(Effect.forkScoped(loop), self))
})
