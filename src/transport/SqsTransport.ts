/**
 * The Amazon SQS transport: consumes the queues the nestjs-durable engine's `SqsTransport` sends step
 * tasks to, and answers on its results queue. Works with SQS and SQS-compatible servers (ElasticMQ,
 * fauxqs) through `@aws-sdk/client-sqs` v3.
 *
 * - one subscription per routing token on `<prefix>-tasks-<token>` (`:` sanitised, `@partition`
 *   suffixed), resolved by name — or through `taskQueueUrl`, which replaces name lookup as it does
 *   engine-side. A name SQS would refuse (a `.` or `@` in the step name or partition) fails `run` at
 *   registration with an error naming the step and the rule: SQS has no such queue, so it is never
 *   silently polled;
 * - long polling (`WaitTimeSeconds` up to 20 s, capped by the worker's poll timeout) for up to
 *   `min(permits, 10)` messages; only the wait is interruptible;
 * - the result is sent to `<prefix>-results` (the optional marker attribute on it), **then** the task
 *   message is deleted — results and deletes ready at the same time share SQS batch calls; a task's
 *   visibility is extended while it runs or waits, and set to 0 when it is given back at shutdown;
 * - a result SQS refuses for its size (over the results queue's `MaximumMessageSize`, or the 1 MiB
 *   of a call) is replaced by a failed result saying so (`result_too_large`, not retryable), logged
 *   as an error, and the task deleted: sent again it would be refused again, and left undeleted the
 *   task would run again at every visibility timeout (`sqs/internal/resultSize.ts`);
 * - a poll stopped at shutdown leaves its receive running (SQS would keep serving an aborted long
 *   poll) and gives back whatever it brings, for up to a second before the client is closed;
 * - a message redelivered while its step still runs here is held, not run again (see `stepId`
 *   handling in `sqs/internal/inflight.ts`);
 * - with `marker`, a message without it is given back at once (visibility 0) to whoever shares the
 *   queue; after a receive that brought only such messages the poller waits (200 ms, doubling, at
 *   most 2 s: `sqs/internal/foreignBackoff.ts`), as such a message would otherwise come straight back;
 * - SQS has no worker registry: registration resolves (and with `autoCreate`, creates) the queues. A
 *   queue that does not exist yet is waited for (logged once, retried with a backoff of up to 5 s),
 *   so workers and engine start in any order; an endpoint that does not answer fails the start
 *   (after `connectTimeout`) unless `waitForBroker`; refused credentials fail it at once with an
 *   `AuthenticationError` / `PermissionError` cause. Deregistration sends nothing; there are no
 *   worker heartbeats and no cancel channel.
 *
 * @since 0.1.0
 */
import {
  ChangeMessageVisibilityCommand,
  CreateQueueCommand,
  DeleteMessageBatchCommand,
  GetQueueAttributesCommand,
  GetQueueUrlCommand,
  type Message,
  type MessageAttributeValue,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  SQSClient,
  type SQSClientConfig
} from "@aws-sdk/client-sqs"
import * as Config from "effect/Config"
import type * as ConfigError from "effect/ConfigError"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as FiberSet from "effect/FiberSet"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Predicate from "effect/Predicate"
import type * as Scope from "effect/Scope"
import { messageOf, withReason } from "../core/internal/errors.js"
import { optional, overRead } from "../core/internal/options.js"
import * as Refusals from "./internal/connectErrors.js"
import { namingVariables } from "./internal/options.js"
import { redact, redactUrl, safeCause } from "./internal/redact.js"
import { waitFor } from "./internal/startup.js"
import { isWorkflowTaskShape, type StepResult } from "../wire/StepProtocol.js"
import * as Batcher from "./internal/batcher.js"
import * as AnswerRetry from "./sqs/internal/answerRetry.js"
import * as DetachedReceives from "./sqs/internal/detachedReceives.js"
import * as ForeignBackoff from "./sqs/internal/foreignBackoff.js"
import * as ResultSize from "./sqs/internal/resultSize.js"
import * as Inflight from "./sqs/internal/inflight.js"
import * as SqsConfig from "./sqs/internal/config.js"
import type { SqsConfigError } from "./sqs/internal/config.js"
import * as Naming from "./sqs/internal/naming.js"
import { stepsOnly } from "./sqs/internal/protocol.js"
import * as Protocol from "../seam/Protocol.js"
import * as WorkerMetrics from "../seam/WorkerMetrics.js"
import {
  Delivery,
  Poller,
  Registration,
  RegistrationError,
  Transport,
  TransportError,
  type WorkerDescription
} from "../seam/Transport.js"
import type { SqsTransportOptions } from "./sqs/internal/options.js"

export type { SqsTransportOptions, TaskQueueUrl } from "./sqs/internal/options.js"

export { SqsConfigError } from "./sqs/internal/config.js"



/**
 * Options of the SQS transport. They are checked when the transport is built (see {@link make}): an
 * unknown key or a bad value fails with an {@link SqsConfigError} naming it.
 *
 * @since 0.1.0
 * @category models
 */
