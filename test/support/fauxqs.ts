/**
 * The `fauxqs` SQS-compatible server (npm, pinned 1.9.2), started by the tests themselves on
 * 127.0.0.1 with an OS-assigned port, and stopped with them. `startFauxqs()` from the package binds
 * 0.0.0.0, so the server is built with `buildApp` and bound to loopback here.
 *
 * Use it as plain async functions ({@link startFauxqs}), a `beforeAll`/`afterAll` pair
 * ({@link useFauxqs}) or a scoped Effect resource ({@link fauxqs}).
 */
import { GetQueueAttributesCommand, GetQueueUrlCommand, SQSClient, type SQSClientConfig } from "@aws-sdk/client-sqs"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import { buildApp } from "fauxqs"
import { randomUUID } from "node:crypto"
import { afterAll, beforeAll } from "vitest"

/** A message as fauxqs keeps it (from its inspection endpoint). */
export interface InspectedMessage {
  readonly messageId: string
  readonly body: string
  readonly approximateReceiveCount: number
}

/** A queue's messages by state, read without receiving them. */
export interface QueueSnapshot {
  readonly ready: ReadonlyArray<InspectedMessage>
  readonly delayed: ReadonlyArray<InspectedMessage>
  readonly inflight: ReadonlyArray<{
    readonly message: InspectedMessage
    readonly receiptHandle: string
    readonly visibilityDeadline: number
  }>
}

/** A running fauxqs server. */
export interface Fauxqs {
  /** `http://127.0.0.1:<port>` */
  readonly endpoint: string
  readonly port: number
  /** Client settings for this server (region `us-east-1`, dummy credentials). */
  readonly clientConfig: SQSClientConfig
  /** A client for the test itself (sending, inspecting); destroyed by {@link Fauxqs.stop}. */
  readonly client: SQSClient
  /** A queue's URL by name. */
  readonly queueUrl: (name: string) => Promise<string>
  /** A queue's messages by state, or undefined when it does not exist. */
  readonly inspect: (name: string) => Promise<QueueSnapshot | undefined>
  /** `ApproximateNumberOfMessages` + `ApproximateNumberOfMessagesNotVisible`. */
  readonly counts: (name: string) => Promise<{ readonly visible: number; readonly inFlight: number }>
  readonly stop: () => Promise<void>
}

/** One SQS call a {@link recordingClient} made: the command's name and input, when it was sent. */
export interface RecordedCall {
  readonly command: string
  readonly input: Record<string, unknown>
}

/**
 * A real client for `server` that records every command it sends (name and input) before sending it,
 * and calls `onCall` with each one; what the server answers is untouched.
 */
export const recordingClient = (
  server: Fauxqs,
  onCall: (call: RecordedCall) => void = () => {}
): { readonly client: SQSClient; readonly calls: Array<RecordedCall> } => {
  const client = new SQSClient(server.clientConfig)
  const calls: Array<RecordedCall> = []
  client.middlewareStack.add(
    (next, context) => (args) => {
      const call = { command: String(context.commandName), input: args.input as Record<string, unknown> }
      calls.push(call)
      onCall(call)
      return next(args)
    },
    { step: "initialize", name: "recordCalls" }
  )
  return { client, calls }
}

/** A fresh queue-name prefix (`<label>-<12 hex>`, valid in SQS names) so tests never share queues. */
export const sqsPrefix = (label = "edw"): string => `${label}-${randomUUID().replaceAll("-", "").slice(0, 12)}`

/** Starts fauxqs on 127.0.0.1 and an OS-assigned port. */
export const startFauxqs = async (): Promise<Fauxqs> => {
  const app = buildApp({ logger: false })
  await app.listen({ port: 0, host: "127.0.0.1" })
  const address = app.server.address()
  if (typeof address !== "object" || address === null) throw new Error("fauxqs did not report its port")
  const port = address.port
  const endpoint = `http://127.0.0.1:${port}`
  const clientConfig: SQSClientConfig = {
    endpoint,
    region: "us-east-1",
    credentials: { accessKeyId: "test", secretAccessKey: "test" }
  }
  const client = new SQSClient(clientConfig)
  return {
    endpoint,
    port,
    clientConfig,
    client,
    queueUrl: async (name) => (await client.send(new GetQueueUrlCommand({ QueueName: name }))).QueueUrl!,
    inspect: async (name) => {
      const response = await fetch(`${endpoint}/_fauxqs/queues/${encodeURIComponent(name)}`)
      if (response.status === 404) return undefined
      const body = await response.json() as { messages: QueueSnapshot }
      return body.messages
    },
    counts: async (name) => {
      const url = (await client.send(new GetQueueUrlCommand({ QueueName: name }))).QueueUrl!
      const out = await client.send(
        new GetQueueAttributesCommand({
          QueueUrl: url,
          AttributeNames: ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        })
      )
      return {
        visible: Number(out.Attributes?.ApproximateNumberOfMessages ?? 0),
        inFlight: Number(out.Attributes?.ApproximateNumberOfMessagesNotVisible ?? 0)
      }
    },
    stop: async () => {
      client.destroy()
      await app.close()
    }
  }
}

/** A fauxqs server for the enclosing `describe` (or file): started in `beforeAll`, stopped in `afterAll`. */
export const useFauxqs = (): () => Fauxqs => {
  let server: Fauxqs | undefined
  beforeAll(async () => {
    server = await startFauxqs()
  })
  afterAll(async () => {
    await server?.stop()
  })
  return () => {
    if (server === undefined) throw new Error("fauxqs is not started yet (use it inside a test)")
    return server
  }
}

/** A fauxqs server as a scoped resource. */
export const fauxqs: Effect.Effect<Fauxqs, never, Scope.Scope> = Effect.acquireRelease(
  Effect.promise(startFauxqs),
  (server) => Effect.promise(server.stop)
)
