import IdreconDomain

/// A row of `events` as the log writes it and the projections read it: the one description
/// of those columns. The append writes it (`insertSQL`, through its `Image`); the projections' catch-up,
/// replay's scan and the refolds of late events read it (`selectColumns`, `init(_:)`), so a
/// column is named, ordered and decoded in one place. The columns only the log reads (`nonce`,
/// the source and its position) are bound beside it; the canonical payload is kept apart, in
/// `event_payloads` under the same `seq`, so that scans of these columns do not read it.
package struct LoggedEvent: Sendable {
    /// The log's sequence number (0 for an event not stored yet).
    package var seq: Int64
    /// `occurred_at` (UTC ms) and `event_id`: the event-time order.
    package var key: EventKey
    package var appID: String
    package var deviceID: String
    package var type: EventType
    /// Logins only.
    package var tracking: Tracking?
    package var asid: String?
    /// `StableHash` of the device and of the ASID: the keys of the log's tiered indexes.
    package var deviceKey: Int64
    package var asidKey: Int64?
    /// The login's linking keys (`LinkKey`), nil when absent.
    package var linkEmail: String?
    package var linkTFB: String?
    /// The friend list as logged (ASIDs joined by ','; `StoredFriendList`), nil when absent:
    /// split only where it is used, so that a catch-up chunk's facts stay small.
    package var friends: String?
    package var declinesFriends: Bool

    /// The row of a validated event.
    package init(_ e: LoginEvent) {
        let login = e.type == .login
        seq = 0
        key = EventKey(at: e.occurredAt, eventID: e.eventID)
        appID = e.appID
        deviceID = e.deviceID
        type = e.type
        tracking = login ? e.tracking : nil
        asid = e.asid
        deviceKey = StableHash.key(e.appID, e.deviceID)
        asidKey = e.asid.map { StableHash.key($0) }
        linkEmail = login ? e.email.map(LinkKey.email) : nil
        linkTFB = login ? e.tokenForBusiness.map(LinkKey.tokenForBusiness) : nil
        friends = login ? e.friendASIDs?.joined(separator: String(UnicodeScalar(Self.friendSeparator))) : nil
        declinesFriends = login && (e.declinedPermissions?.contains("user_friends") ?? false)
    }

    /// What a `SELECT` of `selectColumns` reads.
    package static let selectColumns = """
        seq, event_id, occurred_at, app_id, device_id, type, tracking, asid, device_key, asid_key, \
        link_email, link_tfb, friends, declines_friends
        """

    /// Decodes the columns `selectColumns` names, in that order.
    package init(_ row: BulkStatement.Reader) {
        seq = row.int(0)
        key = EventKey(at: row.int(2), eventID: row.string(1))
        appID = row.string(3)
        deviceID = row.string(4)
        type = row.string(5) == "logout" ? .logout : .login
        tracking = row.optionalString(6).flatMap(Tracking.init)
        asid = row.optionalString(7)
        deviceKey = row.int(8)
        asidKey = row.isNull(9) ? nil : row.int(9)
        linkEmail = row.optionalString(10)
        linkTFB = row.optionalString(11)
        friends = row.optionalString(12)
        declinesFriends = row.int(13) == 1
    }

    /// What separates the ASIDs of a logged friend list (`friends`).
    package static let friendSeparator = UInt8(ascii: ",")

    /// Inserts a row whose `event_id` and `(app_id, nonce)` the append found free
    /// (`LogKeyRuns`). The canonical payload goes to `event_payloads` under the row's `seq`
    /// (`insertPayloadSQL`).
    static let insertSQL = """
        INSERT INTO events (event_id, type, occurred_at, app_id, device_id, asid, tracking, device_key, asid_key,
            link_email, link_tfb, friends, declines_friends, nonce, source_id, position)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        """

    static let insertPayloadSQL = "INSERT INTO event_payloads (seq, payload) VALUES (?, ?)"
}
