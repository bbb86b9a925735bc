import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import type { Transport } from "../../seam/Transport.js"
import { dialectOfUrl, SqlConfigError } from "../../transport/sql/internal/config.js"
import { dialectLabel, overEnvironmentUrl } from "../../transport/sql/internal/connection.js"
import type { ConnectionOptions } from "../../transport/sql/internal/options.js"
import type { Dialect } from "../../transport/sql/internal/statements.js"

/**
 * A SQL transport's layer over `options`, its `url` read from `DATABASE_URL` when none is given, with
 * the connection fields given over that URL's parts (explicit options win). A `DATABASE_URL` of the
 * other dialect is some other database's: left out beside connection fields, refused naming the
 * variable without them (the application wrote no url).
 */
export const withDatabaseUrl = <O extends ConnectionOptions, E>(
  dialect: Dialect,
  options: O,
  layer: (options: O) => Layer.Layer<Transport, E>
): Layer.Layer<Transport, E | SqlConfigError> => {
  const url = process.env.DATABASE_URL
  if (options.url !== undefined || url === undefined) return layer(options)
  const named = dialectOfUrl(url)
  if (Either.isRight(named) && named.right === dialect) return layer(overEnvironmentUrl(url, options))
  const { database, host, password, port, username } = options
  if ([database, host, password, port, username].some((field) => field !== undefined)) return layer(options)
  const scheme = /^[a-z][a-z0-9+.-]*:/i.exec(url)?.[0]
  const fn = dialect === "postgres" ? "postgres()" : "mysql()"
  return Layer.fail(
    new SqlConfigError({
      option: "url",
      // only the scheme is shown: the URL may hold a password
      message: `DATABASE_URL, which ${fn} reads when no url is given, ${
        Either.isRight(named) ? `is a ${scheme}// URL` : `has ${scheme === undefined ? "no scheme" : `the scheme ${scheme}`}`
      }, and ${fn} connects to ${dialectLabel(dialect)}: set DATABASE_URL to a ${
        dialect === "postgres" ? "postgres://" : "mysql://"
      } URL, or pass url (or host, port, database, username, password)`
    })
  )
}
