/**
 * A worker on the nestjs-durable engine's database transport on PostgreSQL, as an Effect
 * application: the engine's own task and result tables, `LISTEN/NOTIFY` wake-ups.
 *
 *   npm install effect-durable-worker effect@3 @effect/platform@0.97 @effect/platform-node@0.108 \
 *     @effect/sql@0.52 @effect/sql-pg@0.53 @effect/experimental@0.61 pg@8
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npx tsx examples/transports/postgres.ts
 *
 * (In a clone of this repository, which has no build until `npm run build`, run it from the
 * sources: `npx tsx --conditions=source examples/transports/postgres.ts`.)
 */
import { NodeRuntime } from "@effect/platform-node"
import { Layer } from "effect"
import { Worker } from "effect-durable-worker"
import { SqlTransport } from "effect-durable-worker/postgres"
import { steps } from "./steps.js"

const WorkerLive = Worker.layer({ steps, concurrency: 16 }).pipe(
  // DATABASE_URL picks the dialect; `SqlTransport.layerPostgres({ url, prefix })` takes it explicitly
  Layer.provide(SqlTransport.layerConfig({ prefix: process.env.DURABLE_PREFIX ?? "durable" }))
)

NodeRuntime.runMain(Layer.launch(WorkerLive))
