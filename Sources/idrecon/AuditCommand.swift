import ArgumentParser
import Foundation
import IdreconDomain
import IdreconStore

struct AuditCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "audit",
        abstract: "Compliance audits.",
        subcommands: [Calls.self])

    struct Calls: ParsableCommand {
        /// Calls judged together: the store judges a batch in ASID order, and a larger batch
        /// shares more pages between neighbouring lookups. With the next batch parsed while one is
        /// judged (2026-11-24, the bench's streams): batches of 32,768 judged 89,036 calls/s over
        /// 1M events and 67,556 over 10M (0.76×); of 262,144, 83,357 and 82,245 (0.99×), where
        /// at 10M each page of the tables is read about once per batch. Memory: two batches (178
        /// MB peak at 10M), and for JSON output their calls as read.
        static let batch = 262_144

        static let configuration = CommandConfiguration(
            commandName: "calls",
            abstract: "Judge Graph-API calls against the access state of their ASID at the time of each call.",
            discussion: """
                FILE holds JSON lines {"called_at": RFC3339, "asid": "…", …} (extra fields are kept in \
                JSON output) or CSV with a header naming called_at and asid. A call on a \
                forbidden_limited ASID is a violation; --strict adds forbidden_unknown and never-seen \
                ASIDs; --scope identity also flags a call whose ASID belonged, at that time, to an \
                identity with a limited member. Violations go to standard output with their evidence, \
                the summary to standard error. Exit 0 clean, 1 violations, 2 bad input (line number given).
                """)

        enum Scope: String, ExpressibleByArgument, CaseIterable { case asid, identity }

        @OptionGroup var global: GlobalOptions
        @OptionGroup var output: FormatOptions
        @Argument(help: "Calls file (JSON lines or CSV), or - for standard input.") var file: String
        @Flag(help: "Also flag calls on forbidden_unknown and never-seen ASIDs.") var strict = false
        @Option(help: "asid (default) or identity.") var scope: Scope = .asid

        func run() throws {
            if file != "-" { try global.checkInput(file, "calls") }
            guard let handle = file == "-" ? FileHandle.standardInput : FileHandle(forReadingAtPath: file) else {
                throw IdreconError(.input, "cannot read \(file)")
            }
            var isDirectory: ObjCBool = false
            if file != "-", FileManager.default.fileExists(atPath: file, isDirectory: &isDirectory), isDirectory.boolValue {
                throw IdreconError(.input, "cannot read \(file): it is a directory")
            }
            // Calls may stream in from a pipe for as long as it stays open: each batch reads the latest state.
            let store = try openForReading(global, oneState: false)
            let policy = AuditPolicy(strict: strict, identityScope: scope == .identity)
            // The call's own fields (`call`) in JSON only: a table or CSV row names its line instead.
            let withCall = output.resolved == .json
            var printer = RowPrinter(output, columns: [
                "line", "called_at", "asid", "kind", "state", "limited_asid", "evidence_event", "evidence_device",
            ] + (withCall ? ["call"] : []), streamingTable: true)
            var reader = CallReader()
            var calls: [GraphCall] = []
            var raws: [Int: JSONValue] = [:]
            var total = 0
            var byKind: [ViolationKind: Int] = [:]

            // A batch is judged on another thread while the next one is read and parsed (the two
            // take about as long: the two cores overlap them); its violations are printed, in
            // order, before the next batch is handed over.
            var judging: (done: DispatchGroup, result: JudgedBatch, raws: [Int: JSONValue])?

            func printJudged() throws {
                guard let (done, result, judgedRaws) = judging else { return }
                done.wait()
                judging = nil
                for v in try result.violations.get() {
                    byKind[v.kind, default: 0] += 1
                    printer.row([
                        .int(Int64(v.call.line)), .text(Timestamp.format(v.call.calledAt)), .text(v.call.asid), .text(v.kind.rawValue),
                        .text(v.state.rawValue), .text(v.limitedASID), .text(v.evidenceEvent), .text(v.evidenceDevice),
                    ] + (withCall ? [.json(judgedRaws[v.call.line] ?? .null)] : []))
                }
            }

            func judge() throws {
                try printJudged()
                let batch = calls, result = JudgedBatch(), done = DispatchGroup()
                done.enter()
                DispatchQueue.global().async {
                    result.violations = Result { try store.audit(batch, policy: policy) }
                    done.leave()
                }
                judging = (done, result, raws)
                calls = []
                raws = [:]
            }

            var buffer: [UInt8] = []
            var eof = false
            // On a terminal: calls judged, and the share of the file read (for the ETA).
            var progress = ProgressLine()
            let size = file == "-" ? nil : (try? FileManager.default.attributesOfItem(atPath: file)[.size] as? Int64) ?? nil
            var bytesRead: Int64 = 0
            defer { progress.done() }
            while !eof {
                let chunk = handle.readData(ofLength: 1 << 20)
                eof = chunk.isEmpty
                bytesRead += Int64(chunk.count)
                buffer.append(contentsOf: chunk)
                progress.update("audit", done: Int64(total), total: nil, unit: "calls",
                                progress: size.map { $0 > 0 ? Double(bytesRead) / Double($0) : 1 })
                var start = 0
                while true {
                    let newline = buffer[start...].firstIndex(of: 0x0A)
                    guard newline != nil || (eof && start < buffer.count) else { break }
                    let end = newline ?? buffer.count
                    let parsed: (GraphCall, JSONValue?)?
                    do { parsed = try reader.parse(buffer[start..<end]) } catch { throw IdreconError(.input, "\(file): \(error.description)") }
                    start = newline.map { $0 + 1 } ?? buffer.count
                    guard let (call, raw) = parsed else { continue }
                    total += 1
                    calls.append(call)
                    if let raw, output.resolved == .json { raws[call.line] = raw }
                    if calls.count >= Self.batch { try judge() }
                }
                buffer.removeSubrange(..<start)
            }
            try judge()
            try printJudged()
            printer.finish()
            let violations = byKind.values.reduce(0, +)
            let detail = ViolationKind.allCases.compactMap { k in byKind[k].map { "\(k.rawValue) \($0)" } }.joined(separator: ", ")
            func count(_ n: Int, _ noun: String) -> String { "\(n) \(noun)\(n == 1 ? "" : "s")" }
            FileHandle.standardError.write(Data(
                "audit: \(count(total, "call")), \(count(violations, "violation"))\(detail.isEmpty ? "" : " (\(detail))")\n".utf8))
            if violations > 0 { throw ExitCode(IdreconError.Kind.violation.exitCode) }
        }
    }
}

