/// A device's login mode.
public enum DeviceMode: String, Sendable, Codable, CaseIterable {
    case enabled, limited
    case loggedOut = "logged_out"
}

/// What a device projection needs of one event.
public struct DeviceFact: Sendable, Equatable {
    public var key: EventKey
    public var type: EventType
    public var tracking: Tracking?
    public var asid: String?

    public init(key: EventKey, type: EventType, tracking: Tracking?, asid: String?) {
        self.key = key
        self.type = type
        self.tracking = tracking
        self.asid = asid
    }
}

/// A time span during which a device holds an ASID in limited mode: from a limited login
/// until the device's next event (`to` nil while it is still the latest).
public struct LimitedSpan: Sendable, Equatable {
    public var asid: String
    public var from: EventKey
    public var to: EventKey?
}

/// Devices projection for one `(app_id, device_id)` (SPEC section 4). Facts must be
/// applied in event-time order; a late fact means folding the device again.
public struct DeviceState: Sendable, Equatable {
    public var mode: DeviceMode = .loggedOut
    public var asid: String?
    public var first: EventKey?
    public var last: EventKey?
    public var logins = 0
    public var logouts = 0
    public var anomalies = 0
    /// Tracking of the latest login, and whether a logout came after it: anomaly detection.
    public var lastLoginTracking: Tracking?
    public var logoutSinceLastLogin = false

    public init() {}

    /// The limited span still open: a limited device's latest event is the limited login
    /// that opened it, and the next fact closes it.
    public var openSpan: LimitedSpan? {
        guard mode == .limited, let asid, let last else { return nil }
        return LimitedSpan(asid: asid, from: last, to: nil)
    }

    /// Applies the next fact in event-time order. Returns the span this fact closes (the
    /// device was limited until now) and the span it opens (a limited login).
    @discardableResult
    public mutating func apply(_ fact: DeviceFact) -> (closed: LimitedSpan?, opened: LimitedSpan?) {
        // The log holds each event ID once, but a row added to it by hand can repeat one: the
        // device's latest key again is that event again, and changes nothing.
        if let last, last == fact.key { return (nil, nil) }
        precondition(last.map { $0 < fact.key } ?? true, "device facts must be applied in event-time order")
        var closed: LimitedSpan?
        if mode == .limited, let asid, let last { closed = LimitedSpan(asid: asid, from: last, to: fact.key) }
        if first == nil { first = fact.key }
        last = fact.key
        var opened: LimitedSpan?
        switch fact.type {
        case .logout:
            logouts += 1
            mode = .loggedOut
            asid = nil
            logoutSinceLastLogin = true
        case .login:
            logins += 1
            let tracking = fact.tracking ?? .enabled
            if let previous = lastLoginTracking, previous != tracking, !logoutSinceLastLogin { anomalies += 1 }
            lastLoginTracking = tracking
            logoutSinceLastLogin = false
            mode = tracking == .limited ? .limited : .enabled
            asid = fact.asid
            if tracking == .limited, let asid = fact.asid { opened = LimitedSpan(asid: asid, from: fact.key, to: nil) }
        }
        return (closed, opened)
    }

    /// Folds a device's facts (any order) into its state and every limited span.
    public static func fold(_ facts: [DeviceFact]) -> (state: DeviceState, spans: [LimitedSpan]) {
        var state = DeviceState()
        var spans: [LimitedSpan] = []
        for fact in facts.sorted(by: { $0.key < $1.key }) {
            let (closed, opened) = state.apply(fact)
            if let closed { spans[spans.count - 1] = closed }
            if let opened { spans.append(opened) }
        }
        return (state, spans)
    }
}
