/** The transport contract (`suite.ts`) on the Durable Workflow transport over the protocol-faithful test server. */
import { durableWorkflow } from "./backends.js"
import { transportContract } from "./suite.js"

transportContract(durableWorkflow)
