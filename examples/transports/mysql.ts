/**
 * A worker on the nestjs-durable engine's database transport on MySQL 8 / MariaDB, through the
 * promise facade.
 *
 *   npm install effect-durable-worker effect@3 @effect/platform@0.97 @effect/sql@0.52 @effect/sql-mysql2@0.53 \
 *     @effect/experimental@0.61 mysql2@3
 *   DATABASE_URL=mysql://root@127.0.0.1:3306/test npx tsx examples/transports/mysql.ts
 *
 * (In a clone of this repository, which has no build until `npm run build`, run it from the
 * sources: `npx tsx --conditions=source examples/transports/mysql.ts`.)
 */
import { Worker } from "effect-durable-worker/promise"
import { mysql } from "effect-durable-worker/mysql"

const worker = new Worker({ concurrency: 16 })
worker.step("inventory.reserve", async (input: { orderId: string }) => ({ orderId: input.orderId, reserved: true }))

// `url` defaults to DATABASE_URL; the tables are the engine's (created when missing, `autoCreate`)
await worker.run(mysql({ prefix: process.env.DURABLE_PREFIX ?? "durable" }))
