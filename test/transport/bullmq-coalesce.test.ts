/**
 * Write coalescing on the BullMQ transport's command connection (`bullmq/internal/coalesce`),
 * against the real Redis: what reaches the socket's own write functions is recorded, one entry per
 * socket write with the number of commands in it.
 */
import { afterEach, assert, describe, it } from "@effect/vitest"
import { Redis } from "ioredis"
import { randomUUID } from "node:crypto"
import { coalesceWrites } from "../../src/transport/bullmq/internal/coalesce.js"
import { redisConnection } from "../support/engine.js"

type Socket = Redis["stream"]

/** Records every socket write of `socket` as the number of chunks (commands) it carried. */
const recordWrites = (socket: Socket) => {
  const writes: Array<number> = []
  const internals = socket as unknown as {
    _write: (...args: Array<unknown>) => void
    _writev: (chunks: ReadonlyArray<unknown>, ...rest: Array<unknown>) => void
  }
  const write = internals._write
  const writev = internals._writev
  internals._write = (...args) => {
    writes.push(1)
    return Reflect.apply(write, socket, args)
  }
  internals._writev = (chunks, ...rest) => {
    writes.push(chunks.length)
    return Reflect.apply(writev, socket, [chunks, ...rest])
  }
  return writes
}

const clients: Array<Redis> = []

const connected = async (maxPerWrite: number) => {
  const client = new Redis({ ...redisConnection(), lazyConnect: true, maxRetriesPerRequest: null })
  clients.push(client)
  coalesceWrites(client, maxPerWrite)
  await client.connect()
  return client
}

/** Ten INCRs of one fresh key, all written in the same turn; resolves with their replies. */
const tenInOneTurn = (client: Redis) => {
  const key = `coalesce-test:${randomUUID()}`
  return Promise.all(Array.from({ length: 10 }, () => client.incr(key))).finally(() => client.del(key))
}

const oneToTen = Array.from({ length: 10 }, (_, i) => i + 1)

/** With a bound of 4: ten commands of one turn go as 1, 1, 4, 4 (the key's DEL, a later turn, alone). */
const tenGoInWritesOfFour = async (client: Redis) => {
  const writes = recordWrites(client.stream)
  assert.deepStrictEqual(await tenInOneTurn(client), oneToTen)
  assert.deepStrictEqual(writes, [1, 1, 4, 4, 1])
}

afterEach(() => {
  for (const client of clients.splice(0)) client.disconnect()
})

describe("BullMQ write coalescing", () => {
  it("the first two commands of a turn go out at once, the rest in writes of at most the bound; replies keep their order", async () => {
    await tenGoInWritesOfFour(await connected(4))
  })

  it("with a bound of 1 every command is its own write, as ioredis writes them", async () => {
    const client = await connected(1)
    const writes = recordWrites(client.stream)
    assert.deepStrictEqual(await tenInOneTurn(client), oneToTen)
    assert.deepStrictEqual(writes, Array.from({ length: 11 }, () => 1))
  })

  it("a command alone in its turn is never held back", async () => {
    const client = await connected(8)
    const writes = recordWrites(client.stream)
    for (let i = 0; i < 5; i++) assert.strictEqual(await client.ping(), "PONG")
    assert.deepStrictEqual(writes, [1, 1, 1, 1, 1])
  })

  it("the socket of a reconnection is coalesced as well", async () => {
    const client = await connected(4)
    const first = client.stream
    const ready = new Promise<void>((resolve) => client.once("ready", () => resolve()))
    client.disconnect(true)
    await ready
    assert.notStrictEqual(client.stream, first)
    await tenGoInWritesOfFour(client)
  })

  it("what is held when the turn ends is written then, not in a later turn", async () => {
    const client = await connected(8)
    const writes = recordWrites(client.stream)
    const key = `coalesce-test:${randomUUID()}`
    // five commands in one turn: two at once, three held until the turn ends
    assert.deepStrictEqual(await Promise.all(Array.from({ length: 5 }, () => client.incr(key))), [1, 2, 3, 4, 5])
    assert.deepStrictEqual(writes, [1, 1, 3])
    await client.del(key)
  })
})
