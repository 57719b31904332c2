import Foundation
import GRDB
import IdreconDomain
import IdreconLog

/// The change feed's tables (README, "Change feed"): `change_feed`, its one row (the topic,
/// how far the log's changes are decided, the last change numbered and the last one
/// delivered), and `feed_changes`, the decided changes not yet delivered. Changes are
/// decided by the live catch-up in the transaction that folds their events, so the feed's
/// position moves with the projections': nothing is decided twice or skipped.
package enum ChangeFeedTables {
    /// The `change_feed` row.
    package struct State: Sendable, Equatable {
        package var topic: String
        package var feedID: String
        package var decidedSeq: Int64
        package var lastChange: Int64
        package var sentChange: Int64
    }

    package static func state(_ db: Database) throws -> State? {
        try Row.fetchOne(db, sql: "SELECT topic, feed_id, decided_seq, last_change, sent_change FROM change_feed WHERE id = 1").map {
            State(topic: $0["topic"], feedID: $0["feed_id"], decidedSeq: $0["decided_seq"], lastChange: $0["last_change"],
                  sentChange: $0["sent_change"])
        }
    }

    /// Starts the feed with the next event the projections fold (the feed decides nothing
    /// about events folded before it existed). Returns the feed's state.
    package static func enable(_ db: Database, topic: String) throws -> State {
        if let state = try state(db) { return state }
        let applied = try ProjectionState.load(db, registry: .standard).appliedSeq
        try db.execute(sql: """
            INSERT INTO change_feed (id, topic, feed_id, decided_seq, last_change, sent_change) VALUES (1, ?, ?, ?, 0, 0)
            """, arguments: [topic, UUID().uuidString.lowercased(), applied])
        return try state(db)!
    }

    /// The decided changes after `change`, in order, at most `limit`.
    package static func pending(_ db: Database, after change: Int64, limit: Int) throws -> [(change: Int64, key: String, body: String)] {
        try Row.fetchAll(db, sql: "SELECT change, key, body FROM feed_changes WHERE change > ? ORDER BY change LIMIT ?",
                         arguments: [change, limit]).map { ($0["change"], $0["key"], $0["body"]) }
    }

    /// Records that every change up to `change` is delivered, and forgets them.
    package static func delivered(_ db: Database, upTo change: Int64) throws {
        try db.execute(sql: "UPDATE change_feed SET sent_change = max(sent_change, ?) WHERE id = 1", arguments: [change])
        try db.execute(sql: "DELETE FROM feed_changes WHERE change <= ?", arguments: [change])
    }

    /// Removes undelivered changes that name `asid` (its erasure); delivered ones are the
    /// topic's, under its retention.
    package static func erase(_ db: Database, asid: String) throws {
        try db.execute(sql: """
            DELETE FROM feed_changes WHERE instr(body, '"' || ? || '"') > 0 OR instr(body, '"u:' || ? || '"') > 0
            """, arguments: [asid, asid])
    }
}

/// Decides and numbers the changes of one live catch-up, chunk by chunk, into `feed_changes`.
package final class ChangeFeedWriter {
    private let db: Database
    private let feedID: String
    private var lastChange: Int64
    private let insert: BulkStatement

    /// nil when the database has no feed.
    init?(_ db: Database, appliedSeq: Int64) throws {
        guard let state = try ChangeFeedTables.state(db) else { return nil }
        self.db = db
        feedID = state.feedID
        lastChange = state.lastChange
        insert = try BulkStatement(cached: db, "INSERT INTO feed_changes (change, seq, key, body) VALUES (?, ?, ?, ?)")
        // Deciding always moves with folding; should the two ever part (the row edited by
        // hand), the feed goes on from what is folded.
        if state.decidedSeq != appliedSeq {
            try db.execute(sql: "UPDATE change_feed SET decided_seq = ? WHERE id = 1", arguments: [appliedSeq])
        }
    }

    /// Decides the changes of a chunk of facts (log order) before the projections fold it.
    func decide(_ facts: [ProjectionFact], tables: ProjectionTables, config: IdentityConfig) throws {
        var detector = ChangeDetector(source: try TableChangeSource(db, tables), config: config)
        for change in try detector.changes(facts) {
            lastChange += 1
            try insert.run {
                $0.add(lastChange); $0.add(change.seq); $0.add(change.key); $0.add(change.json(change: lastChange, feed: feedID))
            }
        }
    }

    func finish(decidedSeq: Int64) throws {
        try db.execute(sql: "UPDATE change_feed SET decided_seq = ?, last_change = ? WHERE id = 1",
                       arguments: [decidedSeq, lastChange])
    }
}

/// The projections' tables as the detector reads them (before a chunk is folded), through
/// each projection's own rows.
struct TableChangeSource: ChangeSource {
    private let devices: DevicesProjection.Rows
    private let access: AccessProjection.Rows
    private let identities: IdentitiesProjection.Rows
    private let friends: FriendsProjection.Rows

    init(_ db: Database, _ t: ProjectionTables) throws {
        devices = try DevicesProjection.Rows(db, t)
        access = try AccessProjection.Rows(db, t)
        identities = try IdentitiesProjection.Rows(db, t)
        friends = try FriendsProjection.Rows(db, t)
    }

    func device(_ app: String, _ device: String) throws -> ChangeDetector.DeviceNow? {
        try devices.load(app, device).flatMap { stored in
            stored.last.map { ChangeDetector.DeviceNow(last: $0, asid: stored.asid, limited: stored.mode == .limited) }
        }
    }

    func lastLogin(_ asid: String) throws -> (key: EventKey, limited: Bool)? { try access.last(asid) }
    func limitedDevices(_ asid: String) throws -> Int { try devices.limitedHolds(of: asid) }
    func mentioned(_ asid: String) throws -> Bool { try friends.isMentioned(asid) }
    func firstLogin(_ asid: String) throws -> EventKey? { try identities.firstLogin(asid) }
    func keys(_ asid: String) throws -> [String] { try identities.keys(of: asid) }
    func holders(_ key: String) throws -> [String] { try identities.asids(of: key) }
    func holderCount(_ key: String) throws -> Int { try identities.linkKey(key)?.asids ?? 0 }
}

/// The feed a log makes from its start (what a replay decides), for checks: folds the facts
/// in log order with no projections behind it. Memory grows with the entities.
package enum FeedFromLog {
    package static func feed(of facts: [ProjectionFact], config: IdentityConfig = IdentityConfig()) throws -> [FeedChange] {
        var detector = ChangeDetector(source: EmptyChangeSource(), config: config)
        return try detector.changes(facts)
    }

    /// The feed of the whole log in `db`, from its start, with the projections' configuration.
    package static func feed(_ db: Database) throws -> [FeedChange] {
        var facts: [ProjectionFact] = []
        try BulkStatement(cached: db, "SELECT \(LoggedEvent.selectColumns) FROM events ORDER BY seq").each { facts.append(ProjectionFact($0)) }
        return try feed(of: facts, config: try ProjectionState.load(db, registry: .standard).config)
    }
}