export interface SqsOptions extends SqsTransportOptions {
  /** An SQS client to use (not destroyed by the transport). Default: one built from `clientConfig`. */
  readonly client?: SQSClient | undefined
  /**
   * Used when `client` is omitted, e.g. `{ endpoint, region, credentials }`; the client is destroyed at
   * shutdown. Default `{}` (the SDK's own region and credential lookup).
   */
  readonly clientConfig?: SQSClientConfig | undefined
}

const NAME = "sqs"



const errorName = (error: unknown): string | undefined =>
  typeof error === "object" && error !== null && typeof (error as { name?: unknown }).name === "string"
    ? (error as { name: string }).name
    : undefined

const isMissingQueue = (error: unknown) => {
  const name = errorName(error)
  return name === "QueueDoesNotExist" || name === "AWS.SimpleQueueService.NonExistentQueue"
}

/**
 * A call that lost its connection or never got one (refused, reset, hung up, timed out), as opposed to
 * an answer SQS gave (a service error) or a call we aborted.
 */
const isConnectionFailure = (error: unknown): boolean => {
  for (let current = error, depth = 0; typeof current === "object" && current !== null && depth < 5; depth++) {
    if (AnswerRetry.isServiceError(current)) return false
    const { code, message, name } = current as { code?: unknown; message?: unknown; name?: unknown }
    if (name === "AbortError") return false
    if (typeof code === "string" && CONNECTION_CODES.has(code)) return true
    if (name === "TimeoutError" || (typeof message === "string" && /socket hang up|ECONNREFUSED|ECONNRESET|timed? ?out/i.test(message))) return true
    current = (current as { cause?: unknown }).cause
  }
  return false
}
const CONNECTION_CODES: ReadonlySet<string> = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "ETIMEDOUT",
  "ECONNABORTED",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN"
])

const NOT_INFLIGHT = new Set(["MessageNotInflight", "ReceiptHandleIsInvalid", "InvalidParameterValue"])

/** The receipt handle no longer designates an in-flight copy (it was deleted, or became visible again). */
const isNotInflight = (error: unknown) => NOT_INFLIGHT.has(errorName(error) ?? "")

/** SQS batch calls in flight at once, per kind of call. */
const BATCH_CALLS = 4

/** SQS's limit on the total size of a batch, in bytes (256 KiB, what every SQS-compatible server takes). */
const MAX_BATCH_BYTES = 262_144

/** The static credentials of the client settings, masked wherever a message might echo them. */
const secretsOf = (options: Pick<SqsConfig.Resolved, "clientConfig">): ReadonlyArray<string | undefined> => {
  const credentials = options.clientConfig.credentials
  if (typeof credentials !== "object" || credentials === null) return []
  const { secretAccessKey, sessionToken } = credentials as { secretAccessKey?: unknown; sessionToken?: unknown }
  return [secretAccessKey, sessionToken].filter((s): s is string => typeof s === "string")
}

const endpointOf = (options: Pick<SqsConfig.Resolved, "client" | "clientConfig">): string => {
  if (options.client !== undefined) return "the given SQSClient's endpoint"
  const endpoint = options.clientConfig.endpoint
  if (typeof endpoint === "string") return redactUrl(endpoint)
  if (typeof endpoint === "object" && endpoint !== null && "hostname" in endpoint) {
    const e = endpoint as { protocol?: string; hostname: string; port?: number; path?: string }
    return `${e.protocol ?? "https:"}//${e.hostname}${e.port === undefined ? "" : `:${e.port}`}${e.path ?? ""}`
  }
  const region = options.clientConfig.region
  return typeof region === "string" ? `AWS ${region}` : "AWS"
}

/** Reads a step task's `stepId`, when the payload is a step task that has one. */
const stepKey = (payload: unknown): string | undefined => {
  if (typeof payload !== "object" || payload === null || isWorkflowTaskShape(payload)) return undefined
  const stepId = (payload as { stepId?: unknown }).stepId
  return typeof stepId === "string" ? stepId : undefined
}

const parseBody = (body: string | undefined): unknown => {
  if (body === undefined) return undefined
  try {
    return JSON.parse(body)
  } catch {
    return body
  }
}

