/// A record the validator's fast path accepted: its fields as ranges of the record's bytes and
/// its canonical payload, exactly what `EventValidator.validate` makes of it
/// (`PlainEventTests` compares the two on generated and mutated records).
public struct PlainEvent {
    public var eventID: Range<Int>
    public var type: EventType
    /// Event time, UTC milliseconds since the epoch.
    public var occurredAt: Int64
    public var appID: Range<Int>
    public var deviceID: Range<Int>
    public var tracking: Tracking?
    public var asid: Range<Int>?
    public var email: Range<Int>?
    public var tokenForBusiness: Range<Int>?
    public var nonce: Range<Int>?
    /// The friend list, without the login's own ASID, as its elements' ranges.
    public var friends: [Range<Int>]?
    public var declinesFriends: Bool
    public var canonicalPayload: [UInt8]
}

extension EventValidator {
    /// The fast path of `validate` for the records a stream almost always holds: ASCII, one
    /// object whose members' values are texts or lists of texts, no escapes, no nulls, every
    /// rule met. It builds no JSON tree and no strings.
    /// nil for anything else, which `validate` then decides (with the rejection's reason and
    /// message): the fast path only ever accepts, so it cannot reject differently.
    public static func acceptPlain(_ record: UnsafeBufferPointer<UInt8>) -> PlainEvent? {
        guard JSONParser.isASCII(record) else { return nil }
        var scan = PlainScan(bytes: record)
        guard let found = scan.members() else { return nil }
        return found.accept(record)
    }
}

/// The members of a plain record: each known field's value as a range of the record (a text's
/// bytes between its quotes, or a list's bytes between its brackets), and the members
/// `validate` does not read, which the canonical payload keeps.
private struct PlainMembers {
    var values = [Range<Int>?](repeating: nil, count: Field.allCases.count)
    var isList: UInt32 = 0
    var others: [(name: Range<Int>, value: Range<Int>, isList: Bool)] = []
    /// Members `validate` does not read that a plain record may have.
    static let maxOthers = 16

    subscript(_ field: Field) -> Range<Int>? { values[field.rawValue] }

    /// The text of `field`: `.some(nil)` when absent, nil when its value is a list.
    func text(_ field: Field) -> Range<Int>?? {
        guard let range = values[field.rawValue] else { return .some(nil) }
        guard isList & (1 << field.rawValue) == 0 else { return .none }
        return .some(range)
    }

    /// The list of `field`: `.some(nil)` when absent, nil when its value is a text.
    func list(_ field: Field) -> Range<Int>?? {
        guard let range = values[field.rawValue] else { return .some(nil) }
        guard isList & (1 << field.rawValue) != 0 else { return .none }
        return .some(range)
    }

    /// The elements of the list at `range`, in order.
    static func elements(of range: Range<Int>, in bytes: UnsafeBufferPointer<UInt8>) -> [Range<Int>] {
        var elements: [Range<Int>] = []
        _ = Self.elements(range, of: bytes) { elements.append($0); return true }
        return elements
    }

    /// Calls `body` with each element of the list at `range` (a plain list: texts without
    /// escapes) until it returns false; whether none did.
    static func elements(
        _ range: Range<Int>, of bytes: UnsafeBufferPointer<UInt8>, _ body: (Range<Int>) -> Bool
    ) -> Bool {
        var i = range.lowerBound
        while i < range.upperBound {
            if bytes[i] == UInt8(ascii: "\"") {
                var end = i + 1
                while bytes[end] != UInt8(ascii: "\"") { end += 1 }
                guard body((i + 1)..<end) else { return false }
                i = end + 1
            } else {
                i += 1
            }
        }
        return true
    }

