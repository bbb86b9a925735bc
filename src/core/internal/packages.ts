/**
 * The optional peer dependencies a user installs: how to name them in an install command, and
 * whether an import failed because one is missing.
 */

/**
 * How to name a package in an install command: npm's `latest` of these is on Effect 4, which this
 * package does not support, so a bare name would install a version outside the peer range.
 *
 * @internal
 */
export const INSTALL_SPECS: Readonly<Record<string, string>> = {
  "@effect/sql": "@effect/sql@0.52",
  "@effect/sql-pg": "@effect/sql-pg@0.53",
  "@effect/sql-mysql2": "@effect/sql-mysql2@0.53",
  "@effect/experimental": "@effect/experimental@0.61",
  "@effect/platform-node": "@effect/platform-node@0.108"
}

/** `npm install` of `packages`, each inside this package's peer range. */
export const installCommand = (packages: ReadonlyArray<string>): string =>
  `npm install ${packages.map((name) => INSTALL_SPECS[name] ?? name).join(" ")}`

/** Whether an import failed because a package could not be found (ESM and CommonJS alike). */
export const isNotFound = (cause: unknown): boolean => {
  const code = (cause as { code?: unknown } | null)?.code
  return code === "ERR_MODULE_NOT_FOUND" || code === "MODULE_NOT_FOUND"
}
