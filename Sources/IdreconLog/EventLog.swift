import Foundation
import GRDB
import IdreconDomain

extension IdreconError {
    /// A one-line description of a database error for the user.
    package static func describe(_ error: any Error) -> String {
        if let db = error as? DatabaseError {
            switch db.resultCode {
            case .SQLITE_NOTADB, .SQLITE_CORRUPT: return "the file is not an idrecon SQLite database or is corrupt"
            case .SQLITE_READONLY: return readOnly(db.extendedResultCode)
            case .SQLITE_CANTOPEN: return "the file cannot be opened; check the path and permissions"
            case .SQLITE_FULL: return "the disk is full"
            default: return db.message ?? "\(db.resultCode)"
            }
        }
        return "\(error)"
    }

    /// Why SQLite could not write, by its extended code: each kind has its own remedy.
    private static func readOnly(_ code: ResultCode) -> String {
        switch code {
        case .SQLITE_READONLY_DIRECTORY:
            "the database is read-only here: its directory is not writable (SQLite creates its -wal and -shm files "
                + "there); check the directory's permissions"
        case .SQLITE_READONLY_DBMOVED:
            "the database is read-only: its file was moved or deleted while it was open; open it again"
        case .SQLITE_READONLY_RECOVERY, .SQLITE_READONLY_CANTINIT:
            "the database is read-only: its -wal/-shm files need recovering and this process cannot write them; "
                + "open it once as a user who can write the database's directory"
        case .SQLITE_READONLY_ROLLBACK:
            "the database is read-only: an interrupted write must be rolled back and this process cannot write it; "
                + "open it once as a user who can write the database"
        default: "the database is read-only; check its permissions (SQLite code \(code.rawValue))"
        }
    }

    /// An error of no idrecon type, by what it is: the database's is `storage`; anything
    /// else is a failure inside idrecon that may pass (`transient`), never the caller's usage.
    package init(unknown error: any Error) {
        if error is DatabaseError {
            self.init(.storage, Self.describe(error))
        } else {
            self.init(.transient, "internal error: \(error); retry, and report it if it persists")
        }
    }
}

