/// Stateless validation of one record value (SPEC section 2). Checks that need the log
/// (`event_id_conflict`, `nonce_replay`) and token verification happen in the store.
public enum EventValidator {
    public static func validate(_ bytes: some Collection<UInt8>) -> Result<LoginEvent, Rejection> {
        // A Kafka record with a null value arrives as no bytes at all.
        guard !bytes.isEmpty else { return .failure(Rejection(.malformedJSON, "the record value is null or empty")) }
        let value: JSONValue
        do {
            value = try JSONParser.parse(bytes)
        } catch {
            return .failure(Rejection(.malformedJSON, "\(error.message) at byte \(error.offset)"))
        }
        do {
            return .success(try validate(value))
        } catch {
            return .failure(error)
        }
    }

    public static func validate(_ value: JSONValue) throws(Rejection) -> LoginEvent {
        guard case let .object(members) = value else {
            throw Rejection(.malformedJSON, "the record is JSON but not an object")
        }
        var fields = Fields(members: members)

        guard let schema = fields.raw(.schema) else {
            throw Rejection(.unsupportedSchema, "field 'schema' is missing; expected \"\(LoginEvent.schemaName)\"")
        }
        guard case let .string(schemaName) = schema, schemaName.sameBytes(as: LoginEvent.schemaName) else {
            throw Rejection(.unsupportedSchema, "field 'schema' is \(CanonicalJSON.encode(schema)); expected \"\(LoginEvent.schemaName)\"")
        }

        let eventID = try fields.requiredString(.eventID)
        guard isEventID(eventID.utf8) else {
            throw Rejection(.invalidField, "field 'event_id' must be 1-128 characters of [A-Za-z0-9._:-]")
        }
        let type = try fields.enumeration(.type, EventType.self) ?? .login
        fields.set(.type, .string(type.rawValue))

        let occurredText = try fields.requiredString(.occurredAt)
        guard let occurredAt = Timestamp.parse(occurredText) else {
            throw Rejection(.invalidField, "field 'occurred_at' is not an RFC 3339 timestamp with offset whose UTC form falls in the years 0001-9999: \"\(occurredText.prefix(64))\"")
        }
        fields.set(.occurredAt, .string(Timestamp.format(occurredAt)))

        let appID = try fields.requiredString(.appID)
        try checkDigits(appID, "app_id")

        let deviceID = try fields.requiredString(.deviceID)
        let deviceASCII = deviceID.isASCII
        guard deviceASCII ? isASCIIDeviceID(deviceID.utf8)
                : (1...128).contains(deviceID.unicodeScalars.count) && deviceID.utf8.allSatisfy(isPrintableASCIIOrHigh)
                    && deviceID.unicodeScalars.allSatisfy({ $0.properties.generalCategory != .control }) // C1 controls
        else { throw Rejection(.invalidField, "field 'device_id' must be 1-128 printable characters") }

        let platform = try fields.enumeration(.platform, Platform.self) ?? .ios
        fields.set(.platform, .string(platform.rawValue))
        let flow = try fields.enumeration(.flow, Flow.self)

        let tracking: Tracking?
        let tokenType: TokenType?
        let asid: String?
        if type == .login {
            guard fields.raw(.tracking) != nil else { throw Rejection(.missingField, "field 'tracking' is required on a login") }
            guard fields.raw(.tokenType) != nil else { throw Rejection(.missingField, "field 'token_type' is required on a login") }
            guard fields.raw(.asid) != nil else { throw Rejection(.missingField, "field 'asid' is required on a login") }
        }
        tracking = try fields.enumeration(.tracking, Tracking.self)
        tokenType = try fields.enumeration(.tokenType, TokenType.self)
        asid = try fields.optionalString(.asid)
        if let asid { try checkDigits(asid, "asid") }

        let email = try fields.optionalString(.email)
        if let email, !isEmail(email.utf8) {
            throw Rejection(.invalidField, "field 'email' must contain exactly one '@'")
        }

        var friends = try fields.optionalStringArray(.friendASIDs)
        if let list = friends {
            for friend in list { try checkDigits(friend, "friend_asids", element: true) }
            if let asid, list.contains(asid) {
                friends = list.filter { $0 != asid }
                fields.set(.friendASIDs, .array(friends!.map { .string($0) }))
            }
        }
        let granted = try fields.optionalStringArray(.grantedPermissions)
        let declined = try fields.optionalStringArray(.declinedPermissions)

        let nonce = try fields.optionalString(.nonce)
        if let nonce, nonce.isASCII ? !isASCIINonce(nonce.utf8)
                                    : nonce.unicodeScalars.contains(where: { $0.properties.isWhitespace }) {
            throw Rejection(.invalidField, "field 'nonce' must be non-empty without whitespace")
        }
        let idToken = try fields.optionalString(.idToken)
        if idToken != nil {
            guard type == .login, tracking == .limited else {
                throw Rejection(.invalidField, "field 'id_token' is only allowed on limited logins")
            }
        }
        let tokenForBusiness = try fields.optionalString(.tokenForBusiness)
        if tokenForBusiness != nil {
            guard type == .login, tracking == .enabled else {
                throw Rejection(.invalidField, "field 'token_for_business' is only allowed on classic (enabled) logins")
            }
        }

        if type == .login, let tracking {
            switch (tracking, tokenType) {
            case (.limited, .accessToken?):
                throw Rejection(.tokenTypeMismatch, "a limited login must carry token_type 'authentication_token', not 'access_token'")
            case (.enabled, .authenticationToken?):
                throw Rejection(.tokenTypeMismatch, "an enabled login must carry token_type 'access_token', not 'authentication_token'")
            default: break
            }
            if tracking == .limited {
                if platform == .tvos { throw Rejection(.limitedUnsupported, "Limited Login is not available on tvOS") }
                if flow == .deviceLogin { throw Rejection(.limitedUnsupported, "Limited Login is not available with flow 'device_login'") }
                if let outside = granted?.first(where: { !limitedLoginPermissions.contains($0) }) {
                    throw Rejection(.permissionOutOfScope, "permission '\(outside)' is not allowed under Limited Login")
                }
            }
        }
        if let granted {
            if email != nil, !granted.contains("email") {
                throw Rejection(.claimWithoutPermission, "field 'email' is present but permission 'email' was not granted")
            }
            if friends != nil, !granted.contains("user_friends") {
                throw Rejection(.claimWithoutPermission, "field 'friend_asids' is present but permission 'user_friends' was not granted")
            }
        }

        return LoginEvent(
            eventID: eventID, type: type, occurredAt: occurredAt, appID: appID, deviceID: deviceID,
            platform: platform, flow: flow, tracking: tracking, tokenType: tokenType, asid: asid, email: email,
            friendASIDs: friends, grantedPermissions: granted, declinedPermissions: declined, nonce: nonce,
            idToken: idToken, tokenForBusiness: tokenForBusiness,
            canonicalPayload: CanonicalJSON.encode(.object(fields.members))
        )
    }

