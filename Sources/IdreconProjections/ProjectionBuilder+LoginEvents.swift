import IdreconDomain

extension ProjectionBuilder {
    /// A partition's logins, packed as `DeviceEvents` packs device events: one fixed-size entry
    /// per login that holds no reference, and the texts back to back in one byte buffer. Sorted
    /// by ASID (bytes) and then event key, each ASID's logins are consecutive and in event time,
    /// so every projection takes its rows from one pass in key order, and a text becomes a
    /// `String` only where a row keeps it. (Aggregated login by login into a dictionary of ASIDs,
    /// each login's texts made `String`s, the partition's logins took as long to gather as the
    /// writer took to load their rows.)
    package struct LoginEvents {
        struct Entry {
            var at: Int64
            /// Where the entry's texts start in `bytes`: ASID, event ID, email key, TFB key, friend
            /// list, app ID and device ID (the last two of limited logins only).
            var offset: Int
            /// The ASID's first 16 bytes as two big-endian integers (`DeviceEvents.prefix`): the
            /// sort reads the bytes only on a tie (ASIDs of 15 digits share their first 8).
            var asidPrefix: UInt64, asidNext: UInt64
            var asidLength: UInt32, eventIDLength: UInt32, emailLength: UInt32, tfbLength: UInt32
            var friendsLength: UInt32, appLength: UInt32, deviceLength: UInt32
            /// Which optional texts are present, and the login's kind (`Flag`).
            var flags: UInt8
        }

        enum Flag {
            static let email: UInt8 = 1, tfb: UInt8 = 2, friends: UInt8 = 4
            static let declinesFriends: UInt8 = 8, limited: UInt8 = 16
        }

        private(set) var entries: [Entry] = []
        private(set) var bytes: [UInt8] = []

        init() {}

        var count: Int { entries.count }

        /// Room for what `file` holds (`SpilledFacts`' login records).
        mutating func reserveCapacity(for file: SpillFile) {
            entries.reserveCapacity(entries.count + file.records)
            bytes.reserveCapacity(bytes.count + max(0, file.bytes - file.records * Self.spilledOverhead))
        }

        /// A login record's bytes besides its texts, at the least: its length, time, the ASID's
        /// and event ID's lengths, three presence bytes and two flags (each optional text adds
        /// a length; reserving less than the texts need would double the buffer).
        private static let spilledOverhead = 4 + 8 + 2 * 4 + 3 + 2

        /// Appends one login; `app` and `device` are kept for limited logins only.
        mutating func append(
            at: Int64, limited: Bool, declinesFriends: Bool, asid: UnsafeRawBufferPointer,
            eventID: UnsafeRawBufferPointer, email: UnsafeRawBufferPointer?, tfb: UnsafeRawBufferPointer?,
            friends: UnsafeRawBufferPointer?, app: UnsafeRawBufferPointer?, device: UnsafeRawBufferPointer?
        ) {
            let offset = bytes.count
            func add(_ text: UnsafeRawBufferPointer?) -> UInt32 {
                guard let text else { return 0 }
                bytes.append(contentsOf: text)
                return UInt32(truncatingIfNeeded: text.count)
            }
            let lengths = (add(asid), add(eventID), add(email), add(tfb), add(friends),
                           limited ? add(app) : 0, limited ? add(device) : 0)
            appendEntry(at: at, offset: offset, lengths: lengths, flags: Self.flags(
                email: email != nil, tfb: tfb != nil, friends: friends != nil, declinesFriends: declinesFriends,
                limited: limited))
        }

        /// Appends one login of the log's scan.
        mutating func append(_ login: LoginRow) {
            let offset = bytes.count
            func add(_ text: String?) -> UInt32 {
                guard let text else { return 0 }
                bytes += text.utf8
                return UInt32(truncatingIfNeeded: text.utf8.count)
            }
            let lengths = (add(login.asid), add(login.key.eventID), add(login.email), add(login.tfb),
                           add(login.friends), login.limited ? add(login.app) : 0,
                           login.limited ? add(login.device) : 0)
            appendEntry(at: login.key.at, offset: offset, lengths: lengths, flags: Self.flags(
                email: login.email != nil, tfb: login.tfb != nil, friends: login.friends != nil,
                declinesFriends: login.declinesFriends, limited: login.limited))
        }

        private static func flags(
            email: Bool, tfb: Bool, friends: Bool, declinesFriends: Bool, limited: Bool
        ) -> UInt8 {
            (email ? Flag.email : 0) | (tfb ? Flag.tfb : 0) | (friends ? Flag.friends : 0)
                | (declinesFriends ? Flag.declinesFriends : 0) | (limited ? Flag.limited : 0)
        }

        /// A login's text lengths, in the order of its texts in `bytes`.
        private typealias Lengths = (
            asid: UInt32, eventID: UInt32, email: UInt32, tfb: UInt32, friends: UInt32, app: UInt32, device: UInt32
        )

        /// The entry of a login whose texts were just appended at `offset`.
        private mutating func appendEntry(at: Int64, offset: Int, lengths: Lengths, flags: UInt8) {
            let asidLength = lengths.asid
            let prefixes = bytes.withUnsafeBufferPointer { base in DeviceEvents.prefix16(base, offset, asidLength) }
            entries.append(Entry(
                at: at, offset: offset, asidPrefix: prefixes.0, asidNext: prefixes.1, asidLength: asidLength,
                eventIDLength: lengths.eventID, emailLength: lengths.email, tfbLength: lengths.tfb,
                friendsLength: lengths.friends, appLength: lengths.app, deviceLength: lengths.device, flags: flags))
        }

        /// Appends another part's logins (the other half of a scan).
        mutating func append(contentsOf other: LoginEvents) {
            let shift = bytes.count
            bytes += other.bytes
            entries.reserveCapacity(entries.count + other.entries.count)
            for var entry in other.entries {
                entry.offset += shift
                entries.append(entry)
            }
        }

        /// Calls `body` with each ASID, in key order (its bytes'), and its logins in event time.
        /// Sorts the logins in place.
        mutating func forEachASID(_ body: (String, [BulkLogin]) throws -> Void) rethrows {
            let order = bytes.withUnsafeBufferPointer { base in
                entries.withUnsafeBufferPointer { entries in GroupedOrder.of(ASIDs(entries: entries, base: base)) }
            }
            GroupedOrder.apply(order, to: &entries)
            try bytes.withUnsafeBufferPointer { base in
                var logins: [BulkLogin] = []
                var start = 0
                guard !entries.isEmpty else { return }
                for end in 1...entries.count
                where end == entries.count || Self.asidOrder(entries[start], entries[end], base) != nil {
                    logins.removeAll(keepingCapacity: true)
                    for i in start..<end {
                        logins.append(BulkLogin(entries[i], base))
                        // 192 bytes hold a login's texts but a long friend list (`ProjectionBuilder.prefetch`).
                        if i + ProjectionBuilder.ahead < entries.count {
                            ProjectionBuilder.prefetch(base, at: entries[i + ProjectionBuilder.ahead].offset, lines: 3)
                        }
                    }
                    try body(String(decoding: logins[0].asid, as: UTF8.self), logins)
                    start = end
                }
            }
        }


        /// The logins grouped by ASID for `GroupedOrder`.
        private struct ASIDs: GroupedItems {
            let entries: UnsafeBufferPointer<Entry>, base: UnsafeBufferPointer<UInt8>

            var count: Int { entries.count }

            func hash(_ item: Int) -> UInt64 {
                let e = entries[item]
                return GroupedOrder.hash(prefix: e.asidPrefix, next: e.asidNext, length: e.asidLength,
                                         bytes: base.baseAddress! + e.offset)
            }

            func sameGroup(_ a: Int, _ b: Int) -> Bool { asidOrder(entries[a], entries[b], base) == nil }

            func groupPrecedes(_ a: Int, _ b: Int) -> Bool { asidOrder(entries[a], entries[b], base) == true }

            func precedesInGroup(_ a: Int, _ b: Int) -> Bool {
                let x = entries[a], y = entries[b]
                guard x.at == y.at else { return x.at < y.at }
                return String.bytesPrecede(BulkLogin(x, base).eventID, BulkLogin(y, base).eventID)
            }
        }

        /// Whether `a`'s ASID precedes `b`'s; nil when they are the same ASID. Equal prefixes of
        /// equal lengths within the prefixes are equal texts; otherwise the bytes decide.
        private static func asidOrder(_ a: Entry, _ b: Entry, _ base: UnsafeBufferPointer<UInt8>) -> Bool? {
            if a.asidPrefix != b.asidPrefix { return a.asidPrefix < b.asidPrefix }
            if a.asidNext != b.asidNext { return a.asidNext < b.asidNext }
            guard a.asidLength != b.asidLength || a.asidLength > 16 else { return nil }
            let x = BulkLogin(a, base).asid, y = BulkLogin(b, base).asid
            return String.sameBytes(x, y) ? nil : String.bytesPrecede(x, y)
        }
    }

