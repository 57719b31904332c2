import Foundation
import IdreconDomain
import IdreconIngest
@testable import IdreconStore
import Testing

/// A small hand-written stream, ingested line by line in the order given.
struct Stream {
    let dir = TempDir()
    let store: EventStore
    private var counter = 0

    init(config: IdentityConfig? = nil) throws {
        store = try EventStore(path: dir.path("db.sqlite"))
        if let config { _ = try store.replay(config: config) }
    }

    /// `day` is the day of November 2026 (fractions allowed: 1.5 is noon on the 1st).
    static func time(_ day: Double) -> String {
        Timestamp.format(Timestamp.parse("2026-11-01T00:00:00Z")! + Int64((day - 1) * 86_400_000))
    }

    static func ms(_ day: Double) -> Int64 { Timestamp.parse(time(day))! }

    static func login(_ id: String, day: Double, app: String = "1", device: String, asid: String, limited: Bool = false,
                      extra: [String: any Sendable] = [:]) -> String {
        var o: [String: any Sendable] = [
            "schema": "login-event/v1", "event_id": id, "occurred_at": time(day), "app_id": app, "device_id": device,
            "tracking": limited ? "limited" : "enabled", "token_type": limited ? "authentication_token" : "access_token", "asid": asid,
        ]
        for (k, v) in extra { o[k] = v }
        return String(decoding: try! JSONSerialization.data(withJSONObject: o, options: [.sortedKeys]), as: UTF8.self)
    }

    static func logout(_ id: String, day: Double, app: String = "1", device: String) -> String {
        #"{"schema":"login-event/v1","event_id":"\#(id)","type":"logout","occurred_at":"\#(time(day))","app_id":"\#(app)","device_id":"\#(device)"}"#
    }

    /// Ingests the lines, one batch each (so late arrivals cross batch boundaries).
    mutating func ingest(_ lines: [String], batchSize: Int = 1) throws {
        counter += 1
        let summary = try FileIngestor(store: store, batchSize: batchSize).ingest(path: dir.write("part\(counter).jsonl", lines))
        let messages = try store.quarantineEntries().map(\.message)
        #expect(summary.outcome.quarantinedTotal == 0, "unexpected quarantine: \(messages)")
    }

    func access(_ asid: String, _ day: Double? = nil) throws -> AccessState {
        try store.access(asid, asOf: day.map(Self.ms)).state
    }

    func export(_ kind: ExportKind) throws -> [String] {
        var lines: [String] = []
        try store.export(kind) { values in lines.append(values.map { CanonicalJSON.encode($0) }.joined(separator: " ")) }
        return lines
    }

    func verifyReplay() throws {
        let report = try store.replay(verifyOnly: true)
        #expect(report.drift.isEmpty, "replay drift: \(report.drift)")
    }
}

