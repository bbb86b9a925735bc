import * as Either from "effect/Either"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import * as SchemaAST from "effect/SchemaAST"

/**
 * The parameter types of a command contract (reference §2.1): the scalar kinds of the server's
 * language, `a|b` unions of them, or `null` for a type it cannot name (a custom class).
 *
 * @internal
 */
export type ContractType = "bool" | "int" | "float" | "string" | "array" | "callable" | "mixed" | "null"

/** A handler parameter as declared (positional). @internal */
export interface ParameterSpec {
  readonly name: string
  /** Decodes (and types) the argument; its encoded side gives the contract type. */
  readonly schema: Schema.Schema<any, any, never> | undefined
  /** An explicit contract type (wins over the schema's). */
  readonly type: string | null | undefined
  readonly variadic: boolean
  readonly defaultAvailable: boolean
  readonly default: unknown
  readonly allowsNull: boolean | undefined
}

/** Declared receivers of one workflow type, by kind. @internal */
export interface ReceiverSpecs {
  readonly signals: Readonly<Record<string, ReadonlyArray<ParameterSpec>>>
  readonly queries: Readonly<Record<string, ReadonlyArray<ParameterSpec>>>
  readonly updates: Readonly<Record<string, ReadonlyArray<ParameterSpec>>>
  readonly updateValidators: ReadonlyArray<string>
}

/** A receiver contract on the wire. @internal */
export interface HandlerContract {
  readonly name: string
  readonly parameters: ReadonlyArray<{
    readonly name: string
    readonly position: number
    readonly required: boolean
    readonly variadic: boolean
    readonly default_available: boolean
    readonly default: unknown
    readonly type: string | null
    readonly allows_null: boolean
  }>
}

/** `workflow_command_contracts[type]` on the wire. @internal */
export interface CommandContract {
  readonly queries: ReadonlyArray<string>
  readonly query_contracts: ReadonlyArray<HandlerContract>
  readonly signals: ReadonlyArray<string>
  readonly signal_contracts: ReadonlyArray<HandlerContract>
  readonly updates: ReadonlyArray<string>
  readonly update_contracts: ReadonlyArray<HandlerContract>
  readonly update_validators: ReadonlyArray<string>
}

const isIntegerRefinement = (ast: SchemaAST.Refinement): boolean => {
  const json = SchemaAST.getJSONSchemaAnnotation(ast)
  return json._tag === "Some" && (json.value as { type?: unknown }).type === "integer"
}

interface Mapped {
  readonly types: ReadonlyArray<string>
  readonly nullable: boolean
  /** A member the server's type system cannot name: the whole type is `null`. */
  readonly opaque: boolean
}

const one = (type: string): Mapped => ({ types: [type], nullable: false, opaque: false })
const nullType: Mapped = { types: [], nullable: true, opaque: false }
const opaque: Mapped = { types: [], nullable: false, opaque: true }

const literalType = (literal: SchemaAST.LiteralValue): Mapped =>
  literal === null
    ? nullType
    : typeof literal === "string"
    ? one("string")
    : typeof literal === "boolean"
    ? one("bool")
    : typeof literal === "bigint"
    ? one("int")
    : one(Number.isInteger(literal) ? "int" : "float")

/** Maps the encoded side of a schema to contract type names. */
const mapAst = (ast: SchemaAST.AST, seen: Set<SchemaAST.AST>): Mapped => {
  switch (ast._tag) {
    case "StringKeyword":
    case "TemplateLiteral":
      return one("string")
    case "NumberKeyword":
      return one("float")
    case "BigIntKeyword":
      return one("int")
    case "BooleanKeyword":
      return one("bool")
    case "Literal":
      return literalType(ast.literal)
    case "Enums": {
      const types = new Set(ast.enums.map(([, value]) => typeof value === "string" ? "string" : Number.isInteger(value) ? "int" : "float"))
      return { types: [...types], nullable: false, opaque: false }
    }
    case "UndefinedKeyword":
    case "VoidKeyword":
      return nullType
    case "TupleType":
    case "TypeLiteral":
    case "ObjectKeyword":
      return one("array")
    case "UnknownKeyword":
    case "AnyKeyword":
      return one("mixed")
    case "Refinement":
      return isIntegerRefinement(ast) ? one("int") : mapAst(ast.from, seen)
    case "Transformation":
      return mapAst(ast.from, seen)
    case "Suspend": {
      if (seen.has(ast)) return one("array")
      seen.add(ast)
      return mapAst(ast.f(), seen)
    }
    case "Union": {
      const members = ast.types.map((member) => mapAst(member, seen))
      return {
        types: [...new Set(members.flatMap((m) => m.types))],
        nullable: members.some((m) => m.nullable),
        opaque: members.some((m) => m.opaque)
      }
    }
    default:
      // declarations (classes, Uint8Array, Date…), symbols, never
      return opaque
  }
}

