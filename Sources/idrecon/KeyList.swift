import ArgumentParser
import Foundation
import IdreconDomain

/// What a lookup command was asked about: the keys on its command line, where `-` stands for
/// standard input, and `--from FILE` (`-`: standard input): one key per line, blank lines and
/// `#` comments skipped. Bulk lookups from a file are how a data team checks a list.
struct KeyList {
    /// A key and where it came from (`argument 2`, `stdin:14`), for error messages.
    struct Key {
        var text: String
        var origin: String
    }

    /// The keys of `arguments` and of `from`, in order; `-` reads standard input (once).
    static func read(_ arguments: [String], from: String?, global: GlobalOptions) throws -> [Key] {
        var keys: [Key] = []
        var readStandardInput = false
        func lines(of path: String) throws {
            let name: String, data: Data
            if path == "-" {
                guard !readStandardInput else { return }
                readStandardInput = true
                (name, data) = ("stdin", FileHandle.standardInput.readDataToEndOfFile())
            } else {
                try global.checkInput(path, "a list of keys")
                guard let contents = FileManager.default.contents(atPath: path) else {
                    throw IdreconError(.input, "cannot read \(path); check the path and its permissions")
                }
                (name, data) = (path, contents)
            }
            for (n, line) in data.split(separator: 0x0A, omittingEmptySubsequences: false).enumerated() {
                let text = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
                if text.isEmpty || text.hasPrefix("#") { continue }
                keys.append(Key(text: text, origin: "\(name):\(n + 1)"))
            }
        }
        for (i, argument) in arguments.enumerated() {
            if argument == "-" { try lines(of: "-") } else { keys.append(Key(text: argument, origin: "argument \(i + 1)")) }
        }
        if let from { try lines(of: from) }
        return keys
    }

    /// ASIDs, each checked to be 1-32 digits: anything else is a usage error that names it.
    static func asids(_ arguments: [String], from: String?, global: GlobalOptions) throws -> [String] {
        try read(arguments, from: from, global: global).map { key in
            guard EventValidator.isASID(key.text) else {
                throw IdreconError(.usage, "\(key.origin): '\(RowPrinter.escape(String(key.text.prefix(64))))' is not an ASID (1-32 digits)")
            }
            return key.text
        }
    }
}
