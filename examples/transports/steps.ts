/**
 * The steps every transport example serves: a checkout's three steps, as the nestjs-durable engine
 * dispatches them (`ctx.step("payments.charge-card", …)` in a workflow registered with the engine).
 */
import { Effect } from "effect"
import { FatalError, Step } from "effect-durable-worker"

export const chargeCard = Step.make("payments.charge-card", (input: { readonly amount: number }, ctx) =>
  Effect.gen(function*() {
    yield* Effect.logInfo(`charging ${input.amount}`)
    // a FatalError fails the step for good: the engine does not retry it
    if (input.amount > 10_000) return yield* Effect.fail(new FatalError("card declined", "card_declined"))
    return { chargeId: `ch_${ctx.stepId}` }
  }))

export const reserveStock = Step.make("inventory.reserve", (input: { readonly orderId: string }) =>
  Effect.succeed({ orderId: input.orderId, reserved: true }))

export const sendReceipt = Step.fromPromise("email.send-receipt", async (input: { readonly orderId: string }) => ({
  orderId: input.orderId,
  sent: true
}))

export const steps = [chargeCard, reserveStock, sendReceipt]