@Suite struct DeviceProjectionTests {
    /// SPEC worked example 1, with the 3rd and 6th events arriving late and early.
    @Test func workedExampleOne() throws {
        var s = try Stream()
        try s.ingest([
            Stream.login("e1", day: 1, device: "D", asid: "11", extra: ["friend_asids": ["99"]]),
            Stream.login("e2", day: 2, device: "D", asid: "11", limited: true),
            Stream.logout("e6", day: 6, device: "D"),
            Stream.logout("e3", day: 3, device: "D"),
            Stream.login("e4", day: 4, device: "D", asid: "11", limited: true),
            Stream.login("e5", day: 5, device: "E", asid: "11"),
        ])
        let d = try #require(try s.store.device(app: "1", device: "D"))
        #expect(d.mode == .loggedOut && d.asid == nil && d.anomalies == 1 && d.logins == 3 && d.logouts == 2)
        let e = try #require(try s.store.device(app: "1", device: "E"))
        #expect(e.mode == .enabled && e.asid == "11" && e.anomalies == 0)
        #expect(try s.access("11", 1.5) == .allowed)
        #expect(try s.access("11", 2.5) == .forbiddenLimited)
        #expect(try s.access("11", 3.5) == .forbiddenLimited) // latest login still limited
        #expect(try s.access("11", 4.5) == .forbiddenLimited)
        #expect(try s.access("11", 5.5) == .forbiddenLimited) // D still holds it limited
        #expect(try s.access("11", 6.5) == .allowed)
        #expect(try s.access("11") == .allowed)
        for day in [1.5, 2.5, 3.5, 4.5, 5.5, 6.5] { #expect(try s.access("99", day) == .forbiddenUnknown) }
        #expect(try s.access("99", 0.5) == .unseen)
        #expect(try s.access("12") == .unseen)
        try s.verifyReplay()
    }

    @Test func tvOSDeviceLoginIsClassic() throws {
        var s = try Stream()
        try s.ingest([Stream.login("t1", day: 1, device: "tv", asid: "5", extra: ["platform": "tvos", "flow": "device_login"])])
        let d = try #require(try s.store.device(app: "1", device: "tv"))
        #expect(d.mode == .enabled && d.asid == "5")
        #expect(try s.access("5") == .allowed)
    }

    @Test func logoutBetweenModesIsNoAnomaly() throws {
        var s = try Stream()
        try s.ingest([
            Stream.login("a", day: 1, device: "D", asid: "1"),
            Stream.logout("b", day: 2, device: "D"),
            Stream.login("c", day: 3, device: "D", asid: "1", limited: true),
            Stream.logout("d", day: 4, device: "D"),
            Stream.login("e", day: 5, device: "D", asid: "2"),
        ])
        #expect(try s.store.device(app: "1", device: "D")?.anomalies == 0)
    }

    @Test func switchWithoutLogoutIsAnAnomalyPerSwitch() throws {
        var s = try Stream()
        try s.ingest([
            Stream.login("a", day: 1, device: "D", asid: "1"),
            Stream.login("b", day: 2, device: "D", asid: "1", limited: true),
            Stream.login("c", day: 3, device: "D", asid: "1", limited: true),
            Stream.login("d", day: 4, device: "D", asid: "1"),
        ])
        let d = try #require(try s.store.device(app: "1", device: "D"))
        #expect(d.anomalies == 2 && d.mode == .enabled)
        // The same device in another app is another device.
        try s.ingest([Stream.login("x", day: 1, app: "2", device: "D", asid: "7", limited: true)])
        #expect(try s.store.device(app: "2", device: "D")?.anomalies == 0)
    }

    /// A late event older than the device's current state lands where event time puts it.
    @Test func lateEventLandsInEventTimeOrder() throws {
        var s = try Stream()
        try s.ingest([
            Stream.login("a", day: 1, device: "D", asid: "1"),
            Stream.login("c", day: 3, device: "D", asid: "1", limited: true),
        ])
        #expect(try s.store.device(app: "1", device: "D")?.anomalies == 1)
        // A logout on the 2nd arrives late: the switch is no longer an anomaly, the mode stays.
        try s.ingest([Stream.logout("b", day: 2, device: "D")])
        let d = try #require(try s.store.device(app: "1", device: "D"))
        #expect(d.anomalies == 0 && d.mode == .limited && d.asid == "1" && d.logouts == 1 && d.lastEventID == "c")
        // A late login on the 0.5th changes first_at only.
        try s.ingest([Stream.login("z", day: 0.5, device: "D", asid: "1")])
        #expect(try s.store.device(app: "1", device: "D")?.firstAt == Stream.ms(0.5))
        #expect(try s.access("1", 2.5) == .allowed)
        #expect(try s.access("1", 3.5) == .forbiddenLimited)
        try s.verifyReplay()
    }

    @Test func equalTimesAreOrderedByEventID() throws {
        var s = try Stream()
        try s.ingest([
            Stream.login("b", day: 1, device: "D", asid: "1", limited: true),
            Stream.login("a", day: 1, device: "D", asid: "2"),
        ])
        let d = try #require(try s.store.device(app: "1", device: "D"))
        #expect(d.asid == "1" && d.mode == .limited && d.lastEventID == "b")
    }
}

@Suite struct FriendGraphTests {
    /// Friend lists long enough that one catch-up folds them in several chunks (a chunk ends
    /// once it holds `catchUpFriendEntries` list entries, here after 3,000 of 3,500 logins),
    /// and that the live fold and replay write edges in several batches (`edgeBatch`, 250,000;
    /// 1,400 ASIDs name 200 friends each): the projections are those a replay builds, and
    /// every named friend is an edge.
    @Test func longFriendListsEndChunksEarly() throws {
        var s = try Stream()
        let lines = (0..<3_500).map { i in
            Stream.login("f\(i)", day: 1 + Double(i) / 1000, device: "d\(i % 300)", asid: "\(1000 + i % 1400)",
                         extra: ["friend_asids": (0..<200).map { "\(5000 + (i * 7 + $0 * 13) % 9000)" }])
        }
        try s.ingest(lines, batchSize: 3_500)
        try s.verifyReplay()
        // The last login of ASID 1000 + 3499 % 1400 names these 200.
        let last = 3_499
        let named = Set((0..<200).map { "\(5000 + (last * 7 + $0 * 13) % 9000)" })
        let edges = try s.store.friends(of: "\(1000 + last % 1400)").filter(\.listedByMe).map(\.friend)
        #expect(Set(edges) == named)
    }

