/**
 * Which SQL driver errors are a connection lost under a statement (tried again on a new connection)
 * and which are a connect that failed (the start fails at once).
 */
import { assert, describe, it } from "@effect/vitest"
import { isConnectionLost, sqlMessageOf } from "../../src/transport/sql/internal/connection.js"

describe("a lost connection, told from a failed connect", () => {
  it("an established connection the server ended is lost: tried again", () => {
    for (const lost of [
      new Error("Connection terminated unexpectedly"),
      Object.assign(new Error("terminating connection due to administrator command"), { code: "57P01" }),
      Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" }),
      Object.assign(new Error("Connection lost: The server closed the connection."), { code: "PROTOCOL_CONNECTION_LOST" }),
      new Error("PgClient: Failed to execute statement", { cause: new Error("Client has encountered a connection error and is not queryable") })
    ]) assert.isTrue(isConnectionLost(lost), lost.message)
  })

  it("a connect that timed out is not, whichever timer fired first: a database that never answers fails after one connectTimeout", () => {
    for (const timedOut of [
      // pg-pool's connectionTimeoutMillis, set to the same connectTimeout as the client's own timer
      new Error("PgClient: Failed to connect", { cause: new Error("Connection terminated due to connection timeout", { cause: new Error("timeout") }) }),
      new Error("PgClient: Connection timed out", { cause: new Error("Connection timed out") }),
      Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" })
    ]) assert.isFalse(isConnectionLost(timedOut), timedOut.message)
  })
})

describe("a driver error's message", () => {
  it("says the client's message and its cause's once each, and a repeated one once", () => {
    assert.strictEqual(
      sqlMessageOf(new Error("PgClient: Connection timed out", { cause: new Error("Connection timed out") })),
      "PgClient: Connection timed out"
    )
    assert.strictEqual(
      sqlMessageOf(new Error("PgClient: Failed to connect", { cause: new Error("Connection terminated due to connection timeout") })),
      "PgClient: Failed to connect: Connection terminated due to connection timeout"
    )
    assert.strictEqual(sqlMessageOf(new Error("timeout", { cause: new Error("connect timeout after 5s") })), "connect timeout after 5s")
    assert.strictEqual(sqlMessageOf(new Error("same", { cause: new Error("same") })), "same")
    // whatever the case of each
    assert.strictEqual(
      sqlMessageOf(new Error("MysqlClient: Connection timeout", { cause: new Error("connection timeout") })),
      "MysqlClient: Connection timeout"
    )
  })
})
