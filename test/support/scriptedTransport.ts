/**
 * A transport of one poller, written in a test against the public seam, whose polls (and, if
 * given, backlog, heartbeat and deregistration) the test scripts: for runtime rules that need a broker to behave a certain way.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { NestDurableProtocol, Transport } from "../../src/index.js"

/** What a scripted transport's poll and heartbeat are made of; `protocol` is the one its deliveries speak. */
export interface Script {
  readonly poll: (protocol: ReturnType<typeof NestDurableProtocol.make>) => Transport.Poller["poll"]
  readonly heartbeat?: Transport.Registration["heartbeat"]
  readonly backlog?: Transport.Poller["backlog"]
  readonly deregister?: Transport.Registration["deregister"]
}

/** The transport named `name`, its one poller (`<name> queue`) on the step pool. */
export const scriptedTransport = (name: string, script: Script): Layer.Layer<Transport.Transport> => {
  const protocol = NestDurableProtocol.make()
  return Layer.succeed(Transport.Transport, {
    name,
    protocol,
    register: () =>
      Effect.succeed(Transport.Registration.make({
        pollers: [Transport.Poller.make({
          name: `${name} queue`,
          pool: protocol.pools.step,
          poll: script.poll(protocol),
          ...(script.backlog === undefined ? {} : { backlog: script.backlog })
        })],
        ...(script.heartbeat === undefined ? {} : { heartbeat: script.heartbeat }),
        ...(script.deregister === undefined ? {} : { deregister: script.deregister })
      }))
  })
}
