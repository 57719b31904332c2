import ArgumentParser
import Foundation
import IdreconDomain
import IdreconIngest
import IdreconStore

struct IngestCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ingest",
        abstract: "Append login events from a JSON-lines file (or - for standard input) to the log.",
        discussion: """
            Every line is appended or quarantined; each batch commits together with the file \
            position, so re-running the same file resumes where the last run stopped and \
            appends nothing twice. Blank lines are skipped.
            """
    )

    @OptionGroup var global: GlobalOptions
    @OptionGroup var output: FormatOptions
    @OptionGroup var tokens: TokenOptions
    @OptionGroup var limits: RecordOptions
    @OptionGroup var bulk: BulkOptions

    @Argument(help: ArgumentHelp("JSON-lines file, or - for standard input.", valueName: "file"))
    var file: String

    @Option(parsing: .unconditional, help: "Records per transaction.")
    var batchSize = 64000

    func validate() throws {
        guard batchSize >= 1 else { throw ValidationError("--batch-size must be at least 1") }
    }

    func run() throws {
        if file != "-", !FileManager.default.isReadableFile(atPath: file) {
            throw IdreconError(.input, "cannot read \(file): no such readable file")
        }
        let store = try EventStore(path: global.databasePath)
        var ingestor = FileIngestor(store: store, batchSize: batchSize, tokens: try tokens.verifier(database: global),
                                    maxRecordBytes: limits.maxRecordBytes)
        ingestor.bulkFrom = bulk.threshold
        var progress = ProgressLine()
        let started = Date()
        let summary: IngestSummary
        do {
            let building = SharedProgress()
            summary = try ingestor.ingest(path: file, progress: { p in
                // Lines read so far; the share of the file's bytes read gives the ETA.
                progress.update("ingest", done: p.lines, total: nil, unit: "lines",
                                progress: p.bytesTotal.map { $0 > 0 ? Double(p.bytesDone) / Double($0) : 1 })
            }, building: { done, total in building.update("building projections", done: done, total: total, unit: "events") })
            building.done()
        } catch {
            progress.done()
            throw error
        }
        progress.done()
        let seconds = Date().timeIntervalSince(started)
        let byCode = summary.outcome.quarantined.sorted { $0.key < $1.key }
        let perSecond = Int64(Double(summary.lines) / max(seconds, 0.001))
        if output.resolved == .json {
            // One typed object; the table's `quarantined.CODE` rows are a map here.
            func number(_ n: Int64) -> JSONValue { .number(String(n)) }
            RowPrinter.emit(CanonicalJSON.encode(.object([
                ("lines", number(summary.lines)), ("appended", number(Int64(summary.outcome.appended))),
                ("duplicates", number(Int64(summary.outcome.duplicates))),
                ("quarantined", number(Int64(summary.outcome.quarantinedTotal))),
                ("quarantined_by_code", .object(byCode.map { ($0.key.rawValue, number(Int64($0.value))) })),
                ("blank_lines", number(summary.skippedBlank)), ("resumed_at_byte", number(summary.resumedAt)),
                ("lines_per_second", number(perSecond)),
            ])))
            return
        }
        var printer = RowPrinter(output, columns: ["metric", "value"])
        let rows: [(String, Int64)] = [
            ("lines", summary.lines), ("appended", Int64(summary.outcome.appended)),
            ("duplicates", Int64(summary.outcome.duplicates)), ("quarantined", Int64(summary.outcome.quarantinedTotal)),
        ] + byCode.map { ("quarantined." + $0.key.rawValue, Int64($0.value)) }
            + [("blank_lines", summary.skippedBlank), ("resumed_at_byte", summary.resumedAt), ("lines_per_second", perSecond)]
        for (metric, value) in rows { printer.row([.text(metric), .int(value)]) }
        printer.finish()
    }
}
