/**
 * `effect-durable-worker/bullmq`: the Redis/BullMQ transport of the nestjs-durable engine.
 *
 * Needs the optional peer dependencies `bullmq` and `ioredis`. The Effect transport is
 * `BullMQTransport`; the promise facade's handle constructor is `redis` (for `Worker.run` of
 * `effect-durable-worker/promise`).
 *
 * @since 0.3.0
 */

/** @since 0.1.0 */
export * as BullMQTransport from "./transport/BullMQTransport.js"

export { redis, type RedisConnectionOptions, type RedisConnectionSettings, type RedisOptions } from "./facade/bullmq.js"
