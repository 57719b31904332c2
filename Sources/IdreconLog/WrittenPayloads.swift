import GRDB

/// The leaves of `event_payloads` that this process's appends wrote, dropped from the kernel's
/// page cache once they are `kept` events behind the log's end and a checkpoint has written
/// them into the database file (and synced it: they are clean, and go at once).
///
/// Why: a payload is written once and read again only by an export of the events, an erasure,
/// or the comparison of a re-delivered event with the one logged, yet its pages, half of the
/// database, filled the page cache, and each new page of the file then took memory back from
/// something else. On this VM that costs more the longer the memory taken back was left idle
/// (its host pages idle guest memory out: 3 GB written over page cache idle for two minutes took
/// 3.4–4.4 s of system time, over page cache idle for seconds 1.5–1.9 s), so the millions of a
/// 10M `ingest` took 1.0–1.3 µs of system time per record until the free memory ran out and
/// 2.2–2.6 µs after; with the payloads dropped, 1.0–1.5 µs throughout (`schemas/performance.md`, "User
/// and system time per million"). The pages dropped are the next ones reused.
package struct WrittenPayloads {
    /// Events whose payloads stay: a re-delivered event's payload is read to compare it with the
    /// logged one, and re-deliveries are nearly always of recent events.
    package static let standardKept: Int64 = 1 << 18

    private let pages: BTreePages
    private let kept: Int64
    /// The lowest `seq` whose leaf may not have been dropped yet.
    private var next: Int64

    /// From the end of the log as `db` sees it: the pages of earlier payloads are left as they are.
    package init?(_ db: Database, path: String, kept: Int64 = standardKept) throws {
        guard let pages = try BTreePages(db, path: path, bTree: "event_payloads") else { return nil }
        (self.pages, self.kept) = (pages, max(0, kept))
        next = try Int64.fetchOne(db, sql: "SELECT coalesce(max(seq), 0) + 1 FROM event_payloads") ?? 1
    }

    /// Drops the runs of leaves the database file holds from `next` on whose events are all `kept`
    /// behind the lowest of the newest run's; returns them. Run after a checkpoint.
    @discardableResult
    package mutating func dropCheckpointed() -> [Range<UInt32>] {
        var runs: [(lowestKey: Int64, pages: Range<UInt32>)] = []
        pages.forEachLeafRun(keys: next...Int64.max) { lowestKey, pages in
            runs.append((lowestKey, pages))
            return true
        }
        guard let newest = runs.last?.lowestKey else { return [] }
        var dropped: [Range<UInt32>] = []
        // A run holds the keys below the next run's lowest.
        for index in runs.indices.dropLast() where runs[index + 1].lowestKey <= newest - kept {
            guard pages.dontNeed(runs[index].pages) else { break }
            dropped.append(runs[index].pages)
            next = runs[index + 1].lowestKey
        }
        return dropped
    }
}