    /// A partition's friend mentions: the earliest login whose list names each ASID, kept by
    /// the bytes of the ASID in a table of its own (open addressing): a partition's logins name
    /// about twice as many friends as there are logins, and a `String` and a dictionary lookup
    /// for each were a tenth of the aggregation's time. Each item holds its ASID's first 16
    /// bytes, so that an ASID no longer than that is found without reading the kept bytes, which
    /// lie all over the buffer (reading them was two fifths of the aggregation at 10M events).
    package struct Mentions {
        private struct Item {
            var offset: Int, eventIDOffset: Int, at: Int64
            var length: UInt32, eventIDLength: UInt32
            /// The ASID's first 16 bytes (`DeviceEvents.prefix16`).
            var prefix: UInt64, next: UInt64
        }

        private var items: [Item] = []
        /// Indices into `items` + 1 (0 is an empty slot); a power of two, at most half full.
        private var slots = [Int32](repeating: 0, count: 1024)
        private var bytes: [UInt8] = []

        init() {}

        var count: Int { items.count }

        /// A list named `friend` at (`at`, `eventID`): kept when earlier than what is kept.
        mutating func lower(_ friend: UnsafeBufferPointer<UInt8>, at: Int64, eventID: UnsafeBufferPointer<UInt8>) {
            let length = UInt32(truncatingIfNeeded: friend.count)
            let (prefix, next) = DeviceEvents.prefix16(friend, 0, length)
            let mask = slots.count - 1
            var slot = Int(truncatingIfNeeded: Self.slot(prefix, next, length, friend)) & mask
            while slots[slot] != 0 {
                let i = Int(slots[slot]) - 1
                let item = items[i]
                let (same, earlier) = bytes.withUnsafeBufferPointer { base in
                    guard item.prefix == prefix, item.next == next, item.length == length,
                          length <= 16 || String.sameBytes(DeviceEvents.slice(base, item.offset, item.length), friend)
                    else { return (false, false) }
                    guard at == item.at else { return (true, at < item.at) }
                    let keptEventID = DeviceEvents.slice(base, item.eventIDOffset, item.eventIDLength)
                    return (true, String.bytesPrecede(eventID, keptEventID))
                }
                guard same else {
                    slot = (slot + 1) & mask
                    continue
                }
                if earlier {
                    items[i].at = at
                    items[i].eventIDOffset = bytes.count
                    items[i].eventIDLength = UInt32(truncatingIfNeeded: eventID.count)
                    bytes.append(contentsOf: eventID)
                }
                return
            }
            let offset = bytes.count
            bytes.append(contentsOf: friend)
            bytes.append(contentsOf: eventID)
            items.append(Item(offset: offset, eventIDOffset: offset + friend.count, at: at, length: length,
                              eventIDLength: UInt32(truncatingIfNeeded: eventID.count), prefix: prefix, next: next))
            slots[slot] = Int32(items.count)
            if items.count * 2 > slots.count { grow() }
        }

        /// Where an ASID's probe starts, before the table's mask: from its prefix and length, and
        /// for an ASID longer than its prefix, from all its bytes (ASIDs that share their first 16
        /// bytes do not all start on one slot).
        private static func slot(
            _ prefix: UInt64, _ next: UInt64, _ length: UInt32, _ friend: UnsafeBufferPointer<UInt8>
        ) -> UInt64 {
            // Mixed: every bit of the ASID reaches the low bits, which pick the slot.
            GroupedOrder.mix(GroupedOrder.hash(prefix: prefix, next: next, length: length,
                                               bytes: UnsafeRawPointer(friend.baseAddress)))
        }

        /// Every friend named in `list` (`StoredFriendList`) that `accepts` takes, at this login.
        mutating func lower(
            list: UnsafeBufferPointer<UInt8>, at: Int64, eventID: UnsafeBufferPointer<UInt8>,
            accepts: (UnsafeBufferPointer<UInt8>) -> Bool = { _ in true }
        ) {
            StoredFriendList.forEach(in: list) { friend in
                if accepts(friend) { lower(friend, at: at, eventID: eventID) }
            }
        }

        /// Adds another part's mentions.
        mutating func merge(_ other: Mentions) {
            other.bytes.withUnsafeBufferPointer { base in
                for item in other.items {
                    lower(DeviceEvents.slice(base, item.offset, item.length), at: item.at,
                          eventID: DeviceEvents.slice(base, item.eventIDOffset, item.eventIDLength))
                }
            }
        }

        private mutating func grow() {
            slots = [Int32](repeating: 0, count: slots.count * 2)
            let mask = slots.count - 1
            bytes.withUnsafeBufferPointer { base in
                for (i, item) in items.enumerated() {
                    let friend = DeviceEvents.slice(base, item.offset, item.length)
                    var slot = Int(truncatingIfNeeded: Self.slot(item.prefix, item.next, item.length, friend)) & mask
                    while slots[slot] != 0 { slot = (slot + 1) & mask }
                    slots[slot] = Int32(i + 1)
                }
            }
        }

        /// Each friend and its earliest mention, in key order (the bytes').
        func sorted() -> [(key: String, value: EventKey)] {
            var sorted: [(key: String, value: EventKey)] = []
            forEachSorted { friend, at, eventID in
                sorted.append((String(decoding: friend, as: UTF8.self),
                               EventKey(at: at, eventID: String(decoding: eventID, as: UTF8.self))))
            }
            return sorted
        }

        /// Calls `body` with each friend and its earliest mention (time and event ID), in key
        /// order (the bytes'), as bytes valid during the call.
        func forEachSorted(_ body: (UnsafeBufferPointer<UInt8>, Int64, UnsafeBufferPointer<UInt8>) -> Void) {
            bytes.withUnsafeBufferPointer { base in
                func friend(_ item: Item) -> UnsafeBufferPointer<UInt8> {
                    DeviceEvents.slice(base, item.offset, item.length)
                }
                var order = items.indices.map { i in (prefix: items[i].prefix, next: items[i].next, index: i) }
                order.sort { a, b in
                    if a.prefix != b.prefix { return a.prefix < b.prefix }
                    if a.next != b.next { return a.next < b.next }
                    return String.bytesPrecede(friend(items[a.index]), friend(items[b.index]))
                }
                for entry in order {
                    let item = items[entry.index]
                    body(friend(item), item.at, DeviceEvents.slice(base, item.eventIDOffset, item.eventIDLength))
                }
            }
        }
    }
}

