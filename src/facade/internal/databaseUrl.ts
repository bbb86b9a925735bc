/** `url` from `DATABASE_URL` when neither `url` nor `host` is given. */
export const withDatabaseUrl = <O extends { readonly url?: unknown; readonly host?: unknown }>(options: O): O =>
  options.url === undefined && options.host === undefined && process.env.DATABASE_URL !== undefined
    ? { ...options, url: process.env.DATABASE_URL }
    : options
