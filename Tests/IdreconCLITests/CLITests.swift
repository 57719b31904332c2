import EventGenerator
import Foundation
import IdreconStore
import Testing

/// The built `idrecon` and `idrecon-gen` executables, next to the test bundle.
enum Binaries {
    static let directory: URL = {
        var url = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        while url.path != "/" {
            if FileManager.default.isExecutableFile(atPath: url.appendingPathComponent("idrecon").path) { return url }
            url.deleteLastPathComponent()
        }
        // Fallback: the package's default debug build folder.
        return URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent(".build/debug")
    }()
    static var idrecon: String { directory.appendingPathComponent("idrecon").path }
    static var generator: String { directory.appendingPathComponent("idrecon-gen").path }
}

struct RunResult {
    var status: Int32
    var stdout: String
    var stderr: String
}

@discardableResult
func run(_ executable: String, _ arguments: [String], stdin: String? = nil, environment: [String: String] = [:]) throws -> RunResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    if !environment.isEmpty { process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
    let out = Pipe(), err = Pipe()
    process.standardOutput = out
    process.standardError = err
    let input = Pipe()
    process.standardInput = stdin == nil ? FileHandle.nullDevice : input
    try process.run()
    if let stdin {
        input.fileHandleForWriting.write(Data(stdin.utf8))
        try input.fileHandleForWriting.close()
    }
    // Both pipes are drained at once: a process that fills one (jemalloc's report at exit is more than a
    // pipe's 64 KiB) while the other is read would block forever.
    let stderr = DrainedPipe(err)
    let o = out.fileHandleForReading.readDataToEndOfFile()
    let e = stderr.data()
    process.waitUntilExit()
    return RunResult(status: process.terminationStatus, stdout: String(decoding: o, as: UTF8.self), stderr: String(decoding: e, as: UTF8.self))
}

/// A pipe read to its end on a thread of its own.
private final class DrainedPipe: @unchecked Sendable {
    private var read = Data()
    private let done = DispatchSemaphore(value: 0)

    init(_ pipe: Pipe) {
        let handle = pipe.fileHandleForReading
        Thread { [self] in
            read = handle.readDataToEndOfFile()
            done.signal()
        }.start()
    }

    /// Everything the pipe carried, once its writers closed it.
    func data() -> Data {
        done.wait()
        return read
    }
}

/// A generated stream written to `events.jsonl` in `s`, and its number of lines.
func generatedStream(_ s: Scratch, events: Int, seed: Int, badFraction: Double = 0.02) throws -> (path: String, lines: Int) {
    let file = s.path("events.jsonl")
    let result = try run(Binaries.generator, ["--events", "\(events)", "--seed", "\(seed)", "--bad-fraction", "\(badFraction)", "--output", file])
    #expect(result.status == 0, "\(result.stderr)")
    return (file, try Data(contentsOf: URL(fileURLWithPath: file)).split(separator: UInt8(ascii: "\n")).count)
}

final class Scratch {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("idrecon-cli-\(UUID().uuidString)")
    init() { try! FileManager.default.createDirectory(at: url, withIntermediateDirectories: true) }
    deinit { try? FileManager.default.removeItem(at: url) }
    func path(_ name: String) -> String { url.appendingPathComponent(name).path }
}