    func accept(_ bytes: UnsafeBufferPointer<UInt8>) -> PlainEvent? {
        func equals(_ range: Range<Int>, _ literal: StaticString) -> Bool {
            range.count == literal.utf8CodeUnitCount
                && UnsafeBufferPointer(rebasing: bytes[range])
                    .elementsEqual(UnsafeBufferPointer(start: literal.utf8Start, count: range.count))
        }
        func slice(_ range: Range<Int>) -> UnsafeBufferPointer<UInt8> { UnsafeBufferPointer(rebasing: bytes[range]) }
        func enumeration<E: RawRepresentable & CaseIterable>(_ field: Field, _: E.Type) -> E??
        where E.RawValue == String {
            guard let value = text(field) else { return .none } // a list: not plain
            guard let value else { return .some(nil) }
            for e in E.allCases where e.rawValue.utf8.elementsEqual(slice(value)) { return .some(e) }
            return .none
        }

        guard let schema = text(.schema) ?? nil, equals(schema, "login-event/v1") else { return nil }
        guard let eventID = text(.eventID) ?? nil, EventValidator.isEventID(slice(eventID)) else { return nil }
        guard let typeValue = enumeration(.type, EventType.self) else { return nil }
        let type = typeValue ?? .login
        guard let occurredText = text(.occurredAt) ?? nil, let occurredAt = Timestamp.parse(utf8: slice(occurredText))
        else { return nil }
        guard let appID = text(.appID) ?? nil, EventValidator.isASID(utf8: slice(appID)) else { return nil }
        guard let deviceID = text(.deviceID) ?? nil, EventValidator.isASCIIDeviceID(slice(deviceID)) else { return nil }
        guard let platformValue = enumeration(.platform, Platform.self) else { return nil }
        let platform = platformValue ?? .ios
        guard let flow = enumeration(.flow, Flow.self) else { return nil }
        if type == .login, self[.tracking] == nil || self[.tokenType] == nil || self[.asid] == nil { return nil }
        guard let tracking = enumeration(.tracking, Tracking.self),
              let tokenType = enumeration(.tokenType, TokenType.self),
              let asid = text(.asid), let email = text(.email), let nonce = text(.nonce), let idToken = text(.idToken),
              let tokenForBusiness = text(.tokenForBusiness), let friendList = list(.friendASIDs),
              let granted = list(.grantedPermissions), let declined = list(.declinedPermissions)
        else { return nil }
        if let asid, !EventValidator.isASID(utf8: slice(asid)) { return nil }
        if let email, !EventValidator.isEmail(slice(email)) { return nil }
        if let nonce, !EventValidator.isASCIINonce(slice(nonce)) { return nil }
        if idToken != nil, type != .login || tracking != .limited { return nil }
        if tokenForBusiness != nil, type != .login || tracking != .enabled { return nil }

        var friends: [Range<Int>]?
        if let friendList {
            var kept: [Range<Int>] = []
            guard Self.elements(friendList, of: bytes, { friend in
                guard EventValidator.isASID(utf8: slice(friend)) else { return false }
                if let asid, slice(friend).elementsEqual(slice(asid)) { return true } // a login is not its own friend
                kept.append(friend)
                return true
            }) else { return nil }
            friends = kept
        }
        func grants(_ permission: StaticString) -> Bool {
            guard let granted else { return false }
            var found = false
            _ = Self.elements(granted, of: bytes) { found = found || equals($0, permission); return true }
            return found
        }
        if type == .login, let tracking {
            switch (tracking, tokenType) {
            case (.limited, .accessToken?), (.enabled, .authenticationToken?): return nil
            default: break
            }
            if tracking == .limited {
                if platform == .tvos || flow == .deviceLogin { return nil }
                if let granted, !Self.elements(granted, of: bytes, { permission in
                    limitedLoginPermissionBytes.contains { $0.elementsEqual(slice(permission)) }
                }) { return nil }
            }
        }
        if granted != nil {
            if email != nil, !grants("email") { return nil }
            if friends != nil, !grants("user_friends") { return nil }
        }
        var declinesFriends = false
        if type == .login, let declined {
            _ = Self.elements(declined, of: bytes) {
                declinesFriends = declinesFriends || equals($0, "user_friends")
                return true
            }
        }

        // The canonical payload: members in their keys' byte order, with the values `validate`
        // normalizes (defaults, `occurred_at` in UTC milliseconds, the friend list) written anew.
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count + 48)
        out.append(UInt8(ascii: "{"))
        func key(_ name: UnsafeBufferPointer<UInt8>) {
            if out.count > 1 { out.append(UInt8(ascii: ",")) }
            quoted(name)
            out.append(UInt8(ascii: ":"))
        }
        func key(_ field: Field) { Field.bytes[field.rawValue].withUnsafeBufferPointer { key($0) } }
        func quoted(_ text: UnsafeBufferPointer<UInt8>) { CanonicalJSON.writeString(text, into: &out) }
        func writeList(_ elements: [Range<Int>]) {
            out.append(UInt8(ascii: "["))
            for (i, element) in elements.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                quoted(slice(element))
            }
            out.append(UInt8(ascii: "]"))
        }
        // Members `validate` does not read go between the fields, in their names' byte order.
        var others = others.sorted { slice($0.name).lexicographicallyPrecedes(slice($1.name)) }[...]
        func writeOthers(before field: Field?) {
            while let other = others.first,
                  field.map({ slice(other.name).lexicographicallyPrecedes(Field.bytes[$0.rawValue]) }) ?? true {
                others.removeFirst()
                key(slice(other.name))
                if other.isList {
                    writeList(Self.elements(of: other.value, in: bytes))
                } else {
                    quoted(slice(other.value))
                }
            }
        }
        for field in Field.canonicalOrder {
            writeOthers(before: field)
            switch field {
            case .type:
                key(field)
                var name = type.rawValue
                name.withUTF8 { quoted($0) }
            case .platform:
                key(field)
                var name = platform.rawValue
                name.withUTF8 { quoted($0) }
            case .occurredAt:
                key(field)
                var text = Timestamp.format(occurredAt)
                text.withUTF8 { quoted($0) }
            case .friendASIDs:
                guard let friends else { continue }
                key(field)
                writeList(friends)
            case .grantedPermissions, .declinedPermissions:
                guard let range = self[field] else { continue }
                key(field)
                writeList(Self.elements(of: range, in: bytes))
            default:
                guard let range = self[field] else { continue }
                key(field)
                quoted(slice(range))
            }
        }
        writeOthers(before: nil)
        out.append(UInt8(ascii: "}"))

        return PlainEvent(
            eventID: eventID, type: type, occurredAt: occurredAt, appID: appID, deviceID: deviceID,
            tracking: type == .login ? tracking : nil, asid: asid, email: type == .login ? email : nil,
            tokenForBusiness: type == .login ? tokenForBusiness : nil, nonce: nonce,
            friends: type == .login ? friends : nil,
            declinesFriends: declinesFriends, canonicalPayload: out)
    }
}

