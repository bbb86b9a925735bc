/**
 * Benchmark floor: a bare `bullmq` Worker on `<P>-tasks-<token>` whose processor answers every task
 * with one `result` job on `<P>-results`, with no runtime, decoding or bookkeeping around it.
 */
import { type Job, Queue, Worker } from "bullmq"
import { JobName, resultJobOptions, resultsQueue, routingToken, tasksQueue } from "../../src/transport/bullmq/internal/naming.js"
import { benchConnection, type PeerOptions, type RunningPeer } from "./peer.js"

interface TaskData {
  readonly runId: string
  readonly seq: number
  readonly stepId: string
}

/** Start the plain BullMQ peer serving `stepName` as a no-op step at `concurrency`. */
export const start = async (options: PeerOptions): Promise<RunningPeer> => {
  const connection = { ...(options.connection ?? benchConnection()), maxRetriesPerRequest: null }
  const results = new Queue(resultsQueue(options.prefix), { connection })
  const worker = new Worker(
    tasksQueue(options.prefix, routingToken(options.stepName)),
    async (job: Job<TaskData>) => {
      const startedAt = Date.now()
      const { runId, seq, stepId } = job.data
      await results.add(JobName.result, { runId, seq, stepId, status: "completed", startedAt }, resultJobOptions)
    },
    { connection, concurrency: options.concurrency }
  )
  await worker.waitUntilReady()
  return {
    stop: async () => {
      await worker.close()
      await results.close()
    }
  }
}
