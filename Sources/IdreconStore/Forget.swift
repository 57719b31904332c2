import Foundation
import GRDB
import IdreconDomain

/// What `forget` erased.
public struct ForgetReport: Sendable {
    public var asid: String
    public var events: Int
    public var quarantined: Int
    public var replay: ReplayReport
}

extension EventStore {
    /// GDPR erasure of one ASID: removes its e-mail and `id_token` from the logged payloads
    /// (and their e-mail link column), removes those strings from quarantined raw records
    /// that contain them, records a tombstone, rebuilds the projections from the scrubbed log
    /// (so the identity may split and `replay --verify` stays clean), and compacts the file
    /// so no freed page keeps the bytes. Non-personal facts (modes, access history) stay.
    public func forget(_ asid: String) throws(StoreError) -> ForgetReport {
        let (events, quarantined) = try write { db -> (Int, Int) in
            try db.execute(sql: "PRAGMA secure_delete = ON")
            var secrets: Set<String> = []
            var scrubbed = 0
            let rows = try Row.fetchAll(db, sql: "SELECT seq, payload FROM events WHERE asid_key = ? AND asid = ?",
                                        arguments: [StableHash.key(asid), asid])
            var emailKeys: Set<String> = []
            for row in rows {
                let payload: String = row["payload"]
                guard let (clean, removed) = Self.scrub(payload) else { continue }
                secrets.formUnion(removed)
                if let value = try? JSONParser.parse(Array(payload.utf8)), case let .string(email)? = value["email"] {
                    emailKeys.insert(LinkKey.email(email))
                }
                try db.execute(sql: "UPDATE events SET payload = ?, link_email = NULL WHERE seq = ?", arguments: [clean, row["seq"] as Int64])
                scrubbed += 1
            }
            // The address is the person's wherever it appears: other ASIDs' logins with the
            // same (normalized) e-mail lose it too (their id_tokens stay: they are theirs).
            if !emailKeys.isEmpty {
                let placeholders = emailKeys.map { _ in "?" }.joined(separator: ",")
                let others = try Row.fetchAll(db, sql: "SELECT seq, payload FROM events WHERE link_email IN (\(placeholders))",
                                              arguments: StatementArguments(Array(emailKeys)))
                for row in others {
                    guard let value = try? JSONParser.parse(Array((row["payload"] as String).utf8)), case let .object(members) = value else { continue }
                    for case let (key, .string(email)) in members where key == "email" { secrets.insert(email); secrets.insert(email.trimmingCharacters(in: .whitespaces)) }
                    let clean = CanonicalJSON.encode(.object(members.filter { $0.key != "email" }))
                    try db.execute(sql: "UPDATE events SET payload = ?, link_email = NULL WHERE seq = ?", arguments: [clean, row["seq"] as Int64])
                    scrubbed += 1
                }
            }
            // Quarantined records of this ASID, or holding one of its e-mails, lose them too;
            // records that are not JSON lose every byte-exact occurrence.
            var touched = 0
            let candidates = try Row.fetchCursor(db, sql: "SELECT id, raw FROM quarantine")
            var updates: [(Int64, [UInt8])] = []
            while let row = try candidates.next() {
                let raw = [UInt8]((row["raw"] as Data?) ?? Data())
                var clean = raw
                if let value = try? JSONParser.parse(raw), case let .object(members) = value {
                    let mine = Self.asidOf(value) == asid
                    let kept = members.filter { member in
                        if member.key == "id_token", mine { return false }
                        if member.key == "email", case let .string(email) = member.value, mine || emailKeys.contains(LinkKey.email(email)) {
                            return false
                        }
                        return true
                    }
                    if kept.count != members.count { clean = Array(CanonicalJSON.encode(.object(kept)).utf8) }
                }
                for secret in secrets where !secret.isEmpty {
                    while let range = clean.firstRange(of: Array(secret.utf8)) { clean.replaceSubrange(range, with: Array("[forgotten]".utf8)) }
                }
                if clean != raw { updates.append((row["id"], clean)) }
            }
            for (id, clean) in updates {
                try db.execute(sql: "UPDATE quarantine SET raw = ? WHERE id = ?", arguments: [Data(clean), id])
                touched += 1
            }
            try db.execute(sql: """
                INSERT INTO forgotten (asid, forgotten_at, events, quarantined) VALUES (?, ?, ?, ?)
                ON CONFLICT(asid) DO UPDATE SET forgotten_at = excluded.forgotten_at,
                    events = events + excluded.events, quarantined = quarantined + excluded.quarantined
                """, arguments: [asid, Int64(Date().timeIntervalSince1970 * 1000), scrubbed, touched])
            return (scrubbed, touched)
        }
        let replay = try self.replay()
        do {
            try pool.writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)")
                try db.execute(sql: "VACUUM")
                try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)")
            }
        } catch {
            throw StoreError("forget: compacting \(path) failed: \(Self.describe(error))")
        }
        return ForgetReport(asid: asid, events: events, quarantined: quarantined, replay: replay)
    }

    /// The payload without `email` and `id_token`, and the values removed; nil when none.
    static func scrub(_ payload: String) -> (String, Set<String>)? {
        guard let value = try? JSONParser.parse(Array(payload.utf8)), case let .object(members) = value else { return nil }
        var removed: Set<String> = []
        let kept = members.filter { member in
            guard member.key == "email" || member.key == "id_token" else { return true }
            if case let .string(s) = member.value { removed.insert(s); removed.insert(s.trimmingCharacters(in: .whitespaces)) }
            return false
        }
        guard kept.count != members.count else { return nil }
        return (CanonicalJSON.encode(.object(kept)), removed)
    }

    static func asidOf(_ value: JSONValue) -> String? {
        if case let .string(s)? = value["asid"] { return s }
        return nil
    }

    /// Whether `asid` was forgotten (its re-delivered old events are duplicates once scrubbed).
    static func isForgotten(_ db: Database, _ asid: String?) throws -> Bool {
        guard let asid else { return false }
        return try Int.fetchOne(db.cachedStatement(sql: "SELECT 1 FROM forgotten WHERE asid = ?"), arguments: [asid]) != nil
    }
}
