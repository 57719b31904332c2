import Foundation
import GRDB
import IdreconStore
import Testing

/// What a user sees when input or the environment is hostile: one line, the right exit
/// code, and nothing that an attacker's bytes can forge.
@Suite struct HostileCLITests {
    /// A record whose message carries an escape sequence and a newline (from `occurred_at`).
    static let forging = #"{"schema":"login-event/v1","event_id":"x1","occurred_at":"\u001b[31mRED\nid,code,forged","#
        + #""app_id":"1","device_id":"d","tracking":"enabled","token_type":"access_token","asid":"1"}"#

    @Test func untrustedTextCannotForgeTableOrCSVRows() throws {
        let s = Scratch()
        let db = s.path("db.sqlite")
        #expect(try run(Binaries.idrecon, ["ingest", "-", "--db", db, "--format", "json"], stdin: Self.forging + "\n").status == 0)
        for format in ["table", "csv"] {
            let list = try run(Binaries.idrecon, ["quarantine", "list", "--db", db, "--format", format])
            #expect(list.status == 0)
            #expect(!list.stdout.utf8.contains(0x1B), "\(format) output carries an escape byte")
            #expect(list.stdout.split(separator: "\n").count == 2, "\(format): \(list.stdout)")
            if format == "csv" { #expect(list.stdout.contains(#"\u{1B}[31mRED\u{A}id"#)) }
            let show = try run(Binaries.idrecon, ["quarantine", "show", "1", "--db", db, "--format", format])
            #expect(!show.stdout.utf8.contains(0x1B))
        }
        // JSON escapes by its own rules and keeps the text exact.
        let json = try run(Binaries.idrecon, ["quarantine", "list", "--db", db, "--format", "json"])
        #expect(json.stdout.contains(#"\u001b[31mRED\nid,code,forged"#))
    }

    @Test func unrelatedSQLiteDatabaseIsRefusedUntouched() throws {
        let s = Scratch()
        let db = s.path("theirs.sqlite")
        try DatabaseQueue(path: db).write { try $0.execute(sql: "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)") }
        let before = try Data(contentsOf: URL(fileURLWithPath: db))
        let result = try run(Binaries.idrecon, ["ingest", "-", "--db", db], stdin: "")
        #expect(result.status == 2)
        #expect(result.stderr.contains("idrecon did not create"))
        #expect(result.stderr.split(separator: "\n").count == 1)
        #expect(try Data(contentsOf: URL(fileURLWithPath: db)) == before)
        let tables = try DatabaseQueue(path: db).read { try String.fetchAll($0, sql: "SELECT name FROM sqlite_master") }
        #expect(tables == ["customers"])
    }

    /// Reading the database as an input would open and close a descriptor of it, dropping
    /// this process's SQLite locks: refused.
    @Test func theDatabaseIsNeverReadAsAnInput() throws {
        let s = Scratch()
        let db = s.path("db.sqlite")
        #expect(try run(Binaries.idrecon, ["ingest", "-", "--db", db, "--format", "json"], stdin: Self.forging + "\n").status == 0)
        for arguments in [["ingest", db], ["audit", "calls", db], ["ingest", "-", "--jwks", db], ["replay", "--config", db]] {
            let result = try run(Binaries.idrecon, arguments + ["--db", db], stdin: "")
            #expect(result.status == 2, "\(arguments)")
            #expect(result.stderr.contains("it is the database itself"), "\(arguments): \(result.stderr)")
        }
    }

    @Test func negativeNumbersAreValidationErrorsNotMissingValues() throws {
        let s = Scratch()
        for arguments in [["ingest", "-", "--batch-size", "-5"], ["ingest", "-", "--max-record-bytes", "-1"],
                          ["consume", "--embedded", "--batch-size", "-5"]] {
            let result = try run(Binaries.idrecon, arguments + ["--db", s.path("db.sqlite")], stdin: "")
            #expect(result.status == 2)
            #expect(!result.stderr.contains("Missing value"), "\(arguments): \(result.stderr)")
            #expect(result.stderr.contains("must be at least"), "\(arguments): \(result.stderr)")
        }
    }

    /// `-wal`/`-shm` left by a reader running as another user: the owner's writer says what
    /// is wrong and what to do. Needs root (to run as two other users); skipped otherwise.
    @Test func sidecarsOfAnotherUserAreExplained() throws {
        let runuser = ["/usr/sbin/runuser", "/sbin/runuser"].first { FileManager.default.isExecutableFile(atPath: $0) }
        guard getuid() == 0, let runuser else {
            print("skipped: sidecarsOfAnotherUserAreExplained needs root and runuser to act as two other users")
            return
        }
        // A directory both users may write to, as a shared data directory would be.
        let dir = "/tmp/idrecon-shared-\(UUID().uuidString)"
        mkdir(dir, 0o1777)
        chmod(dir, 0o1777)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let input = dir + "/one.jsonl", db = dir + "/db.sqlite"
        _ = FileManager.default.createFile(
            atPath: input, contents: Data((Self.eventLine + "\n").utf8), attributes: [.posixPermissions: 0o644])
        func idrecon(as user: String, _ arguments: [String]) throws -> RunResult {
            try run(runuser, ["-u", user, "--", Binaries.idrecon] + arguments)
        }
        let owner = try idrecon(as: "daemon", ["ingest", input, "--db", db, "--format", "json"])
        guard owner.status == 0 else {
            print("skipped: sidecarsOfAnotherUserAreExplained could not run idrecon as daemon: \(owner.stderr)")
            return
        }
        #expect(try idrecon(as: "nobody", ["stats", "--db", db, "--format", "json"]).status == 0)
        let again = try idrecon(as: "daemon", ["ingest", input, "--db", db, "--format", "json"])
        #expect(again.status == 2)
        #expect(again.stderr.split(separator: "\n").count == 1, "\(again.stderr)")
        #expect(again.stderr.contains("belongs to uid 65534"), "\(again.stderr)")
        #expect(again.stderr.contains("chown"), "\(again.stderr)")
    }

    static let eventLine = #"{"schema":"login-event/v1","event_id":"x1","occurred_at":"2026-11-01T00:00:00Z","app_id":"1","#
        + #""device_id":"d","tracking":"enabled","token_type":"access_token","asid":"1"}"#
}
