import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as Codec from "../../src/wire/DurableWorkflowCodec.js"
import { crc64Avro } from "../../src/wire/internal/avro/fingerprint.js"
import { parsingCanonicalForm } from "../../src/wire/internal/avro/schema.js"

const fixtures = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "fixtures", "durable-workflow")
const readText = (...segments: Array<string>): string => fs.readFileSync(path.join(fixtures, ...segments), "utf8")
const readJson = (...segments: Array<string>): any => JSON.parse(readText(...segments))

const golden = readJson("avro-value-v1-golden.json")
const bytes = (...values: Array<number>): Uint8Array => Uint8Array.from(values)
const utf8 = (text: string): Uint8Array => new TextEncoder().encode(text)
const header = Uint8Array.from(Buffer.from("c301e2a33dff55802237", "hex"))
const frame = (...datum: Array<number>): Uint8Array => {
  const out = new Uint8Array(header.length + datum.length)
  out.set(header)
  out.set(datum, header.length)
  return out
}

const encodeBlobOk = (value: unknown): string => Either.getOrThrowWith(Codec.encodeBlob(value), (e) => e)
const decodeBlobOk = (blob: string, options?: Codec.DecodeOptions): Codec.Value =>
  Either.getOrThrowWith(Codec.decodeBlob(blob, options), (e) => e)
const encodeError = (value: unknown): Codec.PayloadEncodeError => {
  const result = Codec.encode(value)
  assert.isTrue(Either.isLeft(result), `expected encoding to fail`)
  return (result as Either.Left<Codec.PayloadEncodeError, Uint8Array>).left
}
const decodeError = (result: Either.Either<Codec.Value, Codec.PayloadDecodeError>): Codec.PayloadDecodeError => {
  assert.isTrue(Either.isLeft(result), `expected decoding to fail`)
  return (result as Either.Left<Codec.PayloadDecodeError, Codec.Value>).left
}

/** The JS value each golden case stands for, under this library's number policy. */
const goldenValues: Record<string, unknown> = {
  null: null,
  boolean_false: false,
  boolean_true: true,
  long_min: -(2n ** 63n),
  long_max: 2n ** 63n - 1n,
  long_7: 7,
  double_7: Codec.double(7),
  negative_zero: -0,
  bytes_00ff: bytes(0x00, 0xff),
  string_utf8: "héllo",
  array: [null, true, 7, Codec.double(7), bytes(0x00, 0xff), "text"],
  map: { a: 1, b: [false] },
  map_empty: {},
  map_key_0: { "0": "zero" },
  map_keys_0_1: { "0": "zero", "1": "one" },
  nested: { items: [{ enabled: true }, utf8("bytes"), -2.5] }
}

