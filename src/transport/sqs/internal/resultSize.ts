/**
 * A step result SQS refuses for its size, and the failed result sent in its place.
 *
 * Sending such a result again cannot help, and leaving its task undeleted only makes the task come
 * back each visibility timeout and its handler run again, for ever, the run waiting on an answer
 * that never comes. So the step is answered with a failure that says why (not retryable: the same
 * output would be refused again), and its task deleted as for any answered task.
 *
 * @internal
 */
import { resultTooLarge, type StepResult } from "../../../wire/StepProtocol.js"

/**
 * How a result's send ended: sent, or refused by SQS for its size (`reason`: SQS's own code and
 * message). Any other failure is a `TransportError`, retried or reported as before.
 *
 * @internal
 */
export type Sent =
  | { readonly _tag: "Sent" }
  | { readonly _tag: "TooLarge"; readonly reason: string }

/** @internal */
export const SENT: Sent = { _tag: "Sent" }

/** @internal */
export const tooLarge = (reason: string): Sent => ({ _tag: "TooLarge", reason })


/**
 * The codes of SQS's refusals that are only ever for a size: a batch over the limit of a call,
 * refused as a whole (`BatchRequestTooLong`, an error class of its own in `@aws-sdk/client-sqs`; its
 * `Code` under the query-compatible protocol is `AWS.SimpleQueueService.BatchRequestTooLong`), and
 * `MessageTooLong`, which some compatible servers give.
 */
const SIZE_CODES: ReadonlySet<string> = new Set([
  "BatchRequestTooLong",
  "AWS.SimpleQueueService.BatchRequestTooLong",
  "MessageTooLong",
  "AWS.SimpleQueueService.MessageTooLong"
])

/**
 * The code of SQS's refusal of a message over its queue's `MaximumMessageSize` (a failed batch
 * entry's `Code`; as an error, its `name` is the query-compatible code): SQS has no code of its own
 * for that, and gives `InvalidParameterValue` for many other invalid values too.
 */
const INVALID_VALUE_CODES: ReadonlySet<string> = new Set(["InvalidParameterValue", "AWS.SimpleQueueService.InvalidParameterValue"])

/**
 * SQS's wording of a message over its queue's limit ("Message must be shorter than 262144 bytes", as
 * AWS and fauxqs word it): read only when the queue's limit could not be, to tell that
 * `InvalidParameterValue` from the others.
 */
const SIZE_WORDING = /must be shorter than|too long|longer than/i

/**
 * Whether a refusal with this code may be for a size, so that the size of what was refused (and the
 * queue's limit) should be looked at: a size code, or `InvalidParameterValue`.
 *
 * @internal
 */
export const maybeSizeRefusal = (code: string | undefined): boolean =>
  code !== undefined && (SIZE_CODES.has(code) || INVALID_VALUE_CODES.has(code))

/**
 * Whether a refusal with this code is told apart as a size refusal by the size of what was refused
 * against the queue's limit (`InvalidParameterValue`), so that the limit should be read.
 *
 * @internal
 */
export const measuredRefusal = (code: string | undefined): boolean => code !== undefined && INVALID_VALUE_CODES.has(code)

/**
 * Whether SQS refused a message for its size, from the code of its answer (a failed batch entry's
 * `Code`, or the `name` of a service error refusing the whole call) and, for the `InvalidParameterValue`
 * SQS gives a message over its queue's limit among other invalid values, the message's size as SQS
 * counts it (`bytes`: its body, its attributes' names, types and values) against the queue's
 * `MaximumMessageSize` (`limit`). Only when that limit could not be read is SQS's wording (`message`)
 * read instead. A throttling, a server error or a connection that failed is never one: those may
 * pass when sent again.
 *
 * @internal
 */
export const isSizeRefusal = (
  code: string | undefined,
  message: string | undefined,
  measured: { readonly bytes: number; readonly limit: number | undefined } = { bytes: 0, limit: undefined }
): boolean => {
  if (code === undefined) return false
  if (SIZE_CODES.has(code)) return true
  if (!INVALID_VALUE_CODES.has(code)) return false
  return measured.limit === undefined ? SIZE_WORDING.test(message ?? "") : measured.bytes > measured.limit
}

/**
 * What was refused: the result's JSON size in bytes, the results queue's limit when it could be
 * read (its `MaximumMessageSize`), and SQS's own words.
 *
 * @internal
 */
export interface Refusal {
  readonly bytes: number
  readonly limit: number | undefined
  readonly reason: string
}

/**
 * The failed result that answers a step whose result SQS refused for its size: same run, seq and
 * step, `retryable: false`, a message naming the size, the limit and what to do.
 *
 * @internal
 */
export const tooLargeResult = (result: StepResult, refusal: Refusal): StepResult => ({
  runId: result.runId,
  seq: result.seq,
  stepId: result.stepId,
  status: "failed",
  error: resultTooLarge(
    `the ${result.status} result of step ${result.stepId} is ${refusal.bytes} bytes of JSON, more than the ` +
      `SQS results queue takes${refusal.limit === undefined ? "" : ` (${refusal.limit} bytes, its MaximumMessageSize)`}; ` +
      `SQS refused it (${refusal.reason}). Keep large outputs in external storage (S3, a database) and return ` +
      "a reference to them"
  ),
  ...(result.startedAt === undefined ? {} : { startedAt: result.startedAt })
})
