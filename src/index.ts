/**
 * effect-durable-worker: the worker side of durable execution, on Effect.
 *
 * - wire: `StepProtocol`, `WorkflowProtocol`, `DurableWorkflowCodec` (wire schemas and codecs)
 * - core: `Step` (handlers, `processStep`), `Workflow` (replay, `processWorkflowTask`),
 *   `DurableWorkflow` (authoring), `FatalError`; `ReplayReport`, `ReplayVerify`, `ReplayCapture`
 *   (verifying recorded histories before a deploy, and recording them from a worker)
 * - seam: `Protocol` and `Transport`, the public contract between the runtime, the orchestrators'
 *   protocols and the brokers
 * - protocols: `NestDurableProtocol` (nestjs-durable steps and turns), `DurableWorkflowProtocol`
 * - runtime: `Worker` (lifecycle, concurrency, drain, deregistration), `WorkerConfig`, `WorkerLogger`
 * - observability: `WorkerMetrics` (the worker's Effect metrics, every transport)
 * - transports: `InMemoryTransport` here; each broker has its own entry point, which loads its
 *   driver (optional peer dependencies): `effect-durable-worker/bullmq` (`BullMQTransport`),
 *   `…/sqs` (`SqsTransport`), `…/postgres` and `…/mysql` (`SqlTransport`), `…/durable-workflow`
 *   (`DurableWorkflowTransport`, `DurableWorkflowExternalStorage`)
 * - services: `Memory`, `Concurrency`, `ConcurrencyController` (adaptive concurrency, memory gate)
 *
 * The plain-promise facade is `effect-durable-worker/promise`. Importing this module loads no
 * broker driver.
 *
 * @since 0.1.0
 */
export { FatalError } from "./core/FatalError.js"

/**
 * The reason a task's `ctx.signal` is aborted with: why the worker stopped it.
 *
 * @since 0.3.0
 */
export { StepAborted } from "./core/internal/interruption.js"

/**
 * A transport's driver is not installed; its message says which packages to install.
 *
 * @since 0.3.0
 */
export { MissingDriverError } from "./transport/internal/drivers.js"

/** @since 0.1.0 */
export * as Concurrency from "./services/Concurrency.js"

/** @since 0.1.0 */
export * as ConcurrencyController from "./services/ConcurrencyController.js"

/** @since 0.1.0 */
export * as DurableWorkflow from "./core/DurableWorkflow.js"

/** @since 0.1.0 */
export * as DurableWorkflowCodec from "./wire/DurableWorkflowCodec.js"

/** @since 0.1.0 */
export * as InMemoryTransport from "./transport/InMemoryTransport.js"

/** @since 0.1.0 */
export * as Memory from "./services/Memory.js"

/** @since 0.2.0 */
export * as NestDurableProtocol from "./protocol/NestDurableProtocol.js"

/** @since 0.2.0 */
export * as Protocol from "./seam/Protocol.js"

/**
 * Recording a sampled share of the workflow turns a worker replays, for `verify`.
 *
 * @since 0.3.0
 */
export * as ReplayCapture from "./core/ReplayCapture.js"

/**
 * The `durable-workflow.v2.replay-diff` report: statuses, verdicts, promotion decisions.
 *
 * @since 0.3.0
 */
export * as ReplayReport from "./core/ReplayReport.js"

/**
 * Verifying a directory of recorded histories (both orchestrators) against the code to deploy.
 *
 * @since 0.3.0
 */
export * as ReplayVerify from "./core/ReplayVerify.js"

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

/** @since 0.3.0 */
export * as WorkerLogger from "./runtime/WorkerLogger.js"

/** @since 0.3.0 */
export * as WorkerMetrics from "./seam/WorkerMetrics.js"

/** @since 0.1.0 */
export * as Workflow from "./core/Workflow.js"

/** @since 0.1.0 */
export * as WorkflowProtocol from "./wire/WorkflowProtocol.js"