/// One login of a partition as the projections' bulk builds read it: a view of
/// `ProjectionBuilder.LoginEvents`' bytes, valid while they are (`forEachASID`).
struct BulkLogin {
    private let entry: ProjectionBuilder.LoginEvents.Entry
    private let base: UnsafeBufferPointer<UInt8>

    fileprivate init(_ entry: ProjectionBuilder.LoginEvents.Entry, _ base: UnsafeBufferPointer<UInt8>) {
        (self.entry, self.base) = (entry, base)
    }

    private typealias Flag = ProjectionBuilder.LoginEvents.Flag

    /// The text of `length` bytes that starts `skipping` bytes into the entry's.
    private func text(_ skipping: Int = 0, length: UInt32) -> UnsafeBufferPointer<UInt8> {
        let start = entry.offset + skipping
        return UnsafeBufferPointer(rebasing: base[start..<(start + Int(length))])
    }

    // Where each text starts in the entry's bytes (`LoginEvents.Entry.offset`).
    private var eventIDStart: Int { Int(entry.asidLength) }
    private var emailStart: Int { eventIDStart + Int(entry.eventIDLength) }
    private var tfbStart: Int { emailStart + Int(entry.emailLength) }
    private var friendsStart: Int { tfbStart + Int(entry.tfbLength) }
    private var appStart: Int { friendsStart + Int(entry.friendsLength) }

