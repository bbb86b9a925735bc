import * as Predicate from "effect/Predicate"
/** Reads and checks `/api/cluster/info` (reference §2.3). @internal */

const prefix = "Server compatibility error: "

/** The worker protocol this worker speaks. @internal */
export const WORKER_PROTOCOL_VERSION = "1.1"

const parseVersion = (value: string): [number, number] | undefined => {
  const match = /^(\d+)\.(\d+)$/.exec(value.trim())
  return match === null ? undefined : [Number(match[1]), Number(match[2])]
}

/** Same major, minor ≥ ours; unparsable → exact equality. @internal */
export const protocolCompatible = (server: string, ours: string = WORKER_PROTOCOL_VERSION): boolean => {
  const [s, o] = [parseVersion(server), parseVersion(ours)]
  if (s === undefined || o === undefined) return server === ours
  return s[0] === o[0] && s[1] >= o[1]
}

const intVersion = (value: unknown): number | undefined =>
  typeof value === "number" && Number.isInteger(value) ? value : typeof value === "string" && /^\d+$/.test(value) ? Number(value) : undefined

const includesAll = (value: unknown, required: ReadonlyArray<string>): boolean =>
  Array.isArray(value) && required.every((item) => value.includes(item))

const authCompositionProblem = (contract: unknown): string | undefined => {
  if (!Predicate.isRecord(contract)) return "missing auth_composition_contract manifest"
  if (contract["schema"] !== "durable-workflow.v2.auth-composition.contract" || intVersion(contract["version"]) !== 1) {
    return `unsupported auth_composition_contract ${JSON.stringify(contract["schema"])} version ${JSON.stringify(contract["version"])}`
  }
  if (!Array.isArray(contract["precedence"])) return "auth_composition_contract is missing precedence"
  const env = contract["canonical_environment"]
  const expectedEnv: Record<string, string> = {
    server_url: "DURABLE_WORKFLOW_SERVER_URL",
    namespace: "DURABLE_WORKFLOW_NAMESPACE",
    auth_token: "DURABLE_WORKFLOW_AUTH_TOKEN",
    tls_verify: "DURABLE_WORKFLOW_TLS_VERIFY",
    profile: "DW_ENV"
  }
  if (!Predicate.isRecord(env) || Object.entries(expectedEnv).some(([k, v]) => env[k] !== v)) {
    return "auth_composition_contract.canonical_environment does not name the expected variables"
  }
  const material = contract["auth_material"]
  const token = Predicate.isRecord(material) ? material["token"] : undefined
  if (!Predicate.isRecord(material) || !Predicate.isRecord(token) || token["status"] !== "supported" || token["redacted"] !== true) {
    return "auth_composition_contract.auth_material.token must be supported and redacted"
  }
  for (const reserved of ["mtls", "signed_headers"]) {
    const entry = material[reserved]
    if (!Predicate.isRecord(entry) || entry["status"] !== "reserved") return `auth_composition_contract.auth_material.${reserved} must be reserved`
  }
  const effective = contract["effective_config"]
  if (!Predicate.isRecord(effective) || !includesAll(effective["required_fields"], ["server_url", "namespace", "profile", "auth", "tls", "identity"])) {
    return "auth_composition_contract.effective_config.required_fields is incomplete"
  }
  const redaction = contract["redaction"]
  if (!Predicate.isRecord(redaction) || !includesAll(redaction["never_echo"], ["bearer_tokens", "private_keys", "raw_authorization_headers"])) {
    return "auth_composition_contract.redaction.never_echo is incomplete"
  }
  return undefined
}

/** What registration learns from a compatible server. @internal */
export interface ServerInfo {
  readonly queryTasks: boolean
  /** The full synchronous pre-accept update-validation contract (multiplexed workflow polls). */
  readonly updateValidation: boolean
  /** `server_capabilities.long_poll_timeout`, seconds. */
  readonly longPollTimeout: number | undefined
  readonly protocolVersion: string
}

