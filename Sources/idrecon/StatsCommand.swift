import ArgumentParser
import Foundation
import IdreconDomain
import IdreconStore

struct StatsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stats",
        abstract: "Counts over the event log, quarantine and consumed positions."
    )

    @OptionGroup var global: GlobalOptions
    @OptionGroup var output: FormatOptions

    func run() async throws {
        let stats: LogStats
        do { stats = try EventStore(path: global.databasePath, readOnly: true).stats() } catch { throw CLIError(error.description) }
        var rows: [(String, Cell)] = [
            ("events", .int(Int64(stats.events))), ("logins", .int(Int64(stats.logins))),
            ("logouts", .int(Int64(stats.logouts))), ("logins.enabled", .int(Int64(stats.enabledLogins))),
            ("logins.limited", .int(Int64(stats.limitedLogins))), ("apps", .int(Int64(stats.apps))),
            ("devices", .int(Int64(stats.devices))), ("asids", .int(Int64(stats.asids))),
            ("duplicates", .int(Int64(stats.duplicates))), ("quarantined", .int(Int64(stats.quarantined))),
        ]
        rows += stats.quarantinedByCode.sorted { $0.key < $1.key }.map { ("quarantined.\($0.key)", .int(Int64($0.value))) }
        rows += [
            ("first_event_at", .text(stats.firstEventAt.map(Timestamp.format))),
            ("last_event_at", .text(stats.lastEventAt.map(Timestamp.format))),
            ("database_bytes", .int(stats.databaseBytes)),
        ]
        rows += stats.positions.map { ("position.\($0.source)", .int($0.position)) }
        var printer = RowPrinter(format: output.resolved, columns: ["metric", "value"])
        for (metric, value) in rows { printer.row([.text(metric), value]) }
        printer.finish()
    }
}
