import CPrefetch
import IdreconDomain

extension ProjectionBuilder {
    /// A partition's device events, packed for the sort and the fold: one fixed-size entry per
    /// event that holds no reference, so the sort moves entries without retains and releases,
    /// and every entry's texts back to back in one byte buffer, so a text costs its bytes and
    /// no allocation. As `String`s, each text longer than 15 bytes (a UUID event or device
    /// ID) was a heap object of its own: with UUID event IDs a 1M replay held ~80 MB more at
    /// its peak and spent a seventh of its CPU in reference counting.
    package struct DeviceEvents {
        struct Entry {
            var at: Int64
            /// Where the entry's texts start in `bytes`: app ID, device ID, event ID, ASID.
            var offset: Int
            /// The app ID's first 8 bytes and the device ID's first 16 as big-endian integers, zero
            /// padded (`prefix`): the sort compares these and reads the texts only on a tie. With
            /// `memcmp` on every comparison, sorting a partition's devices was most of the other
            /// core's work while the writer waited for it.
            var appPrefix: UInt64, devicePrefix: UInt64, deviceNext: UInt64
            // SQLite's texts are at most 10^9 bytes (SQLITE_MAX_LENGTH), so each length fits.
            var appLength: UInt32, deviceLength: UInt32, eventIDLength: UInt32, asidLength: UInt32
            var isLogin: Bool
            /// `code(_:)` of the tracking.
            var tracking: UInt8
            var hasASID: Bool
        }

        private(set) var entries: [Entry] = []
        private(set) var bytes: [UInt8] = []

        init() {}

        var count: Int { entries.count }

        mutating func reserveCapacity(_ events: Int) { entries.reserveCapacity(events) }

        /// The events, leaving none (and no second reference to them) behind: the taker sorts
        /// them in place.
        mutating func take() -> DeviceEvents {
            defer { self = DeviceEvents() }
            return self
        }

        /// A tracking as one byte (entries and spill records): 0 none, 1 enabled, 2 limited.
        static func code(_ tracking: Tracking?) -> UInt8 { tracking == nil ? 0 : tracking == .limited ? 2 : 1 }

        private static func tracking(_ code: UInt8) -> Tracking? { code == 0 ? nil : code == 2 ? .limited : .enabled }

        /// Room for what `file` holds (`spill`'s records): an array that doubles as it grows
        /// holds up to three times its bytes while it is copied.
        mutating func reserveCapacity(for file: SpillFile) {
            entries.reserveCapacity(file.records)
            // A record's bytes less what is not text (length, time, kind, tracking, three text lengths and the ASID's flag).
            bytes.reserveCapacity(max(0, file.bytes - file.records * Self.spilledOverhead))
        }

        private static let spilledOverhead = 4 + 8 + 1 + 1 + 3 * 4 + 1

        /// Appends one event. `texts` appends its texts in the entry's order with the function
        /// it is given (which returns each one's length): app ID, device ID, event ID and the
        /// ASID (nil when there is none).
        mutating func append(at: Int64, isLogin: Bool, tracking: Tracking?,
                             texts: (_ add: (UnsafeRawBufferPointer) -> UInt32) -> (UInt32, UInt32, UInt32, UInt32?)) {
            let offset = bytes.count
            let (app, device, eventID, asid) = texts { text in
                bytes.append(contentsOf: text)
                return UInt32(truncatingIfNeeded: text.count)
            }
            let deviceOffset = offset + Int(app)
            let (appPrefix, (devicePrefix, deviceNext)) = bytes.withUnsafeBufferPointer { base in
                (Self.prefix(base, offset, app), Self.prefix16(base, deviceOffset, device))
            }
            entries.append(Entry(at: at, offset: offset, appPrefix: appPrefix, devicePrefix: devicePrefix,
                                 deviceNext: deviceNext,
                                 appLength: app, deviceLength: device, eventIDLength: eventID,
                                 asidLength: asid ?? 0, isLogin: isLogin,
                                 tracking: Self.code(tracking), hasASID: asid != nil))
        }

        /// Appends one event of the log's scan.
        mutating func append(_ row: DeviceRow) {
            var app = row.app, device = row.device, eventID = row.fact.key.eventID, asid = row.fact.asid
            append(at: row.fact.key.at, isLogin: row.fact.type == .login, tracking: row.fact.tracking) { add in
                (app.withUTF8 { add(UnsafeRawBufferPointer($0)) }, device.withUTF8 { add(UnsafeRawBufferPointer($0)) },
                 eventID.withUTF8 { add(UnsafeRawBufferPointer($0)) }, asid?.withUTF8 { add(UnsafeRawBufferPointer($0)) })
            }
        }

        /// Appends one event as `SpilledFacts` wrote it.
        mutating func append(spilled row: inout SpillRecord.Reader) {
            let at = row.int(), isLogin = row.byte() == 1
            append(at: at, isLogin: isLogin, tracking: Self.tracking(row.byte())) { add in
                (add(row.text()), add(row.text()), add(row.text()), row.byte() == 1 ? add(row.text()) : nil)
            }
        }

        /// Sorts the entries by device (app ID, then device ID, by bytes: two device IDs that
        /// differ only in Unicode normalization are two devices) and then by event key.
        mutating func sort() {
            let order = bytes.withUnsafeBufferPointer { base in
                entries.withUnsafeBufferPointer { entries in GroupedOrder.of(Devices(entries: entries, base: base)) }
            }
            GroupedOrder.apply(order, to: &entries)
        }

        /// The entries grouped by device for `GroupedOrder`.
        private struct Devices: GroupedItems {
            let entries: UnsafeBufferPointer<Entry>, base: UnsafeBufferPointer<UInt8>

            var count: Int { entries.count }

            func hash(_ item: Int) -> UInt64 {
                let e = entries[item], app = UnsafeRawPointer(base.baseAddress! + e.offset)
                return GroupedOrder.hash(prefix: e.appPrefix, length: e.appLength, covered: 8, bytes: app)
                    ^ GroupedOrder.hash(prefix: e.devicePrefix, next: e.deviceNext, length: e.deviceLength,
                                        bytes: app + Int(e.appLength)) &* 0x1656_67B1_9E37_79F9
            }

            func sameGroup(_ a: Int, _ b: Int) -> Bool { deviceOrder(entries[a], base, entries[b], base) == nil }

            func groupPrecedes(_ a: Int, _ b: Int) -> Bool { deviceOrder(entries[a], base, entries[b], base) == true }

            func precedesInGroup(_ a: Int, _ b: Int) -> Bool { eventPrecedes(entries[a], base, entries[b], base) }
        }

        static func precedes(_ a: Entry, _ x: UnsafeBufferPointer<UInt8>, _ b: Entry, _ y: UnsafeBufferPointer<UInt8>) -> Bool {
            deviceOrder(a, x, b, y) ?? eventPrecedes(a, x, b, y)
        }

        /// Whether `a`'s event key (time, then event ID by bytes) precedes `b`'s.
        private static func eventPrecedes(
            _ a: Entry, _ x: UnsafeBufferPointer<UInt8>, _ b: Entry, _ y: UnsafeBufferPointer<UInt8>
        ) -> Bool {
            a.at != b.at ? a.at < b.at : String.bytesPrecede(eventID(a, x), eventID(b, y))
        }

        /// Whether two entries are events of the same device.
        static func sameDevice(_ a: Entry, _ x: UnsafeBufferPointer<UInt8>, _ b: Entry, _ y: UnsafeBufferPointer<UInt8>) -> Bool {
            deviceOrder(a, x, b, y) == nil
        }

        /// Whether `a`'s device precedes `b`'s; nil when they are the same device. Equal prefixes
        /// of equal lengths within the prefix are equal texts; otherwise the bytes decide.
        private static func deviceOrder(
            _ a: Entry, _ x: UnsafeBufferPointer<UInt8>, _ b: Entry, _ y: UnsafeBufferPointer<UInt8>
        ) -> Bool? {
            if a.appPrefix != b.appPrefix { return a.appPrefix < b.appPrefix }
            if a.appLength != b.appLength || a.appLength > 8 {
                let appA = slice(x, a.offset, a.appLength), appB = slice(y, b.offset, b.appLength)
                if !String.sameBytes(appA, appB) { return String.bytesPrecede(appA, appB) }
            }
            if a.devicePrefix != b.devicePrefix { return a.devicePrefix < b.devicePrefix }
            if a.deviceNext != b.deviceNext { return a.deviceNext < b.deviceNext }
            if a.deviceLength != b.deviceLength || a.deviceLength > 16 {
                let deviceA = slice(x, a.offset + Int(a.appLength), a.deviceLength)
                let deviceB = slice(y, b.offset + Int(b.appLength), b.deviceLength)
                if !String.sameBytes(deviceA, deviceB) { return String.bytesPrecede(deviceA, deviceB) }
            }
            return nil
        }

        /// Up to the first 8 of `length` bytes at `offset`, big-endian, zero padded: a shorter text
        /// never gets a larger prefix than a longer one it begins, so comparing prefixes keeps the
        /// bytes' order (SQLite's BINARY collation) wherever they differ. One load of 8 bytes, those
        /// past the text masked off (a loop over the bytes was called three times per event).
        static func prefix(_ base: UnsafeBufferPointer<UInt8>, _ offset: Int, _ length: UInt32) -> UInt64 {
            let count = min(8, Int(length))
            guard count > 0 else { return 0 }
            precondition(offset >= 0 && offset + count <= base.count, "a text's prefix beyond its buffer")
            let start = UnsafeRawPointer(base.baseAddress! + offset)
            guard offset + 8 <= base.count else {
                var value: UInt64 = 0
                for i in 0..<8 { value = value << 8 | UInt64(i < count ? start.load(fromByteOffset: i, as: UInt8.self) : 0) }
                return value
            }
            let word = UInt64(bigEndian: start.loadUnaligned(as: UInt64.self))
            return count == 8 ? word : word & ~(UInt64.max >> (count * 8))
        }

        /// The first 16 of `length` bytes at `offset` as two `prefix`es: what the sorts and the
        /// partition lookups compare before the bytes.
        static func prefix16(_ base: UnsafeBufferPointer<UInt8>, _ offset: Int, _ length: UInt32) -> (UInt64, UInt64) {
            (prefix(base, offset, length), prefix(base, offset + 8, length > 8 ? length - 8 : 0))
        }

        static func app(_ e: Entry, _ base: UnsafeBufferPointer<UInt8>) -> String {
            String(decoding: slice(base, e.offset, e.appLength), as: UTF8.self)
        }

        static func device(_ e: Entry, _ base: UnsafeBufferPointer<UInt8>) -> String {
            String(decoding: slice(base, e.offset + Int(e.appLength), e.deviceLength), as: UTF8.self)
        }

        /// The event as the devices' fold takes it.
        static func fact(_ e: Entry, _ base: UnsafeBufferPointer<UInt8>) -> DeviceFact {
            let asidOffset = e.offset + Int(e.appLength) + Int(e.deviceLength) + Int(e.eventIDLength)
            return DeviceFact(
                key: EventKey(at: e.at, eventID: String(decoding: eventID(e, base), as: UTF8.self)),
                type: e.isLogin ? .login : .logout,
                tracking: tracking(e.tracking),
                asid: e.hasASID ? String(decoding: slice(base, asidOffset, e.asidLength), as: UTF8.self) : nil)
        }

        private static func eventID(_ e: Entry, _ base: UnsafeBufferPointer<UInt8>) -> UnsafeBufferPointer<UInt8> {
            slice(base, e.offset + Int(e.appLength) + Int(e.deviceLength), e.eventIDLength)
        }

        /// The `length` bytes at `offset` (the packed texts of replay's entries).
        static func slice(_ base: UnsafeBufferPointer<UInt8>, _ offset: Int, _ length: UInt32) -> UnsafeBufferPointer<UInt8> {
            UnsafeBufferPointer(rebasing: base[offset..<(offset + Int(length))])
        }
    }

