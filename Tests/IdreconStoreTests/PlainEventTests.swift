import EventGenerator
import Testing
@testable import IdreconDomain
@testable import IdreconLog

/// The validator's fast path (`EventValidator.acceptPlain`) against `validate`: it accepts only
/// what `validate` accepts, with the same fields, canonical payload and `events` row image, and
/// it accepts the records streams are made of.
@Suite struct PlainEventTests {
    /// Checks one record; returns whether the fast path accepted it.
    @discardableResult
    func check(_ record: [UInt8]) -> Bool {
        let plain = record.withUnsafeBufferPointer { EventValidator.acceptPlain($0) }
        guard let plain else { return false }
        guard case let .success(event) = EventValidator.validate(record) else {
            Issue.record("the fast path accepted a record validate rejects: \(String(decoding: record, as: UTF8.self))")
            return true
        }
        #expect(plain.agrees(with: event, record: record), "\(String(decoding: record, as: UTF8.self))")
        let image = record.withUnsafeBufferPointer { LoggedEvent.Image(plain, record: $0) }
        #expect(image == LoggedEvent.Image(event), "\(String(decoding: record, as: UTF8.self))")
        return true
    }

    @Test(arguments: [false, true])
    func acceptsTheGeneratedStreamsValidEventsAsValidateDoes(uuids: Bool) {
        var config = GeneratorConfig(events: 20_000, seed: 7)
        config.uuidEventIDs = uuids
        config.uuidNonces = uuids
        config.limitedPercent = 50
        var (valid, fast) = (0, 0)
        for line in EventStreamGenerator(config: config) {
            if case .success = EventValidator.validate(line) { valid += 1 }
            if check(line) { fast += 1 }
        }
        #expect(valid > 19_000)
        #expect(fast == valid, "every valid generated record is plain")
    }

    /// Members `validate` does not read are kept; past a few, the record is left to `validate`,
    /// whose duplicate-name check stays linear (a hostile record may have a million).
    @Test func manyUnknownMembersAreLeftToValidate() throws {
        let base = #"{"schema":"login-event/v1","event_id":"e1","occurred_at":"2026-11-01T00:00:00Z","app_id":"1","#
            + #""device_id":"d","type":"logout""#
        let few = base + (0..<3).map { #","x\#($0)":"v""# }.joined() + "}"
        #expect(check(Array(few.utf8)))
        let many = base + (0..<200_000).map { #","x\#($0)":"v""# }.joined() + "}"
        #expect(!check(Array(many.utf8)))
        guard case .success = EventValidator.validate(Array(many.utf8)) else { Issue.record("rejected"); return }
    }

    /// Generated records changed at random: bytes flipped, cut or inserted, values swapped for
    /// nulls, numbers, escapes, other texts, members repeated or added. Whatever the fast path
    /// accepts, `validate` accepts alike.
    @Test func agreesWithValidateOnMutatedRecords() {
        var random = SeededRandom(seed: 11)
        var config = GeneratorConfig(events: 4_000, seed: 3)
        config.limitedPercent = 50
        let lines = Array(EventStreamGenerator(config: config))
        let pieces: [String] = [
            "null", "1", "true", "{}", "[]", #""""#, #""\u0041""#, #""x""#, #""login""#, #""logout""#, #""limited""#,
            #""enabled""#, #""tvos""#, #""device_login""#, #""access_token""#, #""authentication_token""#, #""12""#,
            #""1a""#, #""a@b""#, #""a@@b""#, #""n 1""#, #"["user_likes"]"#, #"["email"]"#, #"["user_friends"]"#,
            #"["11","12"]"#, #""2026-11-01T00:00:00Z""#, #""2026-13-01T00:00:00Z""#, #""é""#, " ", "\t", ",", ":",
            #","asid":"12""#, #","extra":"1""#, #","type":"logout""#, #","id_token":"t""#,
            #","token_for_business":"t""#,
            #","declined_permissions":["user_friends"]"#, #","flow":"device_login""#, #","platform":"tvos""#,
            #","a":"1""#, #","zz":["x", "y"]"#, #","extra":"1","extra":"2""#, #","app_idx":"1""#,
            #","sdk_version":"1""#,
        ]
        func piece() -> [UInt8] { Array(pieces[Int(random.next() % UInt64(pieces.count))].utf8) }
        func isAny(_ bytes: String) -> (UInt8) -> Bool { { bytes.utf8.contains($0) } }
        var (accepted, rejected) = (0, 0)
        for _ in 0..<30_000 {
            var record = lines[Int(random.next() % UInt64(lines.count))]
            for _ in 0..<(1 + Int(random.next() % 3)) {
                let at = Int(random.next() % UInt64(record.count + 1))
                switch random.next() % 4 {
                case 0: // a value or a text swapped in after a separator
                    if let colon = record[at...].firstIndex(where: isAny(":,")),
                       let end = record[(colon + 1)...].firstIndex(where: isAny(",}")) {
                        record.replaceSubrange((colon + 1)..<end, with: piece())
                    }
                case 1:
                    record.insert(contentsOf: piece(), at: at)
                case 2:
                    if at < record.count {
                        record.removeSubrange(at..<min(record.count, at + 1 + Int(random.next() % 8)))
                    }
                default:
                    if at < record.count { record[at] = UInt8(truncatingIfNeeded: random.next() % 128) }
                }
            }
            if check(record) { accepted += 1 } else { rejected += 1 }
        }
        #expect(accepted > 1_000 && rejected > 1_000, "accepted \(accepted), left to validate \(rejected)")
    }
}