    /// The rules on a field's text, over its UTF-8 bytes: one place for the validator and its
    /// fast path (`EventValidator+Plain.swift`).
    /// `event_id`: 1-128 characters of [A-Za-z0-9._:-].
    static func isEventID(_ bytes: some Collection<UInt8>) -> Bool {
        (1...128).contains(bytes.count) && bytes.allSatisfy { b in
            switch b {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: ":"), UInt8(ascii: "-"):
                true
            default:
                false
            }
        }
    }

    /// An ASCII `device_id`: 1-128 printable characters (no C0 control, no DEL).
    static func isASCIIDeviceID(_ bytes: some Collection<UInt8>) -> Bool {
        (1...128).contains(bytes.count) && bytes.allSatisfy(isPrintableASCIIOrHigh)
    }

    private static func isPrintableASCIIOrHigh(_ b: UInt8) -> Bool { b >= 0x20 && b != 0x7F }

    /// `email`: exactly one '@'.
    static func isEmail(_ bytes: some Collection<UInt8>) -> Bool {
        var ats = 0
        for b in bytes where b == UInt8(ascii: "@") { ats += 1 }
        return ats == 1
    }

    /// An ASCII `nonce`: non-empty, without ASCII's White_Space.
    static func isASCIINonce(_ bytes: some Collection<UInt8>) -> Bool {
        !bytes.isEmpty && !bytes.contains { $0 == 0x20 || (0x09...0x0D).contains($0) }
    }

    /// Whether `s` is an ASID as events carry them: 1-32 ASCII digits (what the commands
    /// that look ASIDs up accept too).
    public static func isASID(_ s: String) -> Bool { isASID(utf8: s.utf8) }

    static func isASID(utf8 bytes: some Collection<UInt8>) -> Bool {
        (1...32).contains(bytes.count) && bytes.allSatisfy { $0 >= 48 && $0 <= 57 }
    }

    private static func checkDigits(_ s: String, _ field: String, element: Bool = false) throws(Rejection) {
        guard isASID(s) else {
            throw Rejection(.invalidField, "field '\(field)' \(element ? "has an element that is not" : "must be") 1-32 digits")
        }
    }
}

