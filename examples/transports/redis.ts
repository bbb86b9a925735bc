/**
 * A worker on the nestjs-durable engine's Redis/BullMQ transport, as an Effect application.
 *
 *   npm install effect-durable-worker effect@3 @effect/platform@0.97 @effect/platform-node@0.108 bullmq ioredis
 *   REDIS_URL=redis://127.0.0.1:6379 npx tsx examples/transports/redis.ts
 *
 * `BullMQTransport.layerConfig` reads `REDIS_URL` (and `DURABLE_PREFIX`); the worker's options come
 * from `DURABLE_*` variables through `WorkerConfig.layerConfig`. SIGTERM drains and deregisters.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Layer } from "effect"
import { Worker } from "effect-durable-worker"
import { BullMQTransport } from "effect-durable-worker/bullmq"
import { steps } from "./steps.js"

const WorkerLive = Worker.layer({ steps, concurrency: 16, shutdownTimeout: "30 seconds" }).pipe(
  Layer.provide(BullMQTransport.layerConfig())
)

NodeRuntime.runMain(Layer.launch(WorkerLive))
