/**
 * SQS refusing the worker's credentials fails the start with the service's answer, named as an
 * authentication or a permission failure with what to check. fauxqs does not check credentials,
 * so the refusals come from a small HTTP server here that answers as AWS does (status, the
 * `x-amzn-query-error` header and the JSON error body); the errors the worker sees are the real
 * ones the AWS SDK builds from such answers.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import * as Step from "../../src/core/Step.js"
import * as Worker from "../../src/runtime/Worker.js"
import * as Refusals from "../../src/transport/internal/connectErrors.js"
import * as SqsTransport from "../../src/transport/SqsTransport.js"

const SECRET = "aws-secret-9d8c7b6a5f4e"

/** An endpoint answering every call with `status` and AWS error `code`. */
const refusingEndpoint = (status: number, code: string, message: string) =>
  Effect.acquireRelease(
    Effect.async<Server>((resume) => {
      const server = createServer((request, response) => {
        request.resume()
        request.on("end", () => {
          response.writeHead(status, {
            "content-type": "application/x-amz-json-1.0",
            "x-amzn-query-error": `${code};Sender`,
            "x-amzn-requestid": "00000000-0000-0000-0000-000000000000"
          })
          response.end(JSON.stringify({ __type: `com.amazonaws.sqs#${code}`, message }))
        })
      })
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed(server)))
    }),
    (server) =>
      Effect.async<void>((resume) => {
        server.close(() => resume(Effect.void))
      })
  ).pipe(Effect.map((server) => `http://127.0.0.1:${(server.address() as AddressInfo).port}`))

const failedStart = (endpoint: string) =>
  Effect.gen(function*() {
    const worker = yield* Worker.make({ steps: [Step.make("x", () => Effect.succeed(1))] })
    return yield* worker.run.pipe(
      Effect.provide(SqsTransport.layer({
        clientConfig: { endpoint, region: "us-east-1", credentials: { accessKeyId: "AKIDTEST", secretAccessKey: SECRET }, maxAttempts: 1 },
        prefix: "auth"
      })),
      Effect.flip
    ) as unknown as Effect.Effect<{ _tag: string; message: string; cause?: { _tag?: string } }>
  })

const cases: ReadonlyArray<readonly [number, string, string, "AuthenticationError" | "PermissionError"]> = [
  [403, "InvalidClientTokenId", "The security token included in the request is invalid.", "AuthenticationError"],
  [403, "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided.", "AuthenticationError"],
  [400, "UnrecognizedClientException", "The security token included in the request is invalid.", "AuthenticationError"],
  [403, "AccessDenied", "User: arn:aws:iam::1:user/w is not authorized to perform: sqs:getqueueurl", "PermissionError"]
]

describe("SQS transport: refused credentials", () => {
  for (const [status, code, message, tag] of cases) {
    it.scoped(`${code} (HTTP ${status}) fails the start as a ${tag}`, () =>
      Effect.gen(function*() {
        const endpoint = yield* refusingEndpoint(status, code, message)
        const error = yield* failedStart(endpoint)
        assert.strictEqual(error._tag, "RegistrationError")
        assert.strictEqual(error.cause?._tag, tag, error.message)
        assert.include(error.message, `${tag === "AuthenticationError" ? "authentication failed" : "permission denied"}: ${code}`)
        assert.match(error.message, tag === "AuthenticationError" ? /check AWS_ACCESS_KEY_ID \/ AWS_SECRET_ACCESS_KEY/ : /grant the credentials sqs:GetQueueUrl/)
        assert.notInclude(error.message, SECRET)
      }))
  }

  it("the mapping knows the AWS names of refused and missing credentials, and of denied operations", () => {
    for (const name of ["InvalidClientTokenId", "SignatureDoesNotMatch", "UnrecognizedClientException", "ExpiredToken", "CredentialsProviderError"]) {
      assert.strictEqual(Refusals.aws(Object.assign(new Error("x"), { name }))?.kind, "authentication", name)
    }
    for (const name of ["AccessDenied", "AccessDeniedException", "KMS.AccessDeniedException"]) {
      assert.strictEqual(Refusals.aws(Object.assign(new Error("x"), { name }))?.kind, "permission", name)
    }
    assert.isUndefined(Refusals.aws(Object.assign(new Error("x"), { name: "QueueDoesNotExist" })))
  })
})
