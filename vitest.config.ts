import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Integration tests share real Redis/PostgreSQL/MariaDB servers; each uses its own prefix or tables.
    pool: "forks",
    reporters: process.env.CI_JSON_REPORT ? ["default", ["json", { outputFile: process.env.CI_JSON_REPORT }]] : ["default"]
  }
})
