/**
 * Small helpers shared by the tests: a free loopback port, a server that never answers, a private
 * redis-server, a step task as the engine dispatches it, a wait for a condition, a logger that
 * keeps what it is given, and a test script run from source in a process of its own.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { type AddressInfo, createServer, type Socket } from "node:net"
import * as Logger from "effect/Logger"
import { Redis } from "ioredis"

/**
 * A logger that keeps each message as `<LEVEL> <message>` (`WARN waiting for …`), and the layer that
 * puts it in place of the default one.
 */
export const captureLogs = () => {
  const lines: Array<string> = []
  const logger = Logger.make(({ logLevel, message }) => {
    lines.push(`${logLevel.label} ${Array.isArray(message) ? message.join(" ") : String(message)}`)
  })
  return { lines, layer: Logger.replace(Logger.defaultLogger, logger) }
}

/** A TCP port nothing listens on right now, on 127.0.0.1. */
export const freePort = (): Promise<number> =>
  new Promise<number>((resolve, reject) => {
    const server = createServer()
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      server.close(() =>
        typeof address === "object" && address !== null ? resolve(address.port) : reject(new Error("no free port"))
      )
    })
  })

/**
 * Starts a throw-away redis-server on `port` (loopback, nothing persisted; with `password`, it asks
 * for it; with `under`, run by that command, e.g. valgrind) and waits until it answers. Rejects if
 * the server exits first.
 */
/**
 * A loopback TCP server that accepts connections and never writes a byte (a broker that hangs, a
 * firewall that swallows): its port, and `close`, which drops the connections it holds.
 */
export const silentServer = async (): Promise<{ readonly port: number; readonly close: () => void }> => {
  const sockets = new Set<Socket>()
  const server = createServer((socket) => void sockets.add(socket))
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return {
    port: (server.address() as AddressInfo).port,
    close: () => {
      for (const socket of sockets) socket.destroy()
      server.close()
    }
  }
}

export const startRedisServer = async (
  port: number,
  options: { readonly password?: string; readonly under?: ReadonlyArray<string> } = {}
): Promise<ChildProcess> => {
  const auth = options.password === undefined ? [] : ["--requirepass", options.password]
  const [command, ...args] = [...(options.under ?? []), "redis-server"]
  const server = spawn(command!, [...args, "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", ...auth], {
    stdio: "ignore"
  })
  let onExit: (() => void) | undefined
  const exited = new Promise<never>((_, reject) => {
    onExit = () => reject(new Error(`${command} exited before redis-server answered on port ${port}`))
    server.once("exit", onExit)
  })
  const probe = new Redis({ port, password: options.password, lazyConnect: true, retryStrategy: () => 50, maxRetriesPerRequest: null })
  probe.on("error", () => {})
  try {
    await Promise.race([probe.connect().catch(() => undefined).then(() => probe.ping()), exited])
  } finally {
    server.off("exit", onExit!)
    probe.disconnect()
  }
  return server
}

/** A step task as the engine dispatches it (seq 0, attempt 1, the `default` pool transport). */
export const stepTask = (runId: string, name: string, input?: unknown) => ({
  runId,
  seq: 0,
  name,
  stepId: `${runId}:0`,
  group: name,
  attempt: 1,
  transport: "default",
  ...(input === undefined ? {} : { input })
})

/** Polls `check` every 20 ms until it holds; fails naming `what` after `timeoutMs`. A `check` that throws ends the wait with its error. */
export const waitFor = async (what: string, check: () => boolean | Promise<boolean>, timeoutMs = 15_000): Promise<void> => {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

/**
 * Runs a TypeScript `script` of the tests from source (`tsx`, the `source` condition) in a process of
 * its own: the child, what it has printed so far (stdout and stderr together), and its exit.
 */
export const spawnSource = (script: string, args: ReadonlyArray<string>, env: NodeJS.ProcessEnv = {}) => {
  const child = spawn(process.execPath, ["--import", "tsx", "--conditions=source", script, ...args], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, ...env }
  })
  let output = ""
  child.stdout!.on("data", (chunk) => (output += String(chunk)))
  child.stderr!.on("data", (chunk) => (output += String(chunk)))
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal }))
  )
  return { child, output: () => output, exited }
}
