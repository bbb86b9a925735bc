/**
 * The promise facade's external payload storage drivers for `durableWorkflow({ externalStorage })`.
 *
 * @since 0.3.0
 */
import * as DurableWorkflowExternalStorage from "../transport/DurableWorkflowExternalStorage.js"
import type { ExternalStorageDriver } from "../transport/DurableWorkflowExternalStorage.js"
import { refuseUnknown } from "./internal/options.js"

/**
 * External payload storage on the local filesystem, for `durableWorkflow({ externalStorage })`:
 * `file://` URIs, files at `<root>/<codec>/<sha[:2]>/<sha>`.
 *
 * @since 0.1.0
 * @category external storage
 */
export const filesystemStorage = (root: string): ExternalStorageDriver =>
  DurableWorkflowExternalStorage.localFilesystem(root)

const S3_KEYS: ReadonlyArray<keyof DurableWorkflowExternalStorage.S3Options> = ["bucket", "prefix", "client", "clientConfig"]

/**
 * External payload storage on S3 or an S3-compatible server, for
 * `durableWorkflow({ externalStorage })`: objects at `<prefix>/<codec>/<sha[:2]>/<sha>`, URIs
 * `s3://<bucket>/<key>`. Needs the optional peer dependency `@aws-sdk/client-s3` (v3), imported on
 * first use. An unknown key of `options` throws a `TypeError` naming it.
 *
 * ```ts
 * durableWorkflow({
 *   baseUrl, taskQueue: "orders",
 *   externalStorage: s3Storage({ bucket: "payloads", prefix: "dw", clientConfig: { region: "eu-west-1" } }),
 *   externalStorageThresholdBytes: 256_000
 * })
 * ```
 *
 * @since 0.1.0
 * @category external storage
 */
export const s3Storage = (options: DurableWorkflowExternalStorage.S3Options): ExternalStorageDriver => {
  refuseUnknown(options, S3_KEYS, "s3Storage()")
  return DurableWorkflowExternalStorage.s3(options)
}

/**
 * External payload storage on any store, from two async functions: `put` keeps the bytes and
 * answers their URI, `get` reads them back for a reference. The worker checks size and SHA-256 of
 * what `get` answers.
 *
 * @since 0.1.0
 * @category external storage
 */
export const externalStorage = (
  driver: DurableWorkflowExternalStorage.PromiseExternalStorageDriver
): ExternalStorageDriver => DurableWorkflowExternalStorage.make(driver)
