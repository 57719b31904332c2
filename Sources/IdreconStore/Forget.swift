import Foundation
import GRDB
import IdreconDomain
import IdreconProjections

/// What `forget` erased.
public struct ForgetReport: Sendable {
    public var asid: String
    public var events: Int
    public var quarantined: Int
    public var replay: ReplayReport
}

extension EventStore {
    /// GDPR erasure of one ASID: scrubs its logged payloads (`ErasureRules`: e-mail, `id_token`,
    /// e-mail-like words in any string) and their e-mail link column, removes its addresses
    /// from other ASIDs' logins and from quarantined raw records that contain them, records a
    /// tombstone (records of the ASID arriving later are scrubbed before they are stored),
    /// rebuilds the projections from the scrubbed log (so the identity may split and
    /// `replay --verify` stays clean), and compacts the file so no freed page keeps the
    /// bytes. Non-personal facts (modes, access history) stay.
    public func forget(_ asid: String) throws(IdreconError) -> ForgetReport {
        let (events, quarantined) = try write { db -> (Int, Int) in
            try db.execute(sql: "PRAGMA secure_delete = ON")
            var secrets: Set<String> = []
            var scrubbed = 0
            let rows = try Row.fetchAll(db, sql: """
                SELECT seq, payload FROM events JOIN event_payloads USING (seq) WHERE asid_key = ? AND asid = ?
                """, arguments: [StableHash.key(asid), asid])
            var emailKeys: Set<String> = []
            func scrub(_ seq: Int64, _ clean: String) throws {
                try db.execute(sql: "UPDATE event_payloads SET payload = ? WHERE seq = ?", arguments: [clean, seq])
                try db.execute(sql: "UPDATE events SET link_email = NULL WHERE seq = ?", arguments: [seq])
            }
            for row in rows {
                let payload: String = row["payload"]
                guard let value = try? JSONParser.parse(Array(payload.utf8)), let erased = ErasureRules.scrub(value) else { continue }
                let clean = CanonicalJSON.encode(erased)
                for key in ["email", "id_token"] {
                    if case let .string(secret)? = value[key] { secrets.insert(secret); secrets.insert(secret.trimmingCharacters(in: .whitespaces)) }
                }
                if case let .string(email)? = value["email"] { emailKeys.insert(LinkKey.email(email)) }
                try scrub(row["seq"], clean)
                scrubbed += 1
            }
            // The address is the person's wherever it appears: other ASIDs' logins with the
            // same (normalized) e-mail lose it too (their id_tokens stay: they are theirs).
            if !emailKeys.isEmpty {
                let placeholders = emailKeys.map { _ in "?" }.joined(separator: ",")
                let others = try Row.fetchAll(db, sql: """
                    SELECT seq, payload FROM events JOIN event_payloads USING (seq) WHERE link_email IN (\(placeholders))
                    """, arguments: StatementArguments(Array(emailKeys)))
                for row in others {
                    guard let value = try? JSONParser.parse(Array((row["payload"] as String).utf8)), case let .object(members) = value else { continue }
                    for case let (key, .string(email)) in members where key == "email" { secrets.insert(email); secrets.insert(email.trimmingCharacters(in: .whitespaces)) }
                    let clean = CanonicalJSON.encode(.object(members.filter { $0.key != "email" }))
                    try scrub(row["seq"], clean)
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
                    if ErasureRules.asid(of: value)?.sameBytes(as: asid) == true {
                        if let scrubbed = ErasureRules.scrub(value) { clean = Array(CanonicalJSON.encode(scrubbed).utf8) }
                    } else {
                        let kept = members.filter { member in
                            guard member.key.sameBytes(as: "email"), case let .string(email) = member.value else { return true }
                            return !emailKeys.contains(LinkKey.email(email))
                        }
                        if kept.count != members.count { clean = Array(CanonicalJSON.encode(.object(kept)).utf8) }
                    }
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
            try ChangeFeedTables.erase(db, asid: asid)
            try db.execute(sql: """
                INSERT INTO pending_rebuild (id, since, why) VALUES (1, ?, 'forget') ON CONFLICT(id) DO NOTHING
                """, arguments: [Int64(Date().timeIntervalSince1970 * 1000)])
            try db.execute(sql: """
                INSERT INTO forgotten (asid, forgotten_at, events, quarantined) VALUES (?, ?, ?, ?)
                ON CONFLICT(asid) DO UPDATE SET forgotten_at = excluded.forgotten_at,
                    events = events + excluded.events, quarantined = quarantined + excluded.quarantined
                """, arguments: [asid, Int64(Date().timeIntervalSince1970 * 1000), scrubbed, touched])
            return (scrubbed, touched)
        }
        let replay: ReplayReport
        do {
            replay = try self.replay(comparing: false)
        } catch {
            throw IdreconError(.storage, "forget: \(asid) is erased from the log and quarantine, but rebuilding the projections failed "
                + "(\(error.description)); the next idrecon command that writes to \(path), or 'idrecon replay', finishes it")
        }
        do {
            try pool.writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)")
                try db.execute(sql: "VACUUM")
                try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)")
            }
        } catch {
            throw IdreconError(.storage, "forget: compacting \(path) failed: \(IdreconError.describe(error))")
        }
        return ForgetReport(asid: asid, events: events, quarantined: quarantined, replay: replay)
    }
}
