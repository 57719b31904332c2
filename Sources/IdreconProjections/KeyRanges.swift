import CPrefetch
import GRDB
import IdreconDomain
import IdreconLog

/// How a replay too large for one partition splits the log's entities: into ranges of the
/// tables' key order holding about equal shares of events and of entities (`init`).
/// Partitions are loaded one after the other in key order, so each partition's rows go to
/// the end of every table keyed by device or ASID. (Partitions by hash put each one's rows
/// all over tables that grow with the log: at 10M events the load of the last of ten
/// partitions took half again the time of the first.)
struct KeyRanges: Sendable {
    /// The first key of each partition but the first, ascending, as bytes (the scan looks keys
    /// up by the bytes SQLite returns): a device's app and device IDs, an ASID.
    private let devices: DeviceBounds
    private let asids: ByteBounds

    /// Events and entities sampled per partition: enough to keep partitions within a few
    /// percent of each other, few enough to cost milliseconds.
    static let samplesPerPartition = 256

    /// Partitions for a replay whose events weigh `shares` partitions' worth of memory. The
    /// writer has nothing to do until the first partition's logins are gathered and its rows
    /// prepared (on the other core), so the first partition holds a small share (`firstShare`)
    /// and the others the rest, one more partition in all. Paired 1M `ingest`s, a full share
    /// against half of one: the load 2.98–3.21 → 2.82–2.87 s, peak memory 247 → 209–223 MB.
    static func partitions(shares: Int) -> Int { shares > 1 ? shares + 1 : 1 }

    /// The first partition's share: a quarter (half of one before), nine 1M replays paired,
    /// 3.32 → 3.23 s on average.
    static let firstShare = 0.25

    /// The live projections' tables (reader views) whose entities `init` samples, every row of each.
    static let sampledTables = (devices: "devices", asids: "asids")

    /// Ranges for `partitions` partitions of the events in `seqs`. A partition's memory
    /// grows with both its events and its distinct devices and ASIDs, and the two are not
    /// spread alike (active users' ASIDs cluster in key order), so the ranges split the sum
    /// of two samples weighted alike: events at evenly spaced sequence numbers (one seek
    /// each) and entities at even steps through the live projections' tables. When those
    /// are empty the events alone decide. Two snapshots of the log share the reads, each half of
    /// the events' seeks and one of the tables: a log out of the page cache reads a page from
    /// disk for each seek (11,520 at 10M events), and one reader took 3 s to do them all.
    init(_ snapshots: (DatabaseSnapshot, DatabaseSnapshot), seqs: ClosedRange<Int64>, partitions: Int) throws {
        let samples = Int64(partitions * Self.samplesPerPartition)
        let columns = "app_id, device_id, CASE WHEN type = 'login' THEN asid END"
        /// Sampled events' devices and ASIDs (half of them), and every nth row of a live table.
        typealias Half<Key> = (devices: [ByteTextPair], asids: [ByteText], live: [Key])
        func events(_ db: Database, _ indices: Range<Int64>) throws -> ([ByteTextPair], [ByteText]) {
            var devices: [ByteTextPair] = [], asids: [ByteText] = []
            try Self.sampleEvents(db, seqs: seqs, count: samples, indices: indices, columns: columns) { row in
                devices.append(ByteTextPair(row.string(0), row.string(1)))
                if let asid = row.optionalString(2) { asids.append(ByteText(asid)) }
            }
            return (devices, asids)
        }
        let (first, second) = try concurrently({
            try snapshots.0.read { db -> Half<ByteTextPair> in
                let (devices, asids) = try events(db, 0..<samples / 2)
                let table = Self.sampledTables.devices
                let live = try Self.everyNth(db, table, columns: "app_id, device_id", about: samples) {
                    ByteTextPair($0.string(0), $0.string(1))
                }
                return (devices, asids, live)
            }
        }, {
            try snapshots.1.read { db -> Half<ByteText> in
                let (devices, asids) = try events(db, samples / 2..<samples)
                let live = try Self.everyNth(db, Self.sampledTables.asids, columns: "asid", about: samples) {
                    ByteText($0.string(0))
                }
                return (devices, asids, live)
            }
        })
        let deviceBounds = Self.boundaries(Self.weighted(first.devices + second.devices) + Self.weighted(first.live), partitions)
        devices = DeviceBounds(deviceBounds.map { ($0.first.text, $0.second.text) })
        asids = ByteBounds(Self.boundaries(Self.weighted(first.asids + second.asids) + Self.weighted(second.live), partitions)
            .map { $0.text })
    }

