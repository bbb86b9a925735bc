/**
 * A worker on the nestjs-durable engine's Redis/BullMQ transport, as an Effect application.
 *
 *   npm install effect-durable-worker effect@3 @effect/platform@0.97 @effect/platform-node@0.108 bullmq@5 ioredis@5
 *   REDIS_URL=redis://127.0.0.1:6379 npx tsx examples/transports/redis.ts
 *
 * (In a clone of this repository, which has no build until `npm run build`, run it from the
 * sources: `npx tsx --conditions=source examples/transports/redis.ts`.)
 *
 * `BullMQTransport.layerConfig` reads `REDIS_URL` (and `DURABLE_PREFIX`); the worker's options come
 * from `DURABLE_*` variables through `WorkerConfig.layerConfig`. SIGTERM drains and deregisters.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Layer } from "effect"
import { Worker, WorkerConfig } from "effect-durable-worker"
import { BullMQTransport } from "effect-durable-worker/bullmq"
import { steps } from "./steps.js"

// no options here: an option given to Worker.layer would win over its DURABLE_* variable
const WorkerLive = Worker.layer({ steps }).pipe(
  Layer.provide(Layer.merge(BullMQTransport.layerConfig(), WorkerConfig.layerConfig()))
)

NodeRuntime.runMain(Layer.launch(WorkerLive))
