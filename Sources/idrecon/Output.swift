import ArgumentParser
import Foundation
import IdreconDomain
import IdreconIngest
import IdreconKafka
import IdreconLog
import IdreconStore

/// Output format of query commands.
enum OutputFormat: String, ExpressibleByArgument, CaseIterable {
    case table, json, csv
}

/// Options every command shares.
struct GlobalOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("SQLite database file (default: $IDRECON_DB or ./idrecon.sqlite).", valueName: "path"))
    var db: String?

    /// Refuses an input file that is the database (or its WAL): reading it would open and
    /// close a descriptor of a file SQLite holds locks on in this process.
    func checkInput(_ path: String, _ what: String) throws {
        if EventStore.isDatabaseFile(path, of: databasePath) {
            throw IdreconError(.input, "cannot read \(path) as \(what): it is the database itself")
        }
    }

    var databasePath: String {
        db ?? ProcessInfo.processInfo.environment["IDRECON_DB"].flatMap { $0.isEmpty ? nil : $0 } ?? "./idrecon.sqlite"
    }
}

/// `--format`, shared by query commands.
struct FormatOptions: ParsableArguments {
    @Option(help: "Output format: table, json (JSON lines) or csv. Default: table on a terminal, json when piped.")
    var format: OutputFormat?
    @Flag(help: "Tables: each row as one field per line (as sqlite3's .mode line), for wide rows.")
    var vertical = false

    var resolved: OutputFormat { format ?? (isatty(STDOUT_FILENO) != 0 ? .table : .json) }
}

/// A cell of query output; rendered per format. JSON is typed (numbers, booleans, arrays,
/// objects, null) and never shortened; CSV writes a list or object as its JSON text (one
/// unambiguous field); only the table may shorten (`rich` gives its own table text).
enum Cell {
    case text(String?)
    case int(Int64?)
    case bool(Bool)
    case json(JSONValue)
    /// A value with a shorter text for the table.
    case rich(table: String, value: JSONValue)

    /// A typed value: text as text (null as an empty cell), anything else as JSON.
    init(_ value: JSONValue) {
        switch value {
        case .null: self = .text(nil)
        case let .string(s): self = .text(s)
        default: self = .json(value)
        }
    }

    /// The text of a CSV field.
    var plain: String {
        switch self {
        case let .text(s): return s ?? ""
        case let .int(i): return i.map(String.init) ?? ""
        case let .bool(b): return b ? "true" : "false"
        case let .json(v), let .rich(_, v):
            switch v {
            case .null: return ""
            case let .string(s): return s
            default: return CanonicalJSON.encode(v)
            }
        }
    }

    /// The text of a table cell.
    var table: String {
        if case let .rich(text, _) = self { return text }
        return plain
    }

    var json: JSONValue {
        switch self {
        case let .text(s): return s.map(JSONValue.string) ?? .null
        case let .int(i): return i.map { .number(String($0)) } ?? .null
        case let .bool(b): return .bool(b)
        case let .json(v), let .rich(_, v): return v
        }
    }
}

/// Writes rows as an aligned table, JSON lines (keys in column order) or RFC 4180 CSV.
struct RowPrinter {
    let format: OutputFormat
    let columns: [String]
    /// Tables print every 500 rows (widths per chunk) instead of holding every row.
    let streamingTable: Bool
    /// For single-record commands: on a terminal narrower than the table, each row is
    /// printed one field per line instead of as wrapped table lines.
    let verticalWhenNarrow: Bool
    private var tableRows: [[String]] = []
    private var headerPrinted = false

    /// Tables: every row one field per line (`--vertical`).
    let vertical: Bool

    init(format: OutputFormat, columns: [String], streamingTable: Bool = false, verticalWhenNarrow: Bool = false,
         vertical: Bool = false) {
        self.format = format
        self.columns = columns
        self.streamingTable = streamingTable
        self.verticalWhenNarrow = verticalWhenNarrow
        self.vertical = vertical
        if format == .csv { Self.emit(columns.map(Self.csvField).joined(separator: ",")) }
    }

    /// A printer in the format (and `--vertical`) the command's options ask for.
    init(_ options: FormatOptions, columns: [String], streamingTable: Bool = false, verticalWhenNarrow: Bool = false) {
        self.init(format: options.resolved, columns: columns, streamingTable: streamingTable,
                  verticalWhenNarrow: verticalWhenNarrow, vertical: options.vertical)
    }