    /// Calls `body` with `columns` of the first event at or after each of `count` sequence
    /// numbers spaced evenly over `seqs`: one seek each.
    /// `indices` picks some of them (all by default).
    static func sampleEvents(
        _ db: Database, seqs: ClosedRange<Int64>, count: Int64, indices: Range<Int64>? = nil, columns: String,
        _ body: (BulkStatement.Reader) throws -> Void
    ) throws {
        let span = seqs.upperBound - seqs.lowerBound + 1
        let next = try BulkStatement(db, "SELECT \(columns) FROM events WHERE seq >= ? ORDER BY seq LIMIT 1")
        for i in indices ?? 0..<count {
            let seq = seqs.lowerBound + span / count * i + span % count * i / count
            try next.each({ $0.add(seq) }, row: body)
        }
    }

    /// About `samples` rows at even steps through a reader view, in key order.
    private static func everyNth<Key>(
        _ db: Database, _ view: String, columns: String, about samples: Int64, _ key: (BulkStatement.Reader) -> Key
    ) throws -> [Key] {
        let rows = try Int64.fetchOne(db, sql: "SELECT count(*) FROM \(view)") ?? 0
        let step = max(1, rows / max(1, samples))
        var keys: [Key] = [], n: Int64 = 0
        try BulkStatement(db, "SELECT \(columns) FROM \(view)").each { row in
            if n % step == 0 { keys.append(key(row)) }
            n += 1
        }
        return keys
    }

    /// A sample's keys, each weighing an equal share of 1.
    private static func weighted<Key>(_ keys: [Key]) -> [(Key, Double)] {
        keys.map { ($0, 1 / Double(keys.count)) }
    }

    /// The keys where the running weight of a sample, in key order, crosses the end of each
    /// partition's share of its total (`partitions(shares:)`: the first `firstShare`).
    private static func boundaries<Key: Comparable>(_ sample: [(Key, Double)], _ partitions: Int) -> [Key] {
        let sorted = sample.sorted { $0.0 < $1.0 }
        let total = sorted.reduce(0) { $0 + $1.1 }
        let shares = Double(partitions) - 1 + Self.firstShare
        var result: [Key] = [], running = 0.0
        for (key, weight) in sorted where result.count < partitions - 1 {
            running += weight
            if running >= total * (Double(result.count) + Self.firstShare) / shares { result.append(key) }
        }
        return result
    }

    /// The partition of a device, by the bytes of its IDs.
    func partition(app: UnsafeBufferPointer<UInt8>, device: UnsafeBufferPointer<UInt8>) -> Int {
        devices.rank(app: ByteBounds.Probe(app), device: ByteBounds.Probe(device))
    }

    /// The partition of an ASID, by its bytes.
    func partition(asid: UnsafeBufferPointer<UInt8>) -> Int { asids.rank(of: ByteBounds.Probe(asid)) }

    /// Whether an ASID, by its bytes, is in `partition`: two comparisons with the partition's
    /// bounds, not a search (a partition's logins name friends of every partition).
    func holds(asid: UnsafeBufferPointer<UInt8>, partition: Int) -> Bool {
        asids.holds(ByteBounds.Probe(asid), rank: partition)
    }

    /// The partition of an ASID.
    func partition(asid: String) -> Int {
        var asid = asid
        return asid.withUTF8 { partition(asid: $0) }
    }
}

/// The first device of each partition but the first, ascending: the distinct apps among them,
/// and the devices of each app's bounds, consecutive. A device's partition is its app's rank
/// among the apps when no bound has its app (a search of a few), and otherwise its rank among
/// that app's devices.
struct DeviceBounds: Sendable {
    private let apps: ByteBounds, devices: ByteBounds
    /// Where each of `apps`' bounds start in `devices`, and their end.
    private let starts: [Int]

    /// `bounds` in ascending order (app, then device).
    init(_ bounds: [(app: String, device: String)]) {
        var apps: [String] = [], starts: [Int] = []
        for (i, bound) in bounds.enumerated() where apps.last.map({ !$0.utf8.elementsEqual(bound.app.utf8) }) ?? true {
            apps.append(bound.app)
            starts.append(i)
        }
        starts.append(bounds.count)
        (self.apps, self.devices, self.starts) = (ByteBounds(apps), ByteBounds(bounds.map(\.device)), starts)
    }

    /// How many bounds are at or below the device (the index of its partition).
    func rank(app: ByteBounds.Probe, device: ByteBounds.Probe) -> Int {
        let appRank = apps.rank(of: app)
        guard appRank > 0, apps.compare(appRank - 1, app) == 0 else { return starts[appRank] }
        return devices.rank(of: device, in: starts[appRank - 1]..<starts[appRank])
    }
}

