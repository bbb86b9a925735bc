/**
 * `effect-durable-worker/sqs`: the SQS transport of the nestjs-durable engine.
 *
 * Needs the optional peer dependency `@aws-sdk/client-sqs` (v3). The Effect transport is
 * `SqsTransport`; the promise facade's handle constructor is `sqs`.
 *
 * @since 0.3.0
 */

/** @since 0.1.0 */
export * as SqsTransport from "./transport/SqsTransport.js"

export { sqs, type SqsOptions } from "./facade/sqs.js"
