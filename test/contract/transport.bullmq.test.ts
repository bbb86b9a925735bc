/** The transport contract (`suite.ts`) on BullMQ over the local Redis. */
import { bullmq } from "./backends.js"
import { transportContract } from "./suite.js"

transportContract(bullmq)