/// Sorted texts laid out in one buffer for lookups by their bytes: the scan looks up each event's
/// device and ASID and every friend its list names, over 30M lookups at 10M events. Each text's
/// first 16 bytes, big-endian and zero-padded, decide most comparisons without reading the
/// buffer (generated ASIDs share their first 8), and a search compares only those, without a
/// branch per step (`rank(of:in:)`): a binary search's branches went either way at random, and
/// the lookups were a seventh of the 10M scan's samples. Arrays of arrays cost a reference count
/// and a pointer per probe, and the scan's time per event grew with the partitions (1M events in
/// 45 partitions: 0.80 s against 0.55 s in 5).
struct ByteBounds: Sendable {
    private let bytes: [UInt8]
    private let entries: [(start: Int, count: Int, prefix: Prefix)]
    /// Each entry's prefix, high word first, for the searches (`idrecon_count_below`).
    private let keys: [UInt64]

    /// A text's first 16 bytes, zero-padded, as two big-endian integers: compared as numbers,
    /// they order as the bytes do.
    typealias Prefix = (high: UInt64, low: UInt64)

    init(_ texts: [String]) {
        var bytes: [UInt8] = [], entries: [(start: Int, count: Int, prefix: Prefix)] = []
        for text in texts {
            let start = bytes.count
            bytes += text.utf8
            let prefix = bytes[start...].withUnsafeBufferPointer { Probe($0).prefix }
            entries.append((start, bytes.count - start, prefix))
        }
        (self.bytes, self.entries) = (bytes, entries)
        keys = entries.flatMap { [$0.prefix.high, $0.prefix.low] }
    }

    /// A text being looked up, with its prefix computed once.
    struct Probe {
        let text: UnsafeBufferPointer<UInt8>
        let prefix: Prefix

        init(_ text: UnsafeBufferPointer<UInt8>) {
            self.text = text
            prefix = ProjectionBuilder.DeviceEvents.prefix16(text, 0, UInt32(clamping: text.count))
        }
    }

    /// The order of bound `index` against `probe`, as SQLite's BINARY collation orders text:
    /// negative, zero or positive as the bound precedes, equals or follows it. Prefixes that
    /// differ decide (padding is zero, so a text that ends first precedes one it is a prefix
    /// of); equal ones and texts of at most 16 bytes, the lengths; longer texts, their bytes.
    func compare(_ index: Int, _ probe: Probe) -> Int {
        let entry = entries[index]
        return Self.order(entry.prefix, entry.count, probe.prefix, probe.text.count) {
            bytes.withUnsafeBufferPointer { all in
                let bound = UnsafeBufferPointer(rebasing: all[entry.start..<entry.start + entry.count])
                return String.byteOrder(bound, probe.text)
            }
        }
    }

    /// The order of two texts of `xLength` and `yLength` bytes with prefixes `x` and `y`: `compare`'s
    /// rule; `bytes` orders the texts themselves when their prefixes cannot.
    static func order(_ x: Prefix, _ xLength: Int, _ y: Prefix, _ yLength: Int, bytes: () -> Int) -> Int {
        if x != y { return x < y ? -1 : 1 }
        if xLength <= 16, yLength <= 16 { return xLength < yLength ? -1 : xLength == yLength ? 0 : 1 }
        return bytes()
    }

    /// Whether `rank(of: probe)` is `rank`: the bound before it is at or below the probe and
    /// the bound at it above.
    func holds(_ probe: Probe, rank: Int) -> Bool {
        (rank == 0 || compare(rank - 1, probe) <= 0) && (rank == entries.count || compare(rank, probe) > 0)
    }

    /// How many of the bounds in `range` (all by default) are at or below `probe`, plus the
    /// bounds before the range: the index of the probe's partition. The bounds whose prefix
    /// precedes the probe's are counted by a search that compares prefixes only and picks the
    /// next half without a branch; the bounds that share its prefix follow them and are
    /// compared whole.
    func rank(of probe: Probe, in range: Range<Int>? = nil) -> Int {
        let range = range ?? 0..<entries.count
        guard !range.isEmpty else { return range.lowerBound }
        let prefix = probe.prefix
        var rank = range.lowerBound + keys.withUnsafeBufferPointer { keys in
            idrecon_count_below(keys.baseAddress! + 2 * range.lowerBound, range.count, prefix.high, prefix.low)
        }
        while rank < range.upperBound, entries[rank].prefix == prefix, compare(rank, probe) <= 0 { rank += 1 }
        return rank
    }
}
