import Foundation
import GRDB
import IdreconDomain
import IdreconLog
import Testing

/// Replay proves live = rebuilt by digests of every projection row, spelled by
/// `BulkStatement.Reader.appendCanonical`. Integers and valid UTF-8 texts are spelled from SQLite's
/// buffer without a Swift string; they must spell exactly what `String(value)` and
/// `CanonicalJSON.writeString` spell, or a digest would change with the binary.
@Suite struct DigestSpellingTests {
    /// How a value was spelled through Swift strings.
    static func reference(_ value: DatabaseValue) -> [UInt8] {
        var line: [UInt8] = []
        switch value.storage {
        case .null: line.append(contentsOf: "null".utf8)
        case .int64(let int): line.append(contentsOf: String(int).utf8)
        case .double(let double): line.append(contentsOf: String(double).utf8)
        case .string(let string): CanonicalJSON.writeString(string, into: &line)
        case .blob(let data): line.append(contentsOf: data.base64EncodedString().utf8)
        }
        return line
    }

    @Test func valuesAreSpelledAsThroughStrings() throws {
        let db = try DatabaseQueue()
        let integers: [Int64] = [0, 1, -1, 9, 10, -10, 42, 1_764_115_200_000, .max, .min, .max - 1, .min + 1]
        let texts = ["", "a", "u:123", "email:ab12", "quote \" and \\ back", "tab\tnew\nline\u{1}", "é", "日本", "a\u{7f}b"]
        try db.write { db in
            try db.execute(sql: "CREATE TABLE t (v ANY)")
            for value in integers { try db.execute(sql: "INSERT INTO t VALUES (?)", arguments: [value]) }
            for value in texts { try db.execute(sql: "INSERT INTO t VALUES (?)", arguments: [value]) }
            try db.execute(sql: "INSERT INTO t VALUES (NULL), (2.5), (x'00ff'), (CAST(x'61ff62' AS TEXT))")
        }
        let expected = try db.read { db in try DatabaseValue.fetchAll(db, sql: "SELECT v FROM t ORDER BY rowid").map(Self.reference) }
        let spelled = try db.read { db -> [[UInt8]] in
            var lines: [[UInt8]] = []
            try BulkStatement(db, "SELECT v FROM t ORDER BY rowid").each { row in
                var line: [UInt8] = []
                row.appendCanonical(0, to: &line)
                lines.append(line)
            }
            return lines
        }
        #expect(spelled.count == integers.count + texts.count + 4)
        for (ours, theirs) in zip(spelled, expected) {
            #expect(ours == theirs, "\(String(decoding: ours, as: UTF8.self)) != \(String(decoding: theirs, as: UTF8.self))")
        }
    }
}
