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
                    #expect(table.rank(of: probe) == expected, "\(count) bounds, rank of \(text)")
                    for rank in 0...bounds.count {
                        #expect(table.holds(probe, rank: rank) == (rank == expected), "\(count) bounds: \(text) in \(rank)")
                    }
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
                let rank = table.rank(of: probe)
                #expect(rank == bounds.filter { Self.order($0, text) <= 0 }.count, "rank of \(text)")
            }
        }
    }

    /// Devices are ranked by app and then device ID: bounds of one app and of several, with
    /// repeated bounds, against apps and devices that are and are not among them.
    @Test func ranksDevicesByAppThenDevice() {
        let apps = ["", "1001", "1002", "10020", "1234567890abcdefX", "1234567890abcdefY", "\u{e9}"]
        let pairs = apps.flatMap { app in Self.texts.map { (app, $0) } }
        func order(_ a: (String, String), _ b: (String, String)) -> Int {
            let app = Self.order(a.0, b.0)
            return app != 0 ? app : Self.order(a.1, b.1)
        }
        let sorted = pairs.sorted { order($0, $1) < 0 }
        for step in [1, 2, 3, 7, 40, 1_000] {
            let picked = sorted.enumerated().filter { $0.offset % step == step / 2 }.map(\.element)
            let bounds = step == 7 ? picked.flatMap { [$0, $0] } : picked
            let table = DeviceBounds(bounds.map { (app: $0.0, device: $0.1) })
            for pair in pairs + [("1001", "dev-"), ("0", "a"), ("zz", "")] {
                var (app, device) = pair
                app.withUTF8 { app in
                    device.withUTF8 { device in
                        let rank = table.rank(app: ByteBounds.Probe(app), device: ByteBounds.Probe(device))
                        #expect(rank == bounds.filter { order($0, pair) <= 0 }.count, "\(step): rank of \(pair)")
                    }
                }
            }
        }
    }
}