/// Appending to the log: events, quarantine entries, duplicate counts and source positions
/// of one batch, inside the caller's transaction. The projections are not this module's
/// concern: they fold the log afterwards (`IdreconProjections`).
package enum EventLog {
    package static func append(
        _ db: Database, _ records: [IncomingRecord], positions: [ConsumedPosition], forgotten: ForgottenASIDs,
        keys unique: inout LogKeyRuns
    ) throws -> BatchOutcome {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        var outcome = BatchOutcome()
        let findPayload = try db.cachedStatement(sql: "SELECT payload FROM event_payloads WHERE seq = ?")
        let findEventID = try BulkStatement(cached: db, "SELECT event_id FROM events WHERE seq = ?")
        let findNonce = try BulkStatement(cached: db, "SELECT app_id, nonce FROM events WHERE seq = ?")
        // Uniqueness of `event_id` and of `(app_id, nonce)` is the append's, in their runs: each
        // key is looked up before the event is inserted and added with it.
        let insertEvent = try BulkStatement(cached: db, LoggedEvent.insertSQL)
        let insertPayload = try BulkStatement(cached: db, LoggedEvent.insertPayloadSQL)
        // The payloads of this batch's rows, written after all of them: each B-tree's new
        // pages then come in runs, and a scan of `events` reads runs of adjacent pages
        // instead of every third page of the file (schemas/sql.md, "Payloads apart").
        var payloads: [(seq: Int64, image: LoggedEvent.Image)] = []
        /// The logged payload of the event at `seq`, from this batch's rows or the table.
        func loggedPayload(_ seq: Int64) throws -> String? {
            if let first = payloads.first, seq >= first.seq { // seqs rise through the batch
                var (low, high) = (0, payloads.count)
                while low < high {
                    let mid = (low + high) / 2
                    if payloads[mid].seq < seq { low = mid + 1 } else { high = mid }
                }
                if low < payloads.count, payloads[low].seq == seq { return payloads[low].image.payload }
            }
            return try String.fetchOne(findPayload, arguments: [seq])
        }
        let insertQuarantine = try db.cachedStatement(sql: """
            INSERT INTO quarantine (source, position, partition, record_key, raw, code, message, event_id, quarantined_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            """)
        let requarantine = try db.cachedStatement(sql: "UPDATE quarantine SET code = ?, message = ? WHERE id = ?")
        let release = try db.cachedStatement(sql: "DELETE FROM quarantine WHERE id = ?")
        func quarantine(_ record: IncomingRecord, _ rejection: Rejection, eventID: String?, raw: [UInt8]? = nil) throws {
            outcome.quarantined[rejection.code, default: 0] += 1
            if let id = record.quarantineID {
                try requarantine.execute(arguments: [rejection.code.rawValue, rejection.message, id])
                return
            }
            var raw = raw ?? record.raw
            if !forgotten.isEmpty, let value = try? JSONParser.parse(raw), forgotten.contains(ErasureRules.asid(of: value)),
               let clean = ErasureRules.scrub(value) {
                raw = Array(CanonicalJSON.encode(clean).utf8)
            }
            try insertQuarantine.execute(arguments: [
                record.origin.source, record.origin.position, record.origin.partition.map { Int64($0) },
                record.origin.key.map { Data($0) }, Data(raw), rejection.code.rawValue, rejection.message,
                eventID, now,
            ])
        }
        var sourceIDs: [String: Int64] = [:]
        // Runs of records share a source: the last one is checked first, by bytes, before
        // hashing the name.
        var lastSource: (name: String, id: Int64)?
        func sourceID(_ name: String) throws -> Int64 {
            if let lastSource, lastSource.name.sameBytes(as: name) { return lastSource.id }
            if let id = sourceIDs[name] {
                lastSource = (name, id)
                return id
            }
            try db.execute(sql: "INSERT INTO sources (name) VALUES (?) ON CONFLICT(name) DO NOTHING", arguments: [name])
            let id = try Int64.fetchOne(db, sql: "SELECT id FROM sources WHERE name = ?", arguments: [name])!
            sourceIDs[name] = id
            lastSource = (name, id)
            return id
        }
        // The unique keys' hashes first, so that each record's block of the covering filters
        // (`KeyRuns.prefetch`) is asked for `lookahead` records before its lookup waits for it.
        var keyHashes: [(eventID: Int64, nonce: Int64?)] = []
        keyHashes.reserveCapacity(records.count)
        for index in records.indices {
            if case let .success(image) = records[index].verdict {
                keyHashes.append((image.eventIDHash, image.nonceHash))
            } else {
                keyHashes.append((0, nil))
            }
        }
        let lookahead = 8
        // Records are read in place: a copy of one retained each of its texts, and the writer is
        // the pipeline's bottleneck.
        for index in records.indices {
            if index + lookahead < keyHashes.count {
                let ahead = keyHashes[index + lookahead]
                unique.eventIDs.prefetch(hash: ahead.eventID)
                if let nonce = ahead.nonce { unique.nonces.prefetch(hash: nonce) }
            }
            var image: LoggedEvent.Image
            var hashes = keyHashes[index]
            switch records[index].verdict {
            case let .failure(rejection):
                let record = records[index]
                try quarantine(record, rejection, eventID: record.knownEventID ?? Self.bestEffortEventID(record.raw))
                continue
            case let .success(accepted):
                image = accepted
            }
            if !forgotten.isEmpty, forgotten.contains(image.asid), let clean = ErasureRules.scrub(payload: image.payload) {
                switch EventValidator.validate(Array(clean.utf8)) {
                case let .success(scrubbed):
                    image = LoggedEvent.Image(scrubbed)
                    hashes = (image.eventIDHash, image.nonceHash)
                case let .failure(rejection):
                    try quarantine(records[index], rejection, eventID: image.eventID, raw: Array(clean.utf8))
                    continue
                }
            }
            let source = try sourceID(records[index].origin.source)
            // The event logged under this one's `event_id`, else the one that holds its nonce.
            let eventIDHash = hashes.eventID
            let logged = try unique.eventIDs.holder(of: eventIDHash, reading: findEventID, image.sameEventID)
            let nonceHash = hashes.nonce
            var nonceHolder: Int64?
            if logged == nil, let nonceHash {
                nonceHolder = try unique.nonces.holder(of: nonceHash, reading: findNonce, image.sameNonce)
            }
            var inserted = false
            if logged == nil && nonceHolder == nil {
                guard try image.insert(insertEvent, sourceID: source, position: records[index].origin.position) == 1 else {
                    throw DatabaseError(resultCode: .SQLITE_INTERNAL, message: "an event row was not inserted")
                }
                let seq = db.lastInsertedRowID
                unique.eventIDs.add(hash: eventIDHash, seq: seq)
                if let nonceHash { unique.nonces.add(hash: nonceHash, seq: seq) }
                payloads.append((seq, image))
                unique.add(seq: seq, image)
                inserted = true
            }
            let existing = try logged.flatMap(loggedPayload)
            if let id = records[index].quarantineID, inserted || existing.map(image.payloadIs) == true {
                try release.execute(arguments: [id]) // a retried entry that now passes (or is already logged)
            }
            if inserted {
                outcome.appended += 1
            } else if let existing {
                // The same bytes, never Unicode equivalence: "café" (U+00E9) and "cafe\u0301"
                // differ. A re-delivered event of a forgotten ASID is compared scrubbed.
                if image.payloadIs(existing) {
                    outcome.duplicates += 1
                } else {
                    let eventID = image.eventID
                    try quarantine(records[index], Rejection(.eventIDConflict, "event_id '\(eventID)' is already in the log with a different payload"), eventID: eventID)
                }
            } else {
                let (eventID, appID) = (image.eventID, image.appID)
                let other = try nonceHolder.flatMap { seq in try findEventID.first({ $0.add(seq) }) { $0.string(0) } } ?? "?"
                try quarantine(records[index], Rejection(.nonceReplay, "nonce already used by event '\(other)' of app \(appID)"), eventID: eventID)
            }
        }
        for (seq, image) in payloads { try image.insertPayload(insertPayload, seq: seq) }
        if outcome.duplicates > 0 {
            try db.execute(
                sql: "INSERT INTO counters (name, value) VALUES ('duplicates', ?) ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
                arguments: [outcome.duplicates])
        }
        for position in positions { try position.upsert(db) }
        return outcome
    }

    /// The `event_id` of an unparseable-as-event record when it can still be read, for search.
    package static func bestEffortEventID(_ raw: [UInt8]) -> String? {
        guard raw.count < 1 << 20, let value = try? JSONParser.parse(raw), case let .string(id)? = value["event_id"] else { return nil }
        return String(id.prefix(128))
    }
}

/// Tombstones of `forget`, read once per transaction: records of a forgotten ASID arriving
/// later lose their personal data before they are stored, in the log and in quarantine alike.
package struct ForgottenASIDs {
    private let asids: Set<[UInt8]>

    package init(_ db: Database) throws {
        asids = Set(try String.fetchAll(db, sql: "SELECT asid FROM forgotten").map { Array($0.utf8) })
    }

    package var isEmpty: Bool { asids.isEmpty }

    /// Byte equality; no allocation on the hot path while nothing was forgotten.
    package func contains(_ asid: String?) -> Bool {
        guard !asids.isEmpty, let asid else { return false }
        return asids.contains(Array(asid.utf8))
    }
}
