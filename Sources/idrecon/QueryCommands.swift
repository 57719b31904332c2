import ArgumentParser
import Foundation
import IdreconDomain
import IdreconStore
import Synchronization

/// Opens the database for a command's reads, on one connection. The store stays open until the
/// process exits: releasing it would cost a query about a millisecond (GRDB's pool leaves Foundation's notification
/// center, whose first use starts Foundation's bridging), and exit closes a reader's connection alike.
/// `oneState`: every read answers from the state of the open (`EventStore.readOneState`), for commands that
/// read several times and end when they have answered.
func openForReading(_ global: GlobalOptions, oneState: Bool = true) throws(IdreconError) -> EventStore {
    let store = try EventStore(path: global.databasePath, readOnly: true, concurrentReads: false)
    openUntilExit.withLock { $0.append(store) }
    if oneState { try store.readOneState() }
    return store
}

private let openUntilExit = Mutex<[EventStore]>([])

/// Lookups of several keys print what they found and then name what they did not, one line
/// each on stderr; any missing key exits 1 (`not_found`), as one missing key does.
enum NotFound {
    static func report(_ missing: [String], of asked: Int) throws {
        guard !missing.isEmpty else { return }
        guard asked > 1 else { throw IdreconError(.notFound, missing[0]) }
        for line in missing { FileHandle.standardError.write(Data("idrecon: \(RowPrinter.escape(line))\n".utf8)) }
        throw ExitCode(IdreconError.Kind.notFound.exitCode)
    }
}

