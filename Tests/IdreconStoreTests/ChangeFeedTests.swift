import EventGenerator
import Foundation
import Synchronization
import IdreconDomain
import IdreconIngest
@testable import IdreconStore
import PropertyBased
import Testing

/// The change feed's decisions (README, "Change feed"); its delivery to Kafka is tested in
/// `KafkaTests`.
@Suite struct ChangeFeedTests {
    /// The records waiting in the database, with the feed's ID left out (as `feedFromLog` has it).
    static func decided(_ store: EventStore) throws -> [String] {
        let feed = try #require(try store.changeFeed())
        return try store.pendingChanges(after: 0, limit: .max).map {
            $0.body.replacingOccurrences(of: #""feed":"\#(feed.feedID)""#, with: #""feed":"""#)
        }
    }

    static func summary(_ record: String) -> String {
        guard case let .object(members) = try! JSONParser.parse(Array(record.utf8)) else { return "" }
        func text(_ key: String) -> String {
            switch members.first(where: { $0.key == key })?.value {
            case let .string(s): s
            case let .array(a): a.map { if case let .string(s) = $0 { s } else { "?" } }.joined(separator: "+")
            default: ""
            }
        }
        switch text("kind") {
        case "access": return "\(text("event_id")) \(text("asid")) \(text("previous_state"))>\(text("state"))"
        case "identity_merged": return "\(text("event_id")) merged \(text("merged_user_ids"))>\(text("user_id"))"
        case "identity_split": return "\(text("event_id")) split \(text("user_id"))>\(text("split_into"))"
        default: return "\(text("event_id")) renamed \(text("previous_user_id"))>\(text("user_id"))"
        }
    }

    /// SPEC worked example 1 with the 3rd and 6th events arriving late and early: the feed
    /// reports each ASID's state now (at the latest event time), event by event in log order.
    @Test func workedExampleOne() throws {
        var s = try Stream()
        _ = try s.store.enableChangeFeed(topic: "changes")
        try s.ingest([
            Stream.login("e1", day: 1, device: "D", asid: "11", extra: ["friend_asids": ["99"]]),
            Stream.login("e2", day: 2, device: "D", asid: "11", limited: true),
            Stream.logout("e6", day: 6, device: "D"),
            Stream.logout("e3", day: 3, device: "D"),
            Stream.login("e4", day: 4, device: "D", asid: "11", limited: true),
            Stream.login("e5", day: 5, device: "E", asid: "11"),
        ])
        let records = try Self.decided(s.store)
        #expect(records.map(Self.summary) == [
            "e1 11 unseen>allowed", "e1 99 unseen>forbidden_unknown", "e2 11 allowed>forbidden_limited",
            // e6 logs D out while e2 (limited) is 11's latest login; e3 and e4 are older than e6.
            "e5 11 forbidden_limited>allowed",
        ])
        #expect(records == (try s.store.feedFromLog()))
    }

    /// Merges when a shared key links two identities, a rename when a late login is the
    /// earliest, a split when a key becomes shared by too many ASIDs.
    @Test func identityMergesSplitsAndRenames() throws {
        var s = try Stream(config: IdentityConfig(maxASIDsPerKey: 2))
        _ = try s.store.enableChangeFeed(topic: "changes")
        try s.ingest([
            Stream.login("a", day: 2, device: "D1", asid: "1", extra: ["email": "x@example.com"]),
            Stream.login("b", day: 3, device: "D2", asid: "2"),
            Stream.login("c", day: 4, device: "D2", asid: "2", extra: ["email": "x@example.com"]),
            Stream.login("d", day: 1, device: "D3", asid: "2"),
            Stream.login("e", day: 5, device: "D4", asid: "3", extra: ["email": "x@example.com"]),
        ])
        let identity = try Self.decided(s.store).map(Self.summary).filter { !$0.contains(">allowed") }
        #expect(identity == ["c merged u:1+u:2>u:1", "d renamed u:1>u:2", "e split u:2>u:1+u:2"])
        #expect(try Self.decided(s.store) == (try s.store.feedFromLog()))
    }

    /// Decided live, chunk by chunk, over random transactions and write-behind lags, the feed
    /// equals the one the whole log makes event by event from its start: it depends on the
    /// log alone (arrival order, duplicates, late events and the dense population's merges
    /// and splits included).
    @Test func liveFeedEqualsTheLogs() async throws {
        let kinds = Mutex<Set<String>>([])
        await propertyCheck(count: 10, input: Gen.int(in: 0...1_000_000), Gen.int(in: 1...200), Gen.int(in: 0...300)) { seed, most, lag in
            let dir = TempDir()
            let store = try! EventStore(path: dir.path("db.sqlite"))
            _ = try! store.replay(config: denseConfig)
            _ = try! store.enableChangeFeed(topic: "changes")
            var rng = SeededRandom(seed: UInt64(seed))
            appendInRandomTransactions(generatedLines(seed: UInt64(seed), events: 600), to: store, atMost: most, lag: lag, using: &rng)
            try! store.catchUpProjections()
            let live = try! Self.decided(store)
            #expect(!live.isEmpty)
            kinds.withLock { seen in
                for record in live { if case let .string(kind)? = try? JSONParser.parse(Array(record.utf8))["kind"] { seen.insert(kind) } }
            }
            #expect(live == (try! store.feedFromLog()), "seed \(seed), transactions of at most \(most), lag \(lag)")
        }
        // The streams exercised merges and renames (splits: `identityMergesSplitsAndRenames`).
        #expect(kinds.withLock { $0.isSuperset(of: ["access", "identity_merged", "identity_renamed"]) }, "\(kinds.withLock { $0 })")
    }

    /// Tiny random streams where keys are shared by more ASIDs than the guard allows (so
    /// identities merge, split and rename often), in random transactions: live equals the log's.
    @Test func randomSharedKeysSplitAndMergeAlike() async throws {
        let kinds = Mutex<Set<String>>([])
        await propertyCheck(count: 25, input: Gen.int(in: 0...1_000_000)) { seed in
            var rng = SeededRandom(seed: UInt64(seed))
            func pick(_ n: Int) -> Int { Int(rng.next() % UInt64(n)) }
            var lines: [String] = []
            for i in 0..<120 {
                let day = 1 + Double(pick(2_000)) / 100
                let device = "D\(pick(5))"
                if pick(6) == 0 {
                    lines.append(Stream.logout("x\(i)", day: day, device: device))
                    continue
                }
                var extra: [String: any Sendable] = [:]
                if pick(2) == 0 { extra["email"] = "p\(pick(4))@example.com" }
                if pick(4) == 0 { extra["friend_asids"] = ["\(20 + pick(4))"] }
                lines.append(Stream.login("e\(i)", day: day, device: device, asid: "\(1 + pick(9))", limited: pick(3) == 0, extra: extra))
            }
            let dir = TempDir()
            let store = try! EventStore(path: dir.path("db.sqlite"))
            _ = try! store.replay(config: IdentityConfig(maxASIDsPerKey: 2))
            _ = try! store.enableChangeFeed(topic: "changes")
            appendInRandomTransactions(lines, to: store, atMost: 1 + pick(30), lag: pick(40), using: &rng)
            try! store.catchUpProjections()
            let live = try! Self.decided(store)
            kinds.withLock { seen in
                for record in live { if case let .string(kind)? = try? JSONParser.parse(Array(record.utf8))["kind"] { seen.insert(kind) } }
            }
            #expect(live == (try! store.feedFromLog()), "seed \(seed)")
            // Each ASID's last reported state is its access now.
            var last: [String: String] = [:]
            for record in live {
                let value = try! JSONParser.parse(Array(record.utf8))
                if case let .string(asid)? = value["asid"], case let .string(state)? = value["state"] { last[asid] = state }
            }
            for (asid, state) in last { #expect(try! store.access(asid).state.rawValue == state, "seed \(seed), ASID \(asid)") }
        }
        #expect(kinds.withLock { $0 } == ["access", "identity_merged", "identity_split", "identity_renamed"])
    }

    /// Delivered changes leave the database; a forgotten ASID's undelivered ones go with it.
    @Test func deliveryAndErasure() throws {
        var s = try Stream()
        let feed = try s.store.enableChangeFeed(topic: "changes")
        #expect(throws: IdreconError.self) { try s.store.enableChangeFeed(topic: "other") }
        try s.ingest([
            Stream.login("a", day: 1, device: "D1", asid: "1"), Stream.login("b", day: 2, device: "D2", asid: "2"),
            Stream.login("c", day: 3, device: "D3", asid: "3"),
        ])
        #expect(try s.store.pendingChanges(after: 0).map(\.key) == ["1", "2", "3"])
        try s.store.changesDelivered(upTo: 1)
        #expect(try s.store.pendingChanges(after: 0).map(\.change) == [2, 3])
        _ = try s.store.forget("2")
        #expect(try s.store.pendingChanges(after: 0).map(\.key) == ["3"])
        let now = try #require(try s.store.changeFeed())
        #expect(now.feedID == feed.feedID && now.sentChange == 1 && now.lastChange == 3)
    }
}
