/**
 * Benchmark peer: a plain `bullmq` Worker on `<P>-tasks-<token>` whose processor answers every task
 * with one `result` job on `<P>-results`, with no runtime, decoding or bookkeeping around it.
 */
import { type Job, Queue, Worker } from "bullmq"
import { JobName, resultJobOptions, resultsQueue, routingToken, tasksQueue } from "../../src/transport/bullmq/internal/naming.js"
import { completedResult, type PeerOptions, type RunningPeer, type TaskData, workerConnection } from "./peer.js"

/** Start the plain BullMQ peer serving `stepName` as a no-op step at `concurrency`. */
export const start = async (options: PeerOptions): Promise<RunningPeer> => {
  const connection = workerConnection(options)
  const results = new Queue(resultsQueue(options.prefix), { connection })
  const worker = new Worker(
    tasksQueue(options.prefix, routingToken(options.stepName)),
    async (job: Job<TaskData>) => {
      await results.add(JobName.result, completedResult(job.data), resultJobOptions)
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
