import ArgumentParser
import Foundation
import IdreconDomain
import IdreconStore

struct BackupCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backup",
        abstract: "Copy the database consistently while consumers and ingests keep writing.",
        discussion: """
            The copy is the database as of one commit (SQLite's online backup API, from one read \
            transaction), written beside OUT and renamed into place when complete. It is a \
            standalone file (no -wal): restore by stopping the writers and moving it to the \
            --db path (see README, "Running in production").
            """
    )

    @OptionGroup var global: GlobalOptions
    @OptionGroup var output: FormatOptions

    @Argument(help: ArgumentHelp("The new file to write (must not exist).", valueName: "out"))
    var out: String

    func run() throws {
        let started = Date()
        let bytes = try EventStore(path: global.databasePath, readOnly: true).backup(to: out)
        var printer = RowPrinter(output, columns: ["backup", "bytes", "seconds"])
        printer.row([.text(out), .int(bytes), .json(.number(String(format: "%.3f", Date().timeIntervalSince(started))))])
        printer.finish()
    }
}