    /// How many entries ahead of the one read the bulk folds ask for texts: sorted, the entries
    /// are read in order and their texts all over the partition's buffer, each a miss of the CPU's
    /// caches (first reads of texts were a fifth of the devices' fold and a third of preparing
    /// the ASIDs' rows).
    static let ahead = 16

    /// Asks the CPU to load `lines` cache lines of `base` from `offset` on (nothing when the
    /// buffer is empty: a partition whose texts are all empty).
    static func prefetch(_ base: UnsafeBufferPointer<UInt8>, at offset: Int, lines: Int) {
        guard let start = base.baseAddress.map({ $0 + offset }) else { return }
        for line in 0..<lines { idrecon_prefetch(start + line * 64) }
    }

    /// Each device's state and limited spans, in key order, from its events in any order (in
    /// two parts: each is sorted in place and the two are merged as they are folded, which
    /// needs no copy of both).
    static func fold(devices first: consuming DeviceEvents, _ second: consuming DeviceEvents) -> FoldedDevices {
        var a = consume first, b = consume second
        a.sort()
        b.sort()
        let events = a.count + b.count
        var devices = DevicesProjection.BulkRows()
        a.bytes.withUnsafeBufferPointer { x in
            b.bytes.withUnsafeBufferPointer { y in
                var current: (entry: DeviceEvents.Entry, base: UnsafeBufferPointer<UInt8>)?
                var fold = DevicesProjection.Fold()
                var i = 0, j = 0
                while i < a.entries.count || j < b.entries.count {
                    let entry: DeviceEvents.Entry, base: UnsafeBufferPointer<UInt8>
                    if j == b.entries.count || (i < a.entries.count && DeviceEvents.precedes(a.entries[i], x, b.entries[j], y)) {
                        (entry, base) = (a.entries[i], x)
                        // 128 bytes hold an event's app, device, event and ASID IDs of usual lengths.
                        if i + ahead < a.entries.count { prefetch(x, at: a.entries[i + ahead].offset, lines: 2) }
                        i += 1
                    } else {
                        (entry, base) = (b.entries[j], y)
                        if j + ahead < b.entries.count { prefetch(y, at: b.entries[j + ahead].offset, lines: 2) }
                        j += 1
                    }
                    if let device = current, !DeviceEvents.sameDevice(device.entry, device.base, entry, base) {
                        devices.add(DeviceEvents.app(device.entry, device.base),
                                    DeviceEvents.device(device.entry, device.base), fold)
                        (current, fold) = (nil, DevicesProjection.Fold())
                    }
                    if current == nil { current = (entry, base) }
                    fold.add(DeviceEvents.fact(entry, base))
                }
                if let device = current {
                    devices.add(DeviceEvents.app(device.entry, device.base),
                                DeviceEvents.device(device.entry, device.base), fold)
                }
            }
        }
        return (devices, events)
    }
}
