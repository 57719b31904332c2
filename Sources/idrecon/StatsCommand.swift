import ArgumentParser
import Foundation
import IdreconDomain
import IdreconKafka
import IdreconStore

struct StatsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stats",
        abstract: "Counts over the event log, quarantine and consumed positions."
    )

    @OptionGroup var global: GlobalOptions
    @OptionGroup var output: FormatOptions
    @Option(help: """
        Kafka bootstrap servers: also show each partition's lag (end offset - stored offset). Brokers that do not \
        answer within 5 s make the lags unknown (null, with the reason) and the exit code 1.
        """)
    var brokers: String?
    @Option(name: .customShort("X"), help: ArgumentHelp("librdkafka setting key=value for --brokers (repeatable).", valueName: "key=value"))
    var settings: [KafkaSetting] = []

    func run() throws {
        let store = try EventStore(path: global.databasePath, readOnly: true)
        let (stats, log) = (try store.stats(), try store.logPosition())
        let positions = stats.positions.sorted { Self.sourceOrder($0.source) < Self.sourceOrder($1.source) }
        // Each Kafka partition's lag, or why it is unknown (nil without --brokers).
        var lags: [(source: String, records: Int64?, reason: String?)]?
        if let brokers {
            let watermarks: KafkaWatermarks
            do { watermarks = try KafkaWatermarks(brokers: brokers, settings: settings.map { ($0.key, $0.value) }) } catch { throw IdreconError(error) }
            lags = []
            // Brokers that do not answer one partition within the timeout answer none: the rest
            // are not asked (16 partitions would wait 16 times), and the command exits 1.
            var unreachable: String?
            for position in positions where position.source.hasPrefix("kafka:") {
                let name = position.source.dropFirst(6)
                guard let slash = name.lastIndex(of: "/"), let partition = Int32(name[name.index(after: slash)...]) else { continue }
                if let unreachable {
                    lags?.append((position.source, nil, unreachable))
                    continue
                }
                do {
                    let end = try watermarks.end(topic: String(name[..<slash]), partition: partition, timeoutMs: Self.timeoutMs)
                    lags?.append((position.source, max(0, end - position.position), nil))
                } catch {
                    lags?.append((position.source, nil, error.description))
                    if KafkaError.unreachableCodes.contains(error.code) { unreachable = error.description }
                }
            }
        }
        let counts: [(String, Int64)] = [
            ("events", Int64(stats.events)), ("logins", Int64(stats.logins)), ("logouts", Int64(stats.logouts)),
            ("logins_enabled", Int64(stats.enabledLogins)), ("logins_limited", Int64(stats.limitedLogins)),
            ("apps", Int64(stats.apps)), ("devices", Int64(stats.devices)), ("asids", Int64(stats.asids)),
            ("duplicates", Int64(stats.duplicates)), ("quarantined", Int64(stats.quarantined)),
        ]
        let byCode = stats.quarantinedByCode.sorted { $0.key < $1.key }
        let tail: [(String, Cell)] = [
            ("first_event_at", .text(stats.firstEventAt.map(Timestamp.format))),
            ("last_event_at", .text(stats.lastEventAt.map(Timestamp.format))),
            ("database_bytes", .int(stats.databaseBytes)),
            ("skipped_records", .int(stats.skippedRecords)),
            // Logged events the projections have not folded yet (a writer's write-behind).
            ("projection_lag_events", .int(max(0, log.lastSeq - log.appliedSeq))),
        ]
        // The change feed, when the database has one: how far it is decided and delivered.
        let feed: [(String, Cell)]? = try store.changeFeed().map { f in
            [("topic", .text(f.topic)), ("decided_seq", .int(f.decidedSeq)), ("last_change", .int(f.lastChange)),
             ("sent_change", .int(f.sentChange)), ("pending_changes", .int(f.lastChange - f.sentChange))]
        }
        if output.resolved == .json {
            // One typed object: counts as numbers, maps and lists where the table has prefixes.
            var members: [(String, JSONValue)] = counts.map { ($0.0, .number(String($0.1))) }
            members.append(("quarantined_by_code", .object(byCode.map { ($0.key, .number(String($0.value))) })))
            members += tail.map { ($0.0, $0.1.json) }
            members.append(("change_feed", feed.map { .object($0.map { ($0.0, $0.1.json) }) } ?? .null))
            members.append(("positions", .array(positions.map { p -> JSONValue in
                .object([("source", .string(p.source)), ("position", .number(String(p.position))), ("records", .number(String(p.records)))])
            })))
            if let lags {
                members.append(("lag", .array(lags.map { lag -> JSONValue in
                    let records: JSONValue = lag.records.map { .number(String($0)) } ?? .null
                    let reason: JSONValue = lag.reason.map { .string($0) } ?? .null
                    return .object([("source", .string(lag.source)), ("records", records), ("reason", reason)])
                })))
            }
            RowPrinter.emit(CanonicalJSON.encode(.object(members)))
            return try Self.failIfLagUnknown(lags)
        }
        var rows: [(String, Cell)] = counts.map { ($0.0, .int($0.1)) }
        rows += byCode.map { ("quarantined.\($0.key)", .int(Int64($0.value))) }
        rows += tail
        rows += (feed ?? []).map { ("change_feed.\($0.0)", $0.1) }
        rows += positions.map { ("position.\($0.source)", .int($0.position)) }
        for lag in lags ?? [] {
            let value: Cell = lag.records.map { Cell.int($0) } ?? Cell.text("unknown: \(lag.reason ?? "")")
            rows.append(("lag.\(lag.source)", value))
        }
        var printer = RowPrinter(output, columns: ["metric", "value"])
        for (metric, value) in rows { printer.row([.text(metric), value]) }
        printer.finish()
        try Self.failIfLagUnknown(lags)
    }

    /// How long the brokers have to answer for a partition's end offset.
    static let timeoutMs: Int32 = 5000

    /// Lags asked for and not read: exit 1 (`transient`), after printing what is known.
    static func failIfLagUnknown(_ lags: [(source: String, records: Int64?, reason: String?)]?) throws {
        guard let unknown = lags?.filter({ $0.records == nil }), let first = unknown.first else { return }
        throw IdreconError(.transient, "the lag of \(unknown.count) partition(s) is unknown: \(first.reason ?? "")")
    }

    /// Sources in order: files by name, Kafka partitions by topic and then partition number
    /// (`kafka:t/2` before `kafka:t/10`).
    static func sourceOrder(_ source: String) -> (String, Int) {
        guard source.hasPrefix("kafka:"), let slash = source.lastIndex(of: "/"),
              let partition = Int(source[source.index(after: slash)...]) else { return (source, -1) }
        return (String(source[..<slash]), partition)
    }
}
