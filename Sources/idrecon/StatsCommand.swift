import ArgumentParser
import Foundation
import IdreconDomain
import IdreconKafka
import IdreconStore

struct StatsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stats",
        abstract: "Counts over the event log, quarantine and consumed positions."
    )

    @OptionGroup var global: GlobalOptions
    @OptionGroup var output: FormatOptions
    @Option(help: "Kafka bootstrap servers: also show each partition's lag (end offset - stored offset).")
    var brokers: String?
    @Option(name: .customShort("X"), help: ArgumentHelp("librdkafka setting key=value for --brokers (repeatable).", valueName: "key=value"))
    var settings: [KafkaSetting] = []

    func run() async throws {
        let store = try EventStore(path: global.databasePath, readOnly: true)
        let (stats, log) = (try store.stats(), try store.logPosition())
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
            ("skipped_records", .int(stats.skippedRecords)),
            // Logged events the projections have not folded yet (a writer's write-behind).
            ("projection_lag_events", .int(max(0, log.lastSeq - log.appliedSeq))),
        ]
        rows += stats.positions.map { ("position.\($0.source)", .int($0.position)) }
        if let brokers {
            let watermarks: KafkaWatermarks
            do { watermarks = try KafkaWatermarks(brokers: brokers, settings: settings.map { ($0.key, $0.value) }) } catch { throw IdreconError(error) }
            for position in stats.positions where position.source.hasPrefix("kafka:") {
                let name = position.source.dropFirst(6)
                guard let slash = name.lastIndex(of: "/"), let partition = Int32(name[name.index(after: slash)...]) else { continue }
                do {
                    let end = try watermarks.end(topic: String(name[..<slash]), partition: partition)
                    rows.append(("lag.\(position.source)", .int(max(0, end - position.position))))
                } catch {
                    rows.append(("lag.\(position.source)", .text("unknown: \(error.description)")))
                }
            }
        }
        var printer = RowPrinter(format: output.resolved, columns: ["metric", "value"])
        for (metric, value) in rows { printer.row([.text(metric), value]) }
        printer.finish()
    }
}
