import Foundation
import PackagePlugin

/// Writes `BuildInfo.swift` (the source's commit, from `git describe`) before every build of
/// the target it is applied to; the file is only replaced when the commit changed, so an
/// unchanged tree rebuilds nothing. Without git, or outside a clone, the commit is "unknown".
@main
struct BuildInfoPlugin: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        let generated = context.pluginWorkDirectoryURL.appending(path: "generated")
        let scratch = context.pluginWorkDirectoryURL.appending(path: "BuildInfo.swift.next")
        let script = #"""
            commit=$(git -C "$1" describe --tags --always --dirty 2>/dev/null | tr -cd 'A-Za-z0-9._-')
            mkdir -p "$2"
            printf '/// Generated at build time.\nenum BuildInfo {\n    static let commit = "%s"\n}\n' "${commit:-unknown}" > "$3"
            cmp -s "$3" "$2/BuildInfo.swift" || mv "$3" "$2/BuildInfo.swift"
            """#
        return [.prebuildCommand(
            displayName: "Build info (git describe)",
            executable: URL(fileURLWithPath: "/bin/sh"),
            arguments: ["-c", script, "build-info", context.package.directoryURL.path, generated.path, scratch.path],
            outputFilesDirectory: generated)]
    }
}
