import Foundation
import IdreconDomain
import IdreconIngest
@testable import IdreconStore
import Testing

@Suite struct ForgetTests {
    @Test func forgetErasesEveryByteAndKeepsReplayConsistent() throws {
        var s = try Stream()
        let original = Stream.login("a", day: 1, app: "1", device: "P", asid: "300",
                                    extra: ["email": "Zed@Forget.ME", "token_for_business": "T"])
        try s.ingest([
            original,
            Stream.login("b", day: 2, app: "1", device: "Q", asid: "301", extra: ["email": " zed@forget.me "]),
            Stream.login("c", day: 2, app: "2", device: "R", asid: "400", limited: true,
                         extra: ["id_token": "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiIzMDAifQ.c2ln", "nonce": "n-c"]),
            Stream.login("d", day: 3, app: "1", device: "S", asid: "500", extra: ["token_for_business": "T", "friend_asids": ["300"]]),
            Stream.login("e", day: 4, app: "1", device: "P", asid: "300", limited: true, extra: ["email": "zed@forget.me"]),
        ])
        // A conflicting re-send of 300's event lands in quarantine with the e-mail in it.
        _ = try FileIngestor(store: s.store).ingest(path: s.dir.write("conflict.jsonl", [
            Stream.login("a", day: 1, app: "1", device: "Other", asid: "300", extra: ["email": "Zed@Forget.ME"]),
        ]))
        #expect(try s.store.quarantineEntries().count == 1)
        #expect(try s.store.userID(asid: "500") == "u:300")
        #expect(try s.store.userID(asid: "301") == "u:300")

        let report = try s.store.forget("300")
        #expect(report.events == 3 && report.quarantined == 1) // 300's two logins and 301's login with the same address
        #expect(report.replay.swapped)

        // No byte of the e-mail (any case) remains in the database files.
        for suffix in ["", "-wal"] {
            let bytes = (try? Data(contentsOf: URL(fileURLWithPath: s.dir.path("db.sqlite") + suffix))) ?? Data()
            let lowered = [UInt8](bytes).map { $0 >= 65 && $0 <= 90 ? $0 + 32 : $0 }
            #expect(lowered.firstRange(of: Array("forget.me".utf8)) == nil, "e-mail bytes left in db.sqlite\(suffix)")
        }
        // The identity splits: 300 keeps its tfb link to 500; 301 is alone with its own e-mail.
        #expect(try s.store.userID(asid: "500") == "u:300")
        #expect(try s.store.userID(asid: "301") == "u:301")
        // Non-personal facts stay.
        #expect(try s.store.access("300") == AccessAnswer(asid: "300", state: .forbiddenLimited, evidenceEvent: "e", evidenceDevice: "1/P"))
        #expect(try s.store.access("300", asOf: Stream.ms(2)).state == .allowed)
        try s.verifyReplay()

        // Exports equal a fresh ingest of the scrubbed log.
        let fresh = TempDir()
        let scrubbed = try s.store.eventPayloads().map(\.payload)
        let other = try EventStore(path: fresh.path("db.sqlite"))
        _ = try FileIngestor(store: other).ingest(path: fresh.write("log.jsonl", scrubbed))
        for kind in ExportKind.allCases {
            var a: [String] = [], b: [String] = []
            try s.store.export(kind) { a.append(CanonicalJSON.encode(.array($0))) }
            try other.export(kind) { b.append(CanonicalJSON.encode(.array($0))) }
            #expect(a == b, "\(kind)")
        }

        // A re-delivered old event is a duplicate; a new login for the ASID is accepted.
        let again = try FileIngestor(store: s.store).ingest(path: s.dir.write("again.jsonl", [
            original, Stream.login("f", day: 5, app: "1", device: "P", asid: "300", extra: ["email": "new@example.com"]),
        ]))
        #expect(again.outcome.duplicates == 1 && again.outcome.appended == 1 && again.outcome.quarantinedTotal == 0)
    }

