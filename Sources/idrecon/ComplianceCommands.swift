import ArgumentParser
import Foundation
import IdreconDomain
import IdreconStore

struct ForgetCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "forget",
        abstract: "Erase an ASID's e-mail and id_token from the log, quarantine and projections (GDPR).",
        discussion: """
            Scrubs the e-mail and id_token of every logged event of the ASID and of quarantined \
            records holding them, keeps a tombstone, rebuilds the projections from the scrubbed log \
            (the identity may split), then compacts the file (VACUUM) so freed pages keep no copy. \
            Login modes, access history and other non-personal facts stay. Later events for the \
            ASID are accepted; a re-delivered old event is recognized as a duplicate.
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var output: FormatOptions
    @Argument(help: "The ASID to forget.") var asid: String

    func run() throws {
        let store = try EventStore(path: global.databasePath, skipPendingRebuild: true)
        guard try store.seen(asid) else {
            throw IdreconError(.notFound, "ASID \(asid) was never seen; nothing to forget")
        }
        let report = try store.forget(asid)
        var printer = RowPrinter(output, columns: ["asid", "events_scrubbed", "quarantined_scrubbed", "replayed_events"])
        printer.row([.text(asid), .int(Int64(report.events)), .int(Int64(report.quarantined)), .int(report.replay.events)])
        printer.finish()
    }
}

struct GraphCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "graph",
        abstract: "Draw an identity: its ASIDs, link keys, devices with their mode, and optionally friends by access state.",
        discussion: "DOT always; SVG through Graphviz's 'dot' when it is installed.")

    enum Format: String, ExpressibleByArgument, CaseIterable { case dot, svg }

    @OptionGroup var global: GlobalOptions
    @Argument(help: "A user ID (u:…) or a member ASID.") var identity: String
    @Flag(help: "Also draw each member's friends, coloured by access state.") var friends = false
    @Option(help: "dot or svg.") var format: Format = .dot

    func run() throws {
        let store = try openForReading(global)
        let user = identity.hasPrefix("u:") ? identity : try store.userID(asid: identity) ?? ""
        guard let record = try store.identity(user) else {
            throw IdreconError(.notFound, "no identity for \(identity)")
        }
        var dot = "graph \"\(user)\" {\n  graph [rankdir=LR, label=\"\(user)\", fontname=Helvetica];\n  node [fontname=Helvetica, fontsize=10];\n"
        let colors: [AccessState: String] = [.forbiddenLimited: "#e06666", .forbiddenUnknown: "#f6b26b", .allowed: "#93c47d", .unseen: "#cccccc"]
        func q(_ s: String) -> String { "\"" + s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\"" }
        for member in record.members {
            let state = try store.access(member.asid).state
            dot += "  \(q("asid:" + member.asid)) [label=\(q(member.asid + "\n" + state.rawValue)), shape=ellipse, style=filled, fillcolor=\(q(colors[state]!))];\n"
            for device in try store.devices(holding: member.asid) {
                let id = "device:\(device.appID)/\(device.deviceID)"
                dot += "  \(q(id)) [label=\(q("app \(device.appID)\n\(device.deviceID)\n\(device.mode.rawValue)")), shape=box, style=\(device.mode == .limited ? "\"filled,dashed\"" : "filled"), fillcolor=\(q(device.mode == .limited ? "#f4cccc" : "#d9ead3"))];\n"
                dot += "  \(q("asid:" + member.asid)) -- \(q(id)) [style=dotted];\n"
            }
            if friends {
                for f in try store.friends(of: member.asid) {
                    let s = try store.access(f.friend).state
                    dot += "  \(q("friend:" + f.friend)) [label=\(q(f.friend + "\n" + s.rawValue)), shape=circle, fontsize=8, style=filled, fillcolor=\(q(colors[s]!))];\n"
                    dot += "  \(q("asid:" + member.asid)) -- \(q("friend:" + f.friend)) [color=\"#999999\"];\n"
                }
            }
        }
        let linked = try store.keyLinks(of: record.members.map(\.asid))
        for key in record.keys {
            let label = key.key.hasPrefix("email:") ? "email " + key.key.dropFirst(6).prefix(10) + "…" : key.key
            let ambiguous = key.ambiguity.map { "\n(\($0.label))" } ?? ""
            dot += "  \(q("key:" + key.key)) [label=\(q(label + ambiguous)), shape=note, style=\(key.ambiguity == nil ? "solid" : "dashed")];\n"
        }
        for link in linked {
            dot += "  \(q("asid:" + link.asid)) -- \(q("key:" + link.key)) [label=\(q(link.event)), fontsize=8];\n"
        }
        dot += "}\n"
        switch format {
        case .dot:
            FileHandle.standardOutput.write(Data(dot.utf8))
        case .svg:
            let paths = (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":")
            guard let dotPath = paths.map({ "\($0)/dot" }).first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
                throw IdreconError(.usage, "SVG needs Graphviz's 'dot' (apt-get install graphviz); or use --format dot and render it elsewhere")
            }
            let process = Process()
            process.executableURL = URL(fileURLWithPath: dotPath)
            process.arguments = ["-Tsvg"]
            let input = Pipe()
            process.standardInput = input
            try process.run()
            input.fileHandleForWriting.write(Data(dot.utf8))
            try input.fileHandleForWriting.close()
            process.waitUntilExit()
            if process.terminationStatus != 0 { throw IdreconError(.transient, "Graphviz 'dot' failed (exit \(process.terminationStatus))") }
        }
    }
}