    mutating func row(_ cells: [Cell]) {
        switch format {
        case .table:
            tableRows.append(cells.map { Self.escape($0.table) })
            if streamingTable, tableRows.count >= 500 { flushTable() }
        case .csv:
            Self.emit(cells.map { Self.csvField(Self.escape($0.plain)) }.joined(separator: ","))
        case .json:
            var out: [UInt8] = [UInt8(ascii: "{")]
            for (i, (name, cell)) in zip(columns, cells).enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                CanonicalJSON.writeString(name, into: &out)
                out.append(UInt8(ascii: ":"))
                CanonicalJSON.write(cell.json, into: &out)
            }
            out.append(UInt8(ascii: "}"))
            Self.emit(String(decoding: out, as: UTF8.self))
        }
    }

    /// Prints the table (a no-op for streaming formats).
    mutating func finish() {
        guard format == .table, !tableRows.isEmpty || !headerPrinted else { return }
        flushTable()
    }

    private mutating func flushTable() {
        var widths = columns.map(\.count)
        for row in tableRows {
            for (i, cell) in row.enumerated() { widths[i] = min(max(widths[i], cell.count), 80) }
        }
        func line(_ cells: [String]) -> String {
            zip(cells, widths).map { cell, width in
                let clipped = cell.count > width ? String(cell.prefix(width - 1)) + "…" : cell
                return clipped.padding(toLength: width, withPad: " ", startingAt: 0)
            }.joined(separator: "  ").trimmingCharacters(in: .whitespaces)
        }
        var width = widths.reduce(0, +) + 2 * max(0, widths.count - 1)
        let terminal = Self.terminalColumns
        if vertical || verticalWhenNarrow && width > (terminal ?? .max) {
            let nameWidth = self.columns.map(\.count).max() ?? 0
            for (i, row) in tableRows.enumerated() {
                if i > 0 || headerPrinted { Self.emit("") }
                for (name, cell) in zip(self.columns, row) {
                    Self.emit(name.padding(toLength: nameWidth, withPad: " ", startingAt: 0) + "  " + cell)
                }
            }
            headerPrinted = true
            tableRows.removeAll(keepingCapacity: true)
            return
        }
        // Wider than the terminal: the widest columns give way (down to 8 characters each),
        // their cells shortened with "…"; the full values are in --vertical, JSON and CSV.
        while let terminal, width > terminal, let widest = widths.indices.max(by: { widths[$0] < widths[$1] }), widths[widest] > 8 {
            widths[widest] -= 1
            width -= 1
        }
        if !headerPrinted { Self.emit(line(columns.map { $0.uppercased() })) }
        headerPrinted = true
        for row in tableRows { Self.emit(line(row)) }
        tableRows.removeAll(keepingCapacity: true)
    }

    /// Untrusted text (a token's `kid`, a device ID) made safe for a terminal or a line-based
    /// tool: control characters (C0, DEL, C1), line and paragraph separators and bidi
    /// overrides are written as `\u{XX}` and a backslash as `\\`, so nothing can move the
    /// cursor, recolor the screen or start a new row. JSON output escapes by JSON's rules.
    static func escape(_ text: String) -> String {
        func unsafe(_ v: UInt32) -> Bool {
            v < 0x20 || (0x7F...0x9F).contains(v) || v == 0x2028 || v == 0x2029
                || (0x202A...0x202E).contains(v) || (0x2066...0x2069).contains(v) || v == 0x200E || v == 0x200F
        }
        guard text.unicodeScalars.contains(where: { unsafe($0.value) }) else { return text }
        var out = ""
        for scalar in text.unicodeScalars {
            if unsafe(scalar.value) {
                out += "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// Columns of the terminal on standard output; nil when it is not a terminal.
    static var terminalColumns: Int? {
        guard isatty(STDOUT_FILENO) != 0 else { return nil }
        var size = winsize()
        guard ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return nil }
        return Int(size.ws_col)
    }

    static func csvField(_ s: String) -> String {
        s.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" })
            ? "\"" + s.replacingOccurrences(of: "\"", with: "\"\"") + "\"" : s
    }

    static func emit(_ line: String) {
        print(line)
    }
}

/// An error that ends a command with a one-line message and a spec exit code.
extension IdreconError.Kind {
    /// The one table from an error's kind to the exit code (SPEC: 0 ok, 1 not found or
    /// violations found, 2 bad usage or input). A one-shot command that cannot write its
    /// database exits 2: someone must fix the disk or the path first. A consumer's failure
    /// is `transient` (1), so its service manager restarts it; its configuration is 2, so
    /// the unit does not restart into the same mistake.
    var exitCode: Int32 {
        switch self {
        case .usage, .input, .configuration, .storage: 2
        case .notFound, .violation, .transient: 1
        }
    }
}

extension IdreconError {
    /// An error a command caught, with its kind kept: ours as they are, the Kafka layer's by
    /// its kind, anything else by `init(unknown:)`.
    init(_ error: any Error) {
        switch error {
        case let error as IdreconError: self = error
        case let error as KafkaError: self.init(error.kind == .configuration ? .configuration : .transient, error.description)
        default: self.init(unknown: error)
        }
    }
}

/// Writes a transient progress line to stderr, only when stderr is a terminal.
struct ProgressLine {
    let enabled = isatty(STDERR_FILENO) != 0
    private var lastDraw = Date.distantPast
    private let started = Date()

    /// `what: done/total unit (pct), rate unit/s, ETA m:ss` (the total, percentage and ETA
    /// when the total is known): one format for every long command.
    mutating func update(_ what: String, done: Int64, total: Int64?, unit: String, progress: Double? = nil) {
        guard enabled, Date().timeIntervalSince(lastDraw) > 0.2 else { return }
        let elapsed = max(Date().timeIntervalSince(started), 0.001)
        let rate = Double(done) / elapsed
        var text = "\(what): \(done)"
        if let total { text += "/\(total)" }
        text += " \(unit)"
        let fraction = progress ?? total.map { $0 > 0 ? Double(done) / Double($0) : 1 }
        if let fraction { text += String(format: " (%.1f%%)", min(fraction, 1) * 100) }
        text += ", \(Int(rate)) \(unit)/s"
        if let fraction, fraction > 0.001, fraction < 1 {
            let remaining = Int(elapsed * (1 - fraction) / fraction)
            text += String(format: ", ETA %d:%02d", remaining / 60, remaining % 60)
        }
        update(text)
    }

    mutating func update(_ text: @autoclosure () -> String) {
        guard enabled, Date().timeIntervalSince(lastDraw) > 0.2 else { return }
        lastDraw = Date()
        FileHandle.standardError.write(Data(("\r\u{1B}[K" + text()).utf8))
    }

    func done() {
        if enabled { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
    }
}

/// A `ProgressLine` that another thread draws (a pipeline's writer queue).
final class SharedProgress: @unchecked Sendable {
    private let lock = NSLock()
    private var line = ProgressLine()

    func update(_ what: String, done: Int64, total: Int64?, unit: String) {
        lock.withLock { line.update(what, done: done, total: total, unit: unit) }
    }

    func done() { lock.withLock { line.done() } }
}

/// `--jwks`, `--require-token` and the token checks' settings (ingest, consume).
struct TokenOptions: ParsableArguments {
    @Option(help: ArgumentHelp("Verify every id_token of limited logins with this JWKS file (re-read on an unknown kid).", valueName: "file"))
    var jwks: String?
    @Flag(help: "Quarantine limited logins without an id_token (token_invalid).")
    var requireToken = false
    @Option(name: .customLong("issuer"), help: "Accepted token issuer (repeatable; default the Facebook issuers).")
    var issuers: [String] = []
    @Option(parsing: .unconditional, help: "Allowed clock skew for iat, seconds.")
    var tokenSkew = 60

    func validate() throws {
        if requireToken, jwks == nil { throw ValidationError("--require-token needs --jwks") }
        guard tokenSkew >= 0 else { throw ValidationError("--token-skew must be 0 or more") }
    }

    func verifier(database: GlobalOptions) throws -> TokenVerifier? {
        guard let jwks else { return nil }
        try database.checkInput(jwks, "a JWKS file")
        let file = try JWKSFile(path: jwks)
        return TokenVerifier(
            key: { file.key($0) }, issuers: issuers.isEmpty ? TokenVerifier.defaultIssuers : Set(issuers),
            skewMillis: Int64(tokenSkew) * 1000, requireToken: requireToken)
    }
}

/// `--bulk-from` (ingest, consume): when the projections are built in bulk.
struct BulkOptions: ParsableArguments {
    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "Build the projections anew in bulk, instead of folding as events arrive, when the input (a file, or a "
                + "consumer's backlog) would leave them at least this many events behind and at least double the log; "
                + "0 never does (README, \"Bulk build\").", valueName: "events"))
    var bulkFrom: Int64 = EventStore.bulkCatchUpFrom

    func validate() throws {
        guard bulkFrom >= 0 else { throw ValidationError("--bulk-from must be 0 (never) or a number of events") }
    }

    /// The pipelines' threshold; nil never builds in bulk.
    var threshold: Int64? { bulkFrom == 0 ? nil : bulkFrom }
}

/// Limits on what one record may be, for the commands that read records.
struct RecordOptions: ParsableArguments {
    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "Longer records are quarantined as malformed_json without being held in memory; "
                + "their first \(RecordSize.keptBytes) bytes are kept.", valueName: "bytes"))
    var maxRecordBytes = RecordSize.defaultLimit

    func validate() throws {
        guard maxRecordBytes >= 1024 else { throw ValidationError("--max-record-bytes must be at least 1024") }
        guard maxRecordBytes <= 1 << 30 else { throw ValidationError("--max-record-bytes must be at most 1073741824 (1 GiB)") }
    }
}
