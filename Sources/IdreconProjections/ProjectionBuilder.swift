import Dispatch
import Foundation
import GRDB
import IdreconDomain
import IdreconLog
import Synchronization

/// Builds every projection of a new generation from a snapshot of the log in bulk: the
/// log is scanned once, two threads each scanning half; a log larger than one partition
/// (`partitionSize` events) is spilled to temporary files by partition (ranges of the
/// devices' and the ASIDs' key order, `KeyRanges`); each device and each ASID is folded
/// once in event-time order in memory, and the rows are loaded in key order before the
/// secondary indexes exist. Memory is bounded by the partition size, not by the log. The
/// folds and the row writers are the projections' own (`DevicesProjection.Fold`,
/// `IdentitiesProjection.Fold`, `FriendSnapshot`, their `Rows`), the ones the live path
/// applies each transaction with, so both give the same tables.
package struct ProjectionBuilder {
    let tables: ProjectionTables
    let config: IdentityConfig
    /// Events per partition: a partition's facts are held in memory while folded.
    let partitionSize: Int
    package init(tables: ProjectionTables, config: IdentityConfig, partitionSize: Int) {
        (self.tables, self.config, self.partitionSize) = (tables, config, partitionSize)
    }

    /// The facts of a snapshot of the log, scanned: in memory when they fit one partition,
    /// otherwise spilled to a file per partition.
    package enum ScannedFacts {
        /// Held in a box so that taking them leaves no second reference behind (the
        /// devices are sorted in place).
        case inMemory(Handoff<(Facts, otherDevices: DeviceEvents)>)
        case spilled(SpilledFacts, SpilledFacts, partitions: Int)
    }

    /// Scans the events up to `lastSeq`: two snapshots of the log in parallel, each half of
    /// the sequence range, once. With more than one partition each half spills its facts
    /// to a file per partition in `spillDirectory`. The partitions are counted from `lastSeq`,
    /// which bounds the events' count: counting them first read the whole events table (a cold
    /// 10M log: 3.7 s before the scan began, 0.3 s cached). The snapshots are not needed after
    /// this: releasing them lets the database checkpoint while `load` writes.
    /// `readAhead`, when given, reads each half's pages ahead of its scanner (`ReadAhead`).
    package func scan(
        _ snapshots: (DatabaseSnapshot, DatabaseSnapshot), lastSeq: Int64, spillDirectory: String,
        readAhead pool: DatabasePool? = nil
    ) throws -> ScannedFacts {
        let middle = lastSeq / 2
        let halves = (0...middle, (middle + 1)...max(middle + 1, lastSeq))
        // Started with the scanners: beside the samples' seeks, they left those waiting for the disk.
        var readers: [StoppableWork] = []
        defer { readers.forEach { $0.stop() } }
        let progress = (ScanProgress(halves.0.lowerBound), ScanProgress(halves.1.lowerBound))
        func readAhead(paced: Bool) {
            readers = pool.map { pool in
                [ReadAhead.start(pool, seqs: halves.0, progress: paced ? progress.0 : nil),
                 ReadAhead.start(pool, seqs: halves.1, progress: paced ? progress.1 : nil)]
            } ?? []
        }
        let weight = try snapshots.0.read { db in try Self.memoryWeight(db, seqs: 1...max(1, lastSeq)) }
        let shares = (Double(lastSeq) * weight / Double(partitionSize)).rounded(.up)
        let partitions = KeyRanges.partitions(shares: Int(max(1, shares)))
        guard partitions > 1 else {
            readAhead(paced: false) // a partition's pages at most
            var (facts, second) = try concurrently(
                { try snapshots.0.read { db in try Facts(db, seqs: halves.0) } },
                { try snapshots.1.read { db in try Facts(db, seqs: halves.1) } })
            let otherDevices = second.devices.take() // folded alongside, never concatenated
            facts.merge(&second)
            return .inMemory(Handoff((facts, otherDevices)))
        }
        let ranges = try KeyRanges(snapshots, seqs: 1...max(1, lastSeq), partitions: partitions)
        readAhead(paced: true)
        let (first, second) = try concurrently(
            { try snapshots.0.read { db in
                try SpilledFacts(
                    db, seqs: halves.0, partitions: partitions, ranges: ranges, directory: spillDirectory,
                    progress: progress.0)
            } },
            { try snapshots.1.read { db in
                try SpilledFacts(
                    db, seqs: halves.1, partitions: partitions, ranges: ranges, directory: spillDirectory,
                    progress: progress.1)
            } })
        return .spilled(first, second, partitions: partitions)
    }

    /// The live projections' tables that `scan` reads through before it scans the log, to bound
    /// its partitions (`KeyRanges`).
    package static let sampledTables = [KeyRanges.sampledTables.devices, KeyRanges.sampledTables.asids]

    /// How far a scanner of a range of the log is (about the sequence number it reached), for the
    /// range's `ReadAhead` to keep a bounded distance ahead of it.
    final class ScanProgress: Sendable {
        private let reached: Atomic<Int64>

        init(_ start: Int64) { reached = Atomic(start) }

        var seq: Int64 { reached.load(ordering: .relaxed) }

        func reach(_ seq: Int64) { reached.store(seq, ordering: .relaxed) }
    }

    /// Has the pages of a range of the log's events read ahead of the scanner of that range, so
    /// that the pages of a log the page cache no longer holds are read while the scanner works on
    /// the ones before. A scanner alone waits for each page it misses.
    ///
    /// The leaves of `events` are named by its interior pages (`BTreePages`) and the kernel asked
    /// to read them (`posix_fadvise`), a run of consecutive pages at a time, at most `lead` events
    /// ahead of the scanner when it reports its progress. The scanner then finds its pages cached
    /// and sets off no readahead of its own: the kernel's reads the file's next megabytes, and the
    /// log's events pages lie between its payloads' (a cold 10M scan read 4.3 GB for 1.9 GB of
    /// `events` pages; `schemas/performance.md`, "Reading only the log's events pages"). Where no
    /// descriptor of the file is found, or a page is not what it must be, a reader of its own
    /// visits the rows instead, decoding no column (a 10M scan after `consume` had filled the
    /// cache: 11 s without, 6 warm).
    private enum ReadAhead {
        static func start(_ pool: DatabasePool, seqs: ClosedRange<Int64>, progress: ScanProgress?) -> StoppableWork {
            StoppableWork { isStopped in
                var from = seqs.lowerBound
                if let pages = try pool.read({ db in try BTreePages(db, path: pool.path, bTree: "events") }) {
                    let walked = pages.forEachLeafRun(keys: seqs) { lowest, run in
                        while let progress, lowest > progress.seq + lead, !isStopped() { usleep(1_000) }
                        from = lowest
                        return !isStopped() && pages.willNeed(run)
                    }
                    if walked || isStopped() { return }
                }
                try readRows(pool, seqs: from...max(from, seqs.upperBound), isStopped: isStopped)
            }
        }

        /// Events whose pages may be asked for ahead of the scanner: ~50 MB of the bench's log.
        private static let lead: Int64 = 262_144

        private static func readRows(_ pool: DatabasePool, seqs: ClosedRange<Int64>, isStopped: () -> Bool) throws {
            // A small page cache: the pages are read for the kernel's cache, not this connection's
            // (the pool's 32 MB for each of the two readers took a 1M replay's peak from 176 to 245 MB).
            try pool.read { db in
                try db.withPageCache(kibibytes: 256) {
                    let statement = try db.makeStatement(sql: "SELECT count(*) FROM events WHERE seq BETWEEN ? AND ?")
                    var low = seqs.lowerBound
                    while low <= seqs.upperBound, !isStopped() {
                        let high = low + min(Self.chunk - 1, seqs.upperBound - low)
                        _ = try Int64.fetchOne(statement, arguments: [low, high])
                        low = high + 1
                    }
                }
            }
        }

        /// Events read at a time between checks of `stop` (~1 ms when the pages are cached).
        private static let chunk: Int64 = 16_384
    }

    /// How many events of the bench's generated stream an event of this log weighs in a
    /// partition's memory (at least 1): estimated from events sampled at evenly spaced
    /// sequence numbers. A partition's facts hold each login's event key and each friend its
    /// list names, and a text longer than 15 bytes (a UUID event ID, an ASID of 16 digits or
    /// more) is a heap object of its own where a shorter one is stored inline: with UUID event
    /// IDs a 1M replay peaked at 285–318 MB against 208–218 MB. So a log of larger events is
    /// split into more partitions, and a partition's memory stays what the configuration
    /// sets (`partitionSize` events of the bench's stream), whatever the texts.
    package static func memoryWeight(_ db: Database, seqs: ClosedRange<Int64>) throws -> Double {
        /// A Swift string's heap object for `bytes` UTF-8 bytes: none up to 15 (inline), else
        /// a 32-byte header and the bytes, rounded up to malloc's 16.
        func heap(_ bytes: Int) -> Int { bytes <= 15 ? 0 : (bytes + 32 + 15) / 16 * 16 }
        var total = 0, sampled = 0
        let count = min(512, seqs.upperBound - seqs.lowerBound + 1)
        try KeyRanges.sampleEvents(db, seqs: seqs, count: count, columns: "event_id, asid, friends") { row in
            var bytes = Self.eventBytes + heap(row.string(0).utf8.count) + heap(row.optionalString(1)?.utf8.count ?? 0)
            for friend in row.optionalString(2).map(StoredFriendList.split) ?? [] {
                bytes += Self.friendBytes + heap(friend.utf8.count)
            }
            total += bytes
            sampled += 1
        }
        guard sampled > 0 else { return 1 }
        return max(1, Double(total) / Double(sampled) / Double(Self.referenceBytes))
    }

    /// The model's bytes per event besides its texts and per friend-list entry, and what an
    /// event of the bench's stream (short IDs, lists of 0–7 friends) weighs in it.
    private static let eventBytes = 128, friendBytes = 16, referenceBytes = 192

    /// Loads the devices, limited spans, ASIDs, their keys, friend snapshots, edges and
    /// mentions of the scanned events, one partition after the other. `progress` gets the
    /// events folded so far. Returns the events loaded.
    @discardableResult
    package func load(
        _ scanned: consuming ScannedFacts, into pool: DatabasePool, progress: (Int64) -> Void
    ) throws -> Int64 {
        switch consume scanned {
        case .inMemory(let box):
            var (facts, otherDevices) = box.take()
            // Folded before the ASIDs, not beside them: the sort's scratch space and the
            // ASIDs' rows together would be the replay's peak of memory.
            let devices = Self.fold(devices: facts.devices.take(), otherDevices.take())
            let events = try write(Self.prepare(facts, friends: nil), devices: { devices }, into: pool)
            progress(events)
            return events
        case .spilled(let first, let second, let partitions):
            // Three stages feed the writer, each a thread of its own that runs ahead of it by a
            // partition (`Relay`): the logins of each partition read back and aggregated, their
            // ASIDs folded into rows in key order, and the devices' events folded. Each stage
            // handles the partitions in order: aggregating one takes its spill files, preparing one
            // spills its friend edges. Started together, they keep both cores busy while the writer
            // binds rows; chained to the writer's loop (each partition's stages started when it
            // reached the one before), a 10M replay's load used 1.6 of the two cores, the writer
            // waiting for the stages 40 % of its time.
            let friends = try FriendsProjection.BulkSpill(ranges: first.ranges, partitions: partitions, directory: first.directory)
            let aggregated = Relay<Handoff<Facts>> { send in
                for partition in 0..<partitions {
                    var facts = Facts()
                    try first.takeLogins(partition, into: &facts)
                    try second.takeLogins(partition, into: &facts)
                    try send(Handoff(facts))
                }
            }
            let prepared = Relay<Handoff<PreparedASIDs>> { send in
                while let facts = try aggregated.next() {
                    try send(Handoff(try Self.prepare(facts.take(), friends: friends)))
                }
            }
            let devices = Relay<Handoff<FoldedDevices>> { send in
                for partition in 0..<partitions {
                    let (one, other) = (try first.takeDevices(partition), try second.takeDevices(partition))
                    try send(Handoff(Self.fold(devices: one, other)))
                }
            }
            defer { aggregated.cancel(); prepared.cancel(); devices.cancel() }
            var done: Int64 = 0
            for _ in 0..<partitions {
                guard let rows = try prepared.next() else { throw CancellationError() }
                done += try write(rows.take(), devices: {
                    guard let folded = try devices.next() else { throw CancellationError() }
                    return folded.take()
                }, into: pool)
                progress(done)
            }
            // The friend edges are read and their sides merged on the other core while the
            // previous batch is written.
            let batches = Relay<FriendsProjection.BulkSpill.Batch> { send in try friends.read(send) }
            defer { batches.cancel() }
            while let batch = try batches.next() { try pool.write { db in try FriendsProjection.BulkSpill.write(batch, db, tables) } }
            return done
        }
    }

    /// Loads one partition's ASID rows and then its devices' (`devices` waits for them if
    /// they are being folded on the other core). Returns the partition's events.
    private func write(
        _ prepared: consuming PreparedASIDs, devices: () throws -> FoldedDevices, into pool: DatabasePool
    ) throws -> Int64 {
        var rows = prepared
        var events = 0
        try pool.write { db in
            // Each projection's rows are freed once written: the devices are folded meanwhile.
            try IdentitiesProjection.writeBulk(rows.identities, db, tables)
            rows.identities = .init()
            try AccessProjection.writeBulk(rows.access, db, tables)
            rows.access = .init()
            try FriendsProjection.writeBulk(rows.friends, db, tables)
            rows.friends = .init()
            let folded = try devices()
            events = folded.events
            try DevicesProjection.Rows(db, tables).insert(folded.devices)
        }
        return Int64(events)
    }

    /// After `load`: builds the secondary indexes, counts the link keys and assigns every
    /// ASID its identity (`user_id`) from the connected components over linking keys. The
    /// identities are judged on a reader, from the keys' index, while the writer builds the
    /// other projections' indexes (the other core had nothing to do); the ASIDs' index by
    /// user comes after their user IDs are written, which then move no index entries. Both
    /// sides keep a small page cache meanwhile: with the writer's 32 MB, its sorts and the
    /// judgement side by side took a 10M replay's peak from 265 to 457 MB (343 with 8 MB).
    package func finish(_ pool: DatabasePool) throws {
        let keysIndex = IdentitiesProjection.createKeysIndex(generation: tables.generation)
        try pool.write { db in try db.execute(sql: keysIndex) }
        let judged = Background { [tables, config] in
            try pool.read { db in
                try db.withPageCache(kibibytes: 4096) { try IdentitiesProjection.judgeBulk(db, tables, config: config) }
            }
        }
        let identities = ObjectIdentifier(IdentitiesProjection.self)
        try pool.write { db in
            try db.withPageCache(kibibytes: 8192) {
                try tables.createIndexes(db) { ObjectIdentifier($0) != identities }
            }
        }
        let judgement = try judged.result().get()
        try pool.write { db in
            try IdentitiesProjection.finishBulk(judgement, db, tables)
            try tables.createIndexes(db) { ObjectIdentifier($0) == identities }
        }
    }

    // MARK: Scanning and folding

    /// One logged event as a device sees it.
    package struct DeviceRow {
        var app: String
        var device: String
        var fact: DeviceFact
    }

    /// One logged login as its ASID sees it.
    package struct LoginRow {
        var asid: String
        var key: EventKey
        var limited: Bool
        /// Where a limited login came from (the access history's evidence); empty for enabled ones.
        var app: String
        var device: String
        var email: String?
        var tfb: String?
        /// The friend list as logged: ASIDs joined by ','; nil when absent.
        var friends: String?
        var declinesFriends: Bool
    }

    /// A partition's device events and logins (each to be sorted and folded) and the earliest
    /// mention of each ASID its logins' friend lists name.
    package struct Facts {
        var devices = DeviceEvents()
        var logins = LoginEvents()
        var mentions = Mentions()

        init() {}

        /// The facts of the events in `seqs`.
        init(_ db: Database, seqs: ClosedRange<Int64>) throws {
            var facts = Facts()
            facts.devices.reserveCapacity(seqs.count) // one row per event
            try ProjectionBuilder.scan(db, seqs: seqs, device: { facts.devices.append($0) }) { login in
                facts.logins.append(login)
                guard var friends = login.friends else { return }
                var eventID = login.key.eventID
                friends.withUTF8 { list in
                    eventID.withUTF8 { eventID in facts.mentions.lower(list: list, at: login.key.at, eventID: eventID) }
                }
            }
            self = facts
        }

        /// Adds the logins and mentions of other events (of the same partition); their devices
        /// are left alone.
        mutating func merge(_ other: inout Facts) {
            logins.append(contentsOf: other.logins)
            mentions.merge(other.mentions)
            other = Facts()
        }
    }

    /// The facts of the events in a range of the log, spilled to a file per partition
    /// (devices and logins by the `KeyRanges` of their keys) for `Facts` to take back one
    /// partition at a time.
    package final class SpilledFacts: @unchecked Sendable {
        // Each partition's files are read once, devices and logins on different threads.
        private var devices: [SpillFile?]
        private var logins: [SpillFile?]
        /// Each friend a login's list names, in the partition of the friend when that is not
        /// the login's (whose list is read back with it): a partition's mentions are those of
        /// its own ASIDs, written with them in key order (gathered from the logins of each
        /// partition, they named ASIDs all over the key space).
        private var mentions: [SpillFile?]
        /// The partitions' key ranges, and where the files are.
        let ranges: KeyRanges
        let directory: String

        init(
            _ db: Database, seqs: ClosedRange<Int64>, partitions: Int, ranges: KeyRanges, directory: String,
            progress: ScanProgress
        ) throws {
            let devices = try (0..<partitions).map { _ in try SpillFile(directory: directory) }
            let logins = try (0..<partitions).map { _ in try SpillFile(directory: directory) }
            let mentions = try (0..<partitions).map { _ in try SpillFile(directory: directory) }
            var scanned: Int64 = 0
            let spill = Spill(
                ranges: ranges, devices: devices.map(Unmanaged.passUnretained),
                logins: logins.map(Unmanaged.passUnretained), mentions: mentions.map(Unmanaged.passUnretained))
            try BulkStatement(db, """
                SELECT \(LoggedEvent.selectColumns) FROM events WHERE seq BETWEEN \(seqs.lowerBound) AND \(seqs.upperBound)
                """).each { row in
                try spill.add(row)
                scanned += 1
                if scanned & 4095 == 0 { progress.reach(seqs.lowerBound + scanned) }
            }
            (self.devices, self.logins, self.mentions) = (devices, logins, mentions)
            (self.ranges, self.directory) = (ranges, directory)
        }

        /// Writes scanned events to the partitions' files, from the bytes SQLite returns: the scan
        /// makes no `String` of a row's texts (decoding each row as a `LoggedEvent` and its texts
        /// as `String`s was about half of the scan's CPU). The one writer of the records that
        /// `DeviceEvents.append(spilled:)` and `takeLogins` read.
        private struct Spill {
            let ranges: KeyRanges
            /// The files, which `SpilledFacts` holds while this writes them: not retained and released
            /// for each record. A release is an atomic instruction, which waits for the stores before it
            /// (the record's bytes, in one of many buffers): a sixth of a 10M scan's CPU.
            let devices: [Unmanaged<SpillFile>], logins: [Unmanaged<SpillFile>], mentions: [Unmanaged<SpillFile>]

            /// One event's columns (`LoggedEvent.selectColumns`) as bytes.
            struct Event {
                var at: Int64, type: EventType, asidKey: Int64?, declinesFriends: Bool
                /// The tracking as `DeviceEvents.code` spells it.
                var tracking: UInt8
                var eventID: UnsafeBufferPointer<UInt8>, app: UnsafeBufferPointer<UInt8>, device: UnsafeBufferPointer<UInt8>
                var asid: UnsafeBufferPointer<UInt8>?, email: UnsafeBufferPointer<UInt8>?, tfb: UnsafeBufferPointer<UInt8>?
                var friends: UnsafeBufferPointer<UInt8>?
            }

            /// Spills a row of `LoggedEvent.selectColumns`. A row with a text that is not valid
            /// UTF-8 is spilled as `LoggedEvent` decodes it (repaired).
            func add(_ row: BulkStatement.Reader) throws {
                func valid(_ text: UnsafeBufferPointer<UInt8>?) -> Bool { text.map(JSONParser.isUTF8) ?? true }
                let tracking = row.text(6), asid = row.text(7), email = row.text(10), tfb = row.text(11), friends = row.text(12)
                guard let eventID = row.text(1), let app = row.text(3), let device = row.text(4), let type = row.text(5),
                      valid(eventID), valid(app), valid(device), valid(type), valid(tracking), valid(asid), valid(email),
                      valid(tfb), valid(friends)
                else { return try add(LoggedEvent(row)) }
                let code = DeviceEvents.code(tracking.flatMap { text -> Tracking? in
                    text.elementsEqual(Self.limited) ? .limited : text.elementsEqual(Self.enabled) ? .enabled : nil
                })
                try add(Event(at: row.int(2), type: type.elementsEqual(Self.logout) ? .logout : .login,
                              asidKey: row.isNull(9) ? nil : row.int(9), declinesFriends: row.int(13) == 1,
                              tracking: code, eventID: eventID, app: app, device: device, asid: asid, email: email, tfb: tfb,
                              friends: friends))
            }

            /// Spills an event decoded from its row, its texts laid out in one buffer.
            private func add(_ e: LoggedEvent) throws {
                var bytes: [UInt8] = []
                var spans: [Range<Int>?] = []
                for text in [e.key.eventID, e.appID, e.deviceID, e.asid, e.linkEmail, e.linkTFB, e.friends] {
                    let start = bytes.count
                    if let text { bytes += text.utf8 }
                    spans.append(text.map { _ in start..<bytes.count })
                }
                try bytes.withUnsafeBufferPointer { base in
                    func text(_ i: Int) -> UnsafeBufferPointer<UInt8>? { spans[i].map { UnsafeBufferPointer(rebasing: base[$0]) } }
                    try add(Event(at: e.key.at, type: e.type, asidKey: e.asidKey,
                                  declinesFriends: e.declinesFriends, tracking: DeviceEvents.code(e.tracking),
                                  eventID: text(0)!, app: text(1)!, device: text(2)!, asid: text(3), email: text(4), tfb: text(5),
                                  friends: text(6)))
                }
            }

            private func add(_ e: Event) throws {
                let device = ranges.partition(app: e.app, device: e.device)
                try devices[device]._withUnsafeGuaranteedRef { try $0.append { out in
                    out.add(e.at); out.add(UInt8(e.type == .login ? 1 : 0)); out.add(e.tracking)
                    out.add(text: e.app); out.add(text: e.device); out.add(text: e.eventID); out.add(optionalText: e.asid)
                } }
                guard e.type == .login, let asid = e.asid, e.asidKey != nil else { return }
                let limited = e.tracking == DeviceEvents.code(.limited)
                let own = ranges.partition(asid: asid)
                try logins[own]._withUnsafeGuaranteedRef { try $0.append { out in
                    out.add(text: asid); out.add(e.at); out.add(text: e.eventID); out.add(optionalText: e.email)
                    out.add(optionalText: e.tfb); out.add(optionalText: e.friends); out.add(UInt8(e.declinesFriends ? 1 : 0))
                    out.add(UInt8(limited ? 1 : 0))
                    if limited { out.add(text: e.app); out.add(text: e.device) }
                } }
                // Each friend the list names, in the friend's partition when that is not the login's.
                guard let friends = e.friends else { return }
                try StoredFriendList.forEach(in: friends) { friend in
                    let partition = ranges.partition(asid: friend)
                    guard partition != own else { return }
                    try mentions[partition]._withUnsafeGuaranteedRef { try $0.append { out in
                        out.add(text: friend); out.add(e.at); out.add(text: e.eventID)
                    } }
                }
            }

            private static let logout = Array("logout".utf8), limited = Array("limited".utf8), enabled = Array("enabled".utf8)
        }

        /// The spilled device events of `partition`; deletes their file.
        func takeDevices(_ partition: Int) throws -> DeviceEvents {
            var events = DeviceEvents()
            guard let file = devices[partition] else { return events }
            events.reserveCapacity(for: file)
            try file.forEach { row in events.append(spilled: &row) }
            devices[partition] = nil
            return events
        }

        /// Adds the spilled logins of `partition` to `facts`, and the mentions of its ASIDs, and
        /// deletes their files.
        func takeLogins(_ partition: Int, into facts: inout Facts) throws {
            if let file = logins[partition] {
                facts.logins.reserveCapacity(for: file)
                try file.forEach { row in
                    let asid = row.text(), at = row.int(), eventID = row.text()
                    let email = row.byte() == 1 ? row.text() : nil, tfb = row.byte() == 1 ? row.text() : nil
                    let friends = row.byte() == 1 ? row.text() : nil
                    let declinesFriends = row.byte() == 1, limited = row.byte() == 1
                    let app = limited ? row.text() : nil, device = limited ? row.text() : nil
                    facts.logins.append(
                        at: at, limited: limited, declinesFriends: declinesFriends, asid: asid, eventID: eventID,
                        email: email, tfb: tfb, friends: friends, app: app, device: device)
                    // The friends in other partitions were spilled to theirs (`mentions`).
                    guard let friends else { return }
                    facts.mentions.lower(list: friends.assumingMemoryBound(to: UInt8.self), at: at,
                                         eventID: eventID.assumingMemoryBound(to: UInt8.self),
                                         accepts: { [ranges] in ranges.holds(asid: $0, partition: partition) })
                }
            }
            logins[partition] = nil
            try mentions[partition]?.forEach { row in
                let friend = row.text(), at = row.int(), eventID = row.text()
                facts.mentions.lower(friend.assumingMemoryBound(to: UInt8.self), at: at,
                                     eventID: eventID.assumingMemoryBound(to: UInt8.self))
            }
            mentions[partition] = nil
        }
    }

    /// Calls `device` for every event in `seqs` and `login` for every login, in log order.
    static func scan(
        _ db: Database, seqs: ClosedRange<Int64>,
        device: (DeviceRow) throws -> Void, login: (LoginRow) throws -> Void
    ) throws {
        try BulkStatement(db, """
            SELECT \(LoggedEvent.selectColumns) FROM events WHERE seq BETWEEN \(seqs.lowerBound) AND \(seqs.upperBound)
            """).each { row in
            let event = LoggedEvent(row)
            try device(DeviceRow(app: event.appID, device: event.deviceID, fact: event.deviceFact))
            guard event.type == .login, let asid = event.asid, event.asidKey != nil else { return }
            let limited = event.tracking == .limited
            try login(LoginRow(asid: asid, key: event.key, limited: limited, app: limited ? event.appID : "",
                               device: limited ? event.deviceID : "", email: event.linkEmail, tfb: event.linkTFB,
                               friends: event.friends, declinesFriends: event.declinesFriends))
        }
    }

    /// A partition's ASIDs folded into their rows, in key order (the bytes' order, as SQLite
    /// compares them): the logins are sorted once, by ASID and event key, and each projection
    /// takes its rows from each ASID's logins in event time.
    private static func prepare(
        _ facts: consuming Facts, friends spill: FriendsProjection.BulkSpill?
    ) throws -> PreparedASIDs {
        var logins = facts.logins
        let mentions = facts.mentions
        facts = Facts() // the logins are sorted in place
        var prepared = PreparedASIDs(friends: FriendsProjection.BulkRows())
        mentions.forEachSorted { friend, at, eventID in
            FriendsProjection.Rows.mention(friend, at: at, eventID: eventID, &prepared.friends.mentions)
        }
        try logins.forEachASID { asid, logins in
            IdentitiesProjection.addBulk(asid, logins, to: &prepared.identities)
            AccessProjection.addBulk(asid, logins, to: &prepared.access)
            try FriendsProjection.addBulk(asid, logins, to: &prepared.friends, spill: spill)
        }
        return prepared
    }
}

