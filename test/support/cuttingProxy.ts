/**
 * A TCP proxy in front of a real server (Redis, PostgreSQL, MySQL, an SQS endpoint) that can lose one
 * reply on purpose: armed with a marker, it forwards the next command whose bytes contain the marker,
 * lets the server run it, and then drops both connections before the reply reaches the client (or
 * drops the command itself, for a command that never arrived). The client sees a command whose outcome
 * it cannot know (applied, reply lost), which is what a Redis restart or a network cut right after a
 * write leaves; the broker itself is real.
 */
import { connect, createServer, type Socket } from "node:net"

/** A running proxy. */
export interface CuttingProxy {
  readonly port: number
  /**
   * Cut the connection that next sends a command containing `marker`, once: after the server ran it
   * (the default), or, with `applied: false`, before it reaches the server (the chunk is dropped).
   */
  readonly arm: (marker: string, options?: { readonly applied?: boolean }) => void
  /** Cuts every connection now (the server keeps running; clients reconnect through the proxy). */
  readonly cutAll: () => void
  /** How many connections were cut so far. */
  readonly cuts: () => number
  /**
   * Takes the server away (`true`: every connection cut, new ones closed at once, as a server that is
   * down) or brings it back (`false`), without the proxy's port changing.
   */
  readonly setDown: (down: boolean) => void
  readonly close: () => Promise<void>
}

/** Starts a proxy on a free loopback port to Redis at 127.0.0.1:`target`. */
export const cuttingProxy = async (target: number, options: { readonly afterMs?: number } = {}): Promise<CuttingProxy> => {
  let armed: Buffer | undefined
  let forward = true
  let cuts = 0
  let down = false
  const sockets = new Set<Socket>()
  const server = createServer((client) => {
    if (down) {
      client.destroy()
      return
    }
    // writes before the upstream connection is up are buffered by the socket
    const upstream = connect(target, "127.0.0.1")
    for (const socket of [client, upstream]) {
      sockets.add(socket)
      socket.on("error", () => {})
      socket.on("close", () => sockets.delete(socket))
    }
    client.on("close", () => upstream.destroy())
    upstream.on("close", () => client.destroy())
    let cut = false
    let tail = Buffer.alloc(0)
    client.on("data", (chunk: Buffer) => {
      if (cut) return
      // a marker may straddle two chunks
      const seen = armed === undefined ? undefined : Buffer.concat([tail, chunk])
      if (armed === undefined || !seen!.includes(armed)) {
        upstream.write(chunk)
        if (armed !== undefined) tail = seen!.subarray(Math.max(0, seen!.length - armed.length))
        return
      }
      if (forward) upstream.write(chunk)
      armed = undefined
      cut = true
      cuts++
      // Redis runs what it received; the reply dies with the connection
      setTimeout(() => {
        client.destroy()
        upstream.destroy()
      }, options.afterMs ?? 100)
    })
    upstream.on("data", (chunk: Buffer) => {
      if (!cut) client.write(chunk)
    })
  })
  const port = await new Promise<number>((resolve, reject) => {
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      typeof address === "object" && address !== null ? resolve(address.port) : reject(new Error("no port"))
    })
  })
  return {
    port,
    arm: (marker, armOptions) => {
      armed = Buffer.from(marker)
      forward = armOptions?.applied ?? true
    },
    cutAll: () => {
      for (const socket of sockets) socket.destroy()
      cuts++
    },
    cuts: () => cuts,
    setDown: (value) => {
      down = value
      if (value) for (const socket of sockets) socket.destroy()
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy()
        server.close(() => resolve())
      })
  }
}
