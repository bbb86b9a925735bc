import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import type { Transport } from "../../seam/Transport.js"
import { dialectOfUrl, SqlConfigError, urlShape } from "../../transport/sql/internal/config.js"
import { dialectLabel, locationFields } from "../../transport/sql/internal/connection.js"
import type { ConnectionOptions } from "../../transport/sql/internal/options.js"
import type { Dialect } from "../../transport/sql/internal/statements.js"

/**
 * A SQL transport's layer over `options`, its `url` read from `DATABASE_URL` when none of `url`,
 * `host`, `port`, `database`, `username` and `password` is given: a field given says where the
 * database is, and the variable, most likely the application's own database, is not read (the pool
 * would take its URL over every field). A `DATABASE_URL` of the other dialect is refused naming it.
 */
export const withDatabaseUrl = <O extends ConnectionOptions, E>(
  dialect: Dialect,
  options: O,
  layer: (options: O) => Layer.Layer<Transport, E>
): Layer.Layer<Transport, E | SqlConfigError> => {
  const url = process.env.DATABASE_URL
  if (options.url !== undefined || url === undefined || locationFields(options).length > 0) return layer(options)
  const named = dialectOfUrl(url)
  if (Either.isRight(named) && named.right === dialect) return layer({ ...options, url: Redacted.make(url) })
  const fn = dialect === "postgres" ? "postgres()" : "mysql()"
  return Layer.fail(
    new SqlConfigError({
      option: "url",
      // only its shape is shown: the URL may hold a password
      message: `DATABASE_URL, which ${fn} reads when given no url, host, port, database, username or password, ${
        urlShape(url)
      }, and ${fn} connects to ${dialectLabel(dialect)}: set DATABASE_URL to a ${
        dialect === "postgres" ? "postgres://" : "mysql://"
      } URL, or pass url (or host, port, database, username, password)`
    })
  )
}
