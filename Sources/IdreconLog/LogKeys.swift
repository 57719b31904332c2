import Foundation
import GRDB
import IdreconDomain

/// Lookups by the log's hashed keys: `event_device_keys (tier, device_key, seq)` and
/// `event_login_keys (tier, asid_key, seq)` (migration v14). Both lead with the
/// event's tier (`seq >> 18`) so that appends touch only the newest tier's pages; a lookup
/// names every tier, and SQLite seeks once per tier.
///
/// The append inserts each new event's keys (`Appended`), after its rows, in key order. An
/// append that at least doubles the log leaves them out (`suspend`): the build that follows
/// reads the whole log anyway, and its scan hands the keys over sorted, one tier at a time
/// (`Sink`), so that the writer inserts them in key order instead of SQLite sorting the log
/// again (schemas/sql.md, "Tiered log keys"). Not a trigger: an `INSERT` that fires one
/// writes more than one row, so SQLite journals every page it changes for a rollback of the
/// statement (300,000 events appended live: 11.4-12.9 s with the indexes, 15.3-17.9 s with
/// a trigger, which wrote four pages per event to the statement journal).
package enum LogKeys {
    /// A tier holds 2^18 events (migration v7's `seq >> 18`).
    static let tierShift = 18
    /// A `WITH RECURSIVE` list of every tier in the log, named `tiers(t)`.
    package static let tiers = """
        tiers(t) AS (SELECT 0 UNION ALL SELECT t + 1 FROM tiers WHERE t < \
        (SELECT seq >> \(tierShift) FROM events ORDER BY seq DESC LIMIT 1))
        """
    /// The `seq`s of a device's events up to a `seq`: binds `device_key`, then the `seq`.
    package static let deviceSeqs = "SELECT seq FROM event_device_keys WHERE tier IN tiers AND device_key = ? AND seq <= ?"
    /// The `seq`s of an ASID's logins up to a `seq`: binds `asid_key`, then the `seq`.
    package static let loginSeqs = "SELECT seq FROM event_login_keys WHERE tier IN tiers AND asid_key = ? AND seq <= ?"

    /// The tier of an event.
    static func tier(_ seq: Int64) -> Int64 { seq >> tierShift }

    /// The last event whose keys are stored while they are suspended; nil while the append
    /// inserts them.
    package static func keyedThrough(_ db: Database) throws -> Int64? {
        try Int64.fetchOne(db, sql: "SELECT keyed_through FROM log_keys_suspended")
    }

    /// Stops keeping the keys of new events until `restore`, for an append whose events the
    /// projections will be built from in bulk: only the live fold's refolds of late events
    /// read them, and inserting them once afterwards, sorted, costs less than inserting
    /// every event's (1M events: the log's append 30 % faster).
    package static func suspend(_ db: Database) throws {
        try db.execute(sql: """
            INSERT INTO log_keys_suspended (id, keyed_through) SELECT 1, coalesce(max(seq), 0) FROM events WHERE true
            ON CONFLICT (id) DO NOTHING
            """)
    }

    /// Inserts the keys `suspend` left out, sorted by SQLite, and keeps them again (nothing
    /// when they are kept): before any fold (`ProjectionEngine.catchUp`), when a pipeline has
    /// caught up, and before a rebuild whose scan does not hand them over (`Sink`).
    package static func restore(_ db: Database) throws {
        guard let through = try keyedThrough(db) else { return }
        try db.execute(sql: """
            INSERT INTO event_device_keys (tier, device_key, seq)
                SELECT seq >> \(tierShift), device_key, seq FROM events WHERE seq > ? ORDER BY 1, 2, 3
            """, arguments: [through])
        try db.execute(sql: """
            INSERT INTO event_login_keys (tier, asid_key, seq)
                SELECT seq >> \(tierShift), asid_key, seq FROM events
                WHERE seq > ? AND type = 'login' AND asid_key IS NOT NULL ORDER BY 1, 2, 3
            """, arguments: [through])
        try db.execute(sql: "DELETE FROM log_keys_suspended")
    }

    /// The keys of the events one append inserts; nil while they are suspended.
    package static func appending(_ db: Database) throws -> Appended? {
        try keyedThrough(db) == nil ? Appended() : nil
    }
}

extension LogKeys {
    /// A row of either key table.
    struct Key: Comparable {
        var tier: Int64, key: Int64, seq: Int64
        static func < (a: Self, b: Self) -> Bool { (a.tier, a.key, a.seq) < (b.tier, b.key, b.seq) }
    }

    /// Keys of events, each kind in key order.
    struct Run: Sendable {
        var devices: [Key] = []
        var logins: [Key] = []

        var isEmpty: Bool { devices.isEmpty && logins.isEmpty }

        mutating func add(seq: Int64, deviceKey: Int64, type: EventType, asidKey: Int64?) {
            let tier = LogKeys.tier(seq)
            devices.append(Key(tier: tier, key: deviceKey, seq: seq))
            if type == .login, let asidKey { logins.append(Key(tier: tier, key: asidKey, seq: seq)) }
        }

        mutating func sort() {
            devices.sort()
            logins.sort()
        }