/// A partition's folded devices' rows (in key order) and the events they were folded from.
typealias FoldedDevices = (devices: DevicesProjection.BulkRows, events: Int)

/// A value taken out once, leaving no reference behind: what takes it (another thread, or
/// a later step) owns it alone and can mutate it in place or release it.
package final class Handoff<T>: @unchecked Sendable {
    private var value: T?

    package init(_ value: T) { self.value = value }

    package func take() -> T {
        defer { value = nil }
        return value!
    }
}

/// A partition's ASID rows, ready to load (`ProjectionBuilder.prepare`). ASIDs belong to
/// exactly one partition; friend edges can come from several, so they are spilled and loaded
/// after the last partition (`FriendsProjection.BulkSpill`).
private struct PreparedASIDs {
    var identities = IdentitiesProjection.BulkRows()
    var access = AccessProjection.BulkRows()
    var friends: FriendsProjection.BulkRows
}

/// Runs `a` on the calling thread (so it may use the caller's database connection) while
/// `b` runs on another thread; returns both results.
package func concurrently<A, B>(_ a: () throws -> A, _ b: @escaping () throws -> B) throws -> (A, B) {
    let other = Background(b)
    let resultA = Result { try a() }
    let resultB = other.result()
    return (try resultA.get(), try resultB.get())
}

