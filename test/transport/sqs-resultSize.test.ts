/**
 * Which SQS refusals of a result are for its size (answered with a failure in its place) and which
 * are not (retried or reported as before), and the failure that replaces a refused result.
 */
import { assert, describe, it } from "@effect/vitest"
import { isSizeRefusal, tooLargeResult } from "../../src/transport/sqs/internal/resultSize.js"

describe("SQS result size refusals (pure)", () => {
  it("a batch or message over the size limit is a size refusal, as SQS and fauxqs word it", () => {
    assert.isTrue(isSizeRefusal("BatchRequestTooLong", "Batch requests cannot be longer than 1048576 bytes."))
    assert.isTrue(isSizeRefusal("AWS.SimpleQueueService.BatchRequestTooLong", undefined))
    assert.isTrue(isSizeRefusal("InvalidParameterValue", "One or more parameters are invalid. Reason: Message must be shorter than 262144 bytes."))
    assert.isTrue(isSizeRefusal("MessageTooLong", "Message too long"))
  })

  it("throttling, server errors, other invalid values and connection failures are not", () => {
    assert.isFalse(isSizeRefusal("RequestThrottled", "Request is throttled."))
    assert.isFalse(isSizeRefusal("ThrottlingException", "Rate exceeded"))
    assert.isFalse(isSizeRefusal("KMS.ThrottlingException", "too many requests"))
    assert.isFalse(isSizeRefusal("InternalError", "We encountered an internal error. Please try again."))
    assert.isFalse(isSizeRefusal("ServiceUnavailable", undefined))
    assert.isFalse(isSizeRefusal("InvalidParameterValue", "Value 5 for parameter DelaySeconds is invalid."))
    assert.isFalse(isSizeRefusal("InvalidMessageContents", "Invalid characters found."))
    assert.isFalse(isSizeRefusal(undefined, "socket hang up"))
    assert.isFalse(isSizeRefusal("TimeoutError", "Connection timed out after 1000 ms, too long"))
  })

  // SQS has no code of its own for a message over its queue's MaximumMessageSize: it gives
  // InvalidParameterValue, as for many other invalid values, so the size refused tells, not the wording
  it("an InvalidParameterValue is a size refusal when what was refused is over the queue's limit, whatever its wording", () => {
    const over = { bytes: 2_000, limit: 1_024 }
    const within = { bytes: 1_000, limit: 1_024 }
    assert.isTrue(isSizeRefusal("InvalidParameterValue", "Message body exceeds the queue's limit.", over))
    assert.isTrue(isSizeRefusal("AWS.SimpleQueueService.InvalidParameterValue", undefined, over))
    assert.isFalse(isSizeRefusal("InvalidParameterValue", "Message attribute name must be shorter than 256 characters.", within))
    assert.isFalse(isSizeRefusal("InvalidParameterValue", "One or more parameters are invalid. Reason: Message must be shorter than 1024 bytes.", within))
    // the codes that are only ever for a size need no measure; the others are never one, whatever the size
    assert.isTrue(isSizeRefusal("BatchRequestTooLong", "Batch requests cannot be longer than 1048576 bytes.", within))
    assert.isFalse(isSizeRefusal("InvalidMessageContents", "Invalid characters found.", over))
    assert.isFalse(isSizeRefusal("RequestThrottled", "Request is throttled.", over))
  })

  it("the wording is read only when the queue's limit could not be", () => {
    const unknownLimit = { bytes: 2_000, limit: undefined }
    assert.isTrue(isSizeRefusal("InvalidParameterValue", "One or more parameters are invalid. Reason: Message must be shorter than 1024 bytes.", unknownLimit))
    assert.isFalse(isSizeRefusal("InvalidParameterValue", "Value 5 for parameter DelaySeconds is invalid.", unknownLimit))
  })

  it("the replacing failure keeps the run, seq, step and start, is not retryable, and names size, limit and remedy", () => {
    const failed = tooLargeResult(
      { runId: "r", seq: 3, stepId: "r:3", status: "completed", output: "x".repeat(10), startedAt: 5, events: [] },
      { bytes: 2_000_000, limit: 1_048_576, reason: "BatchRequestTooLong: too big" }
    )
    assert.deepStrictEqual(failed, {
      runId: "r",
      seq: 3,
      stepId: "r:3",
      status: "failed",
      startedAt: 5,
      error: {
        code: "result_too_large",
        retryable: false,
        message: "the completed result of step r:3 is 2000000 bytes of JSON, more than the SQS results queue takes " +
          "(1048576 bytes, its MaximumMessageSize); SQS refused it (BatchRequestTooLong: too big). Keep large outputs " +
          "in external storage (S3, a database) and return a reference to them"
      }
    })
    const unknownLimit = tooLargeResult({ runId: "r", seq: 0, stepId: "r:0", status: "failed" }, { bytes: 9, limit: undefined, reason: "x" })
    assert.match(unknownLimit.error!.message, /^the failed result of step r:0 is 9 bytes of JSON, more than the SQS results queue takes; SQS refused it \(x\)/)
    assert.notProperty(unknownLimit, "startedAt")
  })
})