/// The Limited Login permissions as bytes, for comparing without strings.
private let limitedLoginPermissionBytes: [[UInt8]] = limitedLoginPermissions.map { Array($0.utf8) }

extension Field {
    /// The fields in their names' byte order: the order of a canonical payload's members.
    static let canonicalOrder: [Field] = allCases.sorted {
        bytes[$0.rawValue].lexicographicallyPrecedes(bytes[$1.rawValue])
    }
}

/// One pass over a record for `acceptPlain`: gives up (nil) at the first thing that is not
/// plain, leaving it to the full parser.
private struct PlainScan {
    let bytes: UnsafeBufferPointer<UInt8>
    var i = 0

    mutating func skipWhitespace() {
        while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x0A || bytes[i] == 0x0D || bytes[i] == 0x09 { i += 1 }
    }

    /// A text without escapes or control characters; `i` is at its opening quote.
    mutating func text() -> Range<Int>? {
        guard i < bytes.count, bytes[i] == UInt8(ascii: "\"") else { return nil }
        i += 1
        let start = i
        while i < bytes.count {
            let b = bytes[i]
            if b == UInt8(ascii: "\"") {
                i += 1
                return start..<(i - 1)
            }
            if b == UInt8(ascii: "\\") || b < 0x20 { return nil }
            i += 1
        }
        return nil
    }

