/**
 * Reports, on stdout, each `@effect/platform-node` module the process resolves: none for importing
 * the package root and making a worker, then the HTTP server's once a worker with `health` runs.
 */
import { register } from "node:module"

register("data:text/javascript," + encodeURIComponent(`
export async function resolve(specifier, context, next) {
  if (specifier.includes("@effect/platform-node")) process.stdout.write("LOADED " + specifier + "\\n")
  return next(specifier, context)
}`))

const Effect = await import("effect/Effect")
const Layer = await import("effect/Layer")
const root = await import("../../src/index.js")
const worker = await Effect.runPromise(root.Worker.make({ health: { port: 0 } }))
process.stdout.write("ROOT IMPORTED\n")
const broker = await Effect.runPromise(root.InMemoryTransport.make())
await Effect.runPromise(
  worker.runUntil(Effect.zipRight(worker.registered, Effect.succeed(undefined))).pipe(Effect.provide(Layer.merge(broker.layer, Layer.empty)))
)
process.stdout.write("RAN\n")
