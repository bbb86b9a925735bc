/**
 * effect-durable-worker: the worker side of durable execution, on Effect.
 *
 * - wire: `StepProtocol`, `WorkflowProtocol`, `DurableWorkflowCodec` (wire schemas and codecs)
 * - core: `Step` (handlers, `processStep`), `Workflow` (replay, `processWorkflowTask`),
 *   `DurableWorkflow` (authoring), `FatalError`
 * - seam: `Protocol` and `Transport`, the public contract between the runtime, the orchestrators'
 *   protocols and the brokers
 * - protocols: `NestDurableProtocol` (nestjs-durable steps and turns), `DurableWorkflowProtocol`
 * - runtime: `Worker` (lifecycle, concurrency, drain, deregistration), `WorkerConfig`
 * - transports: `InMemoryTransport`, `BullMQTransport`, `SqsTransport`, `SqlTransport`,
 *   `DurableWorkflowTransport` with `DurableWorkflowExternalStorage`
 * - services: `Memory`, `Concurrency`, `ConcurrencyController` (adaptive concurrency, memory gate)
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
export * as DurableWorkflowCodec from "./wire/DurableWorkflowCodec.js"

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

/** @since 0.2.0 */
export * as NestDurableProtocol from "./protocol/NestDurableProtocol.js"

/** @since 0.2.0 */
export * as Protocol from "./seam/Protocol.js"

/** @since 0.1.0 */
export * as SqlTransport from "./transport/SqlTransport.js"

/** @since 0.1.0 */
export * as SqsTransport from "./transport/SqsTransport.js"

/** @since 0.1.0 */
export * as Step from "./core/Step.js"

/** @since 0.1.0 */
export * as StepProtocol from "./wire/StepProtocol.js"

/** @since 0.1.0 */
export * as Transport from "./seam/Transport.js"

/** @since 0.1.0 */
export * as Worker from "./runtime/Worker.js"

/** @since 0.2.0 */
export * as WorkerConfig from "./runtime/WorkerConfig.js"

/** @since 0.1.0 */
export * as Workflow from "./core/Workflow.js"

/** @since 0.1.0 */
export * as WorkflowProtocol from "./wire/WorkflowProtocol.js"
