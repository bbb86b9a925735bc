/**
 * Benchmark reference, not a competitor: the BullMQ client calls this library's worker makes per task,
 * in a bare promise loop with no runtime around them. Each loop takes a job without blocking, adds
 * its `result` job and acknowledges the task in one script call (the reply first), as the worker
 * does (`bullmq/internal/jobs`), and takes the next job with the acknowledgement; with no job
 * waiting, the loops share one blocking wait on the queue's marker. It reads a handed-over job as the
 * worker does, and its command connection coalesces writes as the worker's does. What it reaches is
 * the ceiling of the worker's call pattern on this machine: the part of a ratio that no runtime work
 * can change.
 */
import { Queue, Worker } from "bullmq"
import { Redis } from "ioredis"
import { coalesceWrites } from "../../src/transport/bullmq/internal/coalesce.js"
import { decodeData, decodeOptions, jobAnswerer, jobWriter, type NextJob } from "../../src/transport/bullmq/internal/jobs.js"
import { JobName, resultJobOptions, resultsQueue, routingToken, tasksQueue } from "../../src/transport/bullmq/internal/naming.js"
import { completedResult, type PeerOptions, type RunningPeer, type TaskData, workerConnection } from "./peer.js"

/** Start the ceiling loops serving `stepName` as a no-op step at `concurrency`. */
export const start = async (options: PeerOptions): Promise<RunningPeer> => {
  const connection = workerConnection(options)
  const client = new Redis(connection)
  coalesceWrites(client)
  const blocking = new Redis(connection)
  const resultQueue = new Queue(resultsQueue(options.prefix), { connection: client })
  const tasks = new Worker(tasksQueue(options.prefix, routingToken(options.stepName)), undefined, {
    connection: client,
    autorun: false
  })
  await tasks.waitUntilReady()
  const results = await jobWriter(resultQueue, JobName.result, resultJobOptions)
  const answer = jobAnswerer(client)
  let stopped = false
  let tokens = 0
  // one blocking read on the marker at a time, shared by every loop that found the queue empty
  let waiting: Promise<unknown> | undefined
  const nothingWaiting = () =>
    waiting ??= blocking.bzpopmin(tasks.keys.marker!, 0.05).finally(() => {
      waiting = undefined
    })

  /** A job as the worker reads it: id, data and options. */
  const read = (next: NextJob | undefined) =>
    next === undefined ? undefined : { id: next.id, data: decodeData(next.fields) as TaskData, options: decodeOptions(next.fields.opts) }

  const serve = async () => {
    while (!stopped) {
      const token = `ceiling:${++tokens}`
      const first = await tasks.getNextJob(token, { block: false })
      let job = first === undefined ? undefined : { id: first.id!, data: first.data as TaskData, options: first.opts }
      if (job === undefined) await nothingWaiting()
      while (job !== undefined) {
        job = read((await answer(results, completedResult(job.data), tasks, job, token, !stopped)).next)
      }
    }
  }
  const loops = Array.from({ length: options.concurrency }, serve)
  return {
    stop: async () => {
      stopped = true
      await Promise.all(loops)
      await tasks.close()
      await resultQueue.close()
      blocking.disconnect()
      await client.quit()
    }
  }
}