    fileprivate var asid: UnsafeBufferPointer<UInt8> { text(length: entry.asidLength) }
    fileprivate var eventID: UnsafeBufferPointer<UInt8> { text(eventIDStart, length: entry.eventIDLength) }

    var at: Int64 { entry.at }
    /// The login's event key (a `String` of its event ID: take it once per login kept).
    var key: EventKey { EventKey(at: entry.at, eventID: String(decoding: eventID, as: UTF8.self)) }
    var limited: Bool { entry.flags & Flag.limited != 0 }
    var declinesFriends: Bool { entry.flags & Flag.declinesFriends != 0 }
    var hasFriends: Bool { entry.flags & Flag.friends != 0 }

    /// The login's email key; nil when it has none.
    var email: UnsafeBufferPointer<UInt8>? {
        entry.flags & Flag.email != 0 ? text(emailStart, length: entry.emailLength) : nil
    }
    /// The login's TFB key; nil when it has none.
    var tfb: UnsafeBufferPointer<UInt8>? { entry.flags & Flag.tfb != 0 ? text(tfbStart, length: entry.tfbLength) : nil }

    /// The friend list as logged (ASIDs joined by `,`); nil when absent.
    var friends: String? {
        hasFriends ? String(decoding: text(friendsStart, length: entry.friendsLength), as: UTF8.self) : nil
    }

    /// Where a limited login came from; empty for an enabled one.
    var app: String { String(decoding: text(appStart, length: entry.appLength), as: UTF8.self) }
    var device: String {
        String(decoding: text(appStart + Int(entry.appLength), length: entry.deviceLength), as: UTF8.self)
    }
}
