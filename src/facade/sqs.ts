/**
 * The promise facade's SQS transport: `sqs(...)`.
 *
 * @since 0.3.0
 */
import * as SqsTransport from "../transport/SqsTransport.js"
import type { TransportHandle } from "./internal/options.js"
import type { SqsOptions } from "./internal/transportOptions.js"

export type { SqsClientSettings, SqsOptions } from "./internal/transportOptions.js"

/**
 * The SQS transport of the nestjs-durable engine (`@aws-sdk/client-sqs` v3): queue names, bodies
 * and the results queue as the engine's SQS transport has them. Names the SQS rules refuse (`.`,
 * `@`) are refused at start unless `taskQueueUrl` maps them, as on the engine side. An unknown or
 * invalid option makes `run` reject with an `SqsConfigError` naming it, before any request (client
 * settings such as `endpoint` and `region` go in `clientConfig`).
 *
 * @since 0.1.0
 * @category transports
 */
export const sqs = (options: SqsOptions = {}): TransportHandle => ({
  // the same options: only the client's types are described by their shape here
  layer: SqsTransport.layer(options as SqsTransport.SqsOptions)
})