    /// Erasure covers unknown fields, and its tombstone covers records that arrive later:
    /// re-delivering the ASID's old records (good and bad) brings no personal data back.
    @Test func erasureReachesUnknownFieldsAndLaterRecords() throws {
        let s = try Stream()
        let lines = [
            Stream.login("a", day: 1, device: "P", asid: "300",
                         extra: ["email": "alt4874@mail.test", "contact_note": "reach me at alt4874@mail.test, or <Alt4874@Mail.Test>",
                                 "nested": ["notes": ["alt4874@mail.test"]]]),
            Stream.login("b", day: 2, device: "P", asid: "300", limited: true,
                         extra: ["email": "alt4874@mail.test", "id_token": "e30.e30.c2ln", "nonce": "nb"]),
            // Bad records of 300: quarantined with the address and token in them.
            Stream.login("q1", day: 3, device: "P", asid: "300", limited: true,
                         extra: ["email": "alt4874@mail.test", "granted_permissions": ["user_likes"], "id_token": "e30.e30.c2ln"]),
            Stream.login("q2", day: 3, device: "P", asid: "300", extra: ["email": "alt4874@mail.test", "id_token": "e30.e30.c2ln"]),
        ]
        let file = s.dir.write("in.jsonl", lines)
        let first = try FileIngestor(store: s.store).ingest(path: file)
        #expect(first.outcome.appended == 2 && first.outcome.quarantinedTotal == 2)
        _ = try s.store.forget("300")

        func occurrences() throws -> Int {
            let payloads = try s.store.eventPayloads().map { Array($0.payload.utf8) }
            let raws = try s.store.quarantineEntries().map(\.raw)
            return (payloads + raws).reduce(0) { count, bytes in
                let lowered = bytes.map { $0 >= 65 && $0 <= 90 ? $0 + 32 : $0 }
                var n = 0, rest = lowered[...]
                while let r = rest.firstRange(of: Array("alt4874".utf8)) { n += 1; rest = rest[r.upperBound...] }
                return count + n
            }
        }
        #expect(try occurrences() == 0)
        let note = try s.store.eventPayloads().first { $0.eventID == "a" }!.payload
        #expect(note.contains("reach me at [forgotten], or <[forgotten]>"))

        // The same file again (a replayed topic): duplicates and quarantine, no address back.
        let store = s.store
        _ = try FileIngestor(store: store).ingest(path: s.dir.write("again.jsonl", lines))
        #expect(try occurrences() == 0)
        #expect(try s.store.quarantineEntries().allSatisfy { !String(decoding: $0.raw, as: UTF8.self).contains("e30.e30.c2ln") })
        // A new login of the forgotten ASID is logged without its personal data.
        let later = try FileIngestor(store: store).ingest(path: s.dir.write("later.jsonl", [
            Stream.login("c", day: 6, device: "P", asid: "300", extra: ["email": "alt4874@mail.test", "note": "alt4874@mail.test"]),
        ]))
        #expect(later.outcome.appended == 1)
        #expect(try occurrences() == 0)
        #expect(try s.store.userID(asid: "300") == "u:300")

        // Retrying the quarantine after the erasure: q2's only defect was the e-mail claim the
        // erasure removed, so it is valid now and is logged (scrubbed, like any record of a
        // forgotten ASID); q1's permission is still out of scope, so it stays.
        let retried = try s.store.retryQuarantine { EventValidator.validate($0) }
        #expect(retried.appended == 1)
        #expect(try s.store.eventPayloads().contains { $0.eventID == "q2" })
        let left = try s.store.quarantineEntries().map { "\($0.code)" }
        #expect(left.count == 2 && left.allSatisfy { $0.contains("permission_out_of_scope") }, "\(left)")
        #expect(try occurrences() == 0)
        try s.verifyReplay()
    }
}
