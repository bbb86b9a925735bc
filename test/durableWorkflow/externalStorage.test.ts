/**
 * External payload storage drivers against real servers: the S3 driver against fauxqs (an
 * S3-compatible server on loopback, path-style addressing), end to end through a worker and the
 * in-repo Durable Workflow server.
 */
import {
  CreateBucketCommand,
  GetObjectCommand,
  HeadObjectCommand,
  PutObjectCommand,
  S3Client,
  type S3ClientConfig
} from "@aws-sdk/client-s3"
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { randomUUID } from "node:crypto"
import { pathToFileURL } from "node:url"
import * as Codec from "../../src/wire/DurableWorkflowCodec.js"
import * as Storage from "../../src/transport/DurableWorkflowExternalStorage.js"
import { durableWorkflow, externalStorage, s3Storage, Worker as PromiseWorker } from "../../src/promise.js"
import { start as startServer } from "../support/durableWorkflowServer.js"
import { fauxqs, startFauxqs } from "../support/fauxqs.js"
import { blob, DurableWorkflow, QUEUE, setup, startWorker, until } from "./support.js"

const decoded = (envelope: unknown) => Either.getOrThrow(Codec.decodeEnvelope(envelope as Codec.PayloadEnvelope))

/** fauxqs with a fresh bucket, a client config for it, and a client for the test's own checks. */
const s3Server = Effect.gen(function*() {
  const server = yield* fauxqs
  const clientConfig: S3ClientConfig = {
    endpoint: server.endpoint,
    region: "us-east-1",
    credentials: { accessKeyId: "test", secretAccessKey: "test" },
    forcePathStyle: true
  }
  const client = new S3Client(clientConfig)
  yield* Effect.addFinalizer(() => Effect.sync(() => client.destroy()))
  const bucket = `dw-payloads-${randomUUID().slice(0, 8)}`
  yield* Effect.promise(() => client.send(new CreateBucketCommand({ Bucket: bucket })))
  const read = (uri: string) =>
    Effect.promise(async () => {
      const { bucket: b, key } = Storage.parseS3Uri(uri)!
      const answer = await client.send(new GetObjectCommand({ Bucket: b, Key: key }))
      return new TextDecoder().decode(await answer.Body!.transformToByteArray())
    })
  const overwrite = (uri: string, text: string) =>
    Effect.promise(() => {
      const { bucket: b, key } = Storage.parseS3Uri(uri)!
      return client.send(new PutObjectCommand({ Bucket: b, Key: key, Body: new TextEncoder().encode(text) }))
    })
  return { clientConfig, client, bucket, read, overwrite }
})