        /// Inserts the keys, many to a statement (`BulkInsert`); a key already there is left as it is.
        func insert(_ db: Database) throws {
            func insert(_ keys: [Key], _ table: String, _ columns: String) throws {
                guard !keys.isEmpty else { return }
                try BulkInsert(cached: db, into: table, columns, checked: false).insert(count: keys.count) { i, binder in
                    let key = keys[i]
                    binder.add(key.tier)
                    binder.add(key.key)
                    binder.add(key.seq)
                }
            }
            try insert(devices, "event_device_keys", "tier, device_key, seq")
            try insert(logins, "event_login_keys", "tier, asid_key, seq")
        }
    }

    /// The keys of the events one append inserts, written after its rows, in key order.
    package struct Appended {
        private var run = Run()

        package mutating func add(seq: Int64, _ image: LoggedEvent.Image) {
            run.add(seq: seq, deviceKey: image.deviceKey, type: image.type, asidKey: image.asidKey)
        }

        package mutating func write(_ db: Database) throws {
            run.sort()
            try run.insert(db)
        }
    }

    /// The keys a bulk build's scanners read, handed to the writer as they come: each
    /// scanner (`Collector`) sends a tier's keys sorted when it leaves the tier, and the
    /// writer inserts them in key order (`fill`). At most a few runs wait, so the memory is a
    /// few tiers' keys whatever the log's size.
    package final class Sink: @unchecked Sendable {
        /// Keys of events after this one are collected: the last one with keys when the
        /// scan's snapshot was taken.
        package let after: Int64
        private let condition = NSCondition()
        private var runs: [Run] = []
        private var scanning: Int
        private var failed = false, cancelled = false
        private static let waitingRuns = 2

        /// `scanners`: how many `Collector`s will send (each must `finish` or be released).
        package init(after: Int64, scanners: Int) {
            self.after = after
            scanning = scanners
        }

        fileprivate func send(_ run: Run) {
            condition.lock()
            defer { condition.unlock() }
            while runs.count >= Self.waitingRuns, !cancelled { condition.wait() }
            if !cancelled { runs.append(run) }
            condition.broadcast()
        }

        fileprivate func close(failed: Bool) {
            condition.lock()
            defer { condition.unlock() }
            scanning -= 1
            self.failed = self.failed || failed
            condition.broadcast()
        }

        /// The next run; nil when every scanner finished. Throws when one failed.
        private func next() throws -> Run? {
            condition.lock()
            defer { condition.unlock() }
            while runs.isEmpty, scanning > 0, !failed { condition.wait() }
            if failed { throw CancellationError() }
            guard !runs.isEmpty else { return nil }
            condition.broadcast()
            return runs.removeFirst()
        }

        /// Lets scanners go on without waiting for the writer, dropping what they send.
        private func cancel() {
            condition.lock()
            defer { condition.unlock() }
            cancelled = true
            runs = []
            condition.broadcast()
        }

        /// Inserts the scanned keys as they come, then keeps the keys again (`restore`, for
        /// events after `scanned`, the scan's last one), in a write transaction of `writer`,
        /// beside the scan; throws (so that the transaction rolls back and the keys stay
        /// suspended) when a scanner failed. However it ends, the scanners no longer wait.
        package func fill(_ writer: some DatabaseWriter, scanned: Int64) throws {
            defer { cancel() }
            try writer.write { db in try fill(db, scanned: scanned) }
        }

        private func fill(_ db: Database, scanned: Int64) throws {
            // Another writer may have restored the keys since the scan began: keep its.
            guard try LogKeys.keyedThrough(db) != nil else { return }
            while let run = try next() { try run.insert(db) }
            try db.execute(sql: "UPDATE log_keys_suspended SET keyed_through = max(keyed_through, ?)", arguments: [scanned])
            try LogKeys.restore(db)
        }
    }

    /// One scanner's part of a `Sink`: the keys of the events it reads, in log order.
    package final class Collector {
        private let sink: Sink
        private var tier: Int64 = -1
        private var run = Run()
        private var finished = false

        package init(_ sink: Sink) { self.sink = sink }

        deinit { if !finished { sink.close(failed: true) } }

        private static let tierSize = 1 << LogKeys.tierShift

        package func add(_ event: LoggedEvent) {
            add(seq: event.seq, deviceKey: event.deviceKey, type: event.type, asidKey: event.asidKey)
        }

        package func add(seq: Int64, deviceKey: Int64, type: EventType, asidKey: Int64?) {
            guard seq > sink.after else { return }
            let tier = LogKeys.tier(seq)
            if tier != self.tier {
                send()
                self.tier = tier
                // A tier's keys at most, allocated once: grown by doubling, each array would
                // hold its old and new storage at once, and up to twice what it needs.
                run.devices.reserveCapacity(Self.tierSize)
                run.logins.reserveCapacity(Self.tierSize)
            }
            run.add(seq: seq, deviceKey: deviceKey, type: type, asidKey: asidKey)
        }

        /// Sends the last tier's keys: the scanner read all it was given.
        package func finish() {
            send()
            finished = true
            sink.close(failed: false)
        }

        private func send() {
            guard !run.isEmpty else { return }
            run.sort()
            sink.send(run)
            run = Run()
        }
    }
}