/**
 * The contract type of a schema's encoded side and whether it admits `null`: `String` →
 * `string`, `Number` → `float`, `Int`/`BigInt` → `int`, `Boolean` → `bool`, literals by their
 * value, structs/records/arrays/tuples → `array`, `Unknown`/`Any` → `mixed`, `Null`/`Undefined` →
 * `null`, unions → `a|b` (null members only set `allows_null`), anything else (a class) → `null`.
 *
 * @internal
 */
export const contractTypeOf = (schema: Schema.Schema.Any): { readonly type: string | null; readonly allowsNull: boolean } => {
  const mapped = mapAst(schema.ast, new Set())
  if (mapped.opaque) return { type: null, allowsNull: mapped.nullable }
  if (mapped.types.includes("mixed")) return { type: "mixed", allowsNull: true }
  if (mapped.types.length === 0) return { type: "null", allowsNull: true }
  return { type: mapped.types.join("|"), allowsNull: mapped.nullable }
}

const handlerContract = (name: string, parameters: ReadonlyArray<ParameterSpec>): HandlerContract => ({
  name,
  parameters: parameters.map((p, position) => {
    const derived = p.schema === undefined ? { type: "mixed", allowsNull: true } : contractTypeOf(p.schema)
    const type = p.type === undefined ? derived.type : p.type
    const allowsNull = p.allowsNull ?? (p.type === undefined
      ? derived.allowsNull || (p.defaultAvailable && p.default === null)
      : type === "mixed" || type === "null" || (p.defaultAvailable && p.default === null))
    return {
      name: p.name,
      position,
      required: !p.variadic && !p.defaultAvailable,
      variadic: p.variadic,
      default_available: p.defaultAvailable,
      default: p.defaultAvailable ? (p.default === undefined ? null : p.default) : null,
      type,
      allows_null: allowsNull
    }
  })
})

const sortedContracts = (specs: Readonly<Record<string, ReadonlyArray<ParameterSpec>>>): ReadonlyArray<HandlerContract> =>
  Object.keys(specs).sort().map((name) => handlerContract(name, specs[name]!))

/** The command contract of a workflow type: sorted names and per-handler parameters. @internal */
export const commandContract = (specs: ReceiverSpecs): CommandContract => ({
  queries: Object.keys(specs.queries).sort(),
  query_contracts: sortedContracts(specs.queries),
  signals: Object.keys(specs.signals).sort(),
  signal_contracts: sortedContracts(specs.signals),
  updates: Object.keys(specs.updates).sort(),
  update_contracts: sortedContracts(specs.updates),
  update_validators: [...specs.updateValidators].sort()
})

/** No receivers declared. @internal */
export const emptySpecs: ReceiverSpecs = { signals: {}, queries: {}, updates: {}, updateValidators: [] }

/** Why arguments do not fit a declaration: per-parameter messages (`validation_errors` shape). @internal */
export class ArgumentsMismatch {
  readonly _tag = "ArgumentsMismatch"
  constructor(readonly message: string, readonly errors: Readonly<Record<string, ReadonlyArray<string>>>) {}
}

/**
 * Fits positional arguments to a declaration: fills defaults, checks arity and decodes each
 * argument with its schema (undeclared receivers take the arguments as they are).
 *
 * @internal
 */
export const fitArguments = (
  receiver: string,
  parameters: ReadonlyArray<ParameterSpec> | undefined,
  args: ReadonlyArray<unknown>
): Either.Either<ReadonlyArray<unknown>, ArgumentsMismatch> => {
  if (parameters === undefined) return Either.right(args)
  const errors: Record<string, Array<string>> = {}
  const out: Array<unknown> = []
  const decode = (p: ParameterSpec, value: unknown, key: string) => {
    if (p.schema === undefined) return void out.push(value)
    const decoded = Schema.decodeUnknownEither(p.schema)(value)
    if (Either.isRight(decoded)) out.push(decoded.right)
    else (errors[key] ??= []).push(ParseResult.TreeFormatter.formatErrorSync(decoded.left))
  }
  parameters.forEach((p, i) => {
    if (p.variadic) {
      args.slice(i).forEach((value, j) => decode(p, value, `${p.name}.${j}`))
      return
    }
    if (i < args.length) return decode(p, args[i], p.name)
    if (p.defaultAvailable) return void out.push(p.default)
    ;(errors[p.name] ??= []).push(`the argument ${p.name} is required`)
  })
  const last = parameters[parameters.length - 1]
  if (!(last?.variadic ?? false) && args.length > parameters.length) {
    ;(errors["arguments"] ??= []).push(`${receiver} takes at most ${parameters.length} argument(s), got ${args.length}`)
  }
  const keys = Object.keys(errors)
  if (keys.length === 0) return Either.right(out)
  const first = errors[keys[0]!]![0]!
  return Either.left(new ArgumentsMismatch(`invalid arguments for ${receiver}: ${keys[0]}: ${first}`, errors))
}
