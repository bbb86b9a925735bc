/**
 * Write coalescing for the worker's Redis command connection.
 *
 * ioredis writes every command to its socket at once, one system call each. A busy worker writes
 * one per task (the answer: the reply, and the acknowledgement that also takes the next job), and at
 * concurrency those calls are the largest single cost of its main thread. Here the commands written
 * within one turn of the event loop share socket writes instead:
 *
 * - the turn's first two commands (the answers of its first two tasks) go out at once, so Redis
 *   starts on them while the rest is prepared, and a worker answering a task or two at a time
 *   writes as before;
 * - the commands after them are held and written together, at most `maxPerWrite` at a time, so
 *   Redis is never left idle until the whole turn is done (one write per turn would run the worker
 *   and Redis in lockstep);
 * - whatever is held is written when the turn ends (`process.nextTick`), so no command waits for
 *   a later turn.
 *
 * The order of commands on the connection is unchanged. ioredis opens a new socket on every
 * reconnection; each one is coalesced as it connects.
 *
 * @internal
 */
import type { Redis } from "ioredis"

/** The commands of one turn that may share a socket write, by default. @internal */
export const DEFAULT_COMMANDS_PER_WRITE = 8

/** The commands at the start of a turn that are written at once: the answers of its first two tasks. */
const IMMEDIATE_PER_TURN = 2

type Socket = Redis["stream"]

const coalesced = new WeakSet<Socket>()

const coalesceSocket = (socket: Socket, maxPerWrite: number) => {
  const write = socket.write
  let turnStarted = false
  let immediate = 0
  let held = 0
  const flush = () => {
    if (held === 0) return
    held = 0
    socket.uncork()
  }
  const endTurn = () => {
    turnStarted = false
    immediate = 0
    flush()
  }
  socket.write = function(this: Socket, ...args: Parameters<Socket["write"]>): boolean {
    if (!turnStarted) {
      turnStarted = true
      process.nextTick(endTurn)
    }
    if (immediate < IMMEDIATE_PER_TURN) {
      immediate++
      return Reflect.apply(write, socket, args)
    }
    if (held++ === 0) socket.cork()
    const accepted = Reflect.apply(write, socket, args)
    if (held >= maxPerWrite) flush()
    return accepted
  } as Socket["write"]
}

/**
 * Coalesces the commands `client` writes within one turn of the event loop, on its current socket
 * and on every socket it reconnects with. `maxPerWrite` of 1 (or less) leaves the client as it is.
 *
 * @internal
 */
export const coalesceWrites = (client: Redis, maxPerWrite: number = DEFAULT_COMMANDS_PER_WRITE): void => {
  if (maxPerWrite <= 1) return
  const install = () => {
    const socket = client.stream as Socket | undefined
    if (socket === undefined || coalesced.has(socket)) return
    coalesced.add(socket)
    coalesceSocket(socket, maxPerWrite)
  }
  install()
  client.on("connect", install)
}
