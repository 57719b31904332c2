/// Items to put in order by a group key (a device, an ASID) and then within each group: what the
/// bulk builds' sorts of a partition's events take (`GroupedOrder`).
protocol GroupedItems {
    var count: Int { get }
    /// Equal for two items of one group.
    func hash(_ item: Int) -> UInt64
    func sameGroup(_ a: Int, _ b: Int) -> Bool
    /// Whether `a`'s group precedes `b`'s (items of two groups).
    func groupPrecedes(_ a: Int, _ b: Int) -> Bool
    /// Whether `a` precedes `b` (items of one group).
    func precedesInGroup(_ a: Int, _ b: Int) -> Bool
}

/// The order of a partition's events by group and then within their group, without a
/// comparison sort of all of them: each event is found its group in a hash table, the groups
/// (a sixth as many as the events in a generated log: ~6 events per device, ~8 logins per ASID)
/// are sorted, the events are laid out group after group in the order they came, and each
/// group is sorted (by insertion: the log's order is nearly event time). Sorting all the events
/// as 64-byte entries was a sixth of the 10M load's samples, on the threads that share the
/// second core with the writer.
enum GroupedOrder {
    /// Groups larger than this are sorted by the standard library (insertion sort is quadratic).
    static let insertionLimit = 24

    /// The items' indices in order: `result[k]` is the item at position `k`.
    static func of<Items: GroupedItems>(_ items: Items) -> [Int32] {
        let count = items.count
        guard count > 1 else { return count == 1 ? [0] : [] }
        precondition(count < Int(Int32.max), "too many items for 32-bit indices")
        // Group of each item; each group's first item and size (in order of first appearance).
        var groupOf = [Int32](repeating: 0, count: count)
        var first: [Int32] = [], size: [Int32] = []
        var slotCount = 64
        while slotCount < count * 2 { slotCount <<= 1 }
        var slots = [Int32](repeating: -1, count: slotCount)
        let mask = slotCount - 1
        slots.withUnsafeMutableBufferPointer { slots in
            for item in 0..<count {
                var slot = Int(truncatingIfNeeded: mix(items.hash(item))) & mask
                while true {
                    let group = slots[slot]
                    if group < 0 {
                        slots[slot] = Int32(first.count)
                        groupOf[item] = Int32(first.count)
                        first.append(Int32(item))
                        size.append(1)
                        break
                    }
                    if items.sameGroup(Int(first[Int(group)]), item) {
                        groupOf[item] = group
                        size[Int(group)] += 1
                        break
                    }
                    slot = (slot + 1) & mask
                }
            }
        }
        var groups = Array(Int32(0)..<Int32(first.count))
        groups.sort { a, b in items.groupPrecedes(Int(first[Int(a)]), Int(first[Int(b)])) }
        // Where each group starts; then each item's position, in the order the items came.
        var start = [Int32](repeating: 0, count: first.count)
        var position: Int32 = 0
        for group in groups {
            start[Int(group)] = position
            position += size[Int(group)]
        }
        var order = [Int32](repeating: 0, count: count)
        for item in 0..<count {
            let group = Int(groupOf[item])
            order[Int(start[group])] = Int32(item)
            start[group] += 1
        }
        order.withUnsafeMutableBufferPointer { order in
            var low = 0
            for group in groups {
                let high = low + Int(size[Int(group)])
                if high - low > insertionLimit {
                    order[low..<high].sort { a, b in items.precedesInGroup(Int(a), Int(b)) }
                } else {
                    for i in (low + 1)..<high {
                        let item = order[i]
                        var j = i
                        while j > low, items.precedesInGroup(Int(item), Int(order[j - 1])) {
                            order[j] = order[j - 1]
                            j -= 1
                        }
                        order[j] = item
                    }
                }
                low = high
            }
        }
        return order
    }

    /// Puts `elements` in `order` (`of`'s) in place, following the permutation's cycles.
    static func apply<Element>(_ order: consuming [Int32], to elements: inout [Element]) {
        precondition(order.count == elements.count, "an order of another count of elements")
        order.withUnsafeMutableBufferPointer { order in
            elements.withUnsafeMutableBufferPointer { elements in
                for cycle in 0..<order.count where order[cycle] >= 0 {
                    let kept = elements[cycle]
                    var position = cycle
                    while true {
                        let from = Int(order[position])
                        order[position] = -1
                        if from == cycle {
                            elements[position] = kept
                            break
                        }
                        elements[position] = elements[from]
                        position = from
                    }
                }
            }
        }
    }

    /// A hash of a text from its first bytes as packed entries hold them (`DeviceEvents.prefix`:
    /// `prefix`, and `next` for 16) and its length, and from all its bytes when it is longer than
    /// those `covered` (texts that share their first bytes do not all collide).
    static func hash(
        prefix: UInt64, next: UInt64 = 0, length: UInt32, covered: UInt32 = 16, bytes: UnsafeRawPointer?
    ) -> UInt64 {
        let hash = prefix ^ next &* 0x9E37_79B9_7F4A_7C15 ^ UInt64(length)
        guard length > covered, let bytes else { return hash }
        return hash ^ Self.hash(bytes, Int(length))
    }

    /// A hash of `length` bytes at `start`, eight at a time (texts longer than the entries'
    /// prefixes: UUIDs).
    private static func hash(_ start: UnsafeRawPointer, _ length: Int) -> UInt64 {
        var hash = UInt64(truncatingIfNeeded: length) &* 0x9E37_79B9_7F4A_7C15
        var offset = 0
        while offset + 8 <= length {
            hash = (hash ^ start.loadUnaligned(fromByteOffset: offset, as: UInt64.self)) &* 0xFF51_AFD7_ED55_8CCD
            hash ^= hash >> 29
            offset += 8
        }
        while offset < length {
            hash = (hash ^ UInt64(start.load(fromByteOffset: offset, as: UInt8.self))) &* 0x0000_0100_0000_01B3
            offset += 1
        }
        return hash
    }

    /// MurmurHash3's finalizer: every bit of the hash reaches the low bits, which pick the slot.
    static func mix(_ value: UInt64) -> UInt64 {
        var hash = (value ^ value >> 33) &* 0xFF51_AFD7_ED55_8CCD
        hash = (hash ^ hash >> 33) &* 0xC4CE_B9FE_1A85_EC53
        return hash ^ hash >> 33
    }
}
