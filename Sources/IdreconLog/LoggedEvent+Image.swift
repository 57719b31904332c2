import GRDBSQLite
import IdreconDomain

extension LoggedEvent {
    /// An accepted event as the append writes it: the `events` row's values (`insertSQL`), its
    /// nonce and its canonical payload, laid out in one buffer where the record is validated.
    /// The one writer binds the texts in place and frees one block per record; holding the
    /// validated `LoginEvent` instead, it retained, copied and freed each of its texts and
    /// lists (a third of the writer's time in a 1M ingest; `schemas/performance.md`).
    package struct Image: Sendable, Equatable {
        /// The texts back to back after a header of their end offsets (`Text.allCases.count`
        /// native `Int`s); a text that is absent (NULL) has no bytes and its bit in `nulls`.
        private let storage: [UInt8]
        private let nulls: UInt16
        package let occurredAt: Int64
        package let deviceKey: Int64
        package let asidKey: Int64?
        package let type: EventType
        package let tracking: Tracking?
        package let declinesFriends: Bool

        fileprivate enum Text: Int, CaseIterable {
            case eventID, appID, deviceID, asid, linkEmail, linkTFB, friends, nonce, payload
        }

        fileprivate static let header = Text.allCases.count * MemoryLayout<Int>.size

        package init(_ e: LoginEvent) {
            let row = LoggedEvent(e)
            let texts: [String?] = [
                row.key.eventID, row.appID, row.deviceID, row.asid, row.linkEmail, row.linkTFB, row.friends, e.nonce,
                e.canonicalPayload,
            ]
            var layout = Layout(capacity: texts.reduce(0) { $0 + ($1?.utf8.count ?? 0) })
            for text in texts { layout.add(text?.utf8) }
            (storage, nulls) = layout.finish()
            occurredAt = row.key.at
            deviceKey = row.deviceKey
            asidKey = row.asidKey
            type = row.type
            tracking = row.tracking
            declinesFriends = row.declinesFriends
        }

        /// The image of a record the validator's fast path accepted (`EventValidator.acceptPlain`):
        /// the same as that of the `LoginEvent` `validate` makes of it, built from its bytes.
        package init(_ e: PlainEvent, record: UnsafeBufferPointer<UInt8>) {
            func slice(_ range: Range<Int>) -> UnsafeBufferPointer<UInt8> {
                UnsafeBufferPointer(rebasing: record[range])
            }
            let linkEmail = e.email.map { LinkKey.email(String(decoding: slice($0), as: UTF8.self)) }
            let tfbBytes = e.tokenForBusiness.map { LinkKey.tokenForBusinessPrefix.utf8.count + $0.count } ?? 0
            let friendBytes = e.friends.map { $0.reduce(max(0, $0.count - 1)) { $0 + $1.count } } ?? 0
            var layout = Layout(capacity: e.eventID.count + e.appID.count + e.deviceID.count + (e.asid?.count ?? 0)
                + (linkEmail?.utf8.count ?? 0) + tfbBytes + friendBytes + (e.nonce?.count ?? 0) + e.canonicalPayload.count)
            layout.add(slice(e.eventID))
            layout.add(slice(e.appID))
            layout.add(slice(e.deviceID))
            layout.add(e.asid.map(slice))
            layout.add(linkEmail?.utf8)
            if let tfb = e.tokenForBusiness {
                layout.add(LinkKey.tokenForBusinessPrefix.utf8, then: slice(tfb))
            } else {
                layout.add(nil as [UInt8]?)
            }
            if let friends = e.friends {
                layout.add(joining: friends.map(slice), separator: LoggedEvent.friendSeparator)
            } else {
                layout.add(nil as [UInt8]?)
            }
            layout.add(e.nonce.map(slice))
            layout.add(e.canonicalPayload)
            (storage, nulls) = layout.finish()
            occurredAt = e.occurredAt
            deviceKey = StableHash.key(utf8: slice(e.appID), slice(e.deviceID))
            asidKey = e.asid.map { StableHash.key(utf8: slice($0)) }
            type = e.type
            tracking = e.tracking
            declinesFriends = e.declinesFriends
        }

        /// Lays the texts out in `Text` order: the header of end offsets, then the bytes.
        private struct Layout {
            var bytes: [UInt8] = []
            var nulls: UInt16 = 0
            var count = 0

            init(capacity: Int) {
                bytes.reserveCapacity(Image.header + capacity)
                bytes.append(contentsOf: repeatElement(0, count: Image.header))
            }

            mutating func add(_ text: (some Sequence<UInt8>)?) {
                if let text { bytes.append(contentsOf: text) } else { nulls |= 1 << count }
                end()
            }

            mutating func add(_ prefix: some Sequence<UInt8>, then text: some Sequence<UInt8>) {
                bytes.append(contentsOf: prefix)
                bytes.append(contentsOf: text)
                end()
            }

            mutating func add(joining parts: [UnsafeBufferPointer<UInt8>], separator: UInt8) {
                for (i, part) in parts.enumerated() {
                    if i > 0 { bytes.append(separator) }
                    bytes.append(contentsOf: part)
                }
                end()
            }

            private mutating func end() {
                let end = bytes.count - Image.header
                bytes.withUnsafeMutableBytes { $0.storeBytes(of: end, toByteOffset: count * 8, as: Int.self) }
                count += 1
            }

            func finish() -> ([UInt8], UInt16) {
                precondition(count == Text.allCases.count, "an image lays out every text")
                return (bytes, nulls)
            }
        }

        /// The bytes of `text` in `raw` (this image's storage), nil when it is absent.
        private func slice(_ text: Text, of raw: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer? {
            guard nulls & (1 << text.rawValue) == 0 else { return nil }
            let end = raw.loadUnaligned(fromByteOffset: text.rawValue * 8, as: Int.self)
            let start = text.rawValue == 0
                ? 0 : raw.loadUnaligned(fromByteOffset: (text.rawValue - 1) * 8, as: Int.self)
            return UnsafeRawBufferPointer(rebasing: raw[(Self.header + start)..<(Self.header + end)])
        }

        private func string(_ text: Text) -> String? {
            storage.withUnsafeBytes { raw in slice(text, of: raw).map { String(decoding: $0, as: UTF8.self) } }
        }

        // The texts as strings, for the rare paths (conflicts, erasure, messages).
        package var eventID: String { string(.eventID) ?? "" }
        package var appID: String { string(.appID) ?? "" }
        package var asid: String? { string(.asid) }
        package var nonce: String? { string(.nonce) }
        package var payload: String { string(.payload) ?? "" }

        /// Whether the canonical payload is `other`, byte for byte.
        package func payloadIs(_ other: String) -> Bool {
            var other = other
            return storage.withUnsafeBytes { raw in
                other.withUTF8 { theirs in
                    slice(.payload, of: raw)?.elementsEqual(UnsafeRawBufferPointer(theirs)) ?? false
                }
            }
        }

        /// Binds `insertSQL`'s values (the row's, then the columns only the log reads) and
        /// runs it; the texts are bound in place. Returns the rows inserted (0 or 1).
        func insert(_ statement: BulkStatement, sourceID: Int64, position: Int64) throws -> Int {
            try storage.withUnsafeBytes { raw in
                try statement.runBorrowing { b in
                    b.add(borrowed: slice(.eventID, of: raw))
                    b.add(type.rawValue)
                    b.add(occurredAt)
                    b.add(borrowed: slice(.appID, of: raw))
                    b.add(borrowed: slice(.deviceID, of: raw))
                    b.add(borrowed: slice(.asid, of: raw))
                    b.add(tracking?.rawValue)
                    b.add(deviceKey)
                    b.add(asidKey)
                    b.add(borrowed: slice(.linkEmail, of: raw))
                    b.add(borrowed: slice(.linkTFB, of: raw))
                    b.add(borrowed: slice(.friends, of: raw))
                    b.add(declinesFriends)
                    b.add(borrowed: slice(.nonce, of: raw))
                    b.add(sourceID)
                    b.add(position)
                }
            }
        }

        /// `StableHash.key(event_id)`, the key of `KeyRuns.eventIDs`.
        var eventIDHash: Int64 {
            storage.withUnsafeBytes { raw in
                StableHash.key(utf8: (slice(.eventID, of: raw) ?? UnsafeRawBufferPointer(start: nil, count: 0))
                    .assumingMemoryBound(to: UInt8.self))
            }
        }

        /// Whether `row`'s first column is this event's `event_id`, byte for byte.
        func sameEventID(_ row: BulkStatement.Reader) -> Bool {
            storage.withUnsafeBytes { raw in
                guard let id = slice(.eventID, of: raw), let theirs = row.text(0) else { return false }
                return id.elementsEqual(theirs)
            }
        }

        /// `StableHash.key(app_id, nonce)`, the key of `KeyRuns.nonces`; nil without a nonce.
        var nonceHash: Int64? {
            storage.withUnsafeBytes { raw in
                guard let nonce = slice(.nonce, of: raw), let app = slice(.appID, of: raw) else { return nil }
                return StableHash.key(utf8: app.assumingMemoryBound(to: UInt8.self), nonce.assumingMemoryBound(to: UInt8.self))
            }
        }

        /// Whether `row` (`app_id`, `nonce`) is this event's `(app_id, nonce)`, byte for byte.
        func sameNonce(_ row: BulkStatement.Reader) -> Bool {
            storage.withUnsafeBytes { raw in
                guard let nonce = slice(.nonce, of: raw), let app = slice(.appID, of: raw),
                      let theirApp = row.text(0), let theirNonce = row.text(1) else { return false }
                return app.elementsEqual(theirApp) && nonce.elementsEqual(theirNonce)
            }
        }

        /// Binds and runs `insertPayloadSQL` for the row stored at `seq`.
        func insertPayload(_ statement: BulkStatement, seq: Int64) throws {
            _ = try storage.withUnsafeBytes { raw in
                try statement.runBorrowing { b in
                    b.add(seq)
                    b.add(borrowed: slice(.payload, of: raw))
                }
            }
        }
    }
}
