import Foundation
import GRDB
import IdreconKafka
import IdreconStore
import Testing

/// Every command that writes ends on a full disk with one line and its exit code, and
/// leaves a sound database that a later run resumes. Needs a small filesystem of its own
/// (tmpfs, as root); skipped otherwise.
@Suite(.serialized) struct FullDiskTests {
    final class SmallDisk {
        let path: String
        init?(megabytes: Int) {
            path = FileManager.default.temporaryDirectory.appendingPathComponent("idrecon-disk-\(UUID().uuidString)").path
            try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            guard Self.tool("/bin/mount", ["-t", "tmpfs", "-o", "size=\(megabytes)m", "tmpfs", path]) else {
                try? FileManager.default.removeItem(atPath: path)
                return nil
            }
        }
        func grow(megabytes: Int) -> Bool { Self.tool("/bin/mount", ["-o", "remount,size=\(megabytes)m", path]) }
        deinit {
            _ = Self.tool("/bin/umount", ["-l", path])
            try? FileManager.default.removeItem(atPath: path)
        }
        static func tool(_ tool: String, _ arguments: [String]) -> Bool {
            guard getuid() == 0, FileManager.default.isExecutableFile(atPath: tool),
                  let result = try? run(tool, arguments) else { return false }
            return result.status == 0
        }
    }

    static func expectOneLine(_ result: RunResult, status: Int32, _ command: String) {
        #expect(result.status == status, "\(command): \(result.stderr)")
        let lines = result.stderr.split(separator: "\n").filter { !$0.hasPrefix("replay: waiting") }
        #expect(lines.count == 1, "\(command): \(result.stderr)")
        #expect(result.stderr.contains("disk is full") || result.stderr.contains("disk I/O"), "\(command): \(result.stderr)")
    }

    @Test func writingCommandsEndWithOneLine() throws {
        guard let disk = SmallDisk(megabytes: 3) else {
            print("skipped: writingCommandsEndWithOneLine needs to mount a tmpfs (run as root)")
            return
        }
        let s = Scratch()
        let (file, lines) = try generatedStream(s, events: 30_000, seed: 8)
        let db = disk.path + "/db.sqlite"
        Self.expectOneLine(try run(Binaries.idrecon, ["ingest", file, "--db", db, "--batch-size", "2000"]), status: 2, "ingest")
        // Fill what is left, so the other writers have no room either.
        _ = FileManager.default.createFile(atPath: disk.path + "/filler", contents: nil)
        if let filler = FileHandle(forWritingAtPath: disk.path + "/filler") {
            while (try? filler.write(contentsOf: Data(count: 16_384))) != nil {}
            try? filler.close()
        }
        let asid = try DatabaseQueue(path: db, configuration: { var c = Configuration(); c.readonly = true; return c }()).read {
            try String.fetchOne($0, sql: "SELECT asid FROM events WHERE asid IS NOT NULL LIMIT 1")
        } ?? "1"
        for (command, status) in [(["replay"], Int32(2)), (["forget", asid], 2), (["quarantine", "retry"], 2)] {
            let result = try run(Binaries.idrecon, command + ["--db", db])
            // A command that found nothing to write may succeed (or find nothing: exit 1).
            if result.status != 0 && !(command[0] == "forget" && result.status == 1) {
                Self.expectOneLine(result, status: status, command.joined(separator: " "))
            }
        }
        let integrity = try DatabaseQueue(path: db).read { try String.fetchAll($0, sql: "PRAGMA integrity_check") }
        #expect(integrity == ["ok"])
        try FileManager.default.removeItem(atPath: disk.path + "/filler")
        #expect(disk.grow(megabytes: 256))
        // The next writer also finishes an erasure whose rebuild the full disk stopped.
        #expect(try run(Binaries.idrecon, ["ingest", file, "--db", db, "--batch-size", "2000"]).status == 0)
        let stats = try EventStore(path: db, readOnly: true).stats()
        #expect(stats.events + stats.duplicates + stats.quarantined == lines)
        #expect(try run(Binaries.idrecon, ["replay", "--verify", "--db", db]).status == 0)
    }

    @Test func consumeEndsWithExitOne() throws {
        guard let disk = SmallDisk(megabytes: 3) else {
            print("skipped: consumeEndsWithExitOne needs to mount a tmpfs (run as root)")
            return
        }
        let lines = kafkaStream(events: 20_000, seed: 14)
        let cluster = try MockCluster(brokers: 1)
        try cluster.createTopic("t", partitions: 4, replicationFactor: 1)
        try produce(lines, to: cluster, topic: "t")
        let db = disk.path + "/db.sqlite"
        let arguments = ["consume", "--brokers", cluster.bootstrap, "--topic", "t", "--group", "g", "--db", db, "--exit-at-end",
                         "--batch-size", "2000", "--log-level", "critical", "-X", "session.timeout.ms=6000"]
        Self.expectOneLine(try run(Binaries.idrecon, arguments), status: 1, "consume")
        let integrity = try DatabaseQueue(path: db).read { try String.fetchAll($0, sql: "PRAGMA integrity_check") }
        #expect(integrity == ["ok"])
        #expect(disk.grow(megabytes: 256))
        #expect(try run(Binaries.idrecon, arguments).status == 0)
        let stats = try EventStore(path: db, readOnly: true).stats()
        #expect(stats.events + stats.duplicates + stats.quarantined == lines.count)
    }
}
