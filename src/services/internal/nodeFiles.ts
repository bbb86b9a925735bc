/**
 * The two file reads the memory readings need (`exists`, `readFileString`), over `node:fs`, as a
 * `FileSystem`: the default when the application provides none, so this package needs no
 * `@effect/platform-node` for them. Everything else the service would offer fails as unsupported.
 */
import * as FileSystem from "@effect/platform/FileSystem"
import { SystemError } from "@effect/platform/Error"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { access, readFile } from "node:fs/promises"

const failed = (method: string, path: string) => (cause: unknown) =>
  new SystemError({
    module: "FileSystem",
    method,
    pathOrDescriptor: path,
    reason: (cause as { code?: unknown })?.code === "ENOENT" ? "NotFound" : "Unknown",
    cause
  })

/** A read-only `FileSystem` with `exists` and `readFileString` over `node:fs/promises`. */
export const fileSystem: FileSystem.FileSystem = FileSystem.makeNoop({
  exists: (path) =>
    Effect.tryPromise({ try: () => access(path).then(() => true, () => false), catch: failed("exists", path) }),
  readFileString: (path, encoding) =>
    Effect.tryPromise({
      try: () => readFile(path, { encoding: (encoding ?? "utf-8") as BufferEncoding }),
      catch: failed("readFileString", path)
    })
})

/** {@link fileSystem} as a layer. */
export const layer: Layer.Layer<FileSystem.FileSystem> = Layer.succeed(FileSystem.FileSystem, fileSystem)
