/**
 * effect-durable-worker: the worker side of durable execution, on Effect.
 *
 * - protocol: `StepProtocol` (wire schemas)
 * - core: `Step` (handlers, `processStep`), `FatalError`
 * - runtime: `Worker` (lifecycle, concurrency, drain, deregistration)
 * - services: `Transport` (the broker seam) and its layers (`InMemoryTransport`, …)
 *
 * The plain-promise facade is `effect-durable-worker/promise`.
 *
 * @since 0.1.0
 */
export { FatalError } from "./core/FatalError.js"

/** @since 0.1.0 */
export * as InMemoryTransport from "./transport/InMemoryTransport.js"

/** @since 0.1.0 */
export * as Step from "./core/Step.js"

/** @since 0.1.0 */
export * as StepProtocol from "./protocol/StepProtocol.js"

/** @since 0.1.0 */
export * as Transport from "./transport/Transport.js"

/** @since 0.1.0 */
export * as Worker from "./runtime/Worker.js"
