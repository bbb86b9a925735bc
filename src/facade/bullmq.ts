/**
 * The promise facade's Redis/BullMQ transport: `redis(...)`.
 *
 * @since 0.3.0
 */
import * as BullMQTransport from "../transport/BullMQTransport.js"
import { refusingUnknown, type TransportHandle } from "./internal/options.js"

/**
 * Options of the Redis/BullMQ transport; durations in milliseconds. They are checked as
 * `BullMQTransport` checks its own (an unknown key included).
 *
 * @since 0.1.0
 * @category models
 */
export interface RedisOptions {
  /** A `redis://` or `rediss://` URL. Default `process.env.REDIS_URL`, else `redis://127.0.0.1:6379`. */
  readonly url?: string
  /** ioredis connection options, used instead of `url`. Default none. */
  readonly connection?: BullMQTransport.BullMQOptions["connection"]
  /** Default `durable`, as the engine's. */
  readonly prefix?: string
  /** The transport namespace (keyspace `<prefix>-<namespace>`). Default none. */
  readonly namespace?: string
  /** Serve `<name>@<partition>` tokens: the steps of runs in that engine namespace. Default none; not with `namespace`. */
  readonly partition?: string
  /** BullMQ lock duration of a running job, renewed at half of it. Default 30,000. */
  readonly lockDurationMs?: number
  /** Publish step beats on `<P>-heartbeat` this often while a step runs (engine-side `timeoutMs`). Default off. */
  readonly stepBeatIntervalMs?: number
  /** How long the first connection may take before `run` fails. Default 5,000. */
  readonly connectTimeoutMs?: number
  /** How often stalled jobs are looked for. Default 30,000. */
  readonly stalledIntervalMs?: number
  /**
   * Further brokers of the engine's transport pool, by the pool id the engine stamps on tasks as
   * `transport`; a task is answered on the broker its `transport` names. Default none.
   */
  readonly brokers?: BullMQTransport.BullMQOptions["brokers"]
  /** The engine's pool id of the main broker. Default `"default"`. */
  readonly brokerId?: string
  /** Commands of one event-loop turn that may share a socket write. Default 8; 1 turns this off. */
  readonly commandsPerWrite?: number
}

const REDIS_KEYS: ReadonlyArray<keyof RedisOptions> = [
  "url",
  "connection",
  "prefix",
  "namespace",
  "partition",
  "lockDurationMs",
  "stepBeatIntervalMs",
  "connectTimeoutMs",
  "stalledIntervalMs",
  "brokers",
  "brokerId",
  "commandsPerWrite"
]

/**
 * The Redis/BullMQ transport of the nestjs-durable engine. An unknown or invalid option makes `run`
 * reject with a `BullMQConfigError` naming it, before anything connects.
 *
 * @since 0.1.0
 * @category transports
 */
export const redis = (options: RedisOptions = {}): TransportHandle => {
  const url = options.url ?? process.env.REDIS_URL
  return {
    layer: refusingUnknown(
      options,
      REDIS_KEYS,
      "redis()",
      ({ key, message }) => new BullMQTransport.BullMQConfigError({ option: key, message }),
      () => BullMQTransport.layer({
        ...(url === undefined ? {} : { url }),
        ...(options.connection === undefined ? {} : { connection: options.connection }),
        ...(options.prefix === undefined ? {} : { prefix: options.prefix }),
        ...(options.namespace === undefined ? {} : { namespace: options.namespace }),
        ...(options.partition === undefined ? {} : { partition: options.partition }),
        ...(options.lockDurationMs === undefined ? {} : { lockDuration: options.lockDurationMs }),
        ...(options.stepBeatIntervalMs === undefined ? {} : { stepBeatInterval: options.stepBeatIntervalMs }),
        ...(options.connectTimeoutMs === undefined ? {} : { connectTimeout: options.connectTimeoutMs }),
        ...(options.stalledIntervalMs === undefined ? {} : { stalledInterval: options.stalledIntervalMs }),
        ...(options.brokers === undefined ? {} : { brokers: options.brokers }),
        ...(options.brokerId === undefined ? {} : { brokerId: options.brokerId }),
        ...(options.commandsPerWrite === undefined ? {} : { commandsPerWrite: options.commandsPerWrite })
      })
    )
  }
}
