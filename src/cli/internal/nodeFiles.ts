/**
 * The file operations verification and capture need (`readDirectory`, `readFileString`,
 * `makeDirectory`, `writeFileString`, `rename`), over `node:fs`, as a `FileSystem`, with the
 * platform's `Path`: so the command line and the promise facade need no `@effect/platform-node`.
 * Everything else the service offers fails as unsupported.
 */
import { SystemError } from "@effect/platform/Error"
import * as FileSystem from "@effect/platform/FileSystem"
import * as Path from "@effect/platform/Path"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { mkdir, readdir, readFile, rename, writeFile } from "node:fs/promises"

const failed = (method: string, path: string) => (cause: unknown) =>
  new SystemError({
    module: "FileSystem",
    method,
    pathOrDescriptor: path,
    reason: (cause as { code?: unknown })?.code === "ENOENT" ? "NotFound" : "Unknown",
    description: cause instanceof Error ? cause.message : String(cause),
    cause
  })

const attempt = <A>(method: string, path: string, run: () => Promise<A>) => Effect.tryPromise({ try: run, catch: failed(method, path) })

/** @internal */
export const fileSystem: FileSystem.FileSystem = FileSystem.makeNoop({
  readDirectory: (path) => attempt("readDirectory", path, () => readdir(path)),
  readFileString: (path, encoding) =>
    attempt("readFileString", path, () => readFile(path, { encoding: (encoding ?? "utf-8") as BufferEncoding })),
  makeDirectory: (path, options) =>
    attempt("makeDirectory", path, () => mkdir(path, { recursive: options?.recursive ?? false }).then(() => undefined)),
  writeFileString: (path, data) => attempt("writeFileString", path, () => writeFile(path, data, "utf-8")),
  rename: (from, to) => attempt("rename", from, () => rename(from, to))
})

/** The file system above and the platform's `Path`. @internal */
export const layer: Layer.Layer<FileSystem.FileSystem | Path.Path> = Layer.merge(
  Layer.succeed(FileSystem.FileSystem, fileSystem),
  Path.layer
)
