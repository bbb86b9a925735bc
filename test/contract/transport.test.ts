/**
 * The transport contract (`suite.ts`) on the in-memory broker, on the TestClock. The other brokers
 * run the same suite in `transport.<broker>.test.ts`, one file each so they run in parallel.
 */
import { inMemory } from "./backends.js"
import { transportContract } from "./suite.js"

transportContract(inMemory)
