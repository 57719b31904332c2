import ArgumentParser
import Foundation
import IdreconDomain
import IdreconVersion

/// `idrecon`: Facebook-Login identity reconciliation over an SQLite event log.
struct Idrecon: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "idrecon",
        abstract: "Event-sourced identity reconciliation for Facebook Login events.",
        discussion: """
            Events (login-event/v1 JSON) are appended to an SQLite log; bad records are \
            quarantined with a stable reason code. Exit codes: 0 ok, 1 not found or \
            violations found, 2 bad usage or input.
            """,
        version: IdreconVersion.description,
        subcommands: [
            IngestCommand.self, ConsumeCommand.self, ProduceCommand.self, DevBrokerCommand.self, ReplayCommand.self, DeviceCommand.self, UserCommand.self, ExplainCommand.self,
            FriendsCommand.self, AccessCommand.self, ExportCommand.self, AuditCommand.self, ForgetCommand.self, GraphCommand.self, StatsCommand.self, QuarantineCommand.self, BackupCommand.self, ServeCommand.self,
        ]
    )
}

@main
enum Main {
    static func main() async {
        MemoryPolicy.apply()
        FileLimit.raise()
        do {
            // `--embedded=N` is `--embedded` with N partitions.
            let arguments = CommandLine.arguments.dropFirst().flatMap { argument -> [String] in
                argument.hasPrefix("--embedded=") ? ["--embedded", "--embedded-partitions", String(argument.dropFirst(11))] : [argument]
            }
            var command = try Idrecon.parseAsRoot(arguments)
            // Only the commands that wait on servers (`consume`, `serve`) are asynchronous: the rest
            // run here, on the main thread, and never start Swift's cooperative threads (~1 ms of a query).
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch let code as ExitCode {
            exit(code.rawValue)
        } catch let error as IdreconError {
            FileHandle.standardError.write(Data("idrecon: \(RowPrinter.escape(error.description))\n".utf8))
            exit(error.kind.exitCode)
        } catch {
            let code = Idrecon.exitCode(for: error)
            if code == .success {
                print(Idrecon.fullMessage(for: error))
                exit(0)
            }
            FileHandle.standardError.write(Data((Idrecon.fullMessage(for: error) + "\n").utf8))
            // Usage errors (ArgumentParser's EX_USAGE) map to the spec's exit code 2.
            exit(code == .validationFailure ? 2 : code.rawValue)
        }
    }
}