/// Reads calls from JSON lines or CSV (detected from the first non-blank line).
struct CallReader {
    private var line = 0
    private var csvColumns: (calledAt: Int, asid: Int, count: Int)?
    private var format: Character?

    struct Failure: Error { var description: String }

    mutating func parse(_ bytes: ArraySlice<UInt8>) throws(Failure) -> (GraphCall, JSONValue?)? {
        line += 1
        let text = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        if text.isEmpty { return nil }
        if format == nil { format = text.first == "{" ? "j" : "c" }
        if format == "j" {
            guard let value = try? JSONParser.parse(Array(text.utf8)), case .object = value else {
                throw Failure(description: "line \(line): not a JSON object")
            }
            guard case let .string(at)? = value["called_at"] else { throw Failure(description: "line \(line): missing string field called_at") }
            guard case let .string(asid)? = value["asid"] else { throw Failure(description: "line \(line): missing string field asid") }
            guard let ms = Timestamp.parse(at) else { throw Failure(description: "line \(line): called_at is not RFC 3339: \(at)") }
            return (GraphCall(line: line, calledAt: ms, asid: asid), value)
        }
        let fields = Self.csvFields(text)
        guard let columns = csvColumns else {
            guard let c = fields.firstIndex(of: "called_at"), let a = fields.firstIndex(of: "asid") else {
                throw Failure(description: "line \(line): CSV header must name called_at and asid")
            }
            csvColumns = (c, a, fields.count)
            return nil
        }
        guard fields.count == columns.count else { throw Failure(description: "line \(line): expected \(columns.count) CSV fields, found \(fields.count)") }
        guard let ms = Timestamp.parse(fields[columns.calledAt]) else {
            throw Failure(description: "line \(line): called_at is not RFC 3339: \(fields[columns.calledAt])")
        }
        return (GraphCall(line: line, calledAt: ms, asid: fields[columns.asid]), nil)
    }

    /// RFC 4180 fields of one line (quoted fields may hold commas and doubled quotes).
    static func csvFields(_ line: String) -> [String] {
        var fields: [String] = []
        var current = ""
        var quoted = false
        var iterator = line.makeIterator()
        while let c = iterator.next() {
            if quoted {
                if c == "\"" {
                    if let next = iterator.next() {
                        if next == "\"" { current.append("\"") } else { quoted = false; if next == "," { fields.append(current); current = "" } else { current.append(next) } }
                    } else { quoted = false }
                } else { current.append(c) }
            } else if c == "\"" { quoted = true }
            else if c == "," { fields.append(current); current = "" }
            else { current.append(c) }
        }
        fields.append(current)
        return fields.map { $0.trimmingCharacters(in: .whitespaces) }
    }
}

/// One batch's verdict, written by the thread that judged it and read after it is done.
private final class JudgedBatch: @unchecked Sendable {
    var violations: Result<[Violation], any Error> = .success([])
}
