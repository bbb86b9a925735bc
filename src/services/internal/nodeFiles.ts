/**
 * The file operations this package needs, over `node:fs`, as a `FileSystem` (with the platform's
 * `Path`): the memory readings (`exists`, `readFileString`), and replay verification and capture
 * (`readDirectory`, `makeDirectory`, `writeFileString`, `rename`). It is the default where the
 * application provides no `FileSystem`, so the package needs no `@effect/platform-node`.
 * Everything else the service would offer fails as unsupported.
 */
import { SystemError } from "@effect/platform/Error"
import * as FileSystem from "@effect/platform/FileSystem"
import * as Path from "@effect/platform/Path"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { access, mkdir, readdir, readFile, rename, writeFile } from "node:fs/promises"

const failed = (method: string, path: string) => (cause: unknown) =>
  new SystemError({
    module: "FileSystem",
    method,
    pathOrDescriptor: path,
    reason: (cause as { code?: unknown })?.code === "ENOENT" ? "NotFound" : "Unknown",
    description: cause instanceof Error ? cause.message : String(cause),
    cause
  })

const attempt = <A>(method: string, path: string, run: () => Promise<A>) =>
  Effect.tryPromise({ try: run, catch: failed(method, path) })

/** @internal */
export const fileSystem: FileSystem.FileSystem = FileSystem.makeNoop({
  exists: (path) => attempt("exists", path, () => access(path).then(() => true, () => false)),
  readFileString: (path, encoding) =>
    attempt("readFileString", path, () => readFile(path, { encoding: (encoding ?? "utf-8") as BufferEncoding })),
  readDirectory: (path) => attempt("readDirectory", path, () => readdir(path)),
  makeDirectory: (path, options) =>
    attempt("makeDirectory", path, () => mkdir(path, { recursive: options?.recursive ?? false }).then(() => undefined)),
  writeFileString: (path, data) => attempt("writeFileString", path, () => writeFile(path, data, "utf-8")),
  rename: (from, to) => attempt("rename", from, () => rename(from, to))
})

/** {@link fileSystem} as a layer. @internal */
export const layer: Layer.Layer<FileSystem.FileSystem> = Layer.succeed(FileSystem.FileSystem, fileSystem)

/** {@link fileSystem} and the platform's `Path`. @internal */
export const layerWithPath: Layer.Layer<FileSystem.FileSystem | Path.Path> = Layer.merge(layer, Path.layer)