/// Work on a thread of its own that asks `isStopped` between its steps: reads ahead for another
/// thread, which stops it when it no longer needs them. A failure only loses that work.
package final class StoppableWork: @unchecked Sendable {
    private let lock = NSLock()
    private var stopped = false
    private var work: Background<Void>?

    package init(_ body: @escaping @Sendable (_ isStopped: () -> Bool) throws -> Void) {
        work = Background { [self] in try body { lock.withLock { stopped } } }
    }

    /// Asks the work to stop and waits for it.
    package func stop() {
        lock.withLock { stopped = true }
        _ = work?.result()
        work = nil
    }
}

/// Work started on a thread of its own; `result()` waits for it.
package final class Background<T>: @unchecked Sendable {
    private var outcome: Result<T, any Error>?
    private let finished = DispatchSemaphore(value: 0)

    package init(_ work: @escaping () throws -> T) {
        let work = UncheckedWork(run: work)
        startThread {
            self.outcome = Result { try work.run() }
            self.finished.signal()
        }
    }

    /// Waits for the work to finish.
    package func result() -> Result<T, any Error> {
        finished.wait()
        defer { finished.signal() } // for the next caller
        return outcome!
    }
}

/// Values produced on another thread and taken in order by the caller: at most one waits
/// while the next is produced, so a producer of large values holds two at a time.
package final class Relay<T>: @unchecked Sendable {
    private var slot: T?
    private var failure: (any Error)?
    private var cancelled = false
    // Both start at 0 (libdispatch traps on freeing a semaphore below its initial value);
    // `init` signals `emptied` once: the slot starts empty.
    private let filled = DispatchSemaphore(value: 0), emptied = DispatchSemaphore(value: 0)

    /// Starts `produce`, which sends each value (a send waits until the previous was taken).
    package init(_ produce: @escaping (_ send: (T) throws -> Void) throws -> Void) {
        let work = UncheckedWork<Void> {
            try produce { value in
                self.emptied.wait()
                guard !self.cancelled else { throw CancellationError() }
                self.slot = value
                self.filled.signal()
            }
        }
        emptied.signal()
        startThread {
            do { try work.run() } catch { self.failure = error }
            // The end is an empty slot, once the last value was taken (a cancelled caller
            // takes none: `cancel` has already let a send go on).
            if !self.cancelled { self.emptied.wait() }
            self.filled.signal()
        }
    }

    /// The next value; nil when the producer has finished (its error, if it failed).
    package func next() throws -> T? {
        filled.wait()
        guard let value = slot else {
            filled.signal() // every later call sees the end too
            if let failure, !(failure is CancellationError) { throw failure }
            return nil
        }
        slot = nil
        emptied.signal()
        return value
    }

    /// Stops the producer at its next send (the caller stopped taking values).
    package func cancel() {
        cancelled = true
        emptied.signal()
    }
}

/// Runs `body` on a new thread, not on GCD's shared pool: a build's helpers wait on each
/// other and on the writer, and the pool, which starts no more threads than cores while its
/// own threads run (the ingest's writer queue, a key filler blocked on a condition), started
/// the scan's second half 0.6-0.7 s late in a 1M `ingest`. The thread inherits the caller's
/// scheduling (`ThreadPriority`), as a consumer's lowered writer needs.
private func startThread(_ body: @escaping @Sendable () -> Void) {
    let thread = Thread(block: body)
    thread.stackSize = 8 << 20
    thread.start()
}

private struct UncheckedWork<T>: @unchecked Sendable {
    let run: () throws -> T
}
