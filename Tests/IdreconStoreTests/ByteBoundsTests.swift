@testable import IdreconProjections
import Testing

/// The replay's partitions are found by comparing keys' 16-byte prefixes first: the ranks must
/// be those of SQLite's byte order (`BINARY`) for keys the generated streams never have: shared
/// prefixes, lengths on both sides of 8 and 16 bytes, zero bytes, two spellings of one text.
@Suite struct ByteBoundsTests {
    static let texts = [
        "", "\u{0}", "a", "a\u{0}", "a\u{0}\u{0}", "ab", "10000000", "100000000", "1000000000000001",
        "10000000000000010", "1000000000000001\u{0}", "10000000000000011", "100000000000000100000",
        "0123456789abcdef", "0123456789abcdeg", "0123456789abcdef\u{e9}", "\u{e9}", "e\u{301}", "\u{ff}\u{ff}",
        "dev-3ddc4bb3fb", "dev-3ddc4bb3fc", "dev-3ddc4bb3fb0", "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
    ]

    /// SQLite's BINARY order of two texts' bytes.
    static func order(_ a: String, _ b: String) -> Int {
        let (x, y) = (Array(a.utf8), Array(b.utf8))
        return x.lexicographicallyPrecedes(y) ? -1 : x == y ? 0 : 1
    }

    @Test func ranksWithAnyNumberOfBounds() {
        let sorted = Self.texts.sorted { Self.order($0, $1) < 0 }
        for count in 0...sorted.count {
            let bounds = Array(sorted.prefix(count).enumerated().filter { $0.offset % 2 == 0 || count < 4 }.map(\.element))
            let table = ByteBounds(bounds)
            for text in Self.texts {
                var key = text
                key.withUTF8 { bytes in
                    let expected = bounds.filter { Self.order($0, text) <= 0 }.count
                    let probe = ByteBounds.Probe(bytes)
                    #expect(table.rank { table.compare($0, probe) } == expected, "\(count) bounds, rank of \(text)")
                }
            }
        }
    }

    @Test func comparesAndRanksAsTheBytesOrder() {
        let bounds = Self.texts.sorted { Self.order($0, $1) < 0 }
        let table = ByteBounds(bounds)
        for text in Self.texts + ["0", "\u{0}\u{0}", "1000000000000000", "dev-", "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"] {
            var key = text
            key.withUTF8 { bytes in
                let probe = ByteBounds.Probe(bytes)
                for (index, bound) in bounds.enumerated() {
                    #expect(table.compare(index, probe).signum() == Self.order(bound, text), "\(bound) against \(text)")
                }
                let rank = table.rank { table.compare($0, probe) }
                #expect(rank == bounds.filter { Self.order($0, text) <= 0 }.count, "rank of \(text)")
            }
        }
    }
}
