import ArgumentParser
import Foundation
import IdreconDomain
import IdreconStore

struct QuarantineCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "quarantine",
        abstract: "Inspect records that were not appended, with their reason codes.",
        subcommands: [List.self, Show.self, Retry.self]
    )

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "list", abstract: "List quarantined records (oldest first).")

        @OptionGroup var global: GlobalOptions
        @OptionGroup var output: FormatOptions

        @Option(help: "Only this reason code (\(ReasonCode.allCases.map(\.rawValue).joined(separator: ", "))).")
        var code: String?

        @Option(parsing: .unconditional, help: "At most this many entries; 0 for all.")
        var limit = 100

        func validate() throws {
            if let code, ReasonCode(rawValue: code) == nil {
                throw ValidationError("unknown reason code '\(code)'; one of: \(ReasonCode.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            guard limit >= 0 else { throw ValidationError("--limit must be 0 or more") }
        }

        func run() throws {
            let store = try EventStore(path: global.databasePath, readOnly: true)
            var printer = RowPrinter(output, columns: ["id", "code", "source", "position", "event_id", "message"])
            var after: Int64 = 0
            var remaining = limit == 0 ? Int.max : limit
            while remaining > 0 {
                let page = try store.quarantineEntries(code: code.flatMap(ReasonCode.init), limit: min(remaining, 1000), afterID: after)
                if page.isEmpty { break }
                for e in page {
                    printer.row([.int(e.id), .text(e.code), .text(e.source), .int(e.position), .text(e.eventID), .text(e.message)])
                }
                after = page.last!.id
                remaining -= page.count
            }
            printer.finish()
        }
    }

    struct Retry: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "retry",
            abstract: "Re-validate quarantined records (e.g. after a JWKS update) and append those that now pass, in their original order.")

        @OptionGroup var global: GlobalOptions
        @OptionGroup var output: FormatOptions
        @OptionGroup var tokens: TokenOptions

        @Option(help: "Only entries with this reason code.")
        var code: String?

        func validate() throws {
            if let code, ReasonCode(rawValue: code) == nil {
                throw ValidationError("unknown reason code '\(code)'; one of: \(ReasonCode.allCases.map(\.rawValue).joined(separator: ", "))")
            }
        }

        func run() throws {
            let store = try EventStore(path: global.databasePath)
            let verifier = try tokens.verifier(database: global)
            let outcome = try store.retryQuarantine(code: code.flatMap(ReasonCode.init)) { raw in
                let result = EventValidator.validate(raw)
                if let verifier, case let .success(event) = result, let failure = verifier.check(event) {
                    return .failure(Rejection(.tokenInvalid, failure.detail))
                }
                return result
            }
            var printer = RowPrinter(output, columns: ["metric", "value"])
            printer.row([.text("appended"), .int(Int64(outcome.appended))])
            printer.row([.text("already_logged"), .int(Int64(outcome.duplicates))])
            printer.row([.text("still_quarantined"), .int(Int64(outcome.quarantinedTotal))])
            for (c, n) in outcome.quarantined.sorted(by: { $0.key < $1.key }) { printer.row([.text("still_quarantined.\(c.rawValue)"), .int(Int64(n))]) }
            printer.finish()
        }
    }

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "show", abstract: "Show one quarantined record with its raw bytes.")

        @OptionGroup var global: GlobalOptions
        @OptionGroup var output: FormatOptions

        @Argument(help: "Quarantine entry ID (see 'quarantine list').")
        var id: Int64

        func run() throws {
            let entry: QuarantineEntry?
            entry = try EventStore(path: global.databasePath, readOnly: true).quarantineEntry(id: id)
            guard let entry else { throw IdreconError(.notFound, "no quarantine entry \(id)") }
            let text = String(validating: entry.raw, as: UTF8.self)
            var printer = RowPrinter(output, columns: [
                "id", "code", "message", "source", "position", "partition", "key", "event_id", "quarantined_at", "raw", "raw_base64",
            ])
            printer.row([
                .int(entry.id), .text(entry.code), .text(entry.message), .text(entry.source), .int(entry.position),
                .int(entry.partition.map(Int64.init)), .text(entry.recordKey.map { String(decoding: $0, as: UTF8.self) }),
                .text(entry.eventID), .text(Timestamp.format(entry.quarantinedAt)),
                .text(text), .text(Data(entry.raw).base64EncodedString()),
            ])
            if output.resolved == .table {
                // Vertical layout reads better for one record.
                let values = [
                    String(entry.id), entry.code, entry.message, entry.source, String(entry.position),
                    entry.partition.map(String.init) ?? "", entry.recordKey.map { String(decoding: $0, as: UTF8.self) } ?? "",
                    entry.eventID ?? "", Timestamp.format(entry.quarantinedAt),
                    text ?? "(not UTF-8: \(entry.raw.count) bytes; see raw_base64)", Data(entry.raw).base64EncodedString(),
                ]
                for (name, value) in zip(printer.columns, values.map(RowPrinter.escape)) {
                    print(name.padding(toLength: 15, withPad: " ", startingAt: 0) + (value.count > 2000 ? String(value.prefix(2000)) + "… (\(value.count) chars)" : value))
                }
            } else {
                printer.finish()
            }
        }
    }
}
