import IdreconDomain
@testable import IdreconProjections
import Testing

/// Replay orders a partition's events by grouping them in a hash table and sorting the groups
/// (`GroupedOrder`): the order must be a full sort's, whatever the hashes collide on, the
/// groups' sizes (both sides of the insertion sort's limit) and the texts' bytes.
@Suite struct GroupedOrderTests {
    private struct Items: GroupedItems {
        let groups: [Int], values: [Int]
        var count: Int { groups.count }
        // Three hashes for every group: each probe walks past other groups' slots.
        func hash(_ item: Int) -> UInt64 { UInt64(groups[item] % 3) }
        func sameGroup(_ a: Int, _ b: Int) -> Bool { groups[a] == groups[b] }
        func groupPrecedes(_ a: Int, _ b: Int) -> Bool { groups[a] < groups[b] }
        func precedesInGroup(_ a: Int, _ b: Int) -> Bool { values[a] < values[b] }
    }

    @Test func equalsAFullSort() {
        var rng = SeededGenerator(seed: 3)
        for count in [0, 1, 2, 25, 1_000, 5_000] {
            let groupCount = max(1, count / Int.random(in: 1...60, using: &rng))
            let groups = (0..<count).map { _ in Int.random(in: 0..<groupCount, using: &rng) }
            // Unique values, nearly ascending as the log's times are, with some far out of place.
            let values = (0..<count).map { i in (Int.random(in: 0..<10, using: &rng) == 0 ? -i : i) * count + i }
            let order = GroupedOrder.of(Items(groups: groups, values: values)).map { Int($0) }
            let expected = (0..<count).sorted { a, b in (groups[a], values[a]) < (groups[b], values[b]) }
            #expect(order == expected, "\(count) items")
            var permuted = Array(0..<count)
            GroupedOrder.apply(order.map { Int32($0) }, to: &permuted)
            #expect(permuted == expected)
        }
    }

    @Test func sortsDevicesByTheirBytesThenEventKey() {
        let apps = ["", "1", "1001", "12345678", "123456789", "1234567890abcdefX", "\u{e9}", "e\u{301}"]
        let devices = ByteBoundsTests.texts
        var rng = SeededGenerator(seed: 5)
        var events = ProjectionBuilder.DeviceEvents()
        var expected: [(app: [UInt8], device: [UInt8], key: EventKey)] = []
        for i in 0..<3_000 {
            let app = apps[Int.random(in: 0..<apps.count, using: &rng)]
            // One device with far more events than the others.
            let device = i % 4 == 0 ? "hot" : devices[Int.random(in: 0..<devices.count, using: &rng)]
            let key = EventKey(at: Int64.random(in: 0..<50, using: &rng), eventID: "ev-\(i % 97)-\(i)")
            events.append(ProjectionBuilder.DeviceRow(
                app: app, device: device, fact: DeviceFact(key: key, type: .login, tracking: .enabled, asid: nil)))
            expected.append((Array(app.utf8), Array(device.utf8), key))
        }
        events.sort()
        expected.sort { a, b in
            if a.app != b.app { return a.app.lexicographicallyPrecedes(b.app) }
            if a.device != b.device { return a.device.lexicographicallyPrecedes(b.device) }
            return a.key < b.key
        }
        let sorted = events.bytes.withUnsafeBufferPointer { base in
            events.entries.map { entry in
                (Array(ProjectionBuilder.DeviceEvents.app(entry, base).utf8),
                 Array(ProjectionBuilder.DeviceEvents.device(entry, base).utf8),
                 ProjectionBuilder.DeviceEvents.fact(entry, base).key)
            }
        }
        #expect(sorted.map(\.0) == expected.map(\.app))
        #expect(sorted.map(\.1) == expected.map(\.device))
        #expect(sorted.map(\.2) == expected.map(\.key))
    }
}
