/**
 * The `charge-once` workflow of the live-step-event test, shared by the worker that is killed in the
 * middle of its turn and the one that serves the next turn: a local `charge` that must happen once
 * per run, then a second local step (`finish`) the killed worker never gets through.
 */
import type { AsyncWorkflowContext } from "../../src/promise.js"

export const chargeOnce = (charge: () => void, finish: () => Promise<string>) => async (ctx: AsyncWorkflowContext) => {
  const receipt = await ctx.sideEffect(() => {
    charge()
    return "receipt-1"
  })
  const finished = await ctx.sideEffect(finish)
  return { receipt, finished }
}
