/**
 * effect-durable-worker: the worker side of durable execution, on Effect.
 *
 * - protocol: `StepProtocol`, `WorkflowProtocol`, `DurableWorkflowCodec` (wire schemas and codecs)
 * - core: `Step` (handlers, `processStep`), `Workflow` (replay, `processWorkflowTask`), `FatalError`
 * - runtime: `Worker` (lifecycle, concurrency, drain, deregistration)
 * - services: `Transport` (the broker seam) and its layers (`InMemoryTransport`, `BullMQTransport`,
 *   `SqsTransport`, `SqlTransport`, `DurableWorkflowTransport` with `DurableWorkflowExternalStorage`),
 *   `Memory`, `Concurrency`, `ConcurrencyController` (adaptive concurrency and the memory gate)
 *
 * The plain-promise facade is `effect-durable-worker/promise`.
 *
 * @since 0.1.0
 */
export { FatalError } from "./core/FatalError.js"

/** @since 0.1.0 */
export * as BullMQTransport from "./transport/BullMQTransport.js"

/** @since 0.1.0 */
export * as Concurrency from "./services/Concurrency.js"

/** @since 0.1.0 */
export * as ConcurrencyController from "./services/ConcurrencyController.js"

/** @since 0.1.0 */
export * as DurableWorkflow from "./core/DurableWorkflow.js"

/** @since 0.1.0 */
export * as DurableWorkflowCodec from "./protocol/DurableWorkflowCodec.js"

/**
 * External payload storage drivers for the Durable Workflow transport (filesystem, S3, custom).
 *
 * @since 0.1.0
 */
export * as DurableWorkflowExternalStorage from "./transport/DurableWorkflowExternalStorage.js"

/** @since 0.1.0 */
export * as DurableWorkflowTransport from "./transport/DurableWorkflowTransport.js"

/** @since 0.1.0 */
export * as InMemoryTransport from "./transport/InMemoryTransport.js"

/** @since 0.1.0 */
export * as Memory from "./services/Memory.js"

/** @since 0.1.0 */
export * as SqlTransport from "./transport/SqlTransport.js"

/** @since 0.1.0 */
export * as SqsTransport from "./transport/SqsTransport.js"

/** @since 0.1.0 */
export * as Step from "./core/Step.js"

/** @since 0.1.0 */
export * as StepProtocol from "./protocol/StepProtocol.js"

/** @since 0.1.0 */
export * as Transport from "./transport/Transport.js"

/** @since 0.1.0 */
export * as Worker from "./runtime/Worker.js"

/** @since 0.1.0 */
export * as Workflow from "./core/Workflow.js"

/** @since 0.1.0 */
export * as WorkflowProtocol from "./protocol/WorkflowProtocol.js"
