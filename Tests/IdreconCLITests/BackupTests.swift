import Foundation
import GRDB
import IdreconStore
import Testing

@Suite struct BackupTests {
    /// A backup taken while an ingest writes is a sound database of one commit: it passes
    /// `integrity_check`, its projections equal a replay of its log, and it takes more events.
    @Test func backupDuringIngestIsConsistent() throws {
        let s = Scratch()
        let (file, _) = try generatedStream(s, events: 60_000, seed: 31)
        let db = s.path("db.sqlite"), copy = s.path("copy.sqlite")
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: Binaries.idrecon)
        writer.arguments = ["ingest", file, "--db", db, "--batch-size", "1000", "--format", "json"]
        writer.standardOutput = FileHandle.nullDevice
        writer.standardError = FileHandle.nullDevice
        try writer.run()
        // Wait for the first commits, then back up mid-stream.
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline, ((try? EventStore(path: db, readOnly: true).stats().events) ?? 0) < 2000 { usleep(100_000) }
        let backup = try run(Binaries.idrecon, ["backup", copy, "--db", db, "--format", "json"])
        #expect(backup.status == 0, "\(backup.stderr)")
        let copied = try EventStore(path: copy, readOnly: true).stats().events
        writer.waitUntilExit()
        #expect(writer.terminationStatus == 0)
        let total = try EventStore(path: db, readOnly: true).stats().events
        #expect(copied >= 2000 && copied <= total)
        #expect(!FileManager.default.fileExists(atPath: copy + "-wal"))
        let integrity = try DatabaseQueue(path: copy).read { try String.fetchAll($0, sql: "PRAGMA integrity_check") }
        #expect(integrity == ["ok"])
        let verify = try run(Binaries.idrecon, ["replay", "--verify", "--db", copy])
        #expect(verify.status == 0, "\(verify.stderr)")
        // Restored, it resumes the same file where the copy stood and ends equal to the original.
        #expect(try run(Binaries.idrecon, ["ingest", file, "--db", copy, "--format", "json"]).status == 0)
        #expect(try EventStore(path: copy, readOnly: true).projectionDigests() == EventStore(path: db, readOnly: true).projectionDigests())
        // It never overwrites.
        let again = try run(Binaries.idrecon, ["backup", copy, "--db", db])
        #expect(again.status == 2 && again.stderr.contains("already exists"))
    }
}
