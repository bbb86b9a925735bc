import * as Effect from "effect/Effect"
import * as Step from "../../src/core/Step.js"
import type { Handlers } from "../../src/seam/Protocol.js"

/** What a worker serving these steps (each answering `null`) describes itself with. */
export const servingSteps = (names: ReadonlyArray<string>): Handlers =>
  ({
    steps: new Map(names.map((name) => [name, Step.make(name, () => Effect.succeed(null))])),
    workflows: new Map(),
    durableWorkflows: new Map()
  })