    mutating func members() -> PlainMembers? {
        var found = PlainMembers()
        skipWhitespace()
        guard i < bytes.count, bytes[i] == UInt8(ascii: "{") else { return nil }
        i += 1
        while true {
            skipWhitespace()
            guard let name = text() else { return nil }
            let field = Field.named(UnsafeBufferPointer(rebasing: bytes[name]))
            if let field {
                guard found.values[field.rawValue] == nil else { return nil } // a repeated name
            } else {
                let bytes = self.bytes
                func same(_ a: Range<Int>, _ b: Range<Int>) -> Bool {
                    UnsafeBufferPointer(rebasing: bytes[a]).elementsEqual(UnsafeBufferPointer(rebasing: bytes[b]))
                }
                // Names are compared pairwise, so only a few: `validate` checks many in linear time.
                guard found.others.count < PlainMembers.maxOthers,
                      !found.others.contains(where: { same($0.name, name) })
                else { return nil }
            }
            skipWhitespace()
            guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { return nil }
            i += 1
            skipWhitespace()
            guard i < bytes.count else { return nil }
            if bytes[i] == UInt8(ascii: "[") {
                let start = i + 1
                i += 1
                skipWhitespace()
                if i < bytes.count, bytes[i] == UInt8(ascii: "]") {
                    i += 1
                } else {
                    while true {
                        skipWhitespace()
                        guard text() != nil else { return nil }
                        skipWhitespace()
                        guard i < bytes.count else { return nil }
                        if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
                        guard bytes[i] == UInt8(ascii: "]") else { return nil }
                        i += 1
                        break
                    }
                }
                if let field {
                    found.values[field.rawValue] = start..<(i - 1)
                    found.isList |= 1 << field.rawValue
                } else {
                    found.others.append((name, start..<(i - 1), true))
                }
            } else {
                guard let value = text() else { return nil }
                if let field { found.values[field.rawValue] = value } else { found.others.append((name, value, false)) }
            }
            skipWhitespace()
            guard i < bytes.count else { return nil }
            if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
            guard bytes[i] == UInt8(ascii: "}") else { return nil }
            i += 1
            skipWhitespace()
            return i == bytes.count ? found : nil
        }
    }
}

extension PlainEvent {
    /// Whether this is what `validate` made of `record` (`event`): every field, the friend list
    /// and the canonical payload, byte for byte. The fuzzer and the tests hold the fast path to it.
    public func agrees(with event: LoginEvent, record: [UInt8]) -> Bool {
        func text(_ range: Range<Int>?) -> [UInt8]? { range.map { Array(record[$0]) } }
        func same(_ range: Range<Int>?, _ value: String?) -> Bool { text(range) == value.map { Array($0.utf8) } }
        let login = event.type == .login
        return same(eventID, event.eventID) && type == event.type && occurredAt == event.occurredAt
            && same(appID, event.appID) && same(deviceID, event.deviceID) && tracking == (login ? event.tracking : nil)
            && same(asid, event.asid) && same(email, login ? event.email : nil)
            && same(tokenForBusiness, login ? event.tokenForBusiness : nil) && same(nonce, event.nonce)
            && friends?.map { Array(record[$0]) } == (login ? event.friendASIDs?.map { Array($0.utf8) } : nil)
            && declinesFriends == (login && (event.declinedPermissions?.contains("user_friends") ?? false))
            && canonicalPayload == Array(event.canonicalPayload.utf8)
    }
}
