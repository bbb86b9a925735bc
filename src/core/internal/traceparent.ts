import * as Tracer from "effect/Tracer"

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/

/**
 * The span options that make a task's span a child of the W3C `traceparent` it carries; nothing when
 * the header is absent or malformed (an invalid header never fails a task).
 *
 * @internal
 */
export const externalParent = (traceparent: string | undefined): { readonly parent?: Tracer.AnySpan } => {
  const match = traceparent === undefined ? null : TRACEPARENT.exec(traceparent.trim().toLowerCase())
  if (match === null || match[1] === "ff" || /^0+$/.test(match[2]!) || /^0+$/.test(match[3]!)) return {}
  return {
    parent: Tracer.externalSpan({
      traceId: match[2]!,
      spanId: match[3]!,
      sampled: (parseInt(match[4]!, 16) & 1) === 1
    })
  }
}
