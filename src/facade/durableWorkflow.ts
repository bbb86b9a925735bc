/**
 * The promise facade's Durable Workflow transport: `durableWorkflow(...)` and its external storage drivers.
 *
 * @since 0.3.0
 */
import * as Effect from "effect/Effect"
import type * as Redacted from "effect/Redacted"
import * as DurableWorkflowTransport from "../transport/DurableWorkflowTransport.js"
import { refusingUnknown, settle, type TransportHandle } from "./internal/options.js"

/**
 * Options of the Durable Workflow transport; durations in milliseconds.
 *
 * @since 0.1.0
 * @category models
 */
export interface DurableWorkflowOptions {
  /** The server root (or a managed-runtime prefix); not ending in `/api`, no query or fragment. */
  readonly baseUrl: string
  /** The shared bearer token (both planes). Default none. */
  readonly token?: string | Redacted.Redacted | undefined
  /** A worker-plane token; wins over `token` on the worker plane. Default none. */
  readonly workerToken?: string | Redacted.Redacted | undefined
  /** A control-plane token; wins over `token` on the control plane. Default none. */
  readonly controlToken?: string | Redacted.Redacted | undefined
  /** `X-Namespace`. Default `"default"`. */
  readonly namespace?: string | undefined
  /** The task queue the worker registers on and polls. */
  readonly taskQueue: string
  /** Timeout of non-poll requests. Default 60,000. */
  readonly requestTimeoutMs?: number | undefined
  /** Worker heartbeat interval until the server advertises one; positive. Default 60,000. */
  readonly heartbeatIntervalMs?: number | undefined
  /**
   * Where payloads above `externalStorageThresholdBytes` are stored, and inbound `external_storage`
   * references are read from (size and SHA-256 checked): {@link filesystemStorage},
   * {@link s3Storage}, or {@link externalStorage} for any other store (GCS, Azure Blob, …).
   */
  readonly externalStorage?: DurableWorkflowTransport.ExternalStorageDriver | undefined
  /** Size in bytes of an encoded payload above which it goes to `externalStorage`. At least 1. */
  readonly externalStorageThresholdBytes?: number | undefined
  /** Hooks around workflow tasks, activities and queries, outermost first. Default none. */
  readonly interceptors?: ReadonlyArray<DurableWorkflowTransport.WorkerInterceptor> | undefined
  /** Wait for a server that does not answer at start (logged once, backoff up to 5 s) instead of failing `run`. Default `false`. */
  readonly waitForBroker?: boolean | undefined
}

const DURABLE_WORKFLOW_KEYS: ReadonlyArray<keyof DurableWorkflowOptions> = [
  "baseUrl",
  "token",
  "workerToken",
  "controlToken",
  "namespace",
  "taskQueue",
  "requestTimeoutMs",
  "heartbeatIntervalMs",
  "externalStorage",
  "externalStorageThresholdBytes",
  "interceptors",
  "waitForBroker"
]

/**
 * The Durable Workflow transport, with control-plane helpers.
 *
 * @since 0.1.0
 * @category models
 */
export interface DurableWorkflowHandle extends TransportHandle {
  /** A `runUntil` predicate: true once the workflow is terminal (control plane; needs a control or shared token). */
  readonly workflowTerminal: (workflowId: string) => () => Promise<boolean>
  /** Control plane: retire a worker (`DELETE /api/workers/{id}`); never used by shutdown. */
  readonly deregisterWorker: (workerId: string) => Promise<Record<string, unknown>>
}

/**
 * A Durable Workflow server (worker protocol 1.1 over HTTP): activities, workflow tasks replayed
 * from history, query tasks. An unknown or invalid option makes `run` (and the control-plane
 * helpers) reject with a `DurableWorkflowConfigError` naming it, before any request.
 *
 * @since 0.1.0
 * @category transports
 */
export const durableWorkflow = (options: DurableWorkflowOptions): DurableWorkflowHandle => {
  const layer = refusingUnknown(
    options,
    DURABLE_WORKFLOW_KEYS,
    "durableWorkflow()",
    ({ key, message }) => new DurableWorkflowTransport.DurableWorkflowConfigError({ option: key, message }),
    () => DurableWorkflowTransport.layer({
      baseUrl: options.baseUrl,
      taskQueue: options.taskQueue,
      token: options.token,
      workerToken: options.workerToken,
      controlToken: options.controlToken,
      namespace: options.namespace,
      ...(options.requestTimeoutMs === undefined ? {} : { requestTimeout: options.requestTimeoutMs }),
      ...(options.heartbeatIntervalMs === undefined ? {} : { heartbeatInterval: options.heartbeatIntervalMs }),
      ...(options.externalStorage === undefined ? {} : { externalStorage: options.externalStorage }),
      ...(options.externalStorageThresholdBytes === undefined
        ? {}
        : { externalStorageThresholdBytes: options.externalStorageThresholdBytes }),
      ...(options.interceptors === undefined ? {} : { interceptors: options.interceptors }),
      ...(options.waitForBroker === undefined ? {} : { waitForBroker: options.waitForBroker })
    })
  )
  const control = <A>(effect: Effect.Effect<A, unknown, DurableWorkflowTransport.DurableWorkflowClient>) =>
    settle(Effect.provide(effect, layer))
  return {
    layer,
    workflowTerminal: (workflowId) => () =>
      control(Effect.map(DurableWorkflowTransport.describeWorkflow(workflowId), DurableWorkflowTransport.isTerminal)),
    deregisterWorker: (workerId) => control(DurableWorkflowTransport.deregisterWorker(workerId))
  }
}
