/**
 * A transport handle whose module, and with it the transport's driver, is loaded only when a run
 * builds its layer: the facade itself loads no driver.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { missingDriverError } from "../../transport/internal/drivers.js"
import type { TransportHandle } from "./options.js"

/** The handle `make` builds from the module `load` imports; a driver that is missing fails the run with a `MissingDriverError`. */
export const lazyHandle = <M>(
  load: () => Promise<M>,
  packages: ReadonlyArray<string>,
  transport: string,
  make: (module: M) => TransportHandle
): TransportHandle => ({
  layer: Layer.unwrapEffect(
    Effect.map(Effect.tryPromise({ try: load, catch: missingDriverError(packages, transport) }), (module) => make(module).layer)
  )
})