describe("DurableWorkflowCodec", () => {
  describe("schema and fingerprint", () => {
    it("embeds exactly the published schema", () => {
      assert.deepStrictEqual(JSON.parse(Codec.schemaJson), readJson("durable_workflow.protocol.Value.v1.avsc"))
      assert.strictEqual(Codec.schemaName, golden.schema)
    })

    it("computes CRC-64-AVRO like the Avro specification's reference values", () => {
      assert.strictEqual(crc64Avro(utf8(`"int"`)), 8247732601305521295n)
      assert.strictEqual(crc64Avro(utf8(`"null"`)), 7195948357588979594n)
    })

    it("fingerprints the canonical form of the fixture schema as e2a33dff55802237", () => {
      const canonical = parsingCanonicalForm(readJson("durable_workflow.protocol.Value.v1.avsc"))
      assert.strictEqual(canonical, Codec.schemaCanonicalForm)
      assert.isFalse(/\s/.test(canonical.replace(/"[^"]*"/g, "")))
      assert.include(canonical, `"items":"durable_workflow.protocol.Value"`)
      const fp = crc64Avro(utf8(canonical))
      const wire = Buffer.alloc(8)
      wire.writeBigUInt64LE(fp)
      assert.strictEqual(wire.toString("hex"), "e2a33dff55802237")
      assert.strictEqual(Codec.fingerprint, golden.fingerprint)
      assert.strictEqual(Buffer.from(Codec.singleObjectMagic).toString("hex"), golden.magic_hex)
    })
  })

  describe("golden value cases", () => {
    it("has an expected JS value for every golden case", () => {
      assert.deepStrictEqual(
        golden.cases.map((c: any) => c.name).sort(),
        Object.keys(goldenValues).sort()
      )
    })

    for (const testCase of golden.cases as Array<any>) {
      it(`${testCase.name}: encodes byte-exactly and decodes back`, () => {
        const expected = goldenValues[testCase.name]
        // Where the fixture states the value, it agrees with ours.
        if (testCase.kind === "long") assert.strictEqual(BigInt(expected as number | bigint), BigInt(testCase.value))
        if (testCase.kind === "double") assert.isTrue(Object.is(Number(expected), Number(testCase.value)))
        if (testCase.kind === "boolean" || testCase.kind === "string") assert.strictEqual(expected, testCase.value)
        if (testCase.kind === "bytes") {
          assert.deepStrictEqual(expected, Uint8Array.from(Buffer.from(testCase.value_base64, "base64")))
        }

        assert.strictEqual(encodeBlobOk(expected), testCase.wire_base64)
        const decoded = decodeBlobOk(testCase.wire_base64)
        assert.deepStrictEqual(decoded, expected)
        if (testCase.name === "negative_zero") assert.isTrue(Object.is(decoded, -0))
        assert.strictEqual(encodeBlobOk(decoded), testCase.wire_base64)
      })
    }

    for (const alternate of golden.alternate_map_orders as Array<any>) {
      it(`${alternate.name}: every map order decodes to the same value and re-encodes in its own order`, () => {
        const decoded = (alternate.wire_base64 as Array<string>).map((blob) => decodeBlobOk(blob))
        const expected = { outer: [{ left: 1, right: utf8("x") }], tail: "done" }
        for (const [i, value] of decoded.entries()) {
          assert.deepStrictEqual(value, expected)
          assert.strictEqual(encodeBlobOk(value), alternate.wire_base64[i])
        }
        assert.deepStrictEqual(Object.keys(decoded[1] as object), ["tail", "outer"])
      })
    }
  })

  describe("malformed frames", () => {
    for (const malformed of golden.malformed_frames as Array<any>) {
      it(`${malformed.name} → ${malformed.error}`, () => {
        const error = decodeError(Codec.decodeBlob(malformed.wire_base64))
        assert.strictEqual(error._tag, "PayloadDecodeError")
        assert.strictEqual(error.code, malformed.error)
        assert.isTrue(error.message.startsWith(`${malformed.error}: `), error.message)
      })
    }

    it("a decode failure is a typed Effect failure", () =>
      Effect.gen(function*() {
        const error = yield* Effect.flip(
          Effect.gen(function*() {
            return yield* Codec.decodeBlob("wwEdoz3/VYAiNwA=")
          })
        )
        assert.instanceOf(error, Codec.PayloadDecodeError)
        assert.strictEqual(error.code, "unsupported_payload_schema")
      }).pipe(Effect.runSync))

    it("fails, not throws, on input of the wrong runtime type", () => {
      assert.strictEqual(decodeError(Codec.decodeBlob(42 as any)).code, "invalid_payload_framing")
      assert.strictEqual(decodeError(Codec.decode("wwHi" as any)).code, "invalid_payload_framing")
      assert.strictEqual(decodeError(Codec.decodeEnvelope(null as any)).code, "invalid_payload_framing")
      assert.strictEqual(decodeError(Codec.decodeEnvelope({ codec: "avro" } as any)).code, "invalid_payload_framing")
      assert.strictEqual(decodeError(Codec.decodePayload(7 as any)).code, "invalid_payload_framing")
    })

    it("rejects non-canonical base64 and JSON text", () => {
      for (const blob of ["wwHioz3/VYAiNwA", "wwHioz3/VYAiNwA=\n", "wwHi oz3/VYAiNwA=", "wwHioz3_VYAiNwA=", `{"a":1}`]) {
        assert.strictEqual(decodeError(Codec.decodeBlob(blob)).code, "invalid_payload_framing", blob)
      }
      assert.include(decodeError(Codec.decodeBlob(`{"a":1}`)).message, "JSON")
      assert.include(decodeError(Codec.decodeBlob(Buffer.from(`{"a":1}`).toString("base64"))).message, "JSON")
    })

    it("rejects a long that does not fit in 64 bits and an overlong varint", () => {
      const tooBig = frame(0x04, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02)
      assert.strictEqual(decodeError(Codec.decode(tooBig)).code, "invalid_payload_framing")
      const tooLong = frame(0x04, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00)
      assert.strictEqual(decodeError(Codec.decode(tooLong)).code, "invalid_payload_framing")
    })

    it("rejects an invalid boolean byte, a negative length and a block count beyond the input", () => {
      assert.include(decodeError(Codec.decode(frame(0x02, 0x02))).message, "boolean")
      assert.strictEqual(decodeError(Codec.decode(frame(0x0a, 0x01))).code, "invalid_payload_framing")
      assert.strictEqual(decodeError(Codec.decode(frame(0x0c, 0xfe, 0xff, 0xff, 0xff, 0x0f))).code, "invalid_payload_framing")
    })

    it("rejects hostile nesting without overflowing the stack", () => {
      const depth = 5000
      const datum = [...Array.from({ length: depth }, () => [0x0c, 0x02]).flat(), 0x00, ...Array(depth).fill(0x00)]
      const error = decodeError(Codec.decode(frame(...datum)))
      assert.strictEqual(error.code, "invalid_payload_framing")
      assert.include(error.message, "deeper")
    })
  })

  describe("decoding details", () => {
    it("reads blocked arrays and maps, including negative block counts with byte sizes", () => {
      // array: block of -2 items (size 4 bytes), block of 1 item, end
      const array = frame(0x0c, 0x03, 0x08, 0x04, 0x02, 0x04, 0x04, 0x02, 0x04, 0x06, 0x00)
      assert.deepStrictEqual(Either.getOrThrow(Codec.decode(array)), [1, 2, 3])
      // map: block of -1 entry (size 4 bytes) "a" → 1, block of 1 entry "b" → 2, end
      const map = frame(0x0e, 0x01, 0x08, 0x02, 0x61, 0x04, 0x02, 0x02, 0x02, 0x62, 0x04, 0x04, 0x00)
      assert.deepStrictEqual(Either.getOrThrow(Codec.decode(map)), { a: 1, b: 2 })
    })

    it("keeps a __proto__ key as data", () => {
      const decoded = Either.getOrThrow(
        Codec.decode(frame(0x0e, 0x02, 0x12, ...utf8("__proto__"), 0x0a, 0x02, 0x78, 0x00))
      ) as Record<string, unknown>
      assert.strictEqual(Object.getPrototypeOf(decoded), Object.prototype)
      assert.deepStrictEqual(Object.keys(decoded), ["__proto__"])
      assert.strictEqual(Object.getOwnPropertyDescriptor(decoded, "__proto__")?.value, "x")
      assert.strictEqual(encodeBlobOk(decoded), Buffer.from(frame(0x0e, 0x02, 0x12, ...utf8("__proto__"), 0x0a, 0x02, 0x78, 0x00)).toString("base64"))
    })

    it("returns bytes as copies, not views of the input", () => {
      const input = frame(0x08, 0x04, 0x00, 0xff)
      const decoded = Either.getOrThrow(Codec.decode(input)) as Uint8Array
      input[input.length - 1] = 0x01
      assert.deepStrictEqual(decoded, bytes(0x00, 0xff))
      assert.strictEqual(decoded.buffer.byteLength, 2)
    })

    it("decodes long strings and non-ASCII text", () => {
      const text = "ünïcødé ✓ 𝄞 ".repeat(50) + "x".repeat(200)
      assert.strictEqual(decodeBlobOk(encodeBlobOk(text)), text)
      assert.strictEqual(decodeBlobOk(encodeBlobOk("\uFEFFbom")), "\uFEFFbom")
    })
  })

  describe("codec regressions", () => {
    const fromTyped = (typed: any): unknown => {
      switch (typed.type) {
        case "null":
          return null
        case "boolean":
          return typed.value
        case "long":
          return BigInt(typed.value)
        case "map":
          return Object.fromEntries(typed.entries.map((entry: any) => [entry.key, fromTyped(entry.value)]))
        case "array":
          return typed.items.map(fromTyped)
        default:
          throw new Error(`unknown typed value ${JSON.stringify(typed)}`)
      }
    }

    const files = fs.readdirSync(path.join(fixtures, "codec_regressions")).filter((name) => name.endsWith(".json"))

    it("covers all four regression files", () => {
      assert.strictEqual(files.length, 4)
    })

    for (const file of files) {
      const regression = readJson("codec_regressions", file)
      it(regression.id, () => {
        const wire: string = regression.framing.wire_base64
        const policy = regression.failure_policy
        if (policy.operation === "round_trip") {
          assert.strictEqual(regression.protocol.fingerprint, Codec.fingerprint)
          const value = fromTyped(regression.value)
          assert.strictEqual(encodeBlobOk(value), wire)
          assert.strictEqual(encodeBlobOk(Number(value)), wire)
          assert.deepStrictEqual(decodeBlobOk(wire), Number(value))
          return
        }
        assert.strictEqual(policy.operation, "decode_reject")
        if (regression.framing.encoding === "utf8-json") {
          // The JSON text really is the value, and tagging it "json" is refused before any decode.
          assert.deepStrictEqual(JSON.parse(Buffer.from(wire, "base64").toString("utf8")), fromTyped(regression.value))
          const bare = decodeError(Codec.decodePayload(wire, regression.protocol.codec))
          assert.strictEqual(bare.code, policy.error)
          const enveloped = decodeError(Codec.decodeEnvelope({ codec: regression.protocol.codec, blob: wire }))
          assert.strictEqual(enveloped.code, policy.error)
          // Even untagged, such bytes are not an Avro frame.
          assert.strictEqual(decodeError(Codec.decodeBlob(wire)).code, "invalid_payload_framing")
          return
        }
        assert.strictEqual(regression.framing.encoding, "utf8-json-task")
        const tasks = JSON.parse(Buffer.from(wire, "base64").toString("utf8"))
        assert.deepStrictEqual(tasks, [{}, { payload_codec: null }])
        for (const task of tasks) {
          const error = decodeError(Codec.requireAvroCodec(task.payload_codec, "task payload_codec"))
          assert.strictEqual(error.code, policy.error)
        }
      })
    }

    it("accepts exactly \"avro\" as a codec", () => {
      assert.deepStrictEqual(Codec.requireAvroCodec("avro"), Either.right("avro"))
      for (const codec of ["AVRO", "json", "", undefined, null, 1]) {
        assert.strictEqual(decodeError(Codec.requireAvroCodec(codec)).code, "unsupported_payload_codec")
      }
      assert.strictEqual(decodeError(Codec.decodePayload("wwHioz3/VYAiNwA=")).code, "unsupported_payload_codec")
      assert.deepStrictEqual(Codec.decodePayload("wwHioz3/VYAiNwA=", "avro"), Either.right(null))
      assert.deepStrictEqual(Codec.decodePayload({ codec: "avro", blob: "wwHioz3/VYAiNwIB" }, "json"), Either.right(true))
    })
  })

  describe("integer / double policy", () => {
    const longWire = (value: number | bigint): string => {
      const z = BigInt.asUintN(64, (BigInt(value) << 1n) ^ (BigInt(value) >> 63n))
      const out = [0x04]
      let rest = z
      while (rest >= 0x80n) {
        out.push(Number(rest & 0x7fn) | 0x80)
        rest >>= 7n
      }
      out.push(Number(rest))
      return Buffer.from(frame(...out)).toString("base64")
    }

    it("encodes safe integers as longs and decodes them as numbers", () => {
      const values = [
        0, 1, -1, 63, 64, -64, -65, 2 ** 31, -(2 ** 31), 2 ** 49 - 1, 2 ** 49, -(2 ** 49), 2 ** 52 - 1, 2 ** 52,
        -(2 ** 52), Number.MAX_SAFE_INTEGER, Number.MIN_SAFE_INTEGER
      ]
      for (const value of values) {
        const blob = encodeBlobOk(value)
        assert.strictEqual(blob, longWire(value), String(value))
        assert.strictEqual(decodeBlobOk(blob), value)
        assert.strictEqual(encodeBlobOk(BigInt(value)), blob)
      }
    })

    it("encodes bigints as longs, checking the int64 range, and decodes unsafe longs as bigints", () => {
      for (const value of [2n ** 53n, -(2n ** 53n), 2n ** 62n, 2n ** 63n - 1n, -(2n ** 63n)]) {
        const blob = encodeBlobOk(value)
        assert.strictEqual(blob, longWire(value))
        assert.strictEqual(decodeBlobOk(blob), value)
      }
      for (const value of [2n ** 63n, -(2n ** 63n) - 1n, 2n ** 100n]) {
        const error = encodeError(value)
        assert.strictEqual(error.code, "integer_overflow")
        assert.include(error.message, "64-bit")
      }
    })

    it("encodes fractions, unsafe integral numbers, -0 and Double as doubles", () => {
      assert.deepStrictEqual(decodeBlobOk(encodeBlobOk(7.5)), 7.5)
      assert.strictEqual(encodeBlobOk(Codec.double(7)), "wwHioz3/VYAiNwYAAAAAAAAcQA==")
      assert.strictEqual(encodeBlobOk(-0), "wwHioz3/VYAiNwYAAAAAAAAAgA==")
      assert.strictEqual(encodeBlobOk(7), "wwHioz3/VYAiNwQO")
      // An integral double beyond the safe range decodes as a plain number: it re-encodes as a double.
      const hugeBlob = encodeBlobOk(2 ** 53)
      assert.isTrue(hugeBlob.startsWith("wwHioz3/VYAiNwY"))
      assert.strictEqual(decodeBlobOk(hugeBlob), 2 ** 53)
      assert.strictEqual(encodeBlobOk(decodeBlobOk(hugeBlob)), hugeBlob)
      assert.deepStrictEqual(decodeBlobOk(encodeBlobOk(1e300)), 1e300)
      assert.deepStrictEqual(decodeBlobOk(encodeBlobOk(Codec.double(-3))), Codec.double(-3))
    })

    it("decodes integral doubles as Double (lossless) or, on request, as numbers", () => {
      const decoded = decodeBlobOk("wwHioz3/VYAiNwYAAAAAAAAcQA==")
      assert.isTrue(Codec.isDouble(decoded))
      assert.strictEqual((decoded as any) * 2, 14)
      assert.strictEqual(JSON.stringify({ ratio: decoded }), `{"ratio":7}`)
      assert.strictEqual(decodeBlobOk("wwHioz3/VYAiNwYAAAAAAAAcQA==", { integralDoubles: "number" }), 7)
      assert.isTrue(Object.is(decodeBlobOk("wwHioz3/VYAiNwYAAAAAAAAAgA==", { integralDoubles: "number" }), -0))
    })

    it("refuses non-finite numbers", () => {
      for (const value of [NaN, Infinity, -Infinity, Codec.double(NaN), Codec.double(Infinity)]) {
        assert.strictEqual(encodeError(value).code, "non_finite_float")
      }
    })
  })

  describe("value mapping", () => {
    it("encodes Maps like plain objects and skips undefined properties", () => {
      const plain = encodeBlobOk({ a: 1, b: [false] })
      assert.strictEqual(encodeBlobOk(new Map<string, unknown>([["a", 1], ["b", [false]]])), plain)
      assert.strictEqual(encodeBlobOk({ a: 1, skipped: undefined, b: [false] }), plain)
      assert.strictEqual(encodeBlobOk(Object.assign(Object.create(null), { a: 1, b: [false] })), plain)
      assert.strictEqual(encodeBlobOk(Buffer.from([0, 255])), "wwHioz3/VYAiNwgEAP8=")
    })

    it("refuses non-string map keys", () => {
      assert.strictEqual(encodeError(new Map<unknown, unknown>([[1, "x"]])).code, "invalid_map_key")
      assert.strictEqual(encodeError({ [Symbol("k")]: 1 }).code, "invalid_map_key")
      assert.strictEqual(encodeError({ ["\uD800"]: 1 }).code, "invalid_map_key")
    })

    it("refuses values with no representation, naming where they are", () => {
      class Point {
        constructor(readonly x: number) {}
      }
      for (const value of [undefined, () => 1, Symbol("s"), new Date(0), new Set([1]), new Point(1), new Uint16Array(2), [undefined], "\uDC00"]) {
        assert.strictEqual(encodeError(value).code, "unsupported_value_type")
      }
      const nested = encodeError({ a: [1, { b: NaN }] })
      assert.strictEqual(nested.code, "non_finite_float")
      assert.deepStrictEqual(nested.path, ["a", 1, "b"])
      assert.include(nested.message, `["a"][1]["b"]`)
      assert.include(encodeError(new Date(0)).message, "Date")
    })

    it("refuses a cyclic value instead of overflowing the stack", () => {
      const cyclic: Array<unknown> = []
      cyclic.push(cyclic)
      const error = encodeError(cyclic)
      assert.strictEqual(error.code, "unsupported_value_type")
      assert.include(error.message, "cyclic")
    })

    it("round-trips the benchmark corpus value", () => {
      // Number literals written with a fraction or exponent are doubles in the corpus (Python float).
      const text = readText("avro-value-benchmark-v1.json").replace(
        /(?<=[:[,]\s*)(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)(?=\s*[,\]}])/g,
        (literal) => (/[.eE]/.test(literal) ? `{"$avro_double":${literal}}` : literal)
      )
      const revive = (node: any): unknown => {
        if (Array.isArray(node)) return node.map(revive)
        if (node !== null && typeof node === "object") {
          if ("$avro_bytes" in node) return Uint8Array.from(Buffer.from(node.$avro_bytes, "base64"))
          if ("$avro_double" in node) return Codec.double(node.$avro_double)
          return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, revive(v)]))
        }
        return node
      }
      const corpus = readJson("avro-value-benchmark-v1.json")
      assert.strictEqual(corpus.schema, "durable_workflow.protocol.Value.benchmark/v1")
      const value = revive(JSON.parse(text).value) as any
      assert.deepStrictEqual(value.ratio, Codec.double(7))
      assert.deepStrictEqual(value.items[3], Codec.double(3.25))
      const blob = encodeBlobOk(value)
      assert.isTrue(blob.startsWith("wwHioz3/VYAiN"))
      const decoded = decodeBlobOk(blob) as any
      assert.strictEqual(decoded.attempt, 7)
      assert.deepStrictEqual(decoded.ratio, Codec.double(7))
      assert.strictEqual(decoded.items[3], 3.25)
      assert.strictEqual(decoded.items[2], -9)
      assert.deepStrictEqual(decoded, { ...value, items: [null, false, -9, 3.25, "nested", value.items[5]] })
      assert.strictEqual(encodeBlobOk(decoded), blob)
    })
  })

  describe("envelopes", () => {
    it("wraps a value as { codec: \"avro\", blob } and back", () => {
      const envelope = Either.getOrThrow(Codec.encodeEnvelope({ status: "ready", open_items: 3 }))
      assert.deepStrictEqual(Schema.decodeUnknownSync(Codec.AvroPayloadEnvelope)(envelope), envelope)
      assert.deepStrictEqual(Codec.decodeEnvelope(envelope), Either.right({ status: "ready", open_items: 3 }))
    })

    it("matches the Python SDK's envelopes in the worker-plane parity fixtures", () => {
      const complete = readJson("worker-plane", "query-task-complete-parity.json").sdk_python.request_body
      assert.deepStrictEqual(Codec.encodeEnvelope(complete.result), Either.right(complete.result_envelope))
      const poll = readJson("worker-plane", "query-task-poll-parity.json").response_body.task
      assert.deepStrictEqual(Codec.decodeEnvelope(poll.input), Either.right({ include_line_items: true }))
      const activity = readJson("worker-plane", "activity-complete-parity.json").sdk_python.payload_envelope
      const envelope = Either.getOrThrow(Codec.encodeEnvelope(activity.decoded))
      assert.strictEqual(envelope.codec, activity.codec)
      assert.deepStrictEqual(Codec.decodeEnvelope(envelope), Either.right(activity.decoded))
    })

    it("decodes the Avro payloads of the golden histories and refuses the legacy JSON ones", () => {
      const expected: Record<string, unknown> = {
        "python-sdk-2.0.0-rc.30-avro.json": ["hello Ada"],
        "python-sdk-2.0.0-rc.30-avro-saga.json": ["reservation-456"],
        "python-sdk-2.0.0-rc.30-avro-signal.json": [["alice"], "notified"]
      }
      for (const [file, values] of Object.entries(expected)) {
        const history = readJson("golden_history", file)
        assert.strictEqual(history.source.payload_codec, "avro")
        const blobs = history.cases.flatMap((c: any) =>
          c.history.flatMap((event: any) =>
            ["result", "arguments"].filter((field) => typeof event.payload[field] === "string").map((field) => event.payload[field])
          )
        )
        assert.deepStrictEqual(blobs.map((blob: string) => decodeBlobOk(blob)), values, file)
      }
      const legacy = readJson("golden_history", "python-sdk-0.3.1.json")
      const legacyResult = legacy.cases[0].history[0].payload.result
      assert.strictEqual(legacyResult, `"hello Ada"`)
      assert.strictEqual(decodeError(Codec.decodeBlob(legacyResult)).code, "invalid_payload_framing")
    })

    it("describes external-storage envelopes", () => {
      const external = {
        codec: "avro",
        external_storage: {
          schema: "durable-workflow.v2.external-payload-reference.v1",
          uri: "file:///tmp/avro/ab/abc",
          sha256: "abc",
          size_bytes: 12,
          codec: "avro"
        }
      }
      assert.deepStrictEqual(Schema.decodeUnknownSync(Codec.AnyPayloadEnvelope)(external), external as Codec.AnyPayloadEnvelope)
      assert.isTrue(Either.isLeft(Schema.decodeUnknownEither(Codec.ExternalPayloadEnvelope)({ codec: "avro", blob: "x" })))
    })

    it("ValueFromEnvelope decodes and encodes through the schema, failing with the protocol code", () => {
      const decode = Schema.decodeUnknownEither(Codec.ValueFromEnvelope)
      assert.deepStrictEqual(decode({ codec: "avro", blob: "wwHioz3/VYAiNwQO" }), Either.right(7))
      const foreign = decode({ codec: "json", blob: "bnVsbA==" })
      assert.isTrue(Either.isLeft(foreign))
      assert.include(String((foreign as Either.Left<any, any>).left), "unsupported_payload_codec")
      assert.deepStrictEqual(
        Schema.encodeEither(Codec.ValueFromEnvelope)(Codec.double(7)),
        Either.right({ codec: "avro", blob: "wwHioz3/VYAiNwYAAAAAAAAcQA==" })
      )
      assert.isTrue(Either.isLeft(Schema.encodeEither(Codec.ValueFromEnvelope)(NaN)))
    })
  })
})