/**
 * Builds the transport service. Its options are checked first: an unknown key or a bad value fails
 * with an {@link SqsConfigError} naming the option. The client and queues are set up when the
 * worker registers.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: SqsOptions = {}): Effect.Effect<Transport["Type"], SqsConfigError> =>
  Effect.map(SqsConfig.resolve(options), build)

/** The transport over checked options. */
const build = (config: SqsConfig.Resolved): Transport["Type"] => {
  const { connectTimeout, marker, partition, prefix, visibility, waitTime } = config
  const endpoint = endpointOf(config)
  const name = `sqs ${endpoint} prefix ${prefix}`
  const protocol = stepsOnly(partition)
  const markerAttributes: Record<string, MessageAttributeValue> | undefined = marker === undefined
    ? undefined
    : { [marker]: { DataType: "String", StringValue: "1" } }

  const registrationError = (message: string, cause?: unknown) =>
    new RegistrationError({ transport: NAME, message, ...(cause === undefined ? {} : { cause }) })

  const register = (worker: WorkerDescription): Effect.Effect<Registration, RegistrationError, Scope.Scope> =>
    Effect.gen(function*() {
      yield* WorkerMetrics.connectionsLostFrom(NAME)
      const workflows = Protocol.names(worker.handlers.workflows)
      if (workflows.length > 0) {
        return yield* registrationError(
          `the SQS transport carries step tasks only (the engine's SqsTransport cannot dispatch workflow turns), ` +
            `so workflow(s) ${workflows.map((w) => `"${w}"`).join(", ")} would never run here; ` +
            "serve them from a worker on the BullMQ or SQL transport"
        )
      }

      // group → the step names routed to it
      const groups = new Map<string, Array<string>>()
      for (const step of Protocol.names(worker.handlers.steps)) {
        const group = Naming.token(step, partition)
        groups.set(group, [...(groups.get(group) ?? []), step])
      }
      const byName = config.taskQueueUrl === undefined
      if (byName) {
        const problems = Array.from(groups).flatMap(([group, steps]) => {
          const queue = Naming.tasksQueueName(prefix, group)
          const problem = Naming.queueNameProblem(queue)
          return problem === undefined ? [] : [
            `step ${steps.map((s) => `"${s}"`).join(", ")} is dispatched to queue "${queue}", which SQS refuses (${problem})`
          ]
        })
        if (problems.length > 0) {
          return yield* registrationError(
            `${problems.join("; ")}. ${Naming.QUEUE_NAME_RULE}, and the engine looks task queues up by that name. ` +
              "Use step names without such characters (e.g. payments-charge-card), " +
              "or map each group to an existing queue with taskQueueUrl (the engine must be given the same mapping)"
          )
        }
      }

      const client = config.client ?? (yield* Effect.acquireRelease(
        Effect.sync(() => new SQSClient(config.clientConfig)),
        (c) => Effect.sync(() => c.destroy())
      ))

      const secrets = secretsOf(config)
      /** Why resolving a queue failed: whether it is waited out is decided by `reason`. */
      type Failure = {
        readonly reason: "missing" | "unreachable" | "refused"
        readonly error: RegistrationError
        /** What makes a missing queue exist: said once in the wait's log line. */
        readonly remedy?: string | undefined
      }
      const failure = (reason: Failure["reason"], error: RegistrationError, remedy?: string): Failure => ({ reason, error, remedy })

      const unreachable = (cause: unknown, role: string): Failure => {
        const safe = safeCause(cause, secrets)
        const refusal = Refusals.aws(cause)
        if (refusal !== undefined) {
          const refused = Refusals.toError(
            NAME,
            { ...refusal, answer: redact(refusal.answer, secrets) },
            `SQS at ${endpoint}, resolving the queue for ${role},`,
            {
              authentication: "check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or the credentials in clientConfig, the " +
                "profile or role the SDK picks up), that the key is active and that the region is right",
              permission: "grant the credentials sqs:GetQueueUrl, sqs:GetQueueAttributes, sqs:ReceiveMessage, " +
                "sqs:SendMessage, sqs:DeleteMessage and sqs:ChangeMessageVisibility on the queues (sqs:CreateQueue with autoCreate)"
            },
            safe
          )
          return failure("refused", registrationError(refused.message, refused))
        }
        return AnswerRetry.isServiceError(cause)
          ? failure(
            "refused",
            registrationError(
              `SQS at ${endpoint} refused to resolve the queue for ${role}: ${errorName(cause)}: ${safe.message}; ` +
                "check the credentials and their SQS permissions (GetQueueUrl, GetQueueAttributes, CreateQueue with autoCreate)",
              safe
            )
          )
          : failure(
            "unreachable",
            registrationError(
              `could not reach SQS at ${endpoint} (${safe.message}); check that the endpoint is up and that ` +
                "SQS_ENDPOINT / AWS_REGION / the credentials (or the client options) point at it",
              safe
            )
          )
      }
      const missing = (queue: string, remedy: string, cause: unknown) =>
        failure("missing", registrationError(`queue ${queue} does not exist at ${endpoint}; ${remedy}`, safeCause(cause, secrets)), remedy)

      /** One attempt, cut at `connectTimeout`. */
      const bounded = <A>(attempt: Effect.Effect<A, Failure>, role: string) =>
        attempt.pipe(
          Effect.timeoutFail({
            duration: connectTimeout,
            onTimeout: () =>
              failure(
                "unreachable",
                registrationError(
                  `SQS at ${endpoint} did not answer within ${Duration.format(connectTimeout)} while resolving the queue for ${role}; ` +
                    "check that the endpoint is up and that SQS_ENDPOINT / AWS_REGION (or the client options) point at it"
                )
              )
          })
        )

      /**
       * Resolves a queue, waiting while it does not exist yet (and, with `waitForBroker`, while the
       * endpoint does not answer); `what` names it in the log.
       */
      const waitForQueue = <A>(attempt: Effect.Effect<A, Failure>, role: string, what: string) =>
        waitFor(
          bounded(attempt, role),
          (f) =>
            f.reason === "missing"
              ? `${what} to be created (${f.remedy})`
              : f.reason === "unreachable" && config.waitForBroker
              ? `SQS at ${endpoint} to answer`
              : undefined,
          // a missing queue's error says no more than the wait does
          { describe: (f) => f.reason === "missing" ? undefined : f.error.message }
        ).pipe(Effect.mapError((f) => f.error))

      const queueByName = (queueName: string, role: string) =>
        waitForQueue(
          Effect.tryPromise({
            try: (signal) => client.send(new GetQueueUrlCommand({ QueueName: queueName }), { abortSignal: signal }),
            catch: (cause) => cause
          }).pipe(
            Effect.catchIf(
              (cause) => isMissingQueue(cause) && config.autoCreate,
              () =>
                Effect.tryPromise({
                  try: (signal) => client.send(new CreateQueueCommand({ QueueName: queueName }), { abortSignal: signal }),
                  catch: (cause) => cause
                })
            ),
            Effect.flatMap((out) =>
              out.QueueUrl === undefined ? Effect.fail(new Error(`no QueueUrl for ${queueName}`)) : Effect.succeed(out.QueueUrl)
            ),
            Effect.mapError((cause) =>
              isMissingQueue(cause)
                ? missing(
                  `"${queueName}" for ${role}`,
                  "create it, let the engine create it (its autoCreate), or set autoCreate: true",
                  cause
                )
                : unreachable(cause, role)
            )
          ),
          role,
          `queue "${queueName}" at ${endpoint} for ${role}`
        )

      const queueByUrl = (resolve: () => string | PromiseLike<string>, role: string) =>
        Effect.tryPromise({ try: async () => resolve(), catch: (cause) => cause }).pipe(
          Effect.mapError((cause) =>
            registrationError(`the queue URL resolver for ${role} failed: ${redact(messageOf(cause), secrets)}`, safeCause(cause, secrets))
          ),
          Effect.flatMap((url) =>
            typeof url === "string" && url.length > 0
              ? Effect.succeed(url)
              : Effect.fail(registrationError(`the queue URL resolver for ${role} returned no URL`))
          ),
          Effect.tap((url) =>
            waitForQueue(
              Effect.tryPromise({
                try: (signal) =>
                  client.send(new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ["QueueArn"] }), {
                    abortSignal: signal
                  }),
                catch: (cause) => cause
              }).pipe(
                Effect.mapError((cause) =>
                  isMissingQueue(cause)
                    ? missing(`${url} for ${role}`, "queues given by URL are never created: create it or fix the mapping", cause)
                    : unreachable(cause, role)
                )
              ),
              role,
              `queue ${url} for ${role}`
            )
          )
        )

      const taskQueueUrl = config.taskQueueUrl
      const resolveTasks = (group: string, steps: ReadonlyArray<string>) => {
        const role = `the tasks of step ${steps.map((s) => `"${s}"`).join(", ")} (group "${group}")`
        if (taskQueueUrl === undefined) return queueByName(Naming.tasksQueueName(prefix, group), role)
        if (typeof taskQueueUrl === "function") return queueByUrl(() => taskQueueUrl(group), role)
        const url = taskQueueUrl[group]
        return url === undefined
          ? Effect.fail(
            registrationError(
              `taskQueueUrl has no entry for group "${group}" (step ${steps.map((s) => `"${s}"`).join(", ")}); ` +
                "add the group's queue URL to the mapping"
            )
          )
          : queueByUrl(() => url, role)
      }
      const resultsOption = config.resultsQueueUrl
      const resolveResults = resultsOption === undefined
        ? queueByName(Naming.resultsQueueName(prefix), "the results")
        : queueByUrl(typeof resultsOption === "string" ? () => resultsOption : resultsOption, "the results")

      const [resultsUrl, taskQueues] = yield* Effect.all([
        resolveResults,
        Effect.forEach(Array.from(groups), ([group, steps]) =>
          Effect.map(resolveTasks(group, steps), (url) => ({ group, url })), { concurrency: 8 })
      ], { concurrency: 2 })

      const inflight = Inflight.make()
      const waitSeconds = Naming.waitTimeSeconds(waitTime, worker.pollTimeout)

      const call = <A>(operation: string, run: (signal: AbortSignal) => Promise<A>) =>
        Effect.tryPromise({
          try: run,
          catch: (cause) => {
            if (isConnectionFailure(cause)) WorkerMetrics.connectionLost(NAME)
            return new TransportError({ transport: NAME, operation, message: `${operation} failed: ${messageOf(cause)}`, cause })
          }
        })

      const setVisibility = (copy: Inflight.Copy, seconds: number) =>
        call(
          `changing the visibility of message ${copy.messageId}`,
          (signal) =>
            client.send(
              new ChangeMessageVisibilityCommand({
                QueueUrl: copy.queueUrl,
                ReceiptHandle: copy.receiptHandle,
                VisibilityTimeout: seconds
              }),
              { abortSignal: signal }
            )
        )

      /** Deletes a message; a copy no longer in flight (already deleted, or back in the queue) counts as done. */
      const deleteCopy = yield* Batcher.make<Inflight.Copy, void, TransportError>({
        maxItems: Naming.MAX_RECEIVE,
        parallelism: BATCH_CALLS,
        run: (copies) =>
          Effect.gen(function*() {
            const outcomes: Array<Exit.Exit<void, TransportError>> = copies.map(() => Exit.void)
            const byQueue = new Map<string, Array<number>>()
            copies.forEach((copy, i) => byQueue.set(copy.queueUrl, [...(byQueue.get(copy.queueUrl) ?? []), i]))
            yield* Effect.forEach(byQueue, ([queueUrl, indexes]) =>
              call(
                "deleting messages",
                (signal) =>
                  client.send(
                    new DeleteMessageBatchCommand({
                      QueueUrl: queueUrl,
                      Entries: indexes.map((i) => ({ Id: String(i), ReceiptHandle: copies[i]!.receiptHandle }))
                    }),
                    { abortSignal: signal }
                  )
              ).pipe(Effect.map((out) => {
                for (const failed of out.Failed ?? []) {
                  if (NOT_INFLIGHT.has(failed.Code ?? "")) continue
                  const copy = copies[Number(failed.Id)]!
                  outcomes[Number(failed.Id)] = Exit.fail(
                    new TransportError({
                      transport: NAME,
                      operation: "deleting a message",
                      message: `deleting message ${copy.messageId} failed: ${failed.Code}: ${failed.Message ?? ""}`
                    })
                  )
                }
              })), { concurrency: "unbounded", discard: true })
            return outcomes
          })
      })

      /**
       * With `autoCreate`, a queue resolved by name that SQS says is gone (deleted while the worker
       * ran) is created again, so the next poll or the reply's retry finds it; `error` still fails
       * this call. Warned of once per queue; a create refused (AWS keeps a name for 60 s after a
       * delete) is tried again at the next failure.
       */
      const remade = new Set<string>()
      const remakeIfDeleted = (queueName: string | undefined) => (error: TransportError) =>
        queueName === undefined || !config.autoCreate || !isMissingQueue(error.cause)
          ? Effect.fail(error)
          : call(
            `creating queue "${queueName}" again`,
            (signal) => client.send(new CreateQueueCommand({ QueueName: queueName }), { abortSignal: signal })
          ).pipe(
            Effect.matchEffect({
              onFailure: (failed) => Effect.logDebug(`could not create queue "${queueName}" again yet: ${failed.message}`),
              onSuccess: () =>
                Effect.suspend(() => {
                  if (remade.has(queueName)) return Effect.void
                  remade.add(queueName)
                  return Effect.logWarning(
                    `queue "${queueName}" at ${endpoint} was deleted while the worker ran: created it again (autoCreate); ` +
                      "what it held when it was deleted is gone with it"
                  )
                })
            }),
            Effect.zipRight(Effect.fail(error))
          )
      // the results queue is made again only where it was resolved by name (not given by URL)
      const remakeResults = remakeIfDeleted(resultsOption === undefined ? Naming.resultsQueueName(prefix) : undefined)

      /**
       * The results queue's `MaximumMessageSize`, read when SQS refuses a result with the code it gives a
       * message over it (among others), and for the message of a refused result; undefined when unreadable.
       */
      const resultsLimit = call(
        "reading the results queue's MaximumMessageSize",
        (signal) =>
          client.send(new GetQueueAttributesCommand({ QueueUrl: resultsUrl, AttributeNames: ["MaximumMessageSize"] }), {
            abortSignal: signal
          })
      ).pipe(
        Effect.map((out) => Number(out.Attributes?.MaximumMessageSize)),
        Effect.map((limit) => Number.isFinite(limit) && limit > 0 ? limit : undefined),
        Effect.orElseSucceed(() => undefined)
      )

      /** The results queue's limit, read only when one of `codes` is a refusal told apart by the size refused. */
      const limitFor = (codes: ReadonlyArray<string | undefined>) =>
        codes.some((code) => ResultSize.measuredRefusal(code)) ? resultsLimit : Effect.succeed(undefined)

      /** A result's size as SQS counts it against the queue's limit: its body, and the marker attribute's name, type and value. */
      const messageSize = (body: string) => Buffer.byteLength(body) + (marker === undefined ? 0 : marker.length + 7)

      /**
       * Sends a result to the results queue (with the marker, if any). A result SQS refuses for its
       * size ends as `TooLarge` rather than as an error: sending it again cannot help (see
       * sqs/internal/resultSize.ts).
       */
      const sendResult = yield* Batcher.make<string, ResultSize.Sent, TransportError>({
        maxItems: Naming.MAX_RECEIVE,
        parallelism: BATCH_CALLS,
        size: messageSize,
        maxSize: MAX_BATCH_BYTES,
        run: (bodies) =>
          call(
            "sending results",
            (signal) =>
              client.send(
                new SendMessageBatchCommand({
                  QueueUrl: resultsUrl,
                  Entries: bodies.map((body, i) => ({
                    Id: String(i),
                    MessageBody: body,
                    ...(markerAttributes === undefined ? {} : { MessageAttributes: markerAttributes })
                  }))
                }),
                { abortSignal: signal }
              )
          ).pipe(
            Effect.catchAll(remakeResults),
            Effect.flatMap((out) => {
              const refused = (out.Failed ?? []).filter((failed) => failed.SenderFault !== false)
              // the queue's limit is read only when SQS gave the refusal it gives a message over it (among others)
              return Effect.map(limitFor(refused.map((failed) => failed.Code)), (limit) => {
                const outcomes: Array<Exit.Exit<ResultSize.Sent, TransportError>> = bodies.map(() => Exit.succeed(ResultSize.SENT))
                for (const failed of out.Failed ?? []) {
                  const reason = `${failed.Code}: ${failed.Message ?? ""}`
                  const body = bodies[Number(failed.Id)] ?? ""
                  outcomes[Number(failed.Id)] = failed.SenderFault !== false &&
                      ResultSize.isSizeRefusal(failed.Code, failed.Message, { bytes: messageSize(body), limit })
                    ? Exit.succeed(ResultSize.tooLarge(reason))
                    : Exit.fail(
                      new TransportError({
                        transport: NAME,
                        operation: "sending a result",
                        message: `sending a result failed: ${reason}`
                      })
                    )
                }
                return outcomes
              })
            }),
            // a call refused as a whole for its size: sent alone, the result itself is too large (the
            // batcher sends the items of a larger batch refused as a whole one by one)
            Effect.catchAll((error) => {
              const code = errorName(error.cause)
              if (bodies.length !== 1 || !AnswerRetry.isServiceError(error.cause) || !ResultSize.maybeSizeRefusal(code)) {
                return Effect.fail(error)
              }
              return Effect.flatMap(limitFor([code]), (limit) =>
                ResultSize.isSizeRefusal(code, messageOf(error.cause), { bytes: messageSize(bodies[0]!), limit })
                  ? Effect.succeed([Exit.succeed(ResultSize.tooLarge(`${code}: ${messageOf(error.cause)}`))])
                  : Effect.fail(error))
            })
          )
      })

      /**
       * Answers a step whose result SQS refused for its size with a failed result saying so (not
       * retryable), so that its task can be deleted rather than run again at every visibility lapse.
       */
      const answerTooLarge = (deliveryId: string, result: StepResult, body: string, reason: string) =>
        Effect.gen(function*() {
          const failed = ResultSize.tooLargeResult(result, { bytes: Buffer.byteLength(body), limit: yield* resultsLimit, reason })
          yield* Effect.logError(
            `${failed.error!.message}. The step is answered with that failure (code ${failed.error!.code}, ` +
              "not retryable) and its task deleted: sent again, the result would be refused again, and the task " +
              "would come back and run again at every visibility timeout"
          ).pipe(Effect.annotateLogs("delivery", deliveryId))
          const sent = yield* untilAnswered(sendResult(JSON.stringify(failed)))
          if (sent._tag === "TooLarge") {
            return yield* new TransportError({
              transport: NAME,
              operation: "sending a result",
              message: `SQS refused for its size even the failure that replaces step ${result.stepId}'s result: ${sent.reason}`
            })
          }
        })

      /**
       * Extends every held copy; copies that are no longer in flight are dropped, and losing all of
       * them fails. A refusal drops a copy only while it still has the receipt handle the refused call
       * was sent with: the same message received here again meanwhile (see `Inflight.admit`) holds a
       * new handle, live and not yet extended by anyone, and dropping it would leave it out of the
       * final delete, so it would come back and run a second time.
       */
      const extend = (held: Inflight.Held) =>
        Effect.gen(function*() {
          const lost: Array<{ readonly copy: Inflight.Copy; readonly receiptHandle: string }> = []
          yield* Effect.forEach(held.copies, (copy) => {
            const sent: Inflight.Copy = { ...copy }
            return setVisibility(sent, visibility.timeoutSeconds).pipe(
              Effect.catchIf(
                (error) => isNotInflight(error.cause),
                () => Effect.sync(() => lost.push({ copy, receiptHandle: sent.receiptHandle }))
              )
            )
          }, { concurrency: "unbounded", discard: true })
          // read now, not when the call failed: a redelivery may have come in while other calls ran
          const gone = lost.filter(({ copy, receiptHandle }) => copy.receiptHandle === receiptHandle)
          if (gone.length === 0) return
          held.copies = held.copies.filter((copy) => !gone.some((g) => g.copy === copy))
          if (held.copies.length === 0) {
            return yield* new TransportError({
              transport: NAME,
              operation: "extend visibility",
              message: `message ${gone[0]!.copy.messageId} is no longer in flight (its visibility lapsed); ` +
                "another worker may run it too, the engine keeps the first result",
              fatal: true
            })
          }
        })

      // a send or delete that reached no endpoint is tried again, for up to a third of the visibility
      // timeout (see sqs/internal/answerRetry.ts)
      const untilAnswered = AnswerRetry.untilAnswered(visibility.timeoutSeconds)

      const settle = (held: Inflight.Held, effect: Effect.Effect<void, TransportError>) =>
        Effect.ensuring(effect, Effect.sync(() => inflight.release(held)))

      const toDelivery = (queueName: string, copy: Inflight.Copy, payload: unknown, held: Inflight.Held): Delivery<StepResult> => {
        let resultSent = false
        const deleteAll = Effect.suspend(() =>
          Effect.forEach(held.copies, deleteCopy, { concurrency: "unbounded", discard: true })
        )
        // SQS has no control channel: a cancelled run's step runs to its end, and the engine drops its result
        return Delivery.make({
          id: `${queueName}#${copy.messageId}`,
          payload,
          protocol,
          keepAlive: Option.some({ interval: visibility.extendEvery, renew: extend(held) }),
          complete: (result) =>
            settle(
              held,
              Effect.gen(function*() {
                held.answering = true
                // a retried complete (the delete failed) does not send the result twice
                if (resultSent) return yield* untilAnswered(deleteAll)
                const body = JSON.stringify(result)
                const sent = yield* untilAnswered(sendResult(body))
                if (sent._tag === "TooLarge") yield* answerTooLarge(`${queueName}#${copy.messageId}`, result, body, sent.reason)
                resultSent = true
                // the result is sent: now the task and any duplicate held with it can go
                yield* untilAnswered(deleteAll)
              })
            ),
          reject: () => settle(held, deleteAll),
          abandon: settle(
            held,
            Effect.suspend(() =>
              Effect.forEach(
                held.copies,
                (c) => setVisibility(c, 0).pipe(Effect.catchIf((error) => isNotInflight(error.cause), () => Effect.void)),
                { concurrency: "unbounded", discard: true }
              )
            )
          )
        })
      }

      const receive = (queueUrl: string, queueName: string, max: number, wait: number) =>
        call(
          `receiving from ${queueName}`,
          (signal) =>
            client.send(
              new ReceiveMessageCommand({
                QueueUrl: queueUrl,
                MaxNumberOfMessages: max,
                WaitTimeSeconds: wait,
                VisibilityTimeout: visibility.timeoutSeconds,
                ...(marker === undefined ? {} : { MessageAttributeNames: ["All"] })
              }),
              { abortSignal: signal }
            )
        ).pipe(
          Effect.catchAll(remakeIfDeleted(byName ? queueName : undefined)),
          Effect.map((out) => out.Messages ?? [])
        )

      /** Gives received messages back at once (visibility 0). */
      const release = (queueUrl: string, messages: ReadonlyArray<Message>) =>
        Effect.forEach(messages, (message) =>
          message.ReceiptHandle === undefined || message.MessageId === undefined
            ? Effect.void
            : setVisibility({ queueUrl, messageId: message.MessageId, receiptHandle: message.ReceiptHandle }, 0).pipe(
              Effect.catchAll((error) => Effect.logWarning(withReason(`could not give message ${message.MessageId} back`, error)))
            ), { concurrency: "unbounded", discard: true })

      // Receives run detached from the poll that started them. SQS keeps serving a long poll whose
      // connection was closed, so aborting one at shutdown would let it swallow the next message (our
      // own abandoned tasks included) until its visibility lapsed: another worker, idle beside it,
      // would not see that task for the whole visibility timeout. An interrupted poll instead leaves
      // its receive running to the end of its wait, and whatever it brings is given back at once.
      // Shutdown waits for them (they run alongside the drain), for as long as the worker's one
      // shutdown deadline allows, counted from the stop of the polls; past it, or past the wait
      // time and a margin, they are aborted.
      const receives = yield* FiberSet.make<void>()
      let pollsStoppedAt: number | undefined
      // the worker's deadline (its default where a description made by hand has none)
      const shutdownMillis = Duration.toMillis(worker.shutdownTimeout ?? Duration.seconds(30))
      yield* Effect.addFinalizer(() =>
        Effect.suspend(() => DetachedReceives.awaitDetachedReceives(Array.from(receives), { waitSeconds, shutdownMillis, pollsStoppedAt }))
      )
      const receiveDetached = (queueUrl: string, queueName: string, max: number, wait: number) =>
        Effect.gen(function*() {
          const outcome = yield* Deferred.make<ReadonlyArray<Message>, TransportError>()
          let orphaned = false
          yield* FiberSet.run(
            receives,
            // forked from the uninterruptible poll: only the receive itself may be cut short (at the grace)
            Effect.flatMap(Effect.exit(Effect.interruptible(receive(queueUrl, queueName, max, wait))), (exit) =>
              Effect.suspend(() =>
                !orphaned
                  ? Deferred.done(outcome, exit)
                  : Exit.isSuccess(exit)
                  ? release(queueUrl, exit.value)
                  : Effect.void
              ))
          )
          return yield* Deferred.await(outcome).pipe(
            Effect.interruptible,
            Effect.onInterrupt(() =>
              Effect.flatMap(Clock.currentTimeMillis, (now) => {
                orphaned = true
                pollsStoppedAt ??= now
                return Effect.flatMap(Deferred.poll(outcome), (done) =>
                  Option.isNone(done)
                    ? Effect.void
                    : Effect.flatMap(Effect.orElseSucceed(done.value, () => []), (messages) => release(queueUrl, messages)))
              })
            )
          )
        })

      /** A message without the marker (when one is set): someone else's, on a queue shared with them. */
      const isForeign = (message: Message) => marker !== undefined && message.MessageAttributes?.[marker] === undefined

      /** Turns a received message into a delivery, or holds / releases it. */
      const accept = (queueUrl: string, queueName: string, message: Message) =>
        Effect.gen(function*() {
          if (message.ReceiptHandle === undefined || message.MessageId === undefined) return undefined
          const copy: Inflight.Copy = {
            queueUrl,
            messageId: message.MessageId,
            receiptHandle: message.ReceiptHandle
          }
          if (isForeign(message)) {
            // not a durable message: leave it to whoever shares the queue
            yield* release(queueUrl, [message])
            return undefined
          }
          const payload = parseBody(message.Body)
          const admission = inflight.admit(stepKey(payload), copy)
          if (admission._tag === "Duplicate") {
            yield* Effect.logInfo(
              admission.sameMessage
                ? `message ${copy.messageId} came back while its step still runs here; keeping it until that run answers`
                : `message ${copy.messageId} is another task for step ${admission.held.key}, which still runs here; ` +
                  "holding it until that run answers, then deleting it"
            )
            return undefined
          }
          return toDelivery(queueName, copy, payload, admission.held)
        })

      const pollers: Array<Poller> = yield* Effect.forEach(taskQueues, ({ group, url }) => Effect.gen(function*() {
        const queueName = byName ? Naming.tasksQueueName(prefix, group) : url
        const foreignBackoff = yield* ForeignBackoff.make
        return Poller.make({
          name: `queue ${queueName}`,
          pool: protocol.pools.step,
          poll: (max, after) =>
            Effect.gen(function*() {
              if (max < 1) return []
              // after a failed poll, no wait: a long poll on an idle queue would answer only at its end
              const retrying = after?.failure === true
              const messages = yield* receiveDetached(url, queueName, Math.min(max, Naming.MAX_RECEIVE), retrying ? 0 : waitSeconds)
              if (messages.length === 0) {
                yield* foreignBackoff.reset
                // a short poll (poll timeout under a second) waits out the poll timeout, not the broker
                if (waitSeconds === 0 && !retrying) yield* Effect.interruptible(Effect.sleep(worker.pollTimeout))
                return []
              }
              const deliveries: Array<Delivery> = []
              for (const message of messages) {
                const delivery = yield* accept(url, queueName, message)
                if (delivery !== undefined) deliveries.push(delivery)
              }
              if (deliveries.length > 0) {
                yield* foreignBackoff.reset
              } else if (messages.some(isForeign)) {
                // what was given back is visible again at once, so the next receive would bring it
                // straight back: wait first (see sqs/internal/foreignBackoff.ts)
                yield* Effect.interruptible(foreignBackoff.wait)
              }
              return deliveries
            })
        })
      }))

      return Registration.make({ pollers })
    })

  return { name, protocol, register }
}

