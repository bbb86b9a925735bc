/**
 * This package's version, as the worker advertises it to an orchestrator (the BullMQ descriptor's
 * `sdk`, Durable Workflow's `sdk_version`). A constant rather than a read of `package.json`, which
 * would cost every import a file read; the suite checks that it is `package.json`'s.
 *
 * @internal
 */
export const VERSION = "0.3.0"