/// The members the validator reads (SPEC section 2), found once per record by their bytes.
enum Field: Int, CaseIterable {
    case schema, eventID, type, occurredAt, appID, deviceID, platform, flow, tracking, tokenType, asid, email
    case friendASIDs, grantedPermissions, declinedPermissions, nonce, idToken, tokenForBusiness

    var name: String { Self.names[rawValue] }

    static let names = [
        "schema", "event_id", "type", "occurred_at", "app_id", "device_id", "platform", "flow", "tracking", "token_type",
        "asid", "email", "friend_asids", "granted_permissions", "declined_permissions", "nonce", "id_token",
        "token_for_business",
    ]
    static let bytes = names.map { Array($0.utf8) }

    /// The field `key` names, by byte equality (never `String ==`, which equates canonically
    /// equivalent texts).
    static func named(_ key: String) -> Field? {
        var key = key
        return key.withUTF8 { named($0) }
    }

    /// The field a name's UTF-8 bytes spell.
    static func named(_ key: UnsafeBufferPointer<UInt8>) -> Field? {
        for (i, name) in bytes.enumerated() where name.count == key.count {
            if name.withUnsafeBufferPointer({ String.sameBytes($0, key) }) { return Field(rawValue: i) }
        }
        return nil
    }
}

/// The members of the record being validated; `null` counts as absent and is dropped.
private struct Fields {
    var members: [(key: String, value: JSONValue)]
    /// Where each `Field` is in `members` (-1: absent): one pass over the keys instead of a
    /// search per lookup.
    private var slots: [Int]

    init(members: [(key: String, value: JSONValue)]) {
        self.members = members.filter { if case .null = $0.value { false } else { true } }
        slots = Array(repeating: -1, count: Field.allCases.count)
        for (i, member) in self.members.enumerated() {
            if let field = Field.named(member.key) { slots[field.rawValue] = i }
        }
    }

    func raw(_ field: Field) -> JSONValue? {
        let i = slots[field.rawValue]
        return i < 0 ? nil : members[i].value
    }

    mutating func set(_ field: Field, _ value: JSONValue) {
        let i = slots[field.rawValue]
        if i >= 0 {
            members[i].value = value
        } else {
            slots[field.rawValue] = members.count
            members.append((field.name, value))
        }
    }

    func requiredString(_ field: Field) throws(Rejection) -> String {
        guard let value = raw(field) else { throw Rejection(.missingField, "field '\(field.name)' is required") }
        guard case let .string(s) = value else { throw Rejection(.invalidField, "field '\(field.name)' must be a string") }
        return s
    }

    func optionalString(_ field: Field) throws(Rejection) -> String? {
        guard let value = raw(field) else { return nil }
        guard case let .string(s) = value else { throw Rejection(.invalidField, "field '\(field.name)' must be a string") }
        return s
    }

    func optionalStringArray(_ field: Field) throws(Rejection) -> [String]? {
        guard let value = raw(field) else { return nil }
        guard case let .array(elements) = value else {
            throw Rejection(.invalidField, "field '\(field.name)' must be an array of strings")
        }
        var result: [String] = []
        result.reserveCapacity(elements.count)
        for element in elements {
            guard case let .string(s) = element else {
                throw Rejection(.invalidField, "field '\(field.name)' must be an array of strings")
            }
            result.append(s)
        }
        return result
    }

    func enumeration<E: RawRepresentable>(_ field: Field, _: E.Type) throws(Rejection) -> E? where E.RawValue == String {
        guard let s = try optionalString(field) else { return nil }
        guard let e = E(rawValue: s) else { throw Rejection(.invalidField, "field '\(field.name)' has unknown value \"\(s)\"") }
        return e
    }
}
