import { assert, describe, it } from "@effect/vitest"
import * as Core from "@dudousxd/nestjs-durable-core"
import * as UpstreamTransport from "@dudousxd/nestjs-durable-transport-bullmq"
import * as Os from "node:os"
import * as Naming from "../../src/transport/bullmq/internal/naming.js"

describe("bullmq naming", () => {
  describe("effective prefix", () => {
    it("defaults to durable and ignores an absent, empty or default namespace", () => {
      assert.strictEqual(Naming.DEFAULT_PREFIX, "durable")
      assert.strictEqual(Naming.effectivePrefix(), "durable")
      assert.strictEqual(Naming.effectivePrefix("durable", undefined), "durable")
      assert.strictEqual(Naming.effectivePrefix("durable", ""), "durable")
      assert.strictEqual(Naming.effectivePrefix("durable", "default"), "durable")
    })

    it("folds a namespace into the prefix", () => {
      assert.strictEqual(Naming.effectivePrefix("durable", "dev-alice"), "durable-dev-alice")
      assert.strictEqual(Naming.effectivePrefix("flip", "dev-bob"), "flip-dev-bob")
    })
  })

  describe("routing tokens", () => {
    it("replaces every colon with a dash and keeps dots", () => {
      assert.strictEqual(Naming.sanitizeQueueToken("x:y"), "x-y")
      assert.strictEqual(Naming.sanitizeQueueToken("a:b:c"), "a-b-c")
      assert.strictEqual(Naming.sanitizeQueueToken("payments.charge-card"), "payments.charge-card")
    })

    it("suffixes a tenant unless it is absent, empty or default", () => {
      assert.strictEqual(Naming.tenantGroup("a", "davi-local"), "a@davi-local")
      assert.strictEqual(Naming.tenantGroup("a", undefined), "a")
      assert.strictEqual(Naming.tenantGroup("a", ""), "a")
      assert.strictEqual(Naming.tenantGroup("a", "default"), "a")
    })

    it("derives one token per registered name with an optional partition", () => {
      assert.strictEqual(Naming.routingToken("payments.charge-card"), "payments.charge-card")
      assert.strictEqual(Naming.routingToken("pay:charge", "acme"), "pay-charge@acme")
      assert.strictEqual(Naming.routingToken("x:y", "default"), "x-y")
    })

    it("agrees with the engine's own token functions", () => {
      const names = ["payments.charge-card", "pay:charge", "a:b:c", "", "ünï:cødé", "x@y"]
      const tenants = [undefined, "", "default", "acme", "davi-local", "t:1"]
      for (const name of names) {
        assert.strictEqual(Naming.sanitizeQueueToken(name), Core.sanitizeQueueToken(name))
        for (const tenant of tenants) {
          assert.strictEqual(
            Naming.routingToken(name, tenant),
            Core.tenantGroup(Core.sanitizeQueueToken(name), tenant),
            `${name} / ${tenant}`
          )
        }
      }
    })
  })

  describe("queue, channel and key names", () => {
    it("names everything under the default prefix", () => {
      const n = Naming.names()
      assert.strictEqual(n.prefix, "durable")
      assert.strictEqual(n.tasks("payments.charge-card"), "durable-tasks-payments.charge-card")
      assert.strictEqual(n.results, "durable-results")
      assert.strictEqual(n.decisions, "durable-decisions")
      assert.strictEqual(n.stepEvents, "durable-step-events")
      assert.strictEqual(n.startRun, "durable-start-run")
      assert.strictEqual(n.runRequest, "durable-run-request")
      assert.strictEqual(n.control, "durable-control")
      assert.strictEqual(n.heartbeat, "durable-heartbeat")
      assert.strictEqual(n.runReply, "durable-run-reply")
      assert.strictEqual(n.tenantEvents("acme"), "durable-tenant-events-acme")
      assert.strictEqual(
        n.workerHeartbeat("payments.charge-card", "ts-host-1"),
        "durable-worker-heartbeat:payments.charge-card:ts-host-1"
      )
      assert.strictEqual(
        n.workerDescriptor("payments.charge-card", "ts-host-1"),
        "durable-worker-descriptor:payments.charge-card:ts-host-1"
      )
    })

    it("folds a namespace into every name", () => {
      const n = Naming.names({ namespace: "dev-alice" })
      assert.strictEqual(n.tasks("payments.charge-card"), "durable-dev-alice-tasks-payments.charge-card")
      assert.strictEqual(n.results, "durable-dev-alice-results")
      assert.strictEqual(n.decisions, "durable-dev-alice-decisions")
      assert.strictEqual(n.control, "durable-dev-alice-control")
      assert.strictEqual(n.heartbeat, "durable-dev-alice-heartbeat")
      assert.strictEqual(n.workerHeartbeat("w", "i"), "durable-dev-alice-worker-heartbeat:w:i")
      assert.strictEqual(n.workerDescriptor("w", "i"), "durable-dev-alice-worker-descriptor:w:i")
    })

    it("uses a custom prefix with a namespace", () => {
      const n = Naming.names({ prefix: "flip", namespace: "dev-bob" })
      assert.strictEqual(n.tasks("payments.charge-card"), "flip-dev-bob-tasks-payments.charge-card")
      assert.strictEqual(n.results, "flip-dev-bob-results")
    })

    it("uses the partition suffix and the sanitised name in task queues and keys", () => {
      assert.strictEqual(Naming.tasksQueue("durable", Naming.routingToken("a", "davi-local")), "durable-tasks-a@davi-local")
      assert.strictEqual(Naming.tasksQueue("durable", Naming.routingToken("x:y")), "durable-tasks-x-y")
      assert.strictEqual(
        Naming.workerHeartbeatKey("durable", Naming.routingToken("pay:charge", "acme"), "ts-h-7"),
        "durable-worker-heartbeat:pay-charge@acme:ts-h-7"
      )
      assert.strictEqual(
        Naming.workerDescriptorKey("durable", Naming.routingToken("pay:charge", "acme"), "ts-h-7"),
        "durable-worker-descriptor:pay-charge@acme:ts-h-7"
      )
    })

    it("defaults the instance id to ts-<hostname>-<pid>", () => {
      assert.strictEqual(Naming.defaultInstanceId(), `ts-${Os.hostname()}-${process.pid}`)
    })
  })

  describe("broker priority", () => {
    it("maps higher engine priority to a lower BullMQ priority", () => {
      assert.strictEqual(Naming.toBrokerPriority(9), 1_048_567)
      assert.strictEqual(Naming.toBrokerPriority(0), 1_048_576)
      assert.strictEqual(Naming.toBrokerPriority(-5), 1_048_581)
      assert.strictEqual(Naming.toBrokerPriority(1.4), 1_048_575)
      assert.strictEqual(Naming.toBrokerPriority(1.5), 1_048_575)
    })

    it("clamps to [1, 2097151]", () => {
      assert.strictEqual(Naming.toBrokerPriority(1_048_575), 1)
      assert.strictEqual(Naming.toBrokerPriority(1_048_576), 1)
      assert.strictEqual(Naming.toBrokerPriority(5_000_000), 1)
      assert.strictEqual(Naming.toBrokerPriority(-1_048_575), 2_097_151)
      assert.strictEqual(Naming.toBrokerPriority(-1_048_576), 2_097_151)
      assert.strictEqual(Naming.toBrokerPriority(-9_000_000), 2_097_151)
    })

    it("leaves an absent priority absent", () => {
      assert.strictEqual(Naming.toBrokerPriority(undefined), undefined)
      assert.strictEqual(Naming.toBrokerPriority(null), undefined)
    })

    it("agrees with the engine transport's mapping", () => {
      for (const p of [undefined, -3_000_000, -1_048_576, -7, 0, 0.5, 1, 9, 100.49, 1_048_575, 3_000_000]) {
        assert.strictEqual(Naming.toBrokerPriority(p), UpstreamTransport.toBrokerPriority(p), String(p))
      }
    })
  })

  describe("job names and options", () => {
    it("adds task jobs with the engine's options and a priority only when set", () => {
      assert.deepStrictEqual(Naming.taskJobOptions(), { removeOnComplete: true, removeOnFail: { age: 86_400 } })
      assert.isFalse("priority" in Naming.taskJobOptions(undefined))
      assert.deepStrictEqual(Naming.taskJobOptions(9), {
        removeOnComplete: true,
        removeOnFail: { age: 86_400 },
        priority: 1_048_567
      })
    })

    it("adds result jobs removed on complete and on fail", () => {
      assert.deepStrictEqual(Naming.resultJobOptions, { removeOnComplete: true, removeOnFail: true })
      assert.deepStrictEqual(Naming.JobName, {
        task: "task",
        workflow: "workflow",
        result: "result",
        decision: "decision",
        stepEvent: "stepEvent"
      })
    })
  })
})
