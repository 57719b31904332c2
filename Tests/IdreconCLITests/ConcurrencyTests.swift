import Foundation
import GRDB
import IdreconKafka
import IdreconStore
import Testing

/// Other processes open the database while idrecon writes it: the `sqlite3` shell of a
/// data team (read-write, the default), and other idrecon writers. None of it may corrupt
/// the database or lose a record.
@Suite(.serialized) struct ConcurrencyTests {
    static let sqlite3 = ["/usr/bin/sqlite3", "/bin/sqlite3"].first { FileManager.default.isExecutableFile(atPath: $0) }

    /// Opens, reads and closes the database `times` times from the `sqlite3` shell.
    static func foreignClient(_ db: String, times: Int) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", """
            i=0; while [ $i -lt \(times) ]; do
              \(sqlite3!) -cmd '.timeout 10000' "$0" 'SELECT count(*) FROM events' >/dev/null 2>&1; i=$((i+1)); done
            """, db]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        return process
    }

    /// Lines of a small file of valid events with fresh IDs, for a second writer.
    static func tinyFile(_ s: Scratch, _ n: Int) -> (path: String, lines: Int) {
        let lines = (0..<5).map { i in
            #"{"schema":"login-event/v1","event_id":"tiny-\#(n)-\#(i)","occurred_at":"2026-11-0\#(1 + i)T09:00:00Z","#
                + #""app_id":"9","device_id":"T\#(n)","tracking":"enabled","token_type":"access_token","asid":"777","#
                + #""email":"tiny\#(n)@mail.test"}"#
        }
        let path = s.path("tiny-\(n).jsonl")
        _ = FileManager.default.createFile(atPath: path, contents: Data(lines.map { $0 + "\n" }.joined().utf8))
        return (path, lines.count)
    }

    /// While `writer` runs: the foreign client, and tiny ingests, forgets and replays in turn.
    /// Returns the records the tiny ingests read.
    static func crowd(_ s: Scratch, db: String, while writer: Process) throws -> (tinyLines: Int, clientRuns: Int32) {
        let client = try foreignClient(db, times: 250)
        var tinyLines = 0, round = 0
        while writer.isRunning {
            round += 1
            switch round % 3 {
            case 0:
                let tiny = tinyFile(s, round)
                let result = try run(Binaries.idrecon, ["ingest", tiny.path, "--db", db, "--format", "json"])
                #expect(result.status == 0, "\(result.stderr)")
                if result.status == 0 { tinyLines += tiny.lines }
            case 1:
                let result = try run(Binaries.idrecon, ["forget", "777", "--db", db, "--format", "json"])
                #expect(result.status == 0 || result.status == 1, "\(result.stderr)")
            default:
                let result = try run(Binaries.idrecon, ["replay", "--db", db])
                #expect(result.status == 0, "\(result.stderr)")
            }
        }
        let clientStatus = wait(client, seconds: 300)
        return (tinyLines, clientStatus)
    }

    static func check(_ db: String, records: Int) throws {
        let integrity = try DatabaseQueue(path: db).read { try String.fetchAll($0, sql: "PRAGMA integrity_check") }
        #expect(integrity == ["ok"])
        let stats = try EventStore(path: db, readOnly: true).stats()
        #expect(stats.events + stats.duplicates + stats.quarantined == records)
        let verify = try run(Binaries.idrecon, ["replay", "--verify", "--db", db])
        #expect(verify.status == 0, "\(verify.stderr)")
    }

    @Test func ingestWithForeignClientsAndOtherWriters() throws {
        guard Self.sqlite3 != nil else {
            print("skipped: ingestWithForeignClientsAndOtherWriters needs the sqlite3 shell (apt-get install sqlite3)")
            return
        }
        let s = Scratch()
        let (file, lines) = try generatedStream(s, events: 60_000, seed: 12, badFraction: 0.03)
        let db = s.path("db.sqlite")
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: Binaries.idrecon)
        writer.arguments = ["ingest", file, "--db", db, "--batch-size", "1000", "--format", "json"]
        writer.standardOutput = FileHandle.nullDevice
        let errors = Pipe()
        writer.standardError = errors
        try writer.run()
        let (tiny, client) = try Self.crowd(s, db: db, while: writer)
        writer.waitUntilExit()
        let stderr = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(writer.terminationStatus == 0, "\(stderr)")
        #expect(client == 0)
        try Self.check(db, records: lines + tiny)
    }

    @Test func consumeWithForeignClientsAndOtherWriters() throws {
        guard Self.sqlite3 != nil else {
            print("skipped: consumeWithForeignClientsAndOtherWriters needs the sqlite3 shell (apt-get install sqlite3)")
            return
        }
        let s = Scratch()
        let lines = kafkaStream(events: 30_000, seed: 21)
        let cluster = try MockCluster(brokers: 1)
        try cluster.createTopic("t", partitions: 4, replicationFactor: 1)
        try produce(lines, to: cluster, topic: "t")
        let db = s.path("db.sqlite")
        let consumer = try startConsumer(cluster, topic: "t", db: db)
        let (tiny, client) = try Self.crowd(s, db: db, while: consumer)
        #expect(wait(consumer) == 0)
        #expect(client == 0)
        try Self.check(db, records: lines.count + tiny)
    }
}
