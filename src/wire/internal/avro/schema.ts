/**
 * The one payload schema of the Durable Workflow protocol (`durable_workflow.protocol.Value`, v1),
 * and the Avro "Parsing Canonical Form" transformation used to fingerprint it.
 *
 * @internal
 */

/**
 * The schema exactly as published (`durable_workflow.protocol.Value.v1.avsc`). A record with one
 * field, a union of `null` and seven single-field wrapper records; arrays and maps nest `Value`.
 *
 * @internal
 */
export const valueSchemaJson =
  `{"type":"record","name":"Value","namespace":"durable_workflow.protocol","fields":[{"name":"value","type":["null",` +
  `{"type":"record","name":"BooleanValue","fields":[{"name":"boolean","type":"boolean"}]},` +
  `{"type":"record","name":"LongValue","fields":[{"name":"long","type":"long"}]},` +
  `{"type":"record","name":"DoubleValue","fields":[{"name":"double","type":"double"}]},` +
  `{"type":"record","name":"BytesValue","fields":[{"name":"bytes","type":"bytes"}]},` +
  `{"type":"record","name":"StringValue","fields":[{"name":"string","type":"string"}]},` +
  `{"type":"record","name":"ArrayValue","fields":[{"name":"items","type":{"type":"array","items":"Value"}}]},` +
  `{"type":"record","name":"MapValue","fields":[{"name":"entries","type":{"type":"map","values":"Value"}}]}]}]}`

const primitives = new Set(["null", "boolean", "int", "long", "float", "double", "bytes", "string"])
const namedKinds = new Set(["record", "enum", "fixed"])
/** Attribute order of the canonical form; every other attribute is dropped. */
const keptAttributes = ["name", "type", "fields", "symbols", "items", "values", "size"] as const

const fullName = (name: string, namespace: string | undefined): string =>
  name.includes(".") || namespace === undefined || namespace === "" ? name : `${namespace}.${name}`

/**
 * The Parsing Canonical Form of an Avro schema (Avro specification, "Parsing Canonical Form for
 * Schemas"): primitives as bare names, full names everywhere, only the attributes that matter for
 * parsing in a fixed order, a named type written out once and referenced by full name afterwards,
 * no whitespace. Throws on a schema it cannot read: only ever applied to the constant above.
 *
 * @internal
 */
export const parsingCanonicalForm = (schema: unknown): string => {
  const defined = new Set<string>()

  const go = (node: unknown, namespace: string | undefined): string => {
    if (typeof node === "string") {
      if (primitives.has(node)) return JSON.stringify(node)
      return JSON.stringify(fullName(node, namespace))
    }
    if (Array.isArray(node)) return `[${node.map((branch) => go(branch, namespace)).join(",")}]`
    if (node === null || typeof node !== "object") throw new Error(`not an Avro schema: ${String(node)}`)
    const obj = node as Record<string, unknown>
    const type = obj["type"]
    if (typeof type === "string" && primitives.has(type)) return JSON.stringify(type)
    if (typeof type !== "string") return go(type, namespace)

    let ownNamespace = namespace
    let name: string | undefined
    if (namedKinds.has(type)) {
      const rawName = obj["name"]
      if (typeof rawName !== "string") throw new Error(`named type without a name: ${JSON.stringify(obj)}`)
      const declared = typeof obj["namespace"] === "string" ? (obj["namespace"] as string) : namespace
      name = fullName(rawName, declared)
      if (defined.has(name)) return JSON.stringify(name)
      defined.add(name)
      const dot = name.lastIndexOf(".")
      ownNamespace = dot === -1 ? undefined : name.slice(0, dot)
    }

    const parts: Array<string> = []
    for (const attribute of keptAttributes) {
      switch (attribute) {
        case "name":
          if (name !== undefined) parts.push(`"name":${JSON.stringify(name)}`)
          break
        case "type":
          parts.push(`"type":${JSON.stringify(type)}`)
          break
        case "fields": {
          const fields = obj["fields"]
          if (Array.isArray(fields)) {
            const rendered = fields.map((field: Record<string, unknown>) =>
              `{"name":${JSON.stringify(field["name"])},"type":${go(field["type"], ownNamespace)}}`
            )
            parts.push(`"fields":[${rendered.join(",")}]`)
          }
          break
        }
        case "symbols":
          if (Array.isArray(obj["symbols"])) parts.push(`"symbols":${JSON.stringify(obj["symbols"])}`)
          break
        case "items":
          if (obj["items"] !== undefined) parts.push(`"items":${go(obj["items"], ownNamespace)}`)
          break
        case "values":
          if (obj["values"] !== undefined) parts.push(`"values":${go(obj["values"], ownNamespace)}`)
          break
        case "size":
          if (typeof obj["size"] === "number") parts.push(`"size":${String(obj["size"])}`)
          break
      }
    }
    return `{${parts.join(",")}}`
  }

  return go(schema, undefined)
}
