import Foundation
import GRDB
import IdreconDomain

/// The log's keys, each kind in its own sorted runs (`KeyRuns`; schemas/sql.md, "Unique keys in runs" and "Log keys"):
/// - the two unique keys the append checks before it inserts an event and adds with it:
///   `event_id` (`event_id_runs`, migration v16) and `(app_id, nonce)` (`nonce_runs`, v15);
/// - the two lookup keys the refolds of late events read (`LogKeys`): each event's
///   `device_key` (`device_key_runs`) and each login's `asid_key` (`login_key_runs`, v20).
///
/// The append adds every new event's keys to the open runs, which live in the writer's memory
/// (`Cache`) and are written, sorted, once full. The lookup keys' open runs are lists (16 bytes
/// a key, no hashing) and their sealed runs have no filter (the append never searches them): a
/// lookup scans the open list and reads the one chunk its fences name in each sealed run, and
/// the runs grow with the log of the history (schemas/sql.md, "Log keys").
package struct LogKeyRuns {
    /// A writer's filters and open keys of the four, kept between its transactions (`KeyRuns.Cache`).
    package struct Cache: Sendable {
        fileprivate var eventIDs = KeyRuns.Cache()
        fileprivate var nonces = KeyRuns.Cache()
        fileprivate var devices = KeyRuns.Cache()
        fileprivate var logins = KeyRuns.Cache()
        package init() {}
    }

    static let eventIDSource = KeyRuns.Source(sql: "SELECT seq, event_id FROM events WHERE seq >= ?") { row in
        StableHash.key(utf8: row.text(1) ?? UnsafeBufferPointer(start: nil, count: 0))
    }
    static let nonceSource = KeyRuns.Source(
        sql: "SELECT seq, app_id, nonce FROM events WHERE seq >= ? AND nonce IS NOT NULL"
    ) { row in
        let empty = UnsafeBufferPointer<UInt8>(start: nil, count: 0)
        return StableHash.key(utf8: row.text(1) ?? empty, row.text(2) ?? empty)
    }
    static let deviceSource = KeyRuns.Source(sql: "SELECT seq, device_key FROM events WHERE seq >= ?", layout: .listed) { $0.int(1) }
    static let loginSource = KeyRuns.Source(
        sql: "SELECT seq, asid_key FROM events WHERE seq >= ? AND type = 'login' AND asid_key IS NOT NULL", layout: .listed
    ) { $0.int(1) }

    /// Unique: the append adds a key only when no event holds it.
    package var eventIDs: KeyRuns
    package var nonces: KeyRuns
    /// Lookup keys: every event's device, every login's ASID (`add`).
    fileprivate var devices: KeyRuns
    fileprivate var logins: KeyRuns

    package init(_ db: Database, cache: inout Cache, shape: KeyRuns.Shape = .standard) throws {
        eventIDs = try KeyRuns(db, table: "event_id_runs", source: Self.eventIDSource, cache: &cache.eventIDs, shape: shape)
        nonces = try KeyRuns(db, table: "nonce_runs", source: Self.nonceSource, cache: &cache.nonces, shape: shape)
        devices = try KeyRuns(db, table: "device_key_runs", source: Self.deviceSource, cache: &cache.devices, shape: shape)
        logins = try KeyRuns(db, table: "login_key_runs", source: Self.loginSource, cache: &cache.logins, shape: shape)
    }

    /// Adds the lookup keys of an event the append inserted under `seq`.
    package mutating func add(seq: Int64, _ image: LoggedEvent.Image) {
        devices.add(hash: image.deviceKey, seq: seq)
        if image.type == .login, let asidKey = image.asidKey { logins.add(hash: asidKey, seq: seq) }
    }

    /// `KeyRuns.finish` of the four: the end of the transaction's appends and folds.
    package mutating func finish(_ db: Database, into cache: inout Cache) throws {
        try eventIDs.finish(db, into: &cache.eventIDs)
        try nonces.finish(db, into: &cache.nonces)
        try devices.finish(db, into: &cache.devices)
        try logins.finish(db, into: &cache.logins)
    }
}

/// The log's lookup keys as the folds of one write transaction read them: the events of a
/// device and the logins of an ASID, by their keys' hashes, which a late event's refold reads
/// again from the log. Holds the transaction's `LogKeyRuns` (the append's, with the keys of
/// the events it inserted, or made at the first lookup) until `take` gives them back for `finish`.
package final class LogKeys {
    private var runs: LogKeyRuns?
    private var make: (() throws -> LogKeyRuns)?

    /// The runs of an append.
    package init(_ runs: consuming LogKeyRuns) { self.runs = runs }

    /// Runs made by `make` at the first lookup: a transaction with no late event reads none of
    /// them (a replay's or a catch-up's, whose process may not hold them yet).
    package init(making make: @escaping () throws -> LogKeyRuns) { self.make = make }

    /// The `seq`s, ascending, of the events up to `seq` whose `device_key` is `key` (a hash:
    /// the caller compares the events' app and device IDs).
    package func deviceEvents(_ key: Int64, through seq: Int64) throws -> [Int64] {
        try Self.through(seq, loaded().devices.seqs(hash: key))
    }

    /// The `seq`s, ascending, of the logins up to `seq` whose `asid_key` is `key` (a hash: the
    /// caller compares the ASIDs).
    package func logins(_ key: Int64, through seq: Int64) throws -> [Int64] {
        try Self.through(seq, loaded().logins.seqs(hash: key))
    }

    private func loaded() throws -> LogKeyRuns {
        if runs == nil, let make {
            runs = try make()
            self.make = nil
        }
        return runs!
    }

    private static func through(_ last: Int64, _ seqs: [Int64]) -> [Int64] { seqs.filter { $0 <= last }.sorted() }

    /// The runs, for their `finish` (nil when none were made); the lookups end here.
    package func take() -> LogKeyRuns? {
        defer { (runs, make) = (nil, nil) }
        return runs
    }
}
