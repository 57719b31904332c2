import Crypto
import Foundation
import GRDB
import IdreconDomain
import IdreconIngest
@testable import IdreconStore
import Testing
import _CryptoExtras

/// Records and conditions that once lost events, crashed or stopped the pipeline.
@Suite struct HostileIngestTests {
    @Test func unicodeEquivalentPayloadIsAConflictNotADuplicate() throws {
        let dir = TempDir()
        func line(_ device: String) -> String {
            #"{"schema":"login-event/v1","event_id":"e1","occurred_at":"2026-11-01T09:00:00Z","app_id":"1","#
                + #""device_id":"\#(device)","tracking":"enabled","token_type":"access_token","asid":"11"}"#
        }
        let file = dir.write("a.jsonl", [line("caf\u{E9}"), line("cafe\u{301}"), line("caf\u{E9}")])
        let store = try EventStore(path: dir.path("db.sqlite"))
        let summary = try FileIngestor(store: store).ingest(path: file)
        #expect(summary.outcome.appended == 1)
        #expect(summary.outcome.duplicates == 1)
        #expect(summary.outcome.quarantined == [.eventIDConflict: 1])
        #expect(try store.quarantineEntries().map(\.position) == [2])
    }

    @Test func oversizedLineIsQuarantinedWithItsEventIDAndABoundedPrefix() throws {
        let dir = TempDir()
        let big = #"{"schema":"login-event/v1","blob":""# + String(repeating: "x", count: 20 << 20) + #"","event_id":"big"}"#
        let file = dir.write("big.jsonl", [eventLine("a"), big, eventLine("b"), String(repeating: "y", count: 3000)])
        let store = try EventStore(path: dir.path("db.sqlite"))
        let summary = try FileIngestor(store: store, maxRecordBytes: 2048).ingest(path: file)
        #expect(summary.lines == 4)
        #expect(summary.outcome.appended == 2)
        #expect(summary.outcome.quarantined == [.malformedJSON: 2])
        let q = try store.quarantineEntries()
        #expect(q[0].raw.count == RecordSize.keptBytes)
        #expect(q[0].raw == Array(big.utf8.prefix(RecordSize.keptBytes)))
        #expect(q[0].eventID == "big")
        #expect(q[0].message.contains("record of \(big.utf8.count) bytes exceeds the limit of 2048 bytes"))
        #expect(q[1].raw.count == 3000 && q[1].position == 4)
        // Resume after the oversized lines: nothing is read twice.
        let again = try FileIngestor(store: store, maxRecordBytes: 2048).ingest(path: file)
        #expect(again.lines == 0)
        // A retry leaves a record kept only in part as it was.
        let retried = try store.retryQuarantine { EventValidator.validate($0) }
        #expect(retried.appended == 0)
        #expect(try store.quarantineEntries()[0].message == q[0].message)
    }

    @Test func oversizedRecordValueFromKafkaIsBoundedToo() {
        let raw = Array((#"{"event_id":"k1","pad":""# + String(repeating: "z", count: 100_000) + #""}"#).utf8)
        let record = IncomingRecord(raw: raw, origin: RecordOrigin(source: "kafka:t/0", position: 7), maxBytes: 4096)
        #expect(record.raw.count == min(raw.count, RecordSize.keptBytes))
        #expect(record.knownEventID == "k1")
        guard case let .failure(rejection) = record.validation else { Issue.record("accepted"); return }
        #expect(rejection.code == .malformedJSON)
    }

    @Test func correctlySignedTokenWithAHugeExpIsQuarantinedNotFatal() throws {
        let dir = TempDir()
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let p = try key.publicKey.getKeyPrimitives()
        func sign(_ exp: String) -> String {
            let header = Base64URL.encode(Array(#"{"alg":"RS256","kid":"k1"}"#.utf8))
            let body = Base64URL.encode(Array(#"{"iss":"https://facebook.com","aud":"1","sub":"9","nonce":"np","iat":1793523600,"exp":\#(exp)}"#.utf8))
            let sig = try! key.signature(for: SHA256.hash(data: Array((header + "." + body).utf8)), padding: .insecurePKCS1v1_5)
            return header + "." + body + "." + Base64URL.encode(sig.rawRepresentation)
        }
        let keys = KeySet(keys: ["k1": try _RSA.Signing.PublicKey(n: p.modulus, e: p.publicExponent)])
        var lines = (0..<20).map { eventLine("g\($0)", ["device_id": "D\($0)"]) }
        for (i, exp) in ["1e19", "1e300", "9223372036854775807"].enumerated() {
            lines.append(Stream.login("poison\(i)", day: 1.375, device: "P", asid: "9", limited: true,
                                      extra: ["nonce": "np", "id_token": sign(exp)]))
        }
        let store = try EventStore(path: dir.path("db.sqlite"))
        let summary = try FileIngestor(store: store, tokens: TokenVerifier(keys: keys)).ingest(path: dir.write("in.jsonl", lines))
        #expect(summary.outcome.appended == 20)
        #expect(summary.outcome.quarantined == [.tokenInvalid: 3])
        #expect(try store.quarantineEntries().allSatisfy { $0.message.contains("exp out of range") })
    }

    /// A full disk ends the ingest with the store's one-line error; the database stays sound
    /// and a later run on a bigger disk resumes exactly. Needs a small filesystem of its own
    /// (tmpfs, as root); skipped otherwise.
    @Test func fullDiskIsAnErrorNotACrash() throws {
        let dir = TempDir()
        let mountPoint = dir.path("small")
        try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: true)
        guard Self.mount(["-t", "tmpfs", "-o", "size=3m", "tmpfs", mountPoint]) else {
            print("skipped: fullDiskIsAnErrorNotACrash needs to mount a tmpfs (run as root)")
            return
        }
        defer { _ = Self.umount(mountPoint) }
        let lines = (0..<30_000).map { eventLine("f\($0)", ["device_id": "D\($0 % 997)", "asid": "\($0 % 3001)"]) }
        let file = dir.write("in.jsonl", lines)
        let db = mountPoint + "/db.sqlite"
        do {
            let store = try EventStore(path: db)
            _ = try FileIngestor(store: store, batchSize: 2000, chunkSize: 1000).ingest(path: file)
            Issue.record("a 3 MB filesystem held 30,000 events")
        } catch {
            let message = "\(error)"
            #expect(message.contains("disk is full"), "\(message)")
            #expect(!message.contains("\n"))
        }
        let check = try DatabaseQueue(path: db).read { try String.fetchOne($0, sql: "PRAGMA integrity_check") }
        #expect(check == "ok")
        #expect(Self.mount(["-o", "remount,size=256m", mountPoint]))
        let store = try EventStore(path: db)
        _ = try FileIngestor(store: store, batchSize: 2000).ingest(path: file)
        let stats = try store.stats()
        #expect(stats.events + stats.duplicates + stats.quarantined == lines.count)
        #expect(stats.events == lines.count)
    }

    static func mount(_ arguments: [String]) -> Bool { run("/bin/mount", arguments) }
    static func umount(_ path: String) -> Bool { run("/bin/umount", ["-l", path]) }

    private static func run(_ tool: String, _ arguments: [String]) -> Bool {
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: tool) else { return false }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return false }
        process.waitUntilExit()
        return process.terminationStatus == 0
    }
}