    /// SPEC worked example 2: friend lists are asymmetric in time.
    @Test func workedExampleTwo() throws {
        var s = try Stream()
        try s.ingest([
            Stream.login("a", day: 1, device: "D1", asid: "100", extra: ["friend_asids": [String]()]),
            Stream.login("b", day: 2, device: "D2", asid: "200", extra: ["friend_asids": ["100"]]),
            Stream.login("c", day: 3, device: "D1", asid: "100", extra: ["declined_permissions": ["user_friends"]]),
        ])
        #expect(try s.export(.friends) == [#""100" "200""#])
        #expect(try s.store.friends(of: "100").map(\.friend) == ["200"])
        #expect(try s.store.friends(of: "100").first?.listedByThem == true)
        #expect(try s.store.friends(of: "100").first?.listedByMe == false)
        try s.verifyReplay()
    }

    @Test func declineEmptiesOnlyOlderSnapshotsAndLatestListWins() throws {
        var s = try Stream()
        try s.ingest([
            Stream.login("a", day: 1, device: "D", asid: "1", extra: ["friend_asids": ["2", "3"]]),
            Stream.login("b", day: 2, device: "D", asid: "1", extra: ["declined_permissions": ["user_friends"]]),
        ])
        #expect(try s.export(.friends).isEmpty)
        try s.ingest([Stream.login("c", day: 3, device: "D", asid: "1", extra: ["friend_asids": ["4"]])])
        #expect(try s.export(.friends) == [#""1" "4""#])
        // An older list arriving late changes nothing.
        try s.ingest([Stream.login("z", day: 0.5, device: "D", asid: "1", extra: ["friend_asids": ["5"]])])
        #expect(try s.export(.friends) == [#""1" "4""#])
        // ...but its mention still counts for forbidden_unknown from that time on.
        #expect(try s.access("5", 0.75) == .forbiddenUnknown)
        #expect(try s.access("5", 0.25) == .unseen)
        // Mutual listing is one edge.
        try s.ingest([Stream.login("d", day: 4, device: "E", asid: "4", extra: ["friend_asids": ["1"]])])
        #expect(try s.export(.friends) == [#""1" "4""#])
        #expect(try s.store.friends(of: "4").first.map { $0.listedByMe && $0.listedByThem } == true)
        try s.verifyReplay()
    }
}

@Suite struct IdentityProjectionTests {
    /// SPEC worked example 3: merged by normalized e-mail across apps; access stays per ASID.
    @Test func workedExampleThree() throws {
        var s = try Stream()
        try s.ingest([
            Stream.login("a", day: 1 + 9.0 / 24, app: "1", device: "P", asid: "300", extra: ["email": "Ana@X.com"]),
            Stream.login("b", day: 1 + 8.0 / 24, app: "2", device: "Q", asid: "400", limited: true, extra: ["email": " ana@x.com "]),
        ])
        #expect(try s.store.userID(asid: "300") == "u:400")
        #expect(try s.store.userID(asid: "400") == "u:400")
        let hash = LinkKey.emailHash("ana@x.com")
        #expect(try s.export(.identities) == [#""u:400" ["300","400"] ["\#(hash)"]"#])
        #expect(try s.access("300") == .allowed)
        #expect(try s.access("400") == .forbiddenLimited)
        #expect(try s.store.userIDs(email: "  ANA@x.COM") == ["u:400"])
        let chain = try #require(try s.store.explain("300", "400"))
        #expect(chain == [LinkHop(from: "300", to: "400", key: "email:" + hash, fromEvent: "a", toEvent: "b")])
        try s.verifyReplay()
    }

