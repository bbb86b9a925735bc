/**
 * The option types of the promise facade's transport constructors, declared with no driver's types
 * (an ioredis connection or an SQS client is described by its shape), so the facade's declarations
 * check in a project that installed only the drivers it uses (`skipLibCheck: false`).
 */
import type * as Redacted from "effect/Redacted"
import type { SqsTransportOptions } from "../../transport/sqs/internal/options.js"

export type { MysqlOptions, PostgresOptions } from "../../transport/sql/internal/options.js"

/**
 * The ioredis connection settings the transport reads itself (the target it names in errors, the
 * password it keeps out of them). Each may be `undefined`, meaning ioredis's default, so a value
 * read from `process.env` fits under `exactOptionalPropertyTypes`.
 *
 * @since 0.3.0
 * @category models
 */
export interface RedisConnectionSettings {
  readonly host?: string | undefined
  readonly port?: number | undefined
  readonly username?: string | undefined
  readonly password?: string | undefined
  readonly db?: number | undefined
  readonly tls?: object | undefined
}

/**
 * ioredis connection options (`new Redis(options)`): host, port, credentials, TLS, and any other
 * option ioredis takes. ioredis's own `RedisOptions` fits, as does an application's own options
 * interface or an object literal with further ioredis options.
 *
 * @since 0.3.0
 * @category models
 */
export type RedisConnectionOptions =
  | RedisConnectionSettings
  // an object literal naming further ioredis options (a named interface has no index signature, so
  // it takes the first member)
  | (RedisConnectionSettings & { readonly [option: string]: unknown })

/**
 * Options of the Redis/BullMQ transport; durations in milliseconds. They are checked as
 * `BullMQTransport` checks its own (an unknown key included).
 *
 * @since 0.1.0
 * @category models
 */
export interface RedisOptions {
  /** A `redis://` or `rediss://` URL. Default `process.env.REDIS_URL`, else `redis://127.0.0.1:6379`. */
  readonly url?: string | Redacted.Redacted | undefined
  /** ioredis connection options, used instead of `url`. Default none. */
  readonly connection?: RedisConnectionOptions | undefined
  /** Default `durable`, as the engine's. */
  readonly prefix?: string | undefined
  /** The transport namespace (keyspace `<prefix>-<namespace>`). Default none. */
  readonly namespace?: string | undefined
  /** Serve `<name>@<partition>` tokens: the steps of runs in that engine namespace. Default none; not with `namespace`. */
  readonly partition?: string | undefined
  /** BullMQ lock duration of a running job, renewed at half of it. Default 30,000. */
  readonly lockDurationMs?: number | undefined
  /** Publish step beats on `<P>-heartbeat` this often while a step runs (engine-side `timeoutMs`). Default off. */
  readonly stepBeatIntervalMs?: number | undefined
  /** How long the first connection may take before `run` fails. Default 5,000. */
  readonly connectTimeoutMs?: number | undefined
  /** How often stalled jobs are looked for. Default 30,000. */
  readonly stalledIntervalMs?: number | undefined
  /**
   * Further brokers of the engine's transport pool, by the pool id the engine stamps on tasks as
   * `transport`; a task is answered on the broker its `transport` names. Default none.
   */
  readonly brokers?: Readonly<Record<string, { readonly url?: string | Redacted.Redacted | undefined; readonly connection?: RedisConnectionOptions | undefined }>> | undefined
  /** The engine's pool id of the main broker. Default `"default"`. */
  readonly brokerId?: string | undefined
  /** Commands of one event-loop turn that may share a socket write. Default 8; 1 turns this off. */
  readonly commandsPerWrite?: number | undefined
  /**
   * Wait for a Redis that does not answer at start (logged once, retried with a backoff of up to 5 s)
   * instead of failing `run`. Refused credentials still fail at once. Default `false`.
   */
  readonly waitForBroker?: boolean | undefined
}

/**
 * `@aws-sdk/client-sqs` client settings (`new SQSClient(config)`): region, endpoint, credentials, and
 * any other setting the SDK takes.
 *
 * @since 0.3.0
 * @category models
 */
export interface SqsClientSettings {
  readonly region?: string | (() => Promise<string>) | undefined
  readonly endpoint?: string | object | undefined
  readonly credentials?: object | (() => Promise<object>) | undefined
  readonly [setting: string]: unknown
}

/**
 * Options of `sqs(...)`: the SQS transport's own, checked as it checks them.
 *
 * @since 0.3.0
 * @category models
 */
export interface SqsOptions extends SqsTransportOptions {
  /** An `SQSClient` of `@aws-sdk/client-sqs` v3 to use (not destroyed by the transport). Default: one built from `clientConfig`. */
  readonly client?: object | undefined
  /** Used when `client` is omitted, e.g. `{ endpoint, region, credentials }`. Default `{}` (the SDK's own lookup). */
  readonly clientConfig?: SqsClientSettings | undefined
}
