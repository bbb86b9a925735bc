/**
 * Why a value cannot go on a JSON wire, and where in it: what `JSON.stringify` would throw on (a
 * BigInt, a cycle) or silently change (a function or symbol dropped, a non-finite number turned into
 * `null`, a Map, Set, Error or Promise turned into `{}`). Checked where a handler's result is built, so a bad result fails at once, named, instead of
 * failing the answer later.
 *
 * @internal
 */
export interface Unencodable {
  /** Where the bad value is, e.g. `$.items[2].amount`. */
  readonly path: string
  readonly reason: string
}

const key = (path: string, name: string) => /^[A-Za-z_$][\w$]*$/.test(name) ? `${path}.${name}` : `${path}[${JSON.stringify(name)}]`

/** The first part of `value` that JSON cannot carry, or `undefined` when all of it can. @internal */
export const unencodable = (value: unknown): Unencodable | undefined => {
  const open = new Set<object>()
  const visit = (v: unknown, path: string, inObject: boolean): Unencodable | undefined => {
    switch (typeof v) {
      case "string":
      case "boolean":
        return undefined
      case "number":
        return Number.isFinite(v) ? undefined : { path, reason: `the number ${v} has no JSON form` }
      case "bigint":
        return { path, reason: "a BigInt has no JSON form (return it as a string or number)" }
      case "function":
        return { path, reason: "a function has no JSON form" }
      case "symbol":
        return { path, reason: "a symbol has no JSON form" }
      case "undefined":
        // a property that is undefined is left out, as JSON.stringify does; in an array it would become null
        return inObject ? undefined : { path, reason: "undefined in an array has no JSON form" }
    }
    if (v === null) return undefined
    const object = v as object & { toJSON?: unknown }
    let toJSON: unknown
    try {
      toJSON = object.toJSON
      if (typeof toJSON === "function") return visit((toJSON as (k: string) => unknown).call(object, ""), path, inObject)
    } catch (error) {
      return { path, reason: `its toJSON (or a getter) throws: ${safeMessage(error)}` }
    }
    const lost = emptied(object)
    if (lost !== undefined) return { path, reason: lost }
    if (open.has(object)) return { path, reason: "the value refers to itself (a cycle)" }
    open.add(object)
    let found: Unencodable | undefined
    if (Array.isArray(object)) {
      for (let i = 0; i < object.length && found === undefined; i++) found = visit(object[i], `${path}[${i}]`, false)
    } else {
      for (const name of Object.keys(object)) {
        let child: unknown
        try {
          child = (object as Record<string, unknown>)[name]
        } catch (error) {
          found = { path: key(path, name), reason: `reading it throws: ${safeMessage(error)}` }
          break
        }
        found = visit(child, key(path, name), true)
        if (found !== undefined) break
      }
    }
    open.delete(object)
    return found
  }
  if (value === undefined) return undefined
  try {
    return visit(value, "$", false)
  } catch (error) {
    // what throws outside a toJSON or a getter: the walk ran out of stack (a value nested thousands
    // deep, which JSON.stringify cannot encode either), or a proxy's trap threw. Either is a value the
    // wire cannot carry, and a throw here would end the task without an answer, to be given back and
    // run again for ever
    return error instanceof RangeError && open.size > 0 && /call stack/i.test(safeMessage(error))
      ? { path: "$", reason: `it is nested ${open.size} or more levels deep, deeper than JSON can be encoded` }
      : { path: "$", reason: `reading it throws: ${safeMessage(error)}` }
  }
}

/**
 * Why an object whose contents JSON does not see (none of them are own enumerable properties) would
 * arrive as `{}`, for the kinds a handler returns by mistake.
 */
const emptied = (object: object): string | undefined =>
  object instanceof Map
    ? "a Map becomes {} in JSON (return Object.fromEntries(map) or [...map])"
    : object instanceof Set
    ? "a Set becomes {} in JSON (return [...set])"
    : object instanceof WeakMap || object instanceof WeakSet
    ? "a WeakMap or WeakSet becomes {} in JSON"
    : object instanceof Promise
    ? "a Promise becomes {} in JSON (await it)"
    : object instanceof Error
    ? "an Error becomes {} in JSON (throw it, or return its message)"
    : undefined

/** An error's message, when reading it does not throw too. */
const safeMessage = (error: unknown): string => {
  try {
    return error instanceof Error ? error.message : String(error)
  } catch {
    return "an error whose message cannot be read"
  }
}

/**
 * The failure a result that cannot be encoded is answered with: final, since a retry returns the same.
 * `code` is `unserializable_output` unless said (a workflow's step or child input is `unserializable_input`).
 *
 * @internal
 */
export const unserializableError = (what: string, bad: Unencodable, code = "unserializable_output") => ({
  message: `${what} cannot be encoded as JSON: ${bad.reason} at ${bad.path}`,
  code,
  retryable: false
})