@Suite struct CLITests {
    @Test func badInputIsOneLineAndExitTwo() throws {
        let s = Scratch()
        let db = s.path("db.sqlite")
        let cases: [[String]] = [
            ["ingest", s.path("missing.jsonl"), "--db", db],
            ["ingest", s.url.path, "--db", db],
            ["ingest", "/dev/null", "--db", s.url.path],
            ["ingest", "/dev/null", "--db", "/proc/no/such/dir/db.sqlite"],
            ["ingest", "/dev/null", "--db", db, "--batch-size", "0"],
            ["ingest", "/dev/null", "--db", db, "--format", "xml"],
            ["quarantine", "list", "--db", db, "--code", "nope"],
            ["stats", "--db", s.path("never-created.sqlite")],
            ["frobnicate"],
        ]
        for arguments in cases {
            let r = try run(Binaries.idrecon, arguments)
            #expect(r.status == 2, "\(arguments): \(r.status) \(r.stderr)")
            #expect(!r.stderr.isEmpty && !r.stderr.contains("Fatal error") && !r.stderr.contains("Stack dump"), "\(arguments)")
        }
        let corrupt = s.path("corrupt.sqlite")
        _ = FileManager.default.createFile(atPath: corrupt, contents: Data(repeating: 7, count: 4096))
        let r = try run(Binaries.idrecon, ["ingest", "/dev/null", "--db", corrupt])
        #expect(r.status == 2)
        #expect(r.stderr.split(separator: "\n").count == 1)
        #expect(r.stderr.contains("not an idrecon SQLite database"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: corrupt)) == Data(repeating: 7, count: 4096), "a corrupt file is never overwritten")
    }

    /// Both commands say which build they are (a release number and the commit) and exit 0;
    /// the generator's usage errors exit 2 like idrecon's, a file it cannot write 1.
    @Test func versionAndTheGeneratorsExitCodes() throws {
        for binary in [Binaries.idrecon, Binaries.generator] {
            let r = try run(binary, ["--version"])
            #expect(r.status == 0, "\(binary): \(r.stderr)")
            #expect(r.stdout.range(of: #"^\d+\.\d+\.\d+ \([A-Za-z0-9._-]+\)\n$"#, options: .regularExpression) != nil, "\(r.stdout)")
        }
        #expect(try run(Binaries.idrecon, ["--version"]).stdout == run(Binaries.generator, ["--version"]).stdout)
        for arguments in [["--events", "-1"], ["--bad-fraction", "2"], ["--frobnicate"], ["--events"]] {
            let r = try run(Binaries.generator, arguments)
            #expect(r.status == 2, "\(arguments): \(r.status) \(r.stderr)")
        }
        let r = try run(Binaries.generator, ["--events", "1", "--output", "/proc/no/such/dir/events.jsonl"])
        #expect(r.status == 1, "\(r.stderr)")
        #expect(r.stderr.split(separator: "\n").count == 1 && r.stderr.contains("cannot write"), "\(r.stderr)")
    }

    /// Several processes opening one new database at once (two consumers starting together).
    @Test func concurrentFirstOpensAllSucceed() throws {
        for _ in 0..<5 {
            let s = Scratch()
            let processes = try (0..<4).map { _ -> Process in
                let p = Process()
                p.executableURL = URL(fileURLWithPath: Binaries.idrecon)
                p.arguments = ["ingest", "/dev/null", "--db", s.path("db.sqlite")]
                p.standardOutput = FileHandle.nullDevice
                p.standardError = FileHandle.nullDevice
                try p.run()
                return p
            }
            for p in processes {
                p.waitUntilExit()
                #expect(p.terminationStatus == 0)
            }
        }
    }

