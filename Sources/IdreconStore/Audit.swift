import GRDB
import IdreconDomain
import IdreconProjections

/// One Graph-API call to judge: who was called, and when.
public struct GraphCall: Sendable {
    public var line: Int
    public var calledAt: Int64
    public var asid: String

    public init(line: Int, calledAt: Int64, asid: String) {
        self.line = line
        self.calledAt = calledAt
        self.asid = asid
    }
}

/// Why a call is a violation.
public enum ViolationKind: String, Sendable, CaseIterable {
    /// The ASID was `forbidden_limited` at the call.
    case limited
    /// `--strict`: the ASID was known only from friend lists at the call.
    case unknown
    /// `--strict`: the ASID was never seen by the call.
    case unseen
    /// `--scope identity`: another member of the ASID's identity was limited at the call.
    case identity
}

/// A violation with the evidence that decided it.
public struct Violation: Sendable {
    public var call: GraphCall
    public var kind: ViolationKind
    public var state: AccessState
    /// The limited ASID (the call's own, or for `identity` the member's).
    public var limitedASID: String?
    public var evidenceEvent: String?
    public var evidenceDevice: String?
}

/// How strictly calls are judged.
public struct AuditPolicy: Sendable {
    public var strict = false
    public var identityScope = false
    public init(strict: Bool = false, identityScope: Bool = false) {
        self.strict = strict
        self.identityScope = identityScope
    }
}

extension EventStore {
    /// Judges each call at its own `called_at` from the indexed projections (no replay).
    /// Returns the violations, in call order. The calls are judged in ASID order: lookups of
    /// neighbouring keys share B-tree pages, so a large batch reads each page about once
    /// instead of once per call (at 10M events the tables it reads are ten times larger than
    /// SQLite's page cache).
    public func audit(_ calls: [GraphCall], policy: AuditPolicy) throws(IdreconError) -> [Violation] {
        try read { db in
            let state = try ProjectionState.load(db, registry: projections)
            var violations: [(index: Int, violation: Violation)] = []
            let order = calls.indices.sorted { i, j in
                calls[i].asid.sameBytes(as: calls[j].asid) ? i < j : calls[i].asid.bytesPrecede(calls[j].asid)
            }
            let lookup = try AccessLookup(db)
            for index in order {
                let call = calls[index]
                func flag(_ violation: Violation) { violations.append((index, violation)) }
                let answer = try lookup.answer(call.asid, asOf: call.calledAt)
                switch answer.state {
                case .forbiddenLimited:
                    flag(Violation(call: call, kind: .limited, state: answer.state, limitedASID: call.asid,
                                   evidenceEvent: answer.evidenceEvent, evidenceDevice: answer.evidenceDevice))
                    continue
                case .forbiddenUnknown where policy.strict:
                    flag(Violation(call: call, kind: .unknown, state: answer.state))
                    continue
                case .unseen where policy.strict:
                    flag(Violation(call: call, kind: .unseen, state: answer.state))
                    continue
                default:
                    break
                }
                guard policy.identityScope, answer.state == .allowed else { continue }
                for member in try Self.identityMembers(db, of: call.asid, at: call.calledAt, config: state.config).sorted() where member != call.asid {
                    let m = try lookup.answer(member, asOf: call.calledAt)
                    if m.state == .forbiddenLimited {
                        flag(Violation(call: call, kind: .identity, state: answer.state, limitedASID: member,
                                       evidenceEvent: m.evidenceEvent, evidenceDevice: m.evidenceDevice))
                        break
                    }
                }
            }
            return violations.sorted { $0.index < $1.index }.map(\.violation)
        }
    }

    /// The members of `asid`'s identity as it stood at `t`: only links made by `t`, and a
    /// key's ambiguity judged by the ASIDs it had by `t`.
    static func identityMembers(_ db: Database, of asid: String, at t: Int64, config: IdentityConfig) throws -> Set<String> {
        let blocked = Set(config.blockedKeys)
        let keysOf = try db.cachedStatement(sql: "SELECT key FROM asid_keys WHERE asid = ? AND first_at <= ?")
        let asidsOf = try db.cachedStatement(sql: "SELECT asid FROM asid_keys WHERE key = ? AND first_at <= ?")
        var linking: [String: Bool] = [:]
        return try IdentityRules.component(
            of: asid,
            keysOf: { a in
                try String.fetchAll(keysOf, arguments: [a, t]).filter { key in
                    if let known = linking[key] { return known }
                    let count = try String.fetchAll(asidsOf, arguments: [key, t]).count
                    let links = config.ambiguity(key: key, asids: count, blocked: blocked) == nil
                    linking[key] = links
                    return links
                }
            },
            asidsOf: { key in try String.fetchAll(asidsOf, arguments: [key, t]) })
    }
}