    @Test func tokenForBusinessChainsAndExplain() throws {
        var s = try Stream()
        try s.ingest([
            Stream.login("a", day: 1, app: "1", device: "P", asid: "1", extra: ["email": "x@y.z"]),
            Stream.login("b", day: 2, app: "1", device: "Q", asid: "2", extra: ["email": "x@y.z", "token_for_business": "T"]),
            Stream.login("c", day: 3, app: "2", device: "R", asid: "3", extra: ["token_for_business": "T"]),
            Stream.login("d", day: 4, app: "3", device: "S", asid: "4"),
        ])
        #expect(try s.store.userID(asid: "3") == "u:1")
        #expect(try s.store.userID(asid: "4") == "u:4")
        let chain = try #require(try s.store.explain("1", "3"))
        #expect(chain.map(\.to) == ["2", "3"])
        #expect(chain.map(\.key) == [LinkKey.email("x@y.z"), "tfb:T"])
        #expect(chain.map(\.fromEvent) == ["a", "b"])
        #expect(try s.store.explain("1", "4") == nil)
        // Merge history in event time: b joined 2 into u:1, c joined 3 into u:1.
        #expect(try s.store.mergeHistory("u:1") == [
            MergeStep(at: Stream.ms(2), event: "b", key: LinkKey.email("x@y.z"), absorbed: "u:2", into: "u:1"),
            MergeStep(at: Stream.ms(3), event: "c", key: "tfb:T", absorbed: "u:3", into: "u:1"),
        ])
        try s.verifyReplay()
    }

    @Test func earlierLoginArrivingLateMovesTheUserID() throws {
        var s = try Stream()
        try s.ingest([
            Stream.login("a", day: 2, device: "P", asid: "1", extra: ["email": "m@n.o"]),
            Stream.login("b", day: 3, device: "Q", asid: "2", extra: ["email": "m@n.o"]),
        ])
        #expect(try s.store.userID(asid: "2") == "u:1")
        try s.ingest([Stream.login("z", day: 1, device: "Q", asid: "2")])
        #expect(try s.store.userID(asid: "1") == "u:2")
        try s.verifyReplay()
    }

    /// A key shared by more than max_asids_per_key ASIDs merges nothing and is reported.
    @Test func overSharedEmailMergesNothingAndSplitsWhenItCrosses() throws {
        var s = try Stream()
        try s.ingest([
            Stream.login("a", day: 1, device: "P", asid: "1", extra: ["email": "shared@x.com"]),
            Stream.login("b", day: 2, device: "Q", asid: "2", extra: ["email": "shared@x.com"]),
        ])
        #expect(try s.store.userID(asid: "2") == "u:1")
        var lines: [String] = []
        for i in 3...26 { lines.append(Stream.login("e\(i)", day: 3, device: "D\(i)", asid: "\(i)", extra: ["email": "Shared@x.com"])) }
        try s.ingest(lines, batchSize: 10)
        for i in 1...26 { #expect(try s.store.userID(asid: "\(i)") == "u:\(i)") }
        let identity = try #require(try s.store.identity("u:1"))
        #expect(identity.keys.first?.ambiguity == .tooManyASIDs)
        #expect(identity.keys.first?.asids == 26)
        // The ambiguous e-mail is still reported on each identity's export row.
        #expect(try s.export(.identities).first == #""u:1" ["1"] ["\#(LinkKey.emailHash("shared@x.com"))"]"#)
        try s.verifyReplay()
    }

    @Test func blocklistAndThresholdComeFromConfig() throws {
        var s = try Stream(config: IdentityConfig(maxASIDsPerKey: 2, blocklist: ["Family@Home.net"]))
        try s.ingest([
            Stream.login("a", day: 1, device: "P", asid: "1", extra: ["email": "family@home.net"]),
            Stream.login("b", day: 2, device: "Q", asid: "2", extra: ["email": "family@home.net"]),
            Stream.login("c", day: 1, device: "R", asid: "3", extra: ["token_for_business": "T"]),
            Stream.login("d", day: 2, device: "S", asid: "4", extra: ["token_for_business": "T"]),
        ])
        #expect(try s.store.userID(asid: "2") == "u:2")
        #expect(try s.store.userID(asid: "4") == "u:3")
        try s.ingest([Stream.login("e", day: 3, device: "T", asid: "5", extra: ["token_for_business": "T"])])
        #expect(try s.store.userID(asid: "4") == "u:4")
        #expect(try s.store.identity("u:1")?.keys.first?.ambiguity == .blocklisted)
        try s.verifyReplay()
        // Replaying with the default config links the family again.
        _ = try s.store.replay(config: IdentityConfig())
        #expect(try s.store.userID(asid: "2") == "u:1")
        #expect(try s.store.userID(asid: "5") == "u:3")
    }

    @Test func logoutsAndFriendMentionsAreNotMembers() throws {
        var s = try Stream()
        try s.ingest([
            Stream.login("a", day: 1, device: "P", asid: "1", extra: ["friend_asids": ["9"]]),
            #"{"schema":"login-event/v1","event_id":"o","type":"logout","occurred_at":"2026-11-02T00:00:00Z","app_id":"1","device_id":"P","asid":"8"}"#,
        ])
        #expect(try s.store.userID(asid: "9") == nil)
        #expect(try s.store.userID(asid: "8") == nil)
        #expect(try s.export(.identities) == [#""u:1" ["1"] []"#])
        #expect(try s.export(.access) == [#""1" "allowed""#, #""9" "forbidden_unknown""#])
    }

    @Test func exportFieldOrderAndSorting() throws {
        var s = try Stream()
        try s.ingest([
            Stream.login("a", day: 1, app: "2", device: "B", asid: "20"),
            Stream.login("b", day: 1, app: "10", device: "A", asid: "3", limited: true),
            Stream.logout("c", day: 2, app: "2", device: "A"),
        ])
        #expect(try s.export(.devices) == [
            #""10" "A" "limited" "3" 0"#, #""2" "A" "logged_out" null 0"#, #""2" "B" "enabled" "20" 0"#,
        ])
        #expect(try s.export(.access) == [#""20" "allowed""#, #""3" "forbidden_limited""#])
        #expect(ExportKind.identities.columns == ["user_id", "asids", "email_sha256"])
    }
}