/**
 * The transport as a layer; building it fails with an {@link SqsConfigError} when an option is
 * unknown or invalid, before any request is sent.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: SqsOptions = {}): Layer.Layer<Transport, SqsConfigError> => Layer.effect(Transport, make(options))

/** The variables {@link layerConfig} reads, by the option each gives (a refusal names its variable). */
const VARIABLES = {
  "clientConfig.endpoint": "SQS_ENDPOINT",
  prefix: "DURABLE_PREFIX",
  partition: "DURABLE_PARTITION",
  marker: "SQS_MARKER",
  resultsQueueUrl: "SQS_RESULTS_QUEUE_URL"
} as const

/**
 * The transport configured from the environment: `SQS_ENDPOINT` (a local server such as
 * `http://127.0.0.1:4566`; AWS itself when unset), `AWS_REGION` (default `us-east-1` with an endpoint,
 * otherwise the SDK's own lookup), `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` / `AWS_SESSION_TOKEN`
 * (read as `Redacted`; otherwise the SDK's credential chain), `DURABLE_PREFIX` (default `durable`), `DURABLE_PARTITION`, `SQS_AUTO_CREATE`
 * (default false), `SQS_MARKER`, `SQS_RESULTS_QUEUE_URL`. Explicit options win over the environment;
 * the result is checked as {@link layer} checks its options.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (options: SqsOptions = {}): Layer.Layer<Transport, ConfigError.ConfigError | SqsConfigError> =>
  Layer.effect(
    Transport,
    Effect.flatMap(
      Config.all({
        endpoint: optional(Config.string("SQS_ENDPOINT")),
        region: optional(Config.string("AWS_REGION")),
        accessKeyId: optional(Config.redacted("AWS_ACCESS_KEY_ID")),
        secretAccessKey: optional(Config.redacted("AWS_SECRET_ACCESS_KEY")),
        sessionToken: optional(Config.redacted("AWS_SESSION_TOKEN")),
        prefix: optional(Config.string(VARIABLES.prefix)),
        partition: optional(Config.string(VARIABLES.partition)),
        autoCreate: Config.boolean("SQS_AUTO_CREATE").pipe(Config.withDefault(false)),
        marker: optional(Config.string(VARIABLES.marker)),
        resultsQueueUrl: optional(Config.string(VARIABLES.resultsQueueUrl))
      }),
      ({ accessKeyId, endpoint, region, secretAccessKey, sessionToken, ...env }) =>
        make(overRead({
          clientConfig: SqsConfig.clientConfigOf({
            endpoint,
            region,
            accessKeyId: SqsConfig.environmentKey(accessKeyId),
            secretAccessKey: SqsConfig.environmentKey(secretAccessKey),
            sessionToken: SqsConfig.environmentKey(sessionToken)
          }),
          ...env
        }, options)).pipe(
          Effect.mapError(namingVariables(
            VARIABLES,
            { ...env, "clientConfig.endpoint": endpoint },
            // a clientConfig given in code replaces the one read, endpoint and all
            Predicate.isRecord(options) ? { ...options, "clientConfig.endpoint": options.clientConfig } : {},
            (option, message) => new SqsConfig.SqsConfigError({ option, message })
          ))
        )
    )
  )