/**
 * Whether the server advertises synchronous pre-accept update validation through multiplexed
 * workflow-task polls (reference §2.3 step 4), every field exactly.
 *
 * @internal
 */
export const supportsUpdateValidation = (capabilities: Record<string, unknown>): boolean => {
  if (capabilities["update_validation_tasks"] !== true) return false
  const sync = capabilities["synchronous_update_validation"]
  if (!Predicate.isRecord(sync)) return false
  const poll = sync["task_poll"]
  return sync["supported"] === true &&
    sync["acceptance_boundary"] === "validator_approved" &&
    sync["worker_capability"] === "update_validation_tasks" &&
    sync["workflow_contract_field"] === "update_validators" &&
    Predicate.isRecord(poll) &&
    poll["strategy"] === "multiplexed" &&
    poll["endpoint"] === "/worker/workflow-tasks/poll" &&
    poll["request_field"] === "task_kinds" &&
    poll["response_discriminator"] === "task.task_kind" &&
    includesAll(poll["task_kinds"], ["workflow", "update_validation"])
}

/** Checks the document; returns the message of the first problem (starting `Server compatibility error: `). @internal */
export const check = (info: unknown, ours: string = WORKER_PROTOCOL_VERSION): ServerInfo | { readonly problem: string } => {
  const fail = (problem: string) => ({ problem: prefix + problem })
  if (!Predicate.isRecord(info)) return fail("/api/cluster/info did not return an object (invalid_cluster_info)")
  const control = info["control_plane"]
  if (!Predicate.isRecord(control)) return fail("missing control_plane manifest")
  if (String(control["version"]) !== "2") return fail(`unsupported control_plane.version ${JSON.stringify(control["version"])}; this worker requires '2'`)
  const request = control["request_contract"]
  if (!Predicate.isRecord(request)) return fail("missing control_plane.request_contract")
  if (request["schema"] !== "durable-workflow.v2.control-plane-request.contract" || intVersion(request["version"]) !== 1) {
    return fail(
      `unsupported control_plane.request_contract ${JSON.stringify(request["schema"])} version ${JSON.stringify(request["version"])}`
    )
  }
  const protocol = info["worker_protocol"]
  if (!Predicate.isRecord(protocol)) return fail("missing worker_protocol manifest")
  const version = String(protocol["version"] ?? "")
  if (!protocolCompatible(version, ours)) {
    return fail(`incompatible worker_protocol.version '${version}'; this worker requires major-equal and minor>='${ours}'`)
  }
  const auth = authCompositionProblem(info["auth_composition_contract"])
  if (auth !== undefined) return fail(auth)
  const capabilities = Predicate.isRecord(protocol["server_capabilities"]) ? protocol["server_capabilities"] : {}
  const raw = capabilities["long_poll_timeout"]
  const longPoll = typeof raw === "number" ? raw : typeof raw === "string" && raw.trim() !== "" && !Number.isNaN(Number(raw)) ? Number(raw) : undefined
  return {
    queryTasks: capabilities["query_tasks"] === true,
    updateValidation: supportsUpdateValidation(capabilities),
    longPollTimeout: longPoll !== undefined && longPoll > 0 ? longPoll : undefined,
    protocolVersion: version
  }
}

/** Poll timing (reference §1.7): the body's `timeout_seconds` and the HTTP timeout, seconds. @internal */
export const pollTiming = (pollTimeoutSeconds: number, longPollTimeout: number | undefined) => {
  const t = longPollTimeout === undefined ? pollTimeoutSeconds : Math.max(pollTimeoutSeconds, longPollTimeout + 5)
  const timeoutSeconds = t >= 1 ? Math.min(Math.ceil(t), 60) : 0
  const httpTimeout = timeoutSeconds === 0 ? Math.max(t, 1) : Math.max(t, timeoutSeconds + 5)
  return { t, timeoutSeconds, httpTimeout }
}