struct DeviceCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "device", abstract: "Show one device: its login mode, who is logged in, counts and anomalies.",
        discussion: """
            mode is the latest event's: enabled, limited (Limited Login) or logged_out. anomalies counts the \
            switches between an enabled and a limited login (or back) with no logout between them: a device that \
            changed login mode without logging out.
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var output: FormatOptions
    @Argument(help: "App ID; - alone reads `app_id device_id` pairs from standard input, one per line.") var app: String?
    @Argument(help: "Device ID.") var device: String?
    @Option(help: ArgumentHelp("Also show the devices in this file: `app_id device_id` per line (tab- or space-separated).",
                               valueName: "file"))
    var from: String?

    func validate() throws {
        switch (app, device) {
        case (_?, _?), ("-", nil): return
        case (nil, nil) where from != nil: return
        default: throw ValidationError("give APP DEVICE, - (pairs on standard input) or --from FILE")
        }
    }

    func run() throws {
        var pairs: [(app: String, device: String)] = []
        if let app, let device { pairs.append((app, device)) }
        for key in try KeyList.read(app == "-" && device == nil ? ["-"] : [], from: from, global: global) {
            // A tab separates the two when there is one (IDs may hold spaces); else the first spaces.
            let separator: Character = key.text.contains("\t") ? "\t" : " "
            let parts = key.text.split(separator: separator, maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else {
                throw IdreconError(.usage, "\(key.origin): expected `app_id device_id`")
            }
            pairs.append((parts[0], parts[1]))
        }
        let store = try openForReading(global)
        var printer = RowPrinter(output, columns: DeviceRecord.fieldNames, verticalWhenNarrow: pairs.count == 1)
        var missing: [String] = []
        for (app, device) in pairs {
            guard let d = try store.device(app: app, device: device) else {
                missing.append("no device \(device) in app \(app)")
                continue
            }
            printer.row(d.fields.map(Cell.init))
        }
        printer.finish()
        try NotFound.report(missing, of: pairs.count)
    }
}

struct AccessCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "access",
        abstract: "Graph-API access state of ASIDs: allowed, forbidden_limited, forbidden_unknown (or unseen).",
        discussion: "Exit 1 when an ASID was never seen.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var output: FormatOptions
    @Argument(help: "ASIDs to check (1-32 digits); - reads them from standard input, one per line.") var asids: [String] = []
    @Option(help: ArgumentHelp("Also check the ASIDs in this file, one per line (- for standard input).", valueName: "file"))
    var from: String?
    @Option(help: ArgumentHelp("Judge at this time (RFC 3339); events with occurred_at <= T count.", valueName: "T"))
    var asOf: TimeArgument?

    /// ASIDs looked up in one read transaction.
    static let batch = 10_000

    func validate() throws {
        guard !asids.isEmpty || from != nil else { throw ValidationError("give at least one ASID, - or --from FILE") }
    }

    func run() throws {
        let asids = try KeyList.asids(asids, from: from, global: global)
        let store = try openForReading(global)
        var printer = RowPrinter(output, columns: AccessAnswer.fieldNames)
        var unseen = false
        // Read in batches (one transaction each), printed in the order asked.
        for start in stride(from: 0, to: asids.count, by: Self.batch) {
            for a in try store.access(Array(asids[start..<min(start + Self.batch, asids.count)]), asOf: asOf?.millis).answers {
                unseen = unseen || a.state == .unseen
                printer.row(a.fields(asOf: asOf?.millis).map(Cell.init))
            }
        }
        printer.finish()
        if unseen { throw ExitCode(IdreconError.Kind.notFound.exitCode) }
    }
}

struct UserCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "user",
        abstract: "Show an identity: member ASIDs, their access and devices, link keys and ambiguous keys.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var output: FormatOptions
    @Argument(help: "An ASID of the identity; - reads ASIDs from standard input, one per line.") var asid: String?
    @Option(help: ArgumentHelp("Show the identities of the ASIDs in this file, one per line (- for standard input).",
                               valueName: "file"))
    var from: String?
    @Option(help: "Find the identity by e-mail (normalized and hashed, never stored).") var email: String?
    @Option(name: .customLong("user-id"), help: "Find the identity by user ID (u:…).") var userID: String?
    @Flag(help: "Show how the identity came together instead: each link that merged two groups, in event time.")
    var history = false

    func validate() throws {
        guard [asid != nil || from != nil, email != nil, userID != nil].filter({ $0 }).count == 1 else {
            throw ValidationError("give exactly one of ASID, - (ASIDs on standard input), --from FILE, --email or --user-id")
        }
    }

    func run() throws {
        let asids = email == nil && userID == nil ? try KeyList.asids(asid.map { [$0] } ?? [], from: from, global: global) : []
        let store = try openForReading(global)
        var users: [String] = []
        var missing: [String] = []
        if let email {
            users = try store.userIDs(email: email)
            if users.isEmpty { missing.append("no identity for that e-mail") }
        } else if let userID {
            if try store.userID(asid: nil, userID: userID) != nil { users = [userID] } else { missing.append("no identity \(userID)") }
        } else {
            var seen: Set<String> = []
            for asid in asids {
                guard let user = try store.userID(asid: asid, userID: nil) else {
                    missing.append("no identity for \(asid)")
                    continue
                }
                if seen.insert(user).inserted { users.append(user) }
            }
        }
        let asked = max(1, asids.count)
        guard !users.isEmpty else { return try NotFound.report(missing, of: asked) }
        if history {
            var printer = RowPrinter(output, columns: ["user_id", "at", "event_id", "key", "absorbed", "into"])
            for user in users {
                for step in try store.mergeHistory(user) {
                    printer.row([.text(user), .text(Timestamp.format(step.at)), .text(step.event),
                                 .rich(table: Self.short(step.key), value: .string(step.key)), .text(step.absorbed), .text(step.into)])
                }
            }
            printer.finish()
            return try NotFound.report(missing, of: asked)
        }
        var printer = RowPrinter(output, columns: [
            "user_id", "asid", "first_login_at", "access", "devices", "keys", "ambiguous_keys", "any_limited",
        ], verticalWhenNarrow: true)
        for user in users {
            guard let identity = try store.identity(user) else { continue }
            var rows: [[Cell]] = []
            var anyLimited = false
            for m in identity.members {
                let access = try store.access(m.asid)
                anyLimited = anyLimited || access.state == .forbiddenLimited
                let devices = try store.devices(holding: m.asid)
                rows.append([
                    .text(user), .text(m.asid), .text(Timestamp.format(m.firstLoginAt)), .text(access.state.rawValue),
                    .rich(table: devices.map { "\($0.appID)/\($0.deviceID):\($0.mode.rawValue)" }.joined(separator: " "),
                          value: .array(devices.map { d in
                              .object([("app_id", .string(d.appID)), ("device_id", .string(d.deviceID)), ("mode", .string(d.mode.rawValue))])
                          })),
                ])
            }
            let linking = identity.keys.filter { $0.ambiguity == nil }
            let keys = Cell.rich(table: linking.map { Self.short($0.key) }.joined(separator: " "),
                                 value: .array(linking.map { .string($0.key) }))
            let ambiguousKeys = identity.keys.compactMap { k in k.ambiguity.map { (k, $0) } }
            let ambiguous = Cell.rich(
                table: ambiguousKeys.map { k, why in "\(Self.short(k.key)) (\(why.label), \(k.asids) ASIDs)" }.joined(separator: "; "),
                value: .array(ambiguousKeys.map { k, why in
                    .object([("key", .string(k.key)), ("reason", .string(why.label)), ("asids", .number(String(k.asids)))])
                }))
            for row in rows { printer.row(row + [keys, ambiguous, .bool(anyLimited)]) }
        }
        printer.finish()
        try NotFound.report(missing, of: asked)
    }

    /// Hashed e-mails shortened for reading in the table only; JSON and CSV keep them whole.
    static func short(_ key: String) -> String {
        key.hasPrefix("email:") ? String(key.prefix(6 + 12)) + "…" : key
    }
}

struct ExplainCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "explain",
        abstract: "Why two ASIDs are one identity: the chain of link keys and the events that created each link.",
        discussion: "Exit 1 when they are not linked.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var output: FormatOptions
    @Argument(help: "First ASID.") var a: String
    @Argument(help: "Second ASID.") var b: String

    func run() throws {
        let store = try openForReading(global)
        guard let chain = try store.explain(a, b) else {
            let known = (try store.userID(asid: a), try store.userID(asid: b))
            switch known {
            case (nil, _): throw IdreconError(.notFound, "ASID \(a) never logged in")
            case (_, nil): throw IdreconError(.notFound, "ASID \(b) never logged in")
            case let (ua?, ub?): throw IdreconError(.notFound, "\(a) (\(ua)) and \(b) (\(ub)) are not linked by any shared, unambiguous key")
            }
        }
        var printer = RowPrinter(output, columns: ["step", "from", "key", "to", "from_event", "to_event"])
        for (i, hop) in chain.enumerated() {
            printer.row([.int(Int64(i + 1)), .text(hop.from), .text(hop.key), .text(hop.to), .text(hop.fromEvent), .text(hop.toEvent)])
        }
        printer.finish()
    }
}

struct FriendsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "friends", abstract: "Friends of an ASID (edges of the friend graph) with each friend's access state.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var output: FormatOptions
    @Argument(help: "ASID.") var asid: String

    func run() throws {
        let store = try openForReading(global)
        guard try store.seen(asid) else {
            throw IdreconError(.notFound, "ASID \(asid) was never seen")
        }
        var printer = RowPrinter(output, columns: ["asid", "friend", "access", "listed_by"])
        for f in try store.friends(of: asid) {
            let state = try store.access(f.friend).state
            let by = f.listedByMe && f.listedByThem ? "both" : f.listedByMe ? asid : f.friend
            printer.row([.text(asid), .text(f.friend), .text(state.rawValue), .text(by)])
        }
        printer.finish()
    }
}

struct ExportCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Export a projection as JSON lines (default), CSV or Parquet, sorted, with the spec's exact fields.",
        discussion: """
            Parquet is written by DuckDB (its Python package: python3 -m pip install duckdb) from the JSON lines, \
            to --output FILE.
            """)

    enum Kind: String, ExpressibleByArgument, CaseIterable { case identities, devices, friends, access, skipped }

    /// What an export writes: files for other tools, so no table.
    enum Format: String, ExpressibleByArgument, CaseIterable { case json, csv, parquet }

    @OptionGroup var global: GlobalOptions
    @Argument(help: "identities, devices, friends, access, or skipped (source positions never read: Kafka retention gaps).")
    var kind: Kind
    @Option(help: "json (JSON lines), csv, or parquet (needs --output and DuckDB).") var format: Format = .json
    @Option(help: ArgumentHelp("For access: judge at this time (RFC 3339).", valueName: "T")) var asOf: TimeArgument?
    @Option(help: ArgumentHelp("""
        Write to FILE instead of standard output: to a temporary file beside it, renamed over FILE once complete \
        (a reader never sees half an export; a failed export leaves FILE as it was).
        """, valueName: "file"))
    var output: String?

    func validate() throws {
        if asOf != nil, kind != .access { throw ValidationError("--as-of applies to 'export access' only") }
        if format == .parquet, output == nil { throw ValidationError("--format parquet writes a file: give --output FILE") }
    }

    func run() throws {
        let store = try openForReading(global, oneState: false) // one read transaction already
        let exportKind = ExportKind(rawValue: kind.rawValue)!
        var out: [UInt8] = []
        out.reserveCapacity(1 << 16)
        // Parquet: JSON lines to a temporary file first, which DuckDB then converts.
        let jsonLines = format == .parquet ? output.map { $0 + ".jsonl" } : output
        let file = try jsonLines.map { path throws(IdreconError) in try AtomicOutput(path, database: global) }
        let stdout = file?.handle ?? FileHandle.standardOutput
        if format == .csv { out += Array((exportKind.columns.joined(separator: ",") + "\n").utf8) }
        try store.export(exportKind, asOf: asOf?.millis) { values in
            if format == .csv {
                out += Array(values.map { v -> String in
                    switch v {
                    case .null: return ""
                    case let .string(s): return RowPrinter.csvField(s)
                    case let .number(n): return n
                    case let .array(items): return RowPrinter.csvField(items.compactMap { if case let .string(s) = $0 { return s } else { return nil } }.joined(separator: ";"))
                    default: return RowPrinter.csvField(CanonicalJSON.encode(v))
                    }
                }.joined(separator: ",").utf8)
            } else {
                out.append(UInt8(ascii: "{"))
                for (i, (name, value)) in zip(exportKind.columns, values).enumerated() {
                    if i > 0 { out.append(UInt8(ascii: ",")) }
                    CanonicalJSON.writeString(name, into: &out)
                    out.append(UInt8(ascii: ":"))
                    CanonicalJSON.write(value, into: &out)
                }
                out.append(UInt8(ascii: "}"))
            }
            out.append(0x0A)
            if out.count > 1 << 16 {
                try AtomicOutput.write(out, to: stdout, path: output)
                out.removeAll(keepingCapacity: true)
            }
        }
        try AtomicOutput.write(out, to: stdout, path: output)
        try file?.commit()
        if format == .parquet, let output, let jsonLines {
            defer { try? FileManager.default.removeItem(atPath: jsonLines) }
            try Self.parquet(from: jsonLines, to: output, database: global)
        }
    }

    /// Converts JSON lines to Parquet with DuckDB's Python package, through a temporary file
    /// renamed over `path` once DuckDB has written it whole.
    static func parquet(from jsonLines: String, to path: String, database: GlobalOptions) throws {
        let target = try AtomicOutput(path, database: database)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        let script = """
            import sys
            try:
                import duckdb
            except ImportError:
                sys.exit(3)
            duckdb.execute("COPY (SELECT * FROM read_ndjson_auto(?)) TO '" + sys.argv[2].replace("'", "''") + "' (FORMAT parquet)", [sys.argv[1]])
            """
        process.arguments = ["python3", "-c", script, jsonLines, target.temporaryPath]
        let errors = Pipe()
        process.standardError = errors
        do { try process.run() } catch {
            throw IdreconError(.usage, "Parquet output needs python3 with DuckDB (python3 -m pip install duckdb); or export json or csv")
        }
        let message = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        switch process.terminationStatus {
        case 0: try target.commit(replacingContents: true)
        case 3, 127: throw IdreconError(.usage, "Parquet output needs python3 with DuckDB (python3 -m pip install duckdb); or export json or csv")
        default:
            let last = message.split(separator: "\n").last.map(String.init) ?? "exit \(process.terminationStatus)"
            throw IdreconError(.transient, "DuckDB could not write \(path): \(RowPrinter.escape(last))")
        }
    }
}

/// A file written beside its destination and renamed over it once complete. Never the
/// database or its WAL (a descriptor of SQLite's file must never be opened by us: closing
/// it would drop SQLite's locks). Until `commit`, dropping it removes the temporary file.
final class AtomicOutput {
    let handle: FileHandle
    private let path: String
    private let temporary: String
    private var committed = false
    /// Where the file is written until `commit`, for a program that writes it itself.
    var temporaryPath: String { temporary }

    init(_ path: String, database: GlobalOptions) throws(IdreconError) {
        if EventStore.isDatabaseFile(path, of: database.databasePath) {
            throw IdreconError(.usage, "cannot write \(path): it is the database itself")
        }
        let url = URL(fileURLWithPath: path)
        temporary = url.deletingLastPathComponent().appendingPathComponent(".\(url.lastPathComponent).\(getpid()).tmp").path
        guard FileManager.default.createFile(atPath: temporary, contents: nil, attributes: [.posixPermissions: 0o644]),
              let handle = FileHandle(forWritingAtPath: temporary) else {
            throw IdreconError(.input, "cannot write \(path): check that its directory exists and is writable")
        }
        (self.handle, self.path) = (handle, path)
    }

    deinit {
        if !committed {
            try? handle.close()
            try? FileManager.default.removeItem(atPath: temporary)
        }
    }

    /// Writes `bytes`; a failure (a full disk) names the destination.
    static func write(_ bytes: [UInt8], to handle: FileHandle, path: String?) throws(IdreconError) {
        do { try handle.write(contentsOf: bytes) } catch {
            throw IdreconError(.storage, "cannot write \(path ?? "standard output"): \(error.localizedDescription)")
        }
    }

    /// Flushes the file to disk and renames it over the destination; `replacingContents`:
    /// another program wrote the temporary file (through its path), so only the rename.
    func commit(replacingContents: Bool = false) throws(IdreconError) {
        do {
            if !replacingContents { try handle.synchronize() }
            try handle.close()
            guard rename(temporary, path) == 0 else { throw IdreconError(.storage, "cannot rename onto \(path): \(String(cString: strerror(errno)))") }
            committed = true
        } catch let error as IdreconError {
            throw error
        } catch {
            throw IdreconError(.storage, "cannot write \(path): \(error.localizedDescription)")
        }
    }
}

struct ReplayCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replay",
        abstract: "Rebuild every projection from the event log; readers keep working until the atomic swap.",
        discussion: """
            Prints the events rebuilt and events/s. --digests also prints a SHA-256 digest per \
            projection next to the live one (a quarter more CPU). --verify rebuilds into fresh tables, \
            compares them with the live projections and discards them (exit 1 on any drift). \
            --config FILE (JSON: {"max_asids_per_key": 25, "blocklist": ["e-mail", "tfb:…"]}) \
            changes the identity guards; the rebuilt projections use it from then on.
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var output: FormatOptions
    @Flag(help: "Compare a rebuild with the live projections; change nothing; exit 1 on drift.") var verify = false
    @Flag(help: "Also digest the rebuilt and the live projections and print both (what --verify compares).")
    var digests = false
    @Option(help: "Identity configuration (JSON) to rebuild with.") var config: String?

    func run() throws {
        var identityConfig: IdentityConfig?
        if let config {
            try global.checkInput(config, "identity configuration")
            guard let data = FileManager.default.contents(atPath: config) else { throw IdreconError(.input, "cannot read config \(config)") }
            do { identityConfig = try JSONDecoder().decode(IdentityConfig.self, from: data) } catch {
                throw IdreconError(.input, "config \(config) is not valid: expected {\"max_asids_per_key\": N, \"blocklist\": [...]}")
            }
            if identityConfig!.maxASIDsPerKey < 1 { throw IdreconError(.input, "config \(config): max_asids_per_key must be at least 1") }
        }
        MemoryPolicy.keepLargeBlocks()
        let store = try EventStore(path: global.databasePath, skipPendingRebuild: true)
        var progress = ProgressLine()
        let comparing = verify || digests
        let report = try store.replay(config: identityConfig, verifyOnly: verify, comparing: comparing) { done, total in
            progress.update("replay", done: done, total: total, unit: "events")
        } waiting: {
            FileHandle.standardError.write(Data("replay: waiting for another replay of \(global.databasePath) to finish\n".utf8))
        }
        progress.done()
        let rate = Double(report.events) / max(report.seconds, 0.001)
        if comparing {
            var printer = RowPrinter(output, columns: ["projection", "digest", "live_digest", "match"])
            for name in report.rebuilt.keys.sorted() {
                // A boolean in JSON; the table says DRIFT where a reader's eye should stop.
                let match = report.rebuilt[name] == report.live[name]
                printer.row([.text(name), .text(report.rebuilt[name]), .text(report.live[name]),
                             .rich(table: match ? "yes" : "DRIFT", value: .bool(match))])
            }
            printer.finish()
        } else {
            var printer = RowPrinter(output, columns: ["events", "seconds", "events_per_second", "swapped"])
            let seconds = JSONValue.number(String(format: "%.2f", report.seconds))
            printer.row([.int(report.events), .json(seconds), .int(Int64(rate)), .bool(report.swapped)])
            printer.finish()
        }
        FileHandle.standardError.write(Data("replay: \(report.events) events in \(String(format: "%.2f", report.seconds)) s (\(Int(rate)) events/s)\(report.swapped ? ", swapped" : ", verify only")\n".utf8))
        if verify, !report.drift.isEmpty {
            throw IdreconError(.violation, "projections drifted from the log: \(report.drift.joined(separator: ", ")); run 'idrecon replay' to rebuild")
        }
    }
}
