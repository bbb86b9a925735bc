/**
 * `effect-durable-worker/durable-workflow`: the Durable Workflow transport (worker protocol 1.1 over
 * HTTP) with its external payload storage.
 *
 * Needs no driver beyond `effect` and `@effect/platform` (HTTP through the platform's `fetch`
 * client); S3 external storage needs the optional peer `@aws-sdk/client-s3`. The Effect transport is
 * `DurableWorkflowTransport`; the promise facade's handle constructor is `durableWorkflow`.
 * Workflow authoring (`DurableWorkflow`) is in the package root.
 *
 * @since 0.3.0
 */

/** @since 0.1.0 */
export * as DurableWorkflowTransport from "./transport/DurableWorkflowTransport.js"

/**
 * External payload storage drivers for the Durable Workflow transport (filesystem, S3, custom).
 *
 * @since 0.1.0
 */
export * as DurableWorkflowExternalStorage from "./transport/DurableWorkflowExternalStorage.js"

export { durableWorkflow, type DurableWorkflowHandle, type DurableWorkflowOptions } from "./facade/durableWorkflow.js"
export { externalStorage, filesystemStorage, s3Storage } from "./facade/externalStorage.js"
