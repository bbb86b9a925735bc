/** The transport contract (`suite.ts`) on the SQS transport over a fauxqs server of each test's own. */
import { sqs } from "./backends.js"
import { transportContract } from "./suite.js"

transportContract(sqs)
