import IdreconDomain
@testable import IdreconProjections
import Testing

/// Replay's packed logins and mentions order and compare texts by their bytes, with shortcuts
/// (16-byte prefixes, hashes) that the generated streams' 15-digit ASIDs never take past:
/// ASIDs that share a prefix, differ in length within and beyond it, hold zero bytes, or are
/// two spellings of one Unicode text.
@Suite struct LoginEventsTests {
    static let asids = [
        "a", "a\u{0}", "ab", "0123456789abcdef", "0123456789abcdef0", "0123456789abcdeg", "0123456789abcdef\u{e9}",
        "0123456789abcdef\u{0}", "\u{e9}", "e\u{301}", "100000000000001", "1000000000000010", "10000000000000100000",
    ]

    @Test func groupsLoginsByASIDBytesInEventTime() {
        var rng = SeededGenerator(seed: 7)
        var logins = ProjectionBuilder.LoginEvents()
        var expected: [[UInt8]: [EventKey]] = [:]
        for i in 0..<2_000 {
            let asid = Self.asids[Int.random(in: 0..<Self.asids.count, using: &rng)]
            let eventID = "ev-\(Int.random(in: 0..<1_000_000, using: &rng))-\(i)"
            let key = EventKey(at: Int64.random(in: 0..<40, using: &rng), eventID: eventID)
            let limited = Bool.random(using: &rng)
            logins.append(ProjectionBuilder.LoginRow(
                asid: asid, key: key, limited: limited, app: limited ? "app" : "", device: limited ? "device-\(i)" : "",
                email: i % 3 == 0 ? "email:\(asid)" : nil, tfb: nil, friends: i % 5 == 0 ? "x,y" : nil,
                declinesFriends: false))
            expected[Array(asid.utf8), default: []].append(key)
        }
        var seen: [(asid: [UInt8], keys: [EventKey])] = []
        logins.forEachASID { asid, group in seen.append((Array(asid.utf8), group.map(\.key))) }
        let order = expected.keys.sorted { $0.lexicographicallyPrecedes($1) }
        #expect(seen.map(\.asid) == order)
        for (asid, keys) in seen { #expect(keys == expected[asid]!.sorted()) }
    }

    @Test func mentionsKeepEachFriendsEarliestLogin() {
        var rng = SeededGenerator(seed: 11)
        var mentions = ProjectionBuilder.Mentions()
        var earliest: [[UInt8]: EventKey] = [:]
        // Enough friends to grow the table several times.
        let friends = Self.asids + (0..<5_000).map { "friend-\($0)" }
        for i in 0..<20_000 {
            let list = (0..<Int.random(in: 1...4, using: &rng)).map { _ in
                friends[Int.random(in: 0..<friends.count, using: &rng)]
            }
            let key = EventKey(at: Int64.random(in: 0..<100, using: &rng), eventID: "ev-\(i)")
            var stored = list.joined(separator: ","), eventID = key.eventID
            stored.withUTF8 { list in eventID.withUTF8 { mentions.lower(list: list, at: key.at, eventID: $0) } }
            for friend in list where friend.utf8.isEmpty == false {
                let bytes = Array(friend.utf8)
                if earliest[bytes].map({ key < $0 }) ?? true { earliest[bytes] = key }
            }
        }
        let sorted = mentions.sorted()
        #expect(sorted.map { Array($0.key.utf8) } == earliest.keys.sorted { $0.lexicographicallyPrecedes($1) })
        for (friend, key) in sorted { #expect(key == earliest[Array(friend.utf8)]) }
    }
}