describe("S3 external storage driver (fauxqs)", () => {
  it.scoped("round trip: content-addressed key under the prefix, s3:// URI, bytes read back and verified", () =>
    Effect.gen(function*() {
      const { bucket, client, clientConfig, read } = yield* s3Server
      // the driver builds its own client from the config (the SDK is imported on first use)
      const driver = Storage.s3({ bucket, prefix: "/dw/payloads/", clientConfig })
      const payload = blob({ order: "o-1", lines: Array.from({ length: 50 }, (_, i) => `line ${i}`) })
      const reference = yield* Storage.store(driver, payload, "avro")
      assert.strictEqual(reference.schema, "durable-workflow.v2.external-payload-reference.v1")
      assert.strictEqual(reference.size_bytes, payload.length)
      assert.match(reference.sha256, /^[0-9a-f]{64}$/)
      assert.strictEqual(reference.codec, "avro")
      assert.strictEqual(reference.uri, `s3://${bucket}/dw/payloads/avro/${reference.sha256.slice(0, 2)}/${reference.sha256}`)
      const head = yield* Effect.promise(() =>
        client.send(new HeadObjectCommand({ Bucket: bucket, Key: Storage.parseS3Uri(reference.uri)!.key }))
      )
      assert.strictEqual(head.ContentLength, payload.length)
      assert.strictEqual(yield* read(reference.uri), payload)
      assert.strictEqual(yield* Storage.retrieve(driver, reference), payload)
      // a second driver on a caller-owned client reads what the first one wrote
      const other = Storage.s3({ bucket, prefix: "dw/payloads", client })
      assert.strictEqual(yield* Storage.retrieve(other, reference), payload)
      // no prefix: the key is `<codec>/<sha[:2]>/<sha>`
      const bare = yield* Storage.store(Storage.s3({ bucket, client }), payload, "avro")
      assert.strictEqual(bare.uri, `s3://${bucket}/avro/${reference.sha256.slice(0, 2)}/${reference.sha256}`)
    }))

  it.scoped("a tampered or truncated object fails the integrity check with ExternalPayloadIntegrityError", () =>
    Effect.gen(function*() {
      const { bucket, client, overwrite } = yield* s3Server
      const driver = Storage.s3({ bucket, prefix: "dw", client })
      const payload = blob("a payload that someone will change")
      const reference = yield* Storage.store(driver, payload, "avro")
      // same length, different bytes: only the SHA-256 can tell
      const flipped = (payload[0] === "A" ? "B" : "A") + payload.slice(1)
      yield* overwrite(reference.uri, flipped)
      const changed = yield* Effect.flip(Storage.retrieve(driver, reference))
      assert.strictEqual(changed._tag, "ExternalPayloadIntegrityError")
      assert.match(changed.message, /does not match its SHA-256/)
      assert.strictEqual((changed as Storage.ExternalPayloadIntegrityError).uri, reference.uri)
      yield* overwrite(reference.uri, payload.slice(0, 10))
      const truncated = yield* Effect.flip(Storage.retrieve(driver, reference))
      assert.strictEqual(truncated._tag, "ExternalPayloadIntegrityError")
      assert.match(truncated.message, new RegExp(`is 10 bytes, its reference says ${payload.length}`))
    }))

  it.scoped("a missing object or another bucket's URI fails with ExternalStorageError", () =>
    Effect.gen(function*() {
      const { bucket, client } = yield* s3Server
      const driver = Storage.s3({ bucket, client })
      const absent = {
        schema: Storage.referenceSchema,
        uri: `s3://${bucket}/avro/00/${"0".repeat(64)}`,
        sha256: "0".repeat(64),
        size_bytes: 4,
        codec: "avro"
      }
      const missing = yield* Effect.flip(Storage.retrieve(driver, absent))
      assert.strictEqual(missing._tag, "ExternalStorageError")
      assert.strictEqual((missing as Storage.ExternalStorageError).operation, "get")
      assert.include(missing.message, absent.uri)
      const elsewhere = yield* Effect.flip(Storage.retrieve(driver, { ...absent, uri: `s3://another-bucket/avro/00/${"0".repeat(64)}` }))
      assert.strictEqual(elsewhere._tag, "ExternalStorageError")
      assert.match(elsewhere.message, /not in this driver's bucket/)
      const fileUri = yield* Effect.flip(Storage.retrieve(driver, { ...absent, uri: "file:///tmp/x" }))
      assert.strictEqual(fileUri._tag, "ExternalStorageError")
      // an unreachable endpoint is an ExternalStorageError too, on put
      const down = Storage.s3({
        bucket,
        clientConfig: { endpoint: "http://127.0.0.1:1", region: "us-east-1", forcePathStyle: true, maxAttempts: 1, credentials: { accessKeyId: "x", secretAccessKey: "x" } }
      })
      const failedPut = yield* Effect.flip(Storage.store(down, blob("x"), "avro"))
      assert.strictEqual(failedPut._tag, "ExternalStorageError")
      assert.strictEqual(failedPut.operation, "put")
    }))

  it.scoped("end to end: a workflow's large activity arguments go to S3, the activity reads them, its large result goes back, the workflow replays it", () =>
    Effect.gen(function*() {
      const { bucket, clientConfig, read } = yield* s3Server
      const { server } = yield* setup()
      const storage = Storage.s3({ bucket, prefix: "e2e", clientConfig })
      const seen: Array<number> = []
      const shout = DurableWorkflow.activity("text.shout", (text: string) =>
        Effect.sync(() => {
          seen.push(text.length)
          return text.toUpperCase() + "!"
        }))
      const wf = DurableWorkflow.make("text.pipeline", (ctx, text: string) =>
        Effect.gen(function*() {
          const loud = (yield* ctx.activity("text.shout", [text])) as string
          return { length: loud.length, tail: loud.slice(-3) }
        }))
      yield* startWorker(server, { steps: [shout], durableWorkflows: [wf] }, {
        externalStorage: storage,
        externalStorageThresholdBytes: 300
      })
      const text = "abc".repeat(400)
      // 1. the first workflow task schedules the activity: its arguments are above the threshold
      const started = server.enqueueWorkflowTask({ workflowType: "text.pipeline", taskQueue: QUEUE, input: [text] })
      yield* until(server, () => server.completedWorkflowTasks.length === 1)
      const [schedule] = server.completedWorkflowTasks[0]!.commands
      assert.strictEqual(schedule!["type"], "schedule_activity")
      const argsRef = (schedule!["arguments"] as any)["external_storage"]
      assert.match(argsRef["uri"], new RegExp(`^s3://${bucket}/e2e/avro/[0-9a-f]{2}/[0-9a-f]{64}$`))
      assert.deepStrictEqual(decoded({ codec: "avro", blob: yield* read(argsRef["uri"]) }), [text])
      // 2. the server hands the activity the same reference: the worker fetches it from S3
      server.enqueueActivityTask({
        activityType: "text.shout",
        taskQueue: QUEUE,
        workflowId: started.workflowId,
        runId: started.runId,
        wireArguments: schedule!["arguments"]
      })
      yield* until(server, () => server.completedActivityTasks.length === 1)
      assert.deepStrictEqual(seen, [1200])
      const result = server.completedActivityTasks[0]!.result as any
      assert.strictEqual(result["codec"], "avro")
      assert.isUndefined(result["blob"], "the large result is not inline")
      assert.match(result["external_storage"]["uri"], /^s3:\/\//)
      assert.strictEqual(decoded({ codec: "avro", blob: yield* read(result["external_storage"]["uri"]) }), text.toUpperCase() + "!")
      // 3. the next workflow task's history carries the activity result by reference: replay resolves it
      server.enqueueWorkflowTask({
        workflowType: "text.pipeline",
        taskQueue: QUEUE,
        workflowId: started.workflowId,
        runId: started.runId,
        wireArguments: { codec: "avro", external_storage: argsRef },
        historyEvents: [
          { event_type: "ActivityScheduled", payload: { activity_type: "text.shout" } },
          { event_type: "ActivityCompleted", payload: { activity_type: "text.shout", result } }
        ]
      })
      yield* until(server, () => server.completedWorkflowTasks.length === 2)
      const [complete] = server.completedWorkflowTasks[1]!.commands
      assert.strictEqual(complete!["type"], "complete_workflow")
      assert.deepStrictEqual(decoded(complete!["result"]), { length: 1201, tail: "BC!" })
    }))

  it.scoped("end to end: an activity whose S3 arguments were tampered with fails non-retryably with ExternalPayloadIntegrityError", () =>
    Effect.gen(function*() {
      const { bucket, client, overwrite } = yield* s3Server
      const { server } = yield* setup()
      const storage = Storage.s3({ bucket, client })
      let ran = 0
      const echo = DurableWorkflow.activity("text.echo", (text: string) => Effect.sync(() => (ran++, text)))
      yield* startWorker(server, { steps: [echo] }, { externalStorage: storage, externalStorageThresholdBytes: 100_000 })
      const args = blob(["q".repeat(600)])
      const reference = yield* Storage.store(storage, args, "avro")
      const tampered = args.slice(0, -8) + (args.slice(-8, -7) === "A" ? "B" : "A") + args.slice(-7)
      assert.notStrictEqual(tampered, args)
      yield* overwrite(reference.uri, tampered)
      server.enqueueActivityTask({ activityType: "text.echo", taskQueue: QUEUE, wireArguments: { codec: "avro", external_storage: reference } })
      yield* until(server, () => server.failedActivityTasks.length === 1)
      const failure = server.failedActivityTasks[0]!.failure
      assert.strictEqual(failure["type"], "ExternalPayloadIntegrityError")
      assert.strictEqual(failure["non_retryable"], true)
      assert.match(String(failure["message"]), /does not match its SHA-256/)
      assert.strictEqual(ran, 0, "the activity never ran on tampered input")
    }))
  it.scoped("end to end: arguments that cannot be fetched (object missing) fail the activity retryably", () =>
    Effect.gen(function*() {
      const { bucket, client } = yield* s3Server
      const { server } = yield* setup()
      const storage = Storage.s3({ bucket, client })
      let ran = 0
      const echo = DurableWorkflow.activity("text.echo", (text: string) => Effect.sync(() => (ran++, text)))
      yield* startWorker(server, { steps: [echo] }, { externalStorage: storage, externalStorageThresholdBytes: 100_000 })
      const reference = yield* Storage.store(storage, blob(["r".repeat(600)]), "avro")
      const missing = { ...reference, uri: reference.uri.replace(/[0-9a-f]{64}$/, "0".repeat(64)) }
      server.enqueueActivityTask({ activityType: "text.echo", taskQueue: QUEUE, wireArguments: { codec: "avro", external_storage: missing } })
      yield* until(server, () => server.failedActivityTasks.length === 1)
      const failure = server.failedActivityTasks[0]!.failure
      assert.strictEqual(failure["type"], "ExternalStorageError")
      assert.isUndefined(failure["non_retryable"], "a storage outage may pass: the server retries")
      assert.strictEqual(ran, 0)
    }))
})

describe("external storage drivers: filesystem and custom", () => {
  it.scoped("localFilesystem: round trip, tamper detection, a missing file is an ExternalStorageError", () =>
    Effect.gen(function*() {
      const root = fs.mkdtempSync(path.join(os.tmpdir(), "dw-external-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => fs.rmSync(root, { recursive: true, force: true })))
      const driver = Storage.localFilesystem(root)
      const payload = blob({ big: "b".repeat(300) })
      const reference = yield* Storage.store(driver, payload, "avro")
      assert.strictEqual(reference.uri, pathToFileURL(path.join(root, "avro", reference.sha256.slice(0, 2), reference.sha256)).href)
      assert.strictEqual(yield* Storage.retrieve(driver, reference), payload)
      fs.writeFileSync(new URL(reference.uri), "x" + payload.slice(1))
      assert.strictEqual((yield* Effect.flip(Storage.retrieve(driver, reference)))._tag, "ExternalPayloadIntegrityError")
      fs.rmSync(new URL(reference.uri))
      const missing = yield* Effect.flip(Storage.retrieve(driver, reference))
      assert.strictEqual(missing._tag, "ExternalStorageError")
      // a codec that would escape the root is refused
      for (const codec of ["../x", "..", ""]) {
        const escaped = yield* Effect.flip(driver.put(new Uint8Array([1]), { sha256: "a".repeat(64), codec }))
        assert.strictEqual(escaped._tag, "ExternalStorageError", codec)
      }
      const badDigest = yield* Effect.flip(driver.put(new Uint8Array([1]), { sha256: "../../etc", codec: "avro" }))
      assert.strictEqual(badDigest._tag, "ExternalStorageError")
    }))

  it.scoped("make: a promise driver (here an in-memory map) plugs in; rejections become ExternalStorageError", () =>
    Effect.gen(function*() {
      const objects = new Map<string, Uint8Array>()
      const driver = Storage.make({
        put: async (data, metadata) => {
          const uri = `mem://${Storage.objectKey(metadata)}`
          objects.set(uri, data)
          return { uri, expiresAt: "2030-01-01T00:00:00.000Z" }
        },
        get: async (reference) => {
          const data = objects.get(reference.uri)
          if (data === undefined) throw new Error("no such object")
          return data
        }
      })
      const reference = yield* Storage.store(driver, blob("hello"), "avro")
      assert.strictEqual(reference.expires_at, "2030-01-01T00:00:00.000Z")
      assert.match(reference.uri, /^mem:\/\/avro\/[0-9a-f]{2}\/[0-9a-f]{64}$/)
      assert.strictEqual(yield* Storage.retrieve(driver, reference), blob("hello"))
      const missing = yield* Effect.flip(Storage.retrieve(driver, { ...reference, uri: "mem://nothing" }))
      assert.strictEqual(missing._tag, "ExternalStorageError")
      assert.match(missing.message, /could not read external payload mem:\/\/nothing: no such object/)
    }))
})

describe("external storage through the promise facade", () => {
  it("durableWorkflow({ externalStorage: s3Storage(...) }) stores a large activity result in S3 and reads S3 arguments", async () => {
    const [server, s3] = await Promise.all([startServer(), startFauxqs()])
    const client = new S3Client({
      endpoint: s3.endpoint,
      region: "us-east-1",
      credentials: { accessKeyId: "test", secretAccessKey: "test" },
      forcePathStyle: true
    })
    try {
      await client.send(new CreateBucketCommand({ Bucket: "facade" }))
      const storage = s3Storage({ bucket: "facade", prefix: "p", client })
      const worker = new PromiseWorker({ handleSignals: false, logLevel: "None" })
      worker.activity("text.double", async (text: string) => text + text)
      const running = worker.run(durableWorkflow({
        baseUrl: server.url,
        token: server.tokens.worker!,
        taskQueue: "orders",
        externalStorage: storage,
        externalStorageThresholdBytes: 500
      }))
      const args = blob(["w".repeat(400)])
      const reference = await Effect.runPromise(Storage.store(storage, args, "avro"))
      server.enqueueActivityTask({ activityType: "text.double", taskQueue: "orders", wireArguments: { codec: "avro", external_storage: reference } })
      await server.waitUntil(() => server.completedActivityTasks.length === 1, 10_000)
      const result = server.completedActivityTasks[0]!.result as any
      const location = Storage.parseS3Uri(result["external_storage"]["uri"])!
      assert.strictEqual(location.bucket, "facade")
      assert.match(location.key, /^p\/avro\/[0-9a-f]{2}\/[0-9a-f]{64}$/)
      const stored = await client.send(new GetObjectCommand({ Bucket: location.bucket, Key: location.key }))
      const text = new TextDecoder().decode(await stored.Body!.transformToByteArray())
      assert.strictEqual(decoded({ codec: "avro", blob: text }), "w".repeat(800))
      await worker.stop()
      await running
    } finally {
      client.destroy()
      await Promise.all([server.stop(), s3.stop()])
    }
  })

  it("externalStorage({ put, get }) plugs a custom async store into the facade", async () => {
    const server = await startServer()
    const objects = new Map<string, Uint8Array>()
    try {
      const worker = new PromiseWorker({ handleSignals: false, logLevel: "None" })
      worker.activity("text.big", async (n: number) => "k".repeat(n))
      const running = worker.run(durableWorkflow({
        baseUrl: server.url,
        token: server.tokens.worker!,
        taskQueue: "orders",
        externalStorage: externalStorage({
          put: async (data, { sha256 }) => {
            objects.set(`kv://${sha256}`, data)
            return { uri: `kv://${sha256}` }
          },
          get: async (reference) => objects.get(reference.uri)!
        }),
        externalStorageThresholdBytes: 100
      }))
      server.enqueueActivityTask({ activityType: "text.big", taskQueue: "orders", input: [1000] })
      await server.waitUntil(() => server.completedActivityTasks.length === 1, 10_000)
      const reference = (server.completedActivityTasks[0]!.result as any)["external_storage"]
      const data = objects.get(reference["uri"])!
      assert.strictEqual(data.length, reference["size_bytes"])
      assert.strictEqual(decoded({ codec: "avro", blob: new TextDecoder().decode(data) }), "k".repeat(1000))
      await worker.stop()
      await running
    } finally {
      await server.stop()
    }
  })
})
