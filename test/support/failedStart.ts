/**
 * A process whose worker fails to start, for the test that a failed start leaves nothing behind
 * that keeps the process alive: the promise facade (signals left on, as an application has them)
 * runs on the transport the argument names, prints the error's tag and message, and then has
 * nothing more to do. A process that does not exit on its own holds a leaked timer or socket.
 */
import { durableWorkflow, mysql, postgres, redis, sqs, type TransportHandle, Worker } from "../../src/promise.js"

const transports: Record<string, () => TransportHandle> = {
  "redis-refused": () => redis({ url: "redis://127.0.0.1:1" }),
  "postgres-refused-login": () => postgres({ url: "postgres://edw_no_such_role@127.0.0.1:5432/test" }),
  "postgres-host-refused-login": () => postgres({ host: "127.0.0.1", username: "edw_no_such_role" }),
  // nothing says where the database is: the driver's defaults, which the message says
  "postgres-defaults": () => (delete process.env.DATABASE_URL, postgres({ port: 1 })),
  // DATABASE_URL set, and not read beside a field: the message says so, not that none was given
  "postgres-defaults-beside-database-url": () => (
    process.env.DATABASE_URL = "postgres://app@127.0.0.1:5432/app", postgres({ port: 1 })
  ),
  "postgres-refused": () => postgres({ url: "postgres://postgres@127.0.0.1:1/test" }),
  "mysql-refused-login": () => mysql({ url: "mysql://root:wrong@127.0.0.1:3306/test" }),
  "mysql-host-refused-login": () => mysql({ host: "127.0.0.1", username: "root", password: "wrong" }),
  "mysql-refused": () => mysql({ url: "mysql://root@127.0.0.1:1/test" }),
  "sqs-refused": () =>
    sqs({ clientConfig: { endpoint: "http://127.0.0.1:1", region: "us-east-1", credentials: { accessKeyId: "x", secretAccessKey: "x" } } }),
  "durable-workflow-refused": () => durableWorkflow({ baseUrl: "http://127.0.0.1:1", taskQueue: "q" })
}

const worker = new Worker({ logLevel: "None" })
worker.step("x", () => 1)
await worker.run(transports[process.argv[2]!]!()).then(
  () => process.stdout.write("started\n"),
  (error: { _tag?: string; message: string }) => process.stdout.write(`${error._tag}: ${error.message}\n`)
)
