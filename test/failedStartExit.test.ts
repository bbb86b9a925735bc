/**
 * A start that fails leaves nothing behind: the process of an application whose worker could not
 * start exits on its own (no pool's timer, socket or retry left running), on every transport, for
 * a refused connection and a refused login alike, by URL and by host.
 */
import { fileURLToPath } from "node:url"
import { assert, describe, it } from "vitest"
import { spawnSource } from "./support/local.js"

const SCRIPT = fileURLToPath(new URL("./support/failedStart.ts", import.meta.url))

const run = async (transport: string) => {
  // the AWS SDK's notice that its releases from 2027 need Node 22 (see the README's Troubleshooting)
  const { child, exited, output } = spawnSource(SCRIPT, [transport], { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: "true" })
  // the slowest of these fails its start after the SQS client's retries, well within this; eleven
  // processes compiling at once on a CI machine running the suite take a good part of it
  const timer = setTimeout(() => child.kill("SIGKILL"), 45_000)
  const { code, signal } = await exited
  clearTimeout(timer)
  return { output: output(), code, exited: signal === null }
}

const CASES: ReadonlyArray<readonly [string, RegExp]> = [
  ["redis-refused", /^RegistrationError: could not connect to Redis/],
  ["postgres-refused-login", /^RegistrationError: PostgreSQL at .* refused the credentials/],
  ["postgres-host-refused-login", /^RegistrationError: PostgreSQL at .* refused the credentials/],
  [
    "postgres-defaults",
    /^RegistrationError: could not connect to PostgreSQL at postgres:\/\/127\.0\.0\.1:1 \(no url, host or DATABASE_URL given: the driver's defaults, the user from PGUSER or the login\) \(/
  ],
  [
    "postgres-defaults-beside-database-url",
    /^RegistrationError: could not connect to PostgreSQL at postgres:\/\/127\.0\.0\.1:1 \(no url or host given \(DATABASE_URL is not read beside port\): the driver's defaults, the user from PGUSER or the login\) \(/
  ],
  ["postgres-refused", /^RegistrationError: could not connect to PostgreSQL/],
  ["mysql-refused-login", /^RegistrationError: MySQL\/MariaDB at .* refused the credentials/],
  ["mysql-host-refused-login", /^RegistrationError: MySQL\/MariaDB at mysql:\/\/root@127\.0\.0\.1:3306 refused the credentials/],
  ["mysql-refused", /^RegistrationError: could not connect to MySQL\/MariaDB/],
  ["sqs-refused", /^RegistrationError: /],
  ["durable-workflow-refused", /^RegistrationError: /]
]

describe("a failed start, in a process of its own", () => {
  it("the process exits on its own once run() has rejected, on every transport", async () => {
    const outcomes = await Promise.all(CASES.map(async ([transport, expected]) => ({ transport, expected, ...(await run(transport)) })))
    for (const { code, expected, exited, output, transport } of outcomes) {
      assert.isTrue(exited, `${transport}: the process did not exit on its own within 45 s:\n${output}`)
      assert.strictEqual(code, 0, `${transport}:\n${output}`)
      assert.match(output.trim(), expected, transport)
    }
  }, 90_000)
})
