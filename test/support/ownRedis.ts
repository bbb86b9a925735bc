/**
 * A Redis server of a test file's (or a `describe` block's) own, on a free loopback port: started
 * before its tests, killed by its PID after them. For tests that need a second broker, or one they
 * may cut, take away or reconfigure without touching the machine's Redis.
 */
import { afterAll, beforeAll } from "vitest"
import type { ChildProcess } from "node:child_process"
import { cuttingProxy, type CuttingProxy } from "./cuttingProxy.js"
import { freePort, startRedisServer } from "./local.js"

/** The server; `port` is read once the block's `beforeAll` has run. */
export const ownRedisServer = (): { readonly port: number } => {
  let server: ChildProcess | undefined
  let port = 0
  beforeAll(async () => {
    port = await freePort()
    server = await startRedisServer(port)
  })
  afterAll(() => {
    if (server?.pid !== undefined) process.kill(server.pid, "SIGKILL")
  })
  return {
    get port() {
      return port
    }
  }
}

/**
 * The server with a {@link cuttingProxy} in front: `port` is the server's (for the engine and the
 * test's own clients), `proxy` the way in that the test cuts (for the worker).
 */
export const ownRedisBehindProxy = (): { readonly port: number; readonly proxy: CuttingProxy } => {
  const server = ownRedisServer()
  let proxy: CuttingProxy | undefined
  beforeAll(async () => {
    proxy = await cuttingProxy(server.port)
  })
  afterAll(async () => {
    await proxy?.close()
  })
  return {
    get port() {
      return server.port
    },
    get proxy() {
      if (proxy === undefined) throw new Error("the proxy is started before the file's tests")
      return proxy
    }
  }
}