    @Test(.enabled(if: getuid() != 0, "root ignores file permissions"))
    func readOnlyDatabaseIsAClearError() throws {
        let s = Scratch()
        let db = s.path("db.sqlite")
        try run(Binaries.idrecon, ["ingest", "/dev/null", "--db", db])
        try FileManager.default.setAttributes([.posixPermissions: 0o444], ofItemAtPath: db)
        try FileManager.default.setAttributes([.posixPermissions: 0o555], ofItemAtPath: s.url.path)
        defer { try? FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: s.url.path) }
        let input = FileManager.default.temporaryDirectory.appendingPathComponent("ro-\(UUID()).jsonl").path
        _ = FileManager.default.createFile(atPath: input, contents: Data("{}\n".utf8))
        let r = try run(Binaries.idrecon, ["ingest", input, "--db", db])
        #expect(r.status == 2)
        #expect(r.stderr.contains("read-only") || r.stderr.contains("cannot be opened"))
    }

    @Test func ingestFromStdinAndQueryFormats() throws {
        let s = Scratch()
        let db = s.path("db.sqlite")
        let input = """
            {"schema":"login-event/v1","event_id":"a","occurred_at":"2026-11-01T09:00:00Z","app_id":"1","device_id":"D","tracking":"limited","token_type":"access_token","asid":"1"}
            not json, "quoted"
            {"schema":"login-event/v1","event_id":"b","occurred_at":"2026-11-01T09:00:00Z","app_id":"1","device_id":"D","tracking":"limited","token_type":"authentication_token","asid":"1"}

            """
        let ingest = try run(Binaries.idrecon, ["ingest", "-", "--db", db, "--format", "json"], stdin: input)
        #expect(ingest.status == 0)
        #expect(!ingest.stderr.contains("\r") && !ingest.stderr.contains("ETA"), "no progress line when piped")
        // One typed object: numbers as numbers, the codes as a map.
        let summary = try JSONSerialization.jsonObject(with: Data(ingest.stdout.utf8)) as? [String: Any]
        #expect(ingest.stdout.split(separator: "\n").count == 1)
        #expect(summary?["appended"] as? Int == 1 && summary?["lines"] as? Int == 3 && summary?["quarantined"] as? Int == 2)
        #expect((summary?["quarantined_by_code"] as? [String: Int]) == ["malformed_json": 1, "token_type_mismatch": 1])

        let list = try run(Binaries.idrecon, ["quarantine", "list", "--db", db, "--format", "json"])
        let rows = list.stdout.split(separator: "\n").map { try! JSONSerialization.jsonObject(with: Data($0.utf8)) as! [String: Any] }
        #expect(rows.map { $0["code"] as? String } == ["token_type_mismatch", "malformed_json"])
        #expect(rows.map { $0["position"] as? Int } == [1, 2])

        let csv = try run(Binaries.idrecon, ["quarantine", "list", "--db", db, "--format", "csv", "--code", "malformed_json"])
        #expect(csv.stdout.hasPrefix("id,code,source,position,event_id,message\n"))
        #expect(csv.stdout.split(separator: "\n").count == 2)

        let show = try run(Binaries.idrecon, ["quarantine", "show", "2", "--db", db, "--format", "json"])
        #expect(show.stdout.contains(#""raw":"not json, \"quoted\"""#))
        #expect(try run(Binaries.idrecon, ["quarantine", "show", "99", "--db", db]).status == 1)

        let stats = try run(Binaries.idrecon, ["stats", "--db", db, "--format", "csv"])
        #expect(stats.stdout.contains("events,1\n"))
        #expect(stats.stdout.contains("quarantined,2\n"))
        let typed = try JSONSerialization.jsonObject(with: Data(try run(Binaries.idrecon, ["stats", "--db", db, "--format", "json"]).stdout.utf8))
        #expect((typed as? [String: Any])?["events"] as? Int == 1)
        #expect(((typed as? [String: Any])?["quarantined_by_code"] as? [String: Int])?["malformed_json"] == 1)
        #expect(try run(Binaries.idrecon, ["stats", "--help"]).status == 0)
    }

    /// An ingest killed with SIGKILL at random moments and restarted ends with exactly
    /// the log and quarantine of one clean run.
    @Test func killedIngestResumesWithoutLossOrDuplicates() throws {
        let s = Scratch()
        let file = s.path("events.jsonl")
        let gen = try run(Binaries.generator, ["--events", "40000", "--seed", "5", "--bad-fraction", "0.05", "--output", file, "--manifest", s.path("m.json")])
        #expect(gen.status == 0)

        let clean = s.path("clean.sqlite")
        #expect(try run(Binaries.idrecon, ["ingest", file, "--db", clean, "--batch-size", "500"]).status == 0)

        let crashed = s.path("crashed.sqlite")
        var rng = SeededRandom(seed: UInt64(Date().timeIntervalSince1970))
        var kills = 0
        for round in 0..<8 {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: Binaries.idrecon)
            process.arguments = ["ingest", file, "--db", crashed, "--batch-size", "500"]
            process.standardOutput = FileHandle.nullDevice
            let errors = s.path("killed-\(round).err")
            #expect(FileManager.default.createFile(atPath: errors, contents: nil))
            process.standardError = FileHandle(forWritingAtPath: errors)
            try process.run()
            let delay = UInt32(100_000 + rng.next() % 500_000)
            usleep(delay)
            if process.isRunning {
                kill(process.processIdentifier, SIGKILL)
                kills += 1
            }
            process.waitUntilExit()
            // A run that ended on its own before the kill must have ended well.
            let stderr = (try? String(contentsOfFile: errors, encoding: .utf8)) ?? ""
            #expect(process.terminationReason == .uncaughtSignal || process.terminationStatus == 0,
                    "run \(round) (killed after \(delay) µs) exited \(process.terminationStatus): \(stderr)")
        }
        let last = try run(Binaries.idrecon, ["ingest", file, "--db", crashed, "--batch-size", "500"])
        let listing = ((try? FileManager.default.contentsOfDirectory(atPath: s.url.path).sorted()) ?? []).map { name in
            let attributes = (try? FileManager.default.attributesOfItem(atPath: s.path(name))) ?? [:]
            let mode = (attributes[.posixPermissions] as? Int).map { String($0, radix: 8) } ?? "?"
            return "\(name) \(attributes[.size] ?? "?") bytes, mode \(mode)"
        }
        #expect(last.status == 0, "the run after the kills: \(last.stderr); files: \(listing)")

        let a = try EventStore(path: clean, readOnly: true), b = try EventStore(path: crashed, readOnly: true)
        let ea = try a.eventPayloads(), eb = try b.eventPayloads()
        #expect(ea.count == eb.count)
        #expect(Set(ea.map(\.eventID)) == Set(eb.map(\.eventID)))
        #expect(ea.map(\.payload) == eb.map(\.payload))
        let qa = try a.quarantineEntries(), qb = try b.quarantineEntries(limit: nil)
        #expect(try a.quarantineEntries(limit: nil).map { "\($0.position) \($0.code)" } == qb.map { "\($0.position) \($0.code)" })
        #expect(qa.map(\.raw) == Array(qb.prefix(qa.count)).map(\.raw))
        #expect(try a.stats().duplicates == b.stats().duplicates)
        #expect(kills >= 1, "the ingest finished before any kill; make the input larger")
    }

    /// A process killed in a database's first write, before the database is in WAL mode, leaves a
    /// hot rollback journal (CI met it: an ingest killed 0.1–0.6 s after it started). Readers and
    /// writers alike open the database after it, and its log is as if that write never began.
    @Test func aDatabaseKilledInItsFirstWriteOpens() throws {
        let s = Scratch()
        let (file, _) = try generatedStream(s, events: 200, seed: 3, badFraction: 0)
        // The sqlite3 shell killed inside a transaction bigger than its page cache: pages of the
        // new database are written, and the journal that undoes them is left behind.
        let interrupted = """
            PRAGMA journal_mode = DELETE; PRAGMA cache_size = 5; BEGIN; CREATE TABLE t(x);
            WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 20000)
            INSERT INTO t SELECT randomblob(200) FROM c;
            .system kill -9 $PPID

            """
        for (name, first) in [("read.sqlite", ["stats"]), ("write.sqlite", ["ingest", file])] {
            let db = s.path(name)
            _ = try run("/usr/bin/sqlite3", [db], stdin: interrupted)
            #expect(FileManager.default.fileExists(atPath: db + "-journal"), "\(name): no journal left")
            let opened = try run(Binaries.idrecon, first + ["--db", db, "--format", "json"])
            #expect(opened.status == 0, "\(first[0]): \(opened.stderr)")
            #expect(try run(Binaries.idrecon, ["ingest", file, "--db", db]).status == 0)
            let stats = try EventStore(path: db, readOnly: true).stats()
            #expect(stats.events == 200)
        }
    }
}
