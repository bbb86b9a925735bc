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


/** Error codes SQS (and compatible servers) give only for a message or a batch over its size limit. */
const SIZE_CODES: ReadonlySet<string> = new Set([
  "BatchRequestTooLong",
  "AWS.SimpleQueueService.BatchRequestTooLong",
  "MessageTooLong",
  "AWS.SimpleQueueService.MessageTooLong"
])

/** `InvalidParameterValue` covers much else; only its size wording ("Message must be shorter than 262144 bytes") counts. */
const SIZE_WORDING = /must be shorter than|too long|longer than/i

/**
 * Whether SQS refused a message for its size, from the code and message of its answer (a failed
 * batch entry, or a service error refusing the whole call). A throttling, a server error or a
 * connection that failed is never one: those may pass when sent again.
 *
 * @internal
 */
export const isSizeRefusal = (code: string | undefined, message: string | undefined): boolean => {
  if (code === undefined) return false
  if (SIZE_CODES.has(code)) return true
  return (code === "InvalidParameterValue" || code === "AWS.SimpleQueueService.InvalidParameterValue") &&
    SIZE_WORDING.test(message ?? "")
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
