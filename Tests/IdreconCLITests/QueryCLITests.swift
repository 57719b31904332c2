import Foundation
import Testing

@Suite struct QueryCLITests {
    static let stream = """
        {"schema":"login-event/v1","event_id":"a","occurred_at":"2026-11-01T09:00:00Z","app_id":"1","device_id":"P","tracking":"enabled","token_type":"access_token","asid":"300","email":"Ana@X.com","friend_asids":["99"]}
        {"schema":"login-event/v1","event_id":"b","occurred_at":"2026-11-01T08:00:00Z","app_id":"2","device_id":"Q","tracking":"limited","token_type":"authentication_token","asid":"400","email":" ana@x.com "}
        {"schema":"login-event/v1","event_id":"c","occurred_at":"2026-11-02T08:00:00Z","app_id":"2","device_id":"R","tracking":"enabled","token_type":"access_token","asid":"500"}

        """

    func db() throws -> (Scratch, String) {
        let s = Scratch()
        let db = s.path("db.sqlite")
        #expect(try run(Binaries.idrecon, ["ingest", "-", "--db", db], stdin: Self.stream).status == 0)
        return (s, db)
    }

    /// Every command names itself. Without a `commandName` the argument parser spells the type's
    /// name with `String(describing:)` on every start, and its dynamic casts scan the binary's
    /// 10,000 protocol conformances: four unnamed subcommands were a tenth of `--version`'s time.
    @Test func everyCommandNamesItself() throws {
        let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Sources/idrecon")
        let files = try FileManager.default.contentsOfDirectory(at: sources, includingPropertiesForKeys: nil)
        var configurations = 0
        for file in files where file.pathExtension == "swift" {
            let text = try String(contentsOf: file, encoding: .utf8)
            for part in text.components(separatedBy: "CommandConfiguration(").dropFirst() {
                configurations += 1
                #expect(part.drop { $0 == " " || $0 == "\n" }.hasPrefix("commandName:"),
                        "\(file.lastPathComponent): a CommandConfiguration without commandName")
            }
        }
        #expect(configurations >= 20)
    }

    /// A query never loads librdkafka (`CRdKafka` loads it when the Kafka layer first needs it):
    /// linked, it and the libraries it brings took 2–3 ms of every process's start. The loader's
    /// own trace of a query names no such library; the Kafka suites show it loading on demand.
    @Test func queriesDoNotLoadLibrdkafka() throws {
        let (s, db) = try db()
        _ = s
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Binaries.idrecon)
        process.arguments = ["user", "300", "--db", db, "--format", "json"]
        process.environment = ProcessInfo.processInfo.environment.merging(["LD_DEBUG": "files"]) { $1 }
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        let trace = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        #expect(trace.contains("libsqlite3"), "the loader traced nothing: \(trace.prefix(300))")
        #expect(!trace.contains("librdkafka"))
    }

    /// The executable allocates with jemalloc under `CMalloc`'s settings (`MemoryPolicy`): jemalloc's own
    /// report of the options in effect, which it prints at exit when asked to.
    @Test func theAllocatorIsJemallocWithItsSettings() throws {
        let result = try run(Binaries.idrecon, ["--version"], environment: ["MALLOC_CONF": "stats_print:true"])
        #expect(result.status == 0)
        for option in ["opt.narenas: 2", "opt.background_thread: true", "opt.dirty_decay_ms: 1000", "opt.muzzy_decay_ms: 0",
                       "opt.oversize_threshold: 524288"] {
            #expect(result.stderr.contains(option), "\(option): not in effect")
        }
    }

    /// `replay` lets jemalloc's arena of blocks of 512 KiB and more keep freed blocks for half a second
    /// (`MemoryPolicy.keepLargeBlocks`): its report at exit shows an arena decaying dirty pages over 500 ms,
    /// which no other command has (the two arenas 1,000 ms; the large blocks' arena 0, purging at once).
    @Test func replayKeepsFreedLargeBlocksForHalfASecond() throws {
        let (s, db) = try db()
        _ = s
        let decays = { (arguments: [String]) throws -> [String] in
            let result = try run(Binaries.idrecon, arguments, environment: ["MALLOC_CONF": "stats_print:true"])
            #expect(result.status == 0, "\(arguments): \(result.stderr.suffix(300))")
            return result.stderr.split(separator: "\n").compactMap { line in
                let fields = line.split(separator: " ")
                return fields.count > 1 && fields[0] == "dirty:" ? String(fields[1]) : nil
            }
        }
        #expect(try decays(["replay", "--db", db]).contains("500"))
        #expect(try !decays(["user", "300", "--db", db]).contains("500"))
    }

    @Test func queriesAnswerAndSayNotFoundWithExitOne() throws {
        let (s, db) = try db()
        _ = s
        let user = try run(Binaries.idrecon, ["user", "300", "--db", db, "--format", "json"])
        #expect(user.status == 0)
        #expect(user.stdout.contains(#""user_id":"u:400""#) && user.stdout.contains(#""any_limited":true"#))
        #expect(try run(Binaries.idrecon, ["user", "--email", "ANA@x.com", "--db", db, "--format", "csv"]).stdout.contains("u:400"))
        #expect(try run(Binaries.idrecon, ["user", "--user-id", "u:400", "--db", db]).status == 0)
        #expect(try run(Binaries.idrecon, ["user", "777", "--db", db]).status == 1)
        #expect(try run(Binaries.idrecon, ["user", "300", "--email", "a@b", "--db", db]).status == 2)

        let explain = try run(Binaries.idrecon, ["explain", "300", "400", "--db", db, "--format", "csv"])
        #expect(explain.status == 0 && explain.stdout.contains(",300,email:") && explain.stdout.contains(",a,b"))
        let unlinked = try run(Binaries.idrecon, ["explain", "300", "500", "--db", db])
        #expect(unlinked.status == 1 && unlinked.stderr.contains("not linked"))

        let access = try run(Binaries.idrecon, ["access", "300", "400", "99", "--db", db, "--format", "csv"])
        #expect(access.status == 0)
        #expect(access.stdout.contains("300,allowed") && access.stdout.contains("400,forbidden_limited,now,b,2/Q") && access.stdout.contains("99,forbidden_unknown"))
        #expect(try run(Binaries.idrecon, ["access", "400", "--as-of", "2026-11-01T07:00:00Z", "--db", db, "--format", "csv"]).status == 1)
        #expect(try run(Binaries.idrecon, ["access", "400", "--as-of", "yesterday", "--db", db]).status == 2)

        let friends = try run(Binaries.idrecon, ["friends", "300", "--db", db, "--format", "csv"])
        #expect(friends.stdout.contains("300,99,forbidden_unknown,300"))
        #expect(try run(Binaries.idrecon, ["friends", "1234", "--db", db]).status == 1)

        let device = try run(Binaries.idrecon, ["device", "2", "Q", "--db", db, "--format", "json"])
        #expect(device.stdout.contains(#""mode":"limited""#))
        #expect(try run(Binaries.idrecon, ["device", "2", "nope", "--db", db]).status == 1)
    }

    /// `access`, `user` and `device` look up lists: `-` reads standard input, `--from` a file
    /// (blank lines and # comments skipped); found rows print, the missing are named on stderr
    /// and exit 1; anything that is not an ASID is a usage error naming its line.
    @Test func bulkLookupsFromStandardInputAndFiles() throws {
        let (s, db) = try db()
        let access = try run(Binaries.idrecon, ["access", "-", "500", "--db", db, "--format", "csv"], stdin: "300\n\n# a comment\n400\n")
        #expect(access.status == 0, "\(access.stderr)")
        #expect(access.stdout.split(separator: "\n").dropFirst().map { $0.split(separator: ",")[0] } == ["300", "400", "500"])
        let bad = try run(Binaries.idrecon, ["access", "-", "--db", db], stdin: "300\n12ab\n")
        #expect(bad.status == 2 && bad.stderr.contains("stdin:2") && bad.stderr.contains("12ab"), "\(bad.stderr)")
        #expect(try run(Binaries.idrecon, ["access", "-1", "--db", db]).status == 2)
        #expect(try run(Binaries.idrecon, ["user", "abc", "--db", db]).status == 2)

        let list = s.path("asids.txt")
        _ = FileManager.default.createFile(atPath: list, contents: Data("300\n777\n500\n".utf8))
        let users = try run(Binaries.idrecon, ["user", "--from", list, "--db", db, "--format", "csv"])
        #expect(users.status == 1 && users.stderr.contains("777") && users.stderr.split(separator: "\n").count == 1, "\(users.stderr)")
        #expect(users.stdout.contains("u:400,300,") && users.stdout.contains("u:500,500,"))

        let pairs = try run(Binaries.idrecon, ["device", "-", "--db", db, "--format", "csv"], stdin: "1 P\n2\tR\n")
        #expect(pairs.status == 0 && pairs.stdout.contains("1,P,enabled,300") && pairs.stdout.contains("2,R,enabled,500"), "\(pairs.stderr)")
        let missing = try run(Binaries.idrecon, ["device", "-", "--db", db, "--format", "csv"], stdin: "1 P\n9 Z\n")
        #expect(missing.status == 1 && missing.stderr.contains("no device Z in app 9"))
        #expect(try run(Binaries.idrecon, ["device", "-", "--db", db], stdin: "justone\n").status == 2)
    }

    /// `--vertical` prints each row as one field per line, every field whole.
    @Test func verticalTablesShowEveryFieldOnItsOwnLine() throws {
        let (s, db) = try db()
        _ = s
        let r = try run(Binaries.idrecon, ["access", "300", "400", "--db", db, "--format", "table", "--vertical"])
        #expect(r.status == 0)
        let lines = r.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        #expect(lines.filter { $0.hasPrefix("asid ") }.count == 2 && lines.contains(""), "\(r.stdout)")
        #expect(lines.contains { $0.hasPrefix("evidence_device") && $0.hasSuffix("2/Q") }, "\(r.stdout)")
    }

    /// On a terminal narrower than a table, the widest columns give way: no line is wider
    /// than the terminal (run under `script`, which gives the command a terminal).
    @Test func tablesFitTheTerminal() throws {
        guard let script = ["/usr/bin/script", "/bin/script"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            return print("skipped: tablesFitTheTerminal needs script (util-linux)")
        }
        let (s, db) = try db()
        _ = s
        // `access` (a table of about 60 columns here) and `user` (one record: vertical when narrow).
        let command = "stty cols 45; \(Binaries.idrecon) access 300 400 99 --db \(db) --format table; \(Binaries.idrecon) user 300 --db \(db)"
        let r = try run(script, ["-q", "-e", "-c", command, "/dev/null"])
        let lines = r.stdout.replacingOccurrences(of: "\r", with: "").split(separator: "\n")
        #expect(lines.count >= 6, "\(r.stdout)")
        #expect(lines.allSatisfy { $0.count <= 45 }, "\(lines.map(\.count)): \(r.stdout)")
        #expect(r.stdout.contains("forbidde…") && r.stdout.contains("user_id"), "shrunk columns, a vertical record: \(r.stdout)")
    }

    /// `export --output FILE` writes what standard output would get, through a temporary file
    /// renamed once complete (none is left behind); never onto the database; no table format.
    @Test func exportToAFileIsAtomic() throws {
        let (s, db) = try db()
        let file = s.path("devices.csv")
        _ = FileManager.default.createFile(atPath: file, contents: Data("old\n".utf8))
        #expect(try run(Binaries.idrecon, ["export", "devices", "--db", db, "--format", "csv", "--output", file]).status == 0)
        let piped = try run(Binaries.idrecon, ["export", "devices", "--db", db, "--format", "csv"]).stdout
        #expect(String(decoding: try Data(contentsOf: URL(fileURLWithPath: file)), as: UTF8.self) == piped)
        #expect(try FileManager.default.contentsOfDirectory(atPath: s.url.path).filter { $0.hasSuffix(".tmp") }.isEmpty)
        #expect(try run(Binaries.idrecon, ["export", "devices", "--db", db, "--output", db]).status == 2)
        #expect(try run(Binaries.idrecon, ["export", "devices", "--db", db, "--format", "table"]).status == 2)
        #expect(try run(Binaries.idrecon, ["export", "devices", "--db", db, "--output", s.path("no/such/dir.json")]).status == 2)
    }

    /// `--format parquet` (through DuckDB, when its Python package is installed): the rows of
    /// the JSON export, lists as lists; without --output a usage error.
    @Test func exportToParquetHoldsTheJSONRows() throws {
        let (s, db) = try db()
        #expect(try run(Binaries.idrecon, ["export", "identities", "--db", db, "--format", "parquet"]).status == 2)
        guard (try? run("/usr/bin/env", ["python3", "-c", "import duckdb"]).status) == 0 else {
            print("skipped: exportToParquetHoldsTheJSONRows needs DuckDB for Python (python3 -m pip install duckdb)")
            return
        }
        let file = s.path("identities.parquet")
        let r = try run(Binaries.idrecon, ["export", "identities", "--db", db, "--format", "parquet", "--output", file])
        #expect(r.status == 0, "\(r.stderr)")
        let read = try run("/usr/bin/env", ["python3", "-c", """
            import duckdb, json, sys
            for row in duckdb.sql("SELECT * FROM read_parquet('" + sys.argv[1] + "') ORDER BY user_id").fetchall(): print(json.dumps(row))
            """, file])
        let json = try run(Binaries.idrecon, ["export", "identities", "--db", db]).stdout
        #expect(read.stdout.split(separator: "\n").count == json.split(separator: "\n").count && read.stdout.contains(#"["300", "400"]"#),
                "\(read.stdout) \(read.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: s.url.path).filter { $0.contains(".jsonl") || $0.hasSuffix(".tmp") }.isEmpty)
    }

    @Test func exportsHaveTheSpecFields() throws {
        let (s, db) = try db()
        _ = s
        let identities = try run(Binaries.idrecon, ["export", "identities", "--db", db]).stdout
        #expect(identities.hasPrefix(#"{"user_id":"u:400","asids":["300","400"],"email_sha256":[""#))
        #expect(try run(Binaries.idrecon, ["export", "devices", "--db", db, "--format", "csv"]).stdout == """
            app_id,device_id,mode,asid,anomalies
            1,P,enabled,300,0
            2,Q,limited,400,0
            2,R,enabled,500,0

            """)
        #expect(try run(Binaries.idrecon, ["export", "friends", "--db", db]).stdout == #"{"a":"300","b":"99"}"# + "\n")
        #expect(try run(Binaries.idrecon, ["export", "access", "--as-of", "2026-11-01T08:30:00Z", "--db", db]).stdout
            == #"{"asid":"400","state":"forbidden_limited"}"# + "\n")
        #expect(try run(Binaries.idrecon, ["export", "devices", "--as-of", "2026-11-01T08:30:00Z", "--db", db]).status == 2)
    }

    @Test func replayVerifiesAndSwaps() throws {
        let (s, db) = try db()
        let verify = try run(Binaries.idrecon, ["replay", "--verify", "--db", db, "--format", "csv"])
        #expect(verify.status == 0 && !verify.stdout.contains("DRIFT") && verify.stderr.contains("events/s"))
        let config = s.path("config.json")
        _ = FileManager.default.createFile(atPath: config, contents: Data(#"{"blocklist": ["ana@x.com"]}"#.utf8))
        #expect(try run(Binaries.idrecon, ["replay", "--config", config, "--db", db]).status == 0)
        #expect(try run(Binaries.idrecon, ["user", "300", "--db", db, "--format", "csv"]).stdout.contains("u:300"))
        _ = FileManager.default.createFile(atPath: config, contents: Data("not json".utf8))
        #expect(try run(Binaries.idrecon, ["replay", "--config", config, "--db", db]).status == 2)
        #expect(try run(Binaries.idrecon, ["replay", "--verify", "--db", db]).status == 0)
        // Without --digests a replay prints what it rebuilt; with it, each projection's digests.
        let plain = try run(Binaries.idrecon, ["replay", "--db", db, "--format", "csv"])
        #expect(plain.status == 0 && plain.stdout.hasPrefix("events,seconds,events_per_second,swapped\n"))
        #expect(plain.stdout.contains(",true"))
        let digested = try run(Binaries.idrecon, ["replay", "--digests", "--db", db, "--format", "csv"])
        #expect(digested.status == 0 && digested.stdout.hasPrefix("projection,digest,live_digest,match\n"))
        #expect(digested.stdout.contains("devices,") && !digested.stdout.contains(",false"))
    }

    /// While another replay holds the database's replay lock, `replay` says it waits, then
    /// runs when the lock is released.
    @Test func replayWaitsForAnotherReplay() throws {
        let (scratch, db) = try db()
        defer { withExtendedLifetime(scratch) {} }
        let lock = open(db + ".replay-lock", O_RDWR | O_CREAT, 0o644)
        #expect(lock >= 0 && flock(lock, LOCK_EX) == 0)
        let release = DispatchWorkItem { flock(lock, LOCK_UN); close(lock) }
        DispatchQueue.global().asyncAfter(deadline: .now() + 1.5, execute: release)
        let started = Date()
        let r = try run(Binaries.idrecon, ["replay", "--db", db, "--format", "csv"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.contains("waiting for another replay of \(db)"))
        #expect(Date().timeIntervalSince(started) >= 1.4)
        release.wait()
    }
}

@Suite struct AuditCLITests {
    @Test func auditExitCodesFormatsAndBadInput() throws {
        let s = Scratch()
        let db = s.path("db.sqlite")
        #expect(try run(Binaries.idrecon, ["ingest", "-", "--db", db], stdin: QueryCLITests.stream).status == 0)
        let clean = #"{"called_at":"2026-11-01T10:00:00Z","asid":"300","endpoint":"/me"}"# + "\n"
        #expect(try run(Binaries.idrecon, ["audit", "calls", "-", "--db", db], stdin: clean).status == 0)
        let bad = clean + #"{"called_at":"2026-11-01T10:00:00Z","asid":"400","endpoint":"/me/friends"}"# + "\n"
        let r = try run(Binaries.idrecon, ["audit", "calls", "-", "--db", db, "--format", "json"], stdin: bad)
        #expect(r.status == 1)
        #expect(r.stdout.contains(#""line":2"#) && r.stdout.contains(#""kind":"limited""#) && r.stdout.contains(#""evidence_event":"b""#))
        #expect(r.stdout.contains(#""endpoint":"/me/friends""#)) // extra fields kept
        #expect(r.stderr.contains("2 calls, 1 violation (limited 1)"))
        let csv = "asid,called_at,endpoint\n400,2026-11-01T10:00:00Z,\"/me, friends\"\n300,2026-11-01T10:00:00Z,/me\n"
        let c = try run(Binaries.idrecon, ["audit", "calls", "-", "--db", db, "--format", "csv", "--scope", "identity"], stdin: csv)
        #expect(c.status == 1)
        #expect(c.stdout.contains("2,2026-11-01T10:00:00.000Z,400,limited") && c.stdout.contains("3,2026-11-01T10:00:00.000Z,300,identity"))
        #expect(c.stdout.hasPrefix("line,called_at,asid,kind,state,limited_asid,evidence_event,evidence_device\n"), "no empty call column")
        let broken = clean + "{\"called_at\":\"yesterday\",\"asid\":\"1\"}\n"
        let b = try run(Binaries.idrecon, ["audit", "calls", "-", "--db", db], stdin: broken)
        #expect(b.status == 2 && b.stderr.contains("line 2"))
        #expect(try run(Binaries.idrecon, ["audit", "calls", s.path("missing"), "--db", db]).status == 2)
    }
}

@Suite struct ComplianceCLITests {
    @Test func graphDrawsTheIdentity() throws {
        let s = Scratch()
        let db = s.path("db.sqlite")
        #expect(try run(Binaries.idrecon, ["ingest", "-", "--db", db], stdin: QueryCLITests.stream).status == 0)
        let dot = try run(Binaries.idrecon, ["graph", "300", "--friends", "--db", db])
        #expect(dot.status == 0)
        #expect(dot.stdout.hasPrefix("graph \"u:400\" {"))
        #expect(dot.stdout.contains("\"asid:300\"") && dot.stdout.contains("\"asid:400\"") && dot.stdout.contains("forbidden_limited"))
        #expect(dot.stdout.contains("\"device:2/Q\"") && dot.stdout.contains("limited"))
        #expect(dot.stdout.contains("\"friend:99\"") && dot.stdout.contains("forbidden_unknown"))
        #expect(dot.stdout.contains("\"key:email:") && !dot.stdout.contains("ana@x.com"))
        #expect(try run(Binaries.idrecon, ["graph", "u:nobody", "--db", db]).status == 1)
        let svg = try run(Binaries.idrecon, ["graph", "u:400", "--format", "svg", "--db", db])
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/dot") {
            #expect(svg.status == 0 && svg.stdout.contains("<svg"))
        } else {
            #expect(svg.status == 2 && svg.stderr.contains("Graphviz"))
        }
    }

    @Test func forgetCommand() throws {
        let s = Scratch()
        let db = s.path("db.sqlite")
        #expect(try run(Binaries.idrecon, ["ingest", "-", "--db", db], stdin: QueryCLITests.stream).status == 0)
        let r = try run(Binaries.idrecon, ["forget", "300", "--db", db, "--format", "csv"])
        #expect(r.status == 0 && r.stdout.contains("300,2,0,3"))
        #expect(try run(Binaries.idrecon, ["forget", "777", "--db", db]).status == 1)
        #expect(try run(Binaries.idrecon, ["replay", "--verify", "--db", db]).status == 0)
        #expect(try run(Binaries.idrecon, ["user", "300", "--db", db, "--format", "csv"]).stdout.contains("u:300"))
    }
}
