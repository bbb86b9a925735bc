/**
 * The promise facade's Redis/BullMQ transport: `redis(...)`.
 *
 * @since 0.3.0
 */
import * as Layer from "effect/Layer"
import * as BullMQTransport from "../transport/BullMQTransport.js"
import { refusingUnknown, type TransportHandle } from "./internal/options.js"
import type { RedisOptions } from "./internal/transportOptions.js"

export type { RedisConnectionOptions, RedisConnectionSettings, RedisOptions } from "./internal/transportOptions.js"


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
  "commandsPerWrite",
  "waitForBroker"
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
  // the application wrote no url: a refusal of it names the variable it came from
  const fromEnvironment = options.url === undefined && url !== undefined
  return {
    layer: Layer.mapError(refusingUnknown(
      options,
      REDIS_KEYS,
      "redis()",
      ({ key, message }) => new BullMQTransport.BullMQConfigError({ option: key, message }),
      () => BullMQTransport.layer({
        ...(url === undefined ? {} : { url }),
        ...(options.connection === undefined ? {} : { connection: options.connection as NonNullable<BullMQTransport.BullMQOptions["connection"]> }),
        ...(options.prefix === undefined ? {} : { prefix: options.prefix }),
        ...(options.namespace === undefined ? {} : { namespace: options.namespace }),
        ...(options.partition === undefined ? {} : { partition: options.partition }),
        ...(options.lockDurationMs === undefined ? {} : { lockDuration: options.lockDurationMs }),
        ...(options.stepBeatIntervalMs === undefined ? {} : { stepBeatInterval: options.stepBeatIntervalMs }),
        ...(options.connectTimeoutMs === undefined ? {} : { connectTimeout: options.connectTimeoutMs }),
        ...(options.stalledIntervalMs === undefined ? {} : { stalledInterval: options.stalledIntervalMs }),
        ...(options.brokers === undefined ? {} : { brokers: options.brokers as NonNullable<BullMQTransport.BullMQOptions["brokers"]> }),
        ...(options.brokerId === undefined ? {} : { brokerId: options.brokerId }),
        ...(options.commandsPerWrite === undefined ? {} : { commandsPerWrite: options.commandsPerWrite }),
        ...(options.waitForBroker === undefined ? {} : { waitForBroker: options.waitForBroker })
      })
    ), (error) =>
      fromEnvironment && error instanceof BullMQTransport.BullMQConfigError && error.option === "url"
        ? new BullMQTransport.BullMQConfigError({ option: "url", message: `REDIS_URL, which redis() reads when given no url: ${error.message}` })
        : error)
  }
}
