#if canImport(Glibc)
import Glibc
#endif
import CPrefetch

/// One Bloom filter of the keys of many sealed runs of a table (`KeyRuns`): a key it does not hold
/// is in none of the runs it covers, so a lookup checks the filters of the other runs only. A key
/// checked against every run's filter cost a miss per run (ten or so at 10M events), and the writer's
/// CPU per record grew through a 10M `ingest` (3.8 -> 4.6 us from its second million to its last); with
/// this filter in huge pages it stayed flat (schemas/performance.md, "One filter for all runs").
///
/// It lives in the writer's memory only and is never stored: a writer that starts covers the runs one
/// a transaction from their chunks (`KeyRuns.coverOne`), checking the others by their own filters
/// meanwhile. Its words are an anonymous mapping advised `MADV_HUGEPAGE`, so that its megabytes take a
/// few TLB entries, not one per 4 KiB page. It is made for twice the sealed keys, and made again so,
/// from every run's chunks at once, when it is full (`KeyRuns.grow`), up to a size that bounds its memory
/// whatever the log's length (`KeyRuns.Shape.coveringBits`); runs that do not fit in it then are checked
/// by their own filters, as before it.
final class CoveringFilter: @unchecked Sendable {
    /// A run by its identity: a run's keys never change while its generation does not.
    struct Run: Hashable {
        let id: Int64
        let generation: Int64
    }

    private let words: UnsafeMutablePointer<UInt64>
    private let wordCount: Int
    private let mappedBytes: Int
    /// Keys inserted (an upper bound of the distinct ones), and the runs whose keys are all in.
    private(set) var keys = 0
    private(set) var covered: Set<Run> = []

    /// Keys it takes before its false "maybe"s rise past the per-run filters'.
    var capacity: Int { wordCount * 64 / BloomFilter.bitsPerKey }

    /// Whether it is as large as it may be made (`KeyRuns.Shape.coveringBits`).
    let isLargest: Bool

    /// An empty filter for `keys` keys (a power of two of at least `BloomFilter.bitsPerKey` bits each),
    /// of at most `maximumBits` (a power of two of 512 or more); nil when the memory cannot be mapped
    /// (the runs are then checked by their own filters).
    init?(keys: Int, maximumBits: Int) {
        var bits = 512 // one block: the small runs of tests fill it and make it again (`KeyRuns.grow`)
        let (product, _) = keys.multipliedReportingOverflow(by: BloomFilter.bitsPerKey)
        let wanted = min(maximumBits, BloomFilter.maximumBits, product)
        while bits < wanted { bits *= 2 }
        isLargest = bits >= min(maximumBits, BloomFilter.maximumBits)
        let bytes = bits / 8
        guard let raw = mmap(nil, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
              raw != MAP_FAILED else { return nil }
        _ = madvise(raw, bytes, 14) // MADV_HUGEPAGE; a kernel without it maps 4 KiB pages
        (mappedBytes, wordCount) = (bytes, bytes / 8)
        words = raw.bindMemory(to: UInt64.self, capacity: wordCount)
    }

    deinit { munmap(UnsafeMutableRawPointer(words), mappedBytes) }

    func covers(_ id: Int64, _ generation: Int64) -> Bool { covered.contains(Run(id: id, generation: generation)) }

    /// Inserts `hashes`, the keys of the run `id`, `generation`, which it then covers.
    func cover<Hashes: Sequence<Int64>>(_ id: Int64, _ generation: Int64, keys hashes: Hashes) {
        for hash in hashes { insert(hash) }
        covered.insert(Run(id: id, generation: generation))
    }

    /// Inserts one key; `cover` then names the run whose keys are all in.
    func insert(_ hash: Int64) {
        BloomFilter.set(BloomFilter.probe(mixed: BloomFilter.mix(hash), words: wordCount), in: words)
        keys += 1
    }

    /// Marks the run `id`, `generation` covered without inserting: a merge of covered runs.
    func coverMerged(_ id: Int64, _ generation: Int64) { covered.insert(Run(id: id, generation: generation)) }

    /// Forgets the runs not in `runs` (merged away, or another writer's history).
    func keepOnly(_ runs: Set<Run>) { covered.formIntersection(runs) }

    func prefetch(mixed: UInt64) {
        idrecon_prefetch(words + BloomFilter.probe(mixed: mixed, words: wordCount).block)
    }

    func mayContain(mixed: UInt64) -> Bool {
        BloomFilter.test(BloomFilter.probe(mixed: mixed, words: wordCount), in: words)
    }
}
