#!/usr/bin/env node
/**
 * The `effect-durable-worker` executable: runs {@link main} on the process's arguments over
 * `node:fs` and exits with its code.
 *
 * @since 0.3.0
 */
import * as Effect from "effect/Effect"
import { dirname } from "node:path"
import { fileURLToPath } from "node:url"
import { layerWithPath as layer } from "../services/internal/nodeFiles.js"
import { main } from "./main.js"

Effect.runPromise(main(process.argv.slice(2), dirname(fileURLToPath(import.meta.url))).pipe(Effect.provide(layer))).then(
  (code) => {
    process.exitCode = code
  },
  (defect: unknown) => {
    console.error("effect-durable-worker: unexpected error", defect)
    process.exitCode = 2
  }
)
