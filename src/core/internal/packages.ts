/**
 * The optional peer dependencies a user installs: how to name them in an install command, and
 * whether an import failed because one is missing.
 */

/**
 * How to name a package in an install command: at the line of this package's peer range. npm's
 * `latest` has moved past several of them (Effect 4 for the `@effect/` packages, BullMQ 6, ioredis
 * 6, OpenTelemetry's SDK 3), so a bare name can install a version outside the range.
 *
 * @internal
 */
export const INSTALL_SPECS: Readonly<Record<string, string>> = {
  "@aws-sdk/client-s3": "@aws-sdk/client-s3@3",
  "@aws-sdk/client-sqs": "@aws-sdk/client-sqs@3",
  "@effect/experimental": "@effect/experimental@0.61",
  "@effect/opentelemetry": "@effect/opentelemetry@0.64",
  "@effect/platform": "@effect/platform@0.97",
  "@effect/platform-node": "@effect/platform-node@0.108",
  "@effect/sql": "@effect/sql@0.52",
  "@effect/sql-mysql2": "@effect/sql-mysql2@0.53",
  "@effect/sql-pg": "@effect/sql-pg@0.53",
  "@opentelemetry/api": "@opentelemetry/api@1",
  "@opentelemetry/resources": "@opentelemetry/resources@2",
  "@opentelemetry/sdk-metrics": "@opentelemetry/sdk-metrics@2",
  "@opentelemetry/sdk-trace-base": "@opentelemetry/sdk-trace-base@2",
  bullmq: "bullmq@5",
  effect: "effect@3",
  ioredis: "ioredis@5",
  // not a peer: @effect/sql-mysql2 depends on it (^3), and the MySQL transport's error names it
  mysql2: "mysql2@3",
  pg: "pg@8"
}

/** `npm install` of `packages`, each inside this package's peer range. */
export const installCommand = (packages: ReadonlyArray<string>): string =>
  `npm install ${packages.map((name) => INSTALL_SPECS[name] ?? name).join(" ")}`

/** Whether an import failed because a package could not be found (ESM and CommonJS alike). */
export const isNotFound = (cause: unknown): boolean => {
  const code = (cause as { code?: unknown } | null)?.code
  return code === "ERR_MODULE_NOT_FOUND" || code === "MODULE_NOT_FOUND"
}
