/**
 * The slice of `pg` (node-postgres) the tests and the benchmark use; `@types/pg` is not a dependency.
 */
declare module "pg" {
  interface QueryResult<R = any> {
    readonly rows: Array<R>
    readonly rowCount: number | null
  }
  interface PoolClient {
    query<R = any>(text: string, params?: Array<unknown>): Promise<QueryResult<R>>
    release(error?: unknown): void
  }
  class Pool {
    constructor(options?: { readonly connectionString?: string; readonly max?: number })
    query<R = any>(text: string, params?: Array<unknown>): Promise<QueryResult<R>>
    connect(): Promise<PoolClient>
    on(event: "error", listener: (error: Error) => void): this
    end(): Promise<void>
  }
  class Client {
    constructor(options?: { readonly connectionString?: string })
    connect(): Promise<void>
    query<R = any>(text: string, params?: Array<unknown>): Promise<QueryResult<R>>
    on(event: "notification", listener: (message: { channel: string; payload?: string }) => void): this
    on(event: "error", listener: (error: Error) => void): this
    end(): Promise<void>
  }
  const pg: { Pool: typeof Pool; Client: typeof Client }
  export default pg
  export { Client, Pool }
  export type { PoolClient, QueryResult }
}
