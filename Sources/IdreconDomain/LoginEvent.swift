/// The stable reason codes of SPEC section 2. Their raw values are part of the contract.
public enum ReasonCode: String, CaseIterable, Sendable, Codable, Comparable {
    case malformedJSON = "malformed_json"
    case unsupportedSchema = "unsupported_schema"
    case missingField = "missing_field"
    case invalidField = "invalid_field"
    case tokenTypeMismatch = "token_type_mismatch"
    case permissionOutOfScope = "permission_out_of_scope"
    case limitedUnsupported = "limited_unsupported"
    case claimWithoutPermission = "claim_without_permission"
    case eventIDConflict = "event_id_conflict"
    case nonceReplay = "nonce_replay"
    case tokenInvalid = "token_invalid"

    public static func < (lhs: ReasonCode, rhs: ReasonCode) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// Why a record is quarantined: a stable code and a human message naming the field.
public struct Rejection: Error, Equatable, Sendable {
    public var code: ReasonCode
    public var message: String

    public init(_ code: ReasonCode, _ message: String) {
        self.code = code
        self.message = message
    }
}

public enum EventType: String, Sendable, Codable, CaseIterable { case login, logout }
public enum Tracking: String, Sendable, Codable, CaseIterable { case enabled, limited }
public enum TokenType: String, Sendable, Codable, CaseIterable { case accessToken = "access_token", authenticationToken = "authentication_token" }
public enum Platform: String, Sendable, Codable, CaseIterable { case ios, tvos, android, web, unity }
public enum Flow: String, Sendable, Codable, CaseIterable { case loginManager = "login_manager", loginButton = "login_button", deviceLogin = "device_login" }

/// A validated `login-event/v1`. `canonicalPayload` is the stored form: sorted keys,
/// defaults applied, `occurred_at` in UTC milliseconds, nulls and self-friends dropped,
/// unknown fields kept.
public struct LoginEvent: Sendable, Equatable {
    public var eventID: String
    public var type: EventType
    /// Event time, UTC milliseconds since the epoch.
    public var occurredAt: Int64
    public var appID: String
    public var deviceID: String
    public var platform: Platform
    public var flow: Flow?
    public var tracking: Tracking?
    public var tokenType: TokenType?
    public var asid: String?
    public var email: String?
    public var friendASIDs: [String]?
    public var grantedPermissions: [String]?
    public var declinedPermissions: [String]?
    public var nonce: String?
    public var idToken: String?
    public var tokenForBusiness: String?
    public var canonicalPayload: String

    public static let schemaName = "login-event/v1"
}

/// Facebook's Limited Login permission list (SPEC section 1), exactly.
public let limitedLoginPermissions: Set<String> = [
    "public_profile", "email", "gaming_profile", "gaming_user_picture", "user_age_range", "user_birthday",
    "user_friends", "user_gender", "user_hometown", "user_link", "user_location", "user_messenger_contact",
]
