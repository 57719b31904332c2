import Foundation
import IdreconDomain
@testable import IdreconStore
import Testing

@Suite struct AuditTests {
    /// SPEC worked example 1 (ASID 11 on devices D and E, friend 99) plus example 3 (300 ~ 400).
    func stream() throws -> Stream {
        var s = try Stream()
        try s.ingest([
            Stream.login("e1", day: 1, device: "D", asid: "11", extra: ["friend_asids": ["99"]]),
            Stream.login("e2", day: 2, device: "D", asid: "11", limited: true),
            Stream.logout("e3", day: 3, device: "D"),
            Stream.login("e4", day: 4, device: "D", asid: "11", limited: true),
            Stream.login("e5", day: 5, device: "E", asid: "11"),
            Stream.logout("e6", day: 6, device: "D"),
            Stream.login("a", day: 1.5, app: "1", device: "P", asid: "300", extra: ["email": "Ana@X.com"]),
            Stream.login("b", day: 2.5, app: "2", device: "Q", asid: "400", limited: true, extra: ["email": " ana@x.com "]),
        ], batchSize: 3)
        return s
    }

    func calls(_ list: [(Double, String)]) -> [GraphCall] {
        list.enumerated().map { GraphCall(line: $0.offset + 1, calledAt: Stream.ms($0.element.0), asid: $0.element.1) }
    }

    @Test func limitedCallsAreViolationsAtTheirOwnTime() throws {
        let s = try stream()
        let v = try s.store.audit(calls([
            (1.5, "11"), // before it turned limited: fine
            (2.5, "11"), // limited on D
            (3.5, "11"), // logged out, but its latest login was limited
            (5.5, "11"), // D still holds it limited
            (6.5, "11"), // re-consented everywhere: fine
            (7, "99"), (7, "12345"), // unknown / unseen: only under --strict
        ]), policy: AuditPolicy())
        #expect(v.map(\.call.line) == [2, 3, 4])
        #expect(v.allSatisfy { $0.kind == .limited })
        #expect(v.map(\.evidenceEvent) == ["e2", "e2", "e4"])
        #expect(v[0].evidenceDevice == "1/D")
    }

    @Test func strictAddsUnknownAndUnseen() throws {
        let s = try stream()
        let v = try s.store.audit(calls([(0.5, "99"), (1.5, "99"), (7, "12345"), (7, "11")]), policy: AuditPolicy(strict: true))
        #expect(v.map(\.kind) == [.unseen, .unknown, .unseen])
        #expect(v.map(\.call.line) == [1, 2, 3])
    }

    @Test func identityScopeFlagsMembersOfALimitedIdentity() throws {
        let s = try stream()
        let list = calls([
            (1.75, "300"), // 400 has not logged in yet: one-member identity, fine
            (3, "300"),    // 400 (limited) is a member now
            (3, "400"),    // itself limited
        ])
        #expect(try s.store.audit(list, policy: AuditPolicy()).map(\.call.line) == [3])
        let v = try s.store.audit(list, policy: AuditPolicy(identityScope: true))
        #expect(v.map(\.call.line) == [2, 3])
        #expect(v.map(\.kind) == [.identity, .limited])
        #expect(v[0].limitedASID == "400" && v[0].evidenceEvent == "b")
    }
}
