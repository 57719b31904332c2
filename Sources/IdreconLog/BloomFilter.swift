import CPrefetch

/// A Bloom filter of 64-bit key hashes: "certainly absent" or "maybe present". `KeyRuns`
/// keeps one per sealed run so that a new key, nearly every key an append sees, is known free
/// without a search of the run.
struct BloomFilter: Sendable, Equatable {
    /// Bits per key a filter is sized for, and the probes per key: a false "maybe" for about
    /// 1 % of absent keys (10 bits, 7 probes).
    static let bitsPerKey = 10
    static let probes = 7
    /// The largest filter, in bits (128 MiB, 100M keys at `bitsPerKey`): past it the false
    /// "maybe"s rise instead of the memory.
    static let maximumBits = 1 << 30

    private var words: [UInt64]
    var bitCount: Int { words.count * 64 }

    /// An empty filter for `keys` keys: a power of two of at least `bitsPerKey` bits per key.
    init(keys: Int) {
        var bits = 512
        while bits < min(Self.maximumBits, keys.multipliedReportingOverflow(by: Self.bitsPerKey).partialValue) {
            bits *= 2
        }
        words = Array(repeating: 0, count: bits / 64)
    }

    /// A filter from `bytes` as `bytes` wrote them; nil when they are not one.
    init?(bytes: [UInt8]) {
        guard bytes.count >= 64, (bytes.count & (bytes.count - 1)) == 0 else { return nil }
        words = bytes.withUnsafeBytes { raw in
            (0..<(bytes.count / 8)).map { UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: $0 * 8, as: UInt64.self)) }
        }
    }

    var bytes: [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(words.count * 8)
        for word in words { withUnsafeBytes(of: word.littleEndian) { bytes.append(contentsOf: $0) } }
        return bytes
    }

    /// A blocked filter: a key's probes all fall in one 512-bit block (a cache line), chosen by
    /// the mixed hash's high bits, at positions its low bits give, so that a check or an insert
    /// costs one cache miss instead of `probes` (the filters of a 10M log are megabytes).
    /// The keys' FNV-1a hashes are weak in their low bits: both halves come from a mix.
    private func probe(_ hash: Int64) -> (block: Int, positions: UInt64) { probe(mixed: Self.mix(hash)) }

    /// A key's hash mixed, as every filter probes it: mixed once for all of a table's filters.
    static func mix(_ hash: Int64) -> UInt64 {
        var h = UInt64(bitPattern: hash)
        h ^= h >> 33
        h &*= 0xFF51_AFD7_ED55_8CCD
        h ^= h >> 33
        h &*= 0xC4CE_B9FE_1A85_EC53
        h ^= h >> 33
        return h
    }

    private func probe(mixed h: UInt64) -> (block: Int, positions: UInt64) { Self.probe(mixed: h, words: words.count) }

    /// The first word of a `mix`ed hash's block in a filter of `words` words, and its positions in it
    /// (9 bits each from the low end): the layout of every filter of keys (`CoveringFilter` too).
    static func probe(mixed h: UInt64, words: Int) -> (block: Int, positions: UInt64) {
        let blocks = UInt64(words / 8)
        let block = Int(truncatingIfNeeded: ((h >> 32) &* blocks) >> 32) // (h's high half) × blocks / 2^32
        return (block * 8, h &* 0x9E37_79B9_7F4A_7C15)
    }

    mutating func insert(_ hash: Int64) {
        let probe = probe(hash)
        words.withUnsafeMutableBufferPointer { Self.set(probe, in: $0.baseAddress!) }
    }

    /// Sets a probe's bits in the words at `words`.
    static func set(_ probe: (block: Int, positions: UInt64), in words: UnsafeMutablePointer<UInt64>) {
        var positions = probe.positions
        for _ in 0..<Self.probes {
            let bit = Int(truncatingIfNeeded: positions & 511)
            words[probe.block + (bit >> 6)] |= 1 << UInt64(bit & 63)
            positions >>= 9
        }
    }

    /// Whether all of a probe's bits are set in the words at `words`.
    static func test(_ probe: (block: Int, positions: UInt64), in words: UnsafePointer<UInt64>) -> Bool {
        var positions = probe.positions
        for _ in 0..<Self.probes {
            let bit = Int(truncatingIfNeeded: positions & 511)
            if words[probe.block + (bit >> 6)] & (1 << UInt64(bit & 63)) == 0 { return false }
            positions >>= 9
        }
        return true
    }

    func mayContain(_ hash: Int64) -> Bool { mayContain(mixed: Self.mix(hash)) }

    /// Asks the memory for the block a `mix`ed hash falls in, for a `mayContain` soon after: a
    /// key is checked against every run's filter, each block a miss of its own (the filters of
    /// a 10M log are tens of megabytes), and asked for together they are waited for once.
    func prefetch(mixed: UInt64) {
        let base = probe(mixed: mixed).block
        words.withUnsafeBufferPointer { idrecon_prefetch($0.baseAddress! + base) }
    }

    func mayContain(mixed: UInt64) -> Bool {
        let probe = probe(mixed: mixed)
        return words.withUnsafeBufferPointer { Self.test(probe, in: $0.baseAddress!) }
    }
}
