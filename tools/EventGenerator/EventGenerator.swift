import IdreconDomain

/// SplitMix64: small, fast, deterministic for a seed.
public struct SeededRandom: RandomNumberGenerator, Sendable {
    private var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A stateless hash of `values` under `seed`, for attributes derived on demand.
    public static func hash(_ seed: UInt64, _ values: UInt64...) -> UInt64 {
        var rng = SeededRandom(seed: seed)
        var h = rng.next()
        for v in values {
            rng = SeededRandom(seed: h ^ v &* 0x2545_F491_4F6C_DD1D)
            h = rng.next()
        }
        return h
    }

    public mutating func chance(_ p: Double) -> Bool { Double(next() >> 11) / Double(1 << 53) < p }
}

/// Generator settings. Everything is derived from `seed`: the same settings give the
/// same bytes.
public struct GeneratorConfig: Sendable {
    /// Valid, unique events to produce (duplicates and bad records come on top).
    public var events: Int
    public var seed: UInt64 = 42
    /// Fraction of valid events followed by a single-defect bad record.
    public var badFraction = 0.02
    /// Fraction of valid events re-sent later (identical content, other key order).
    public var duplicateFraction = 0.01
    /// Arrival is shuffled within a window of this many events (out-of-order delivery).
    public var shuffleWindow = 64
    /// Persons in the population; default events / 20.
    public var persons: Int?
    /// Event IDs: `ev-<seed>-<n>` (increasing, as a producer's counter makes them) or random
    /// UUIDs (as many SDKs make them: they land all over the log's `event_id` index).
    public var uuidEventIDs = false
    /// Nonces: `n<seed>x<n>` (increasing: they land at the end of the log's nonce index) or
    /// random UUIDs (as the Facebook SDK makes one for each Limited Login).
    public var uuidNonces = false
    /// Friend lists hold 0 to this many ASIDs.
    public var maxFriends = 7
    /// Each person uses 1 to this many devices per app.
    public var maxDevicesPerApp = 3
    /// Percent of devices (other than tvOS) whose user prefers Limited Login.
    public var limitedPercent = 30
    /// Event time of the first event (UTC ms); default 2026-11-01T00:00:00Z.
    public var startMillis: Int64 = 1_793_491_200_000
    /// Reason codes the bad records cycle through.
    public var badCodes: [ReasonCode] = [
        .malformedJSON, .unsupportedSchema, .missingField, .invalidField, .tokenTypeMismatch,
        .permissionOutOfScope, .limitedUnsupported, .claimWithoutPermission, .eventIDConflict, .nonceReplay,
    ]

    public init(events: Int, seed: UInt64 = 42) {
        self.events = events
        self.seed = seed
    }
}

/// What a generated stream contains, so a run can be checked against it.
public struct GeneratorManifest: Codable, Sendable, Equatable {
    public var lines = 0
    public var valid = 0
    public var logins = 0
    public var logouts = 0
    public var limitedLogins = 0
    public var duplicates = 0
    public var quarantined: [String: Int] = [:]

    public var quarantinedTotal: Int { quarantined.values.reduce(0, +) }
}

/// Produces a realistic `login-event/v1` stream as JSON lines in bounded memory: persons
/// with several apps, devices and e-mail variants, friend lists, classic/limited/logout
/// mixes, tvOS device logins, out-of-order arrival, duplicates and bad records.
public struct EventStreamGenerator: IteratorProtocol, Sequence {
    public private(set) var manifest = GeneratorManifest()
    private let config: GeneratorConfig
    private var rng: SeededRandom
    private var produced = 0
    private var window: [[(key: String, value: JSONValue)]] = []
    private var output: [[UInt8]] = []
    private var outputIndex = 0
    private var recent: [[(key: String, value: JSONValue)]] = []
    private var badCounter = 0
    private var lastNonceByApp: [String: JSONValue] = [:]
    private var clock: Int64
    private let persons: Int

    static let apps = ["1001", "1002", "2001"]
    static let business = ["A", "A", "B"]
    /// Shared inbox many persons typed in: over-merge bait (more than 25 ASIDs).
    static let placeholderEmail = "noreply@example.invalid"

    public init(config: GeneratorConfig) {
        self.config = config
        self.rng = SeededRandom(seed: config.seed)
        self.clock = config.startMillis
        self.persons = Swift.max(10, config.persons ?? config.events / 20)
    }

    public mutating func next() -> [UInt8]? {
        while outputIndex >= output.count {
            output.removeAll(keepingCapacity: true)
            outputIndex = 0
            if produced < config.events {
                window.append(makeEvent())
                produced += 1
                if window.count > config.shuffleWindow { emitFromWindow() }
            } else if !window.isEmpty {
                emitFromWindow()
            } else {
                return nil
            }
        }
        defer { outputIndex += 1 }
        manifest.lines += 1
        return output[outputIndex]
    }

    private mutating func emitFromWindow() {
        let index = Int(rng.next() % UInt64(window.count))
        window.swapAt(index, window.count - 1)
        let event = window.removeLast()
        output.append(JSONValue.object(event).serialized())
        manifest.valid += 1
        if let nonce = value(event, "nonce"), case let .string(app)? = value(event, "app_id") { lastNonceByApp[app] = nonce }
        if case .string("logout")? = value(event, "type") { manifest.logouts += 1 } else {
            manifest.logins += 1
            if case .string("limited")? = value(event, "tracking") { manifest.limitedLogins += 1 }
        }
        if rng.chance(config.duplicateFraction * 2) {
            if recent.count < 256 { recent.append(event) } else { recent[Int(rng.next() % 256)] = event }
        }
        if !recent.isEmpty, rng.chance(config.duplicateFraction) {
            let dup = recent.remove(at: Int(rng.next() % UInt64(recent.count)))
            output.append(JSONValue.object(dup.reversed()).serialized())
            manifest.duplicates += 1
        }
        if !config.badCodes.isEmpty, rng.chance(config.badFraction) {
            var code = config.badCodes[badCounter % config.badCodes.count]
            badCounter += 1
            if code == .nonceReplay, value(event, "nonce") == nil, lastNonce(event) == nil { code = .missingField }
            output.append(badRecord(code, from: event))
            manifest.quarantined[code.rawValue, default: 0] += 1
        }
    }

    // MARK: Population, derived statelessly from the seed

    private func h(_ values: UInt64...) -> UInt64 {
        var acc = config.seed
        for v in values { acc = SeededRandom.hash(acc, v) }
        return acc
    }

    private func asid(person: Int, app: Int) -> String {
        let n = UInt64(person) * 4 + UInt64(app)
        let s = String(n)
        return "10" + String(repeating: "0", count: Swift.max(0, 13 - s.count)) + s
    }

    private func appsOf(person: Int) -> [Int] {
        let bits = h(1, UInt64(person)) % 7 + 1 // 1...7, non-empty subset of 3 apps
        return (0..<3).filter { bits & (1 << UInt64($0)) != 0 }
    }

    private func email(person: Int) -> String? {
        let r = h(2, UInt64(person)) % 100
        if r < 10 { return nil }
        if r < 12 { return Self.placeholderEmail }
        if r < 17 { return "family\(person / 3)@example.org" } // a few persons share a family inbox
        let names = ["ana", "bo", "chen", "dara", "eli", "femi", "gus", "hana", "ivo", "jun"]
        return "\(names[person % names.count]).\(person)@example.\(["com", "net", "org"][Int(h(3, UInt64(person)) % 3)])"
    }

    private mutating func emailVariant(_ email: String) -> String {
        switch rng.next() % 6 {
        case 0: return email.uppercased()
        case 1: return " \(email) "
        case 2: return email.prefix(1).uppercased() + email.dropFirst()
        default: return email
        }
    }

    private func devices(person: Int, app: Int) -> Int {
        Int(h(4, UInt64(person), UInt64(app)) % UInt64(Swift.max(1, config.maxDevicesPerApp))) + 1
    }

    private func platformOf(person: Int, app: Int, device: Int) -> Platform {
        let r = h(5, UInt64(person), UInt64(app), UInt64(device)) % 100
        switch r {
        case 0..<40: return .ios
        case 40..<75: return .android
        case 75..<85: return .web
        case 85..<93: return .tvos
        default: return .unity
        }
    }

    // MARK: Events

    private mutating func makeEvent() -> [(key: String, value: JSONValue)] {
        // Zipf-like: a few persons are very active.
        let u = Double(rng.next() >> 11) / Double(1 << 53)
        let person = Swift.min(persons - 1, Int(Double(persons) * u * u))
        let apps = appsOf(person: person)
        let app = apps[Int(rng.next() % UInt64(apps.count))]
        let device = Int(rng.next() % UInt64(devices(person: person, app: app)))
        let platform = platformOf(person: person, app: app, device: device)
        let deviceID = "dev-\(String(h(6, UInt64(person), UInt64(app), UInt64(device)) % 1_000_000_000_000, radix: 16))"
        clock += Int64(rng.next() % 4000) + 1
        let eventIndex = produced
        var fields: [(key: String, value: JSONValue)] = [
            ("schema", .string(LoginEvent.schemaName)),
            ("event_id", .string(config.uuidEventIDs ? uuid(eventIndex, salt: 9) : "ev-\(config.seed)-\(eventIndex)")),
            ("occurred_at", .string(timestamp(clock))),
            ("app_id", .string(Self.apps[app])),
            ("device_id", .string(deviceID)),
            ("platform", .string(platform.rawValue)),
        ]
        if rng.chance(0.12) {
            fields.insert(("type", .string("logout")), at: 2)
            if rng.chance(0.5) { fields.append(("asid", .string(asid(person: person, app: app)))) }
            return fields
        }
        let prefersLimited = platform != .tvos && h(7, UInt64(person), UInt64(app), UInt64(device)) % 100 < UInt64(config.limitedPercent)
        let limited = platform != .tvos && (rng.chance(0.03) ? !prefersLimited : prefersLimited)
        let me = asid(person: person, app: app)
        fields.append(("flow", .string(platform == .tvos ? Flow.deviceLogin.rawValue : (rng.chance(0.5) ? Flow.loginManager.rawValue : Flow.loginButton.rawValue))))
        fields.append(("tracking", .string(limited ? "limited" : "enabled")))
        fields.append(("token_type", .string(limited ? "authentication_token" : "access_token")))
        fields.append(("asid", .string(me)))
        var granted = ["public_profile"]
        var declined: [String] = []
        if let email = email(person: person), rng.chance(0.85) {
            granted.append("email")
            fields.append(("email", .string(emailVariant(email))))
        }
        if rng.chance(0.5) {
            granted.append("user_friends")
            let count = Int(rng.next() % UInt64(config.maxFriends + 1))
            var friends: [JSONValue] = []
            for _ in 0..<count {
                let other = Int(rng.next() % UInt64(persons))
                friends.append(.string(asid(person: other, app: app)))
            }
            fields.append(("friend_asids", .array(friends)))
        } else if rng.chance(0.1) {
            declined.append("user_friends")
        }
        if !limited, rng.chance(0.3) { granted.append(["user_likes", "user_photos", "user_posts"][Int(rng.next() % 3)]) }
        if limited, rng.chance(0.2) { granted.append("user_birthday") }
        fields.append(("granted_permissions", .array(granted.map(JSONValue.string))))
        if !declined.isEmpty { fields.append(("declined_permissions", .array(declined.map(JSONValue.string)))) }
        if limited || rng.chance(0.5) {
            fields.append(("nonce", .string(config.uuidNonces ? uuid(eventIndex, salt: 11) : "n\(config.seed)x\(eventIndex)")))
        }
        if !limited, Self.business[app] == "A", rng.chance(0.7) {
            fields.append(("token_for_business", .string("tfb\(Self.business[app])\(String(h(8, UInt64(person)) % 1_000_000_007))")))
        }
        if rng.chance(0.02) { fields.append(("sdk_version", .string("17.0.\(rng.next() % 3)"))) } // unknown field, kept
        return fields
    }

    /// A version-4-shaped UUID derived from the seed, the event's number and `salt` (no draw from
    /// `rng`: the rest of the stream is the same whatever the IDs).
    private func uuid(_ index: Int, salt: UInt64) -> String {
        func hex(_ value: UInt64, _ digits: Int) -> String {
            let text = String(value, radix: 16)
            return String(repeating: "0", count: Swift.max(0, digits - text.count)) + text.suffix(digits)
        }
        let a = h(salt, UInt64(index)), b = h(salt + 1, UInt64(index))
        return "\(hex(a >> 32, 8))-\(hex((a >> 16) & 0xFFFF, 4))-4\(hex(a & 0xFFF, 3))-"
            + "\(hex(0x8000 | (b >> 48) & 0x3FFF, 4))-\(hex(b & 0xFFFF_FFFF_FFFF, 12))"
    }

    /// RFC 3339 in a random but equivalent rendering (Z, an offset, milliseconds).
    private mutating func timestamp(_ millis: Int64) -> String {
        let utc = Timestamp.format(millis)
        switch rng.next() % 4 {
        case 0: return String(utc.prefix(19)) + "Z"
        case 1:
            let local = Timestamp.format(millis + 3_600_000)
            return String(local.prefix(23)) + "+01:00"
        case 2:
            let local = Timestamp.format(millis - 5 * 3_600_000 - 1_800_000)
            return String(local.prefix(19)) + "-05:30"
        default: return utc
        }
    }

    // MARK: Bad records: exactly one defect each

    private func lastNonce(_ event: [(key: String, value: JSONValue)]) -> JSONValue? {
        guard case let .string(app)? = value(event, "app_id") else { return nil }
        return lastNonceByApp[app]
    }

    private func value(_ fields: [(key: String, value: JSONValue)], _ key: String) -> JSONValue? {
        fields.first(where: { $0.key == key })?.value
    }

    private func setting(_ fields: [(key: String, value: JSONValue)], _ key: String, _ value: JSONValue?) -> [(key: String, value: JSONValue)] {
        var out = fields.filter { $0.key != key }
        if let value { out.append((key, value)) }
        return out
    }

    private mutating func badRecord(_ code: ReasonCode, from event: [(key: String, value: JSONValue)]) -> [UInt8] {
        let n = badCounter
        // A valid classic login that shares nothing with the log.
        var base = event
        if case .string("logout")? = value(base, "type") {
            base = setting(base, "type", nil)
            base = setting(base, "tracking", .string("enabled"))
            base = setting(base, "token_type", .string("access_token"))
            base = setting(base, "asid", .string("9\(n)"))
        }
        base = setting(base, "event_id", .string("bad-\(config.seed)-\(n)"))
        base = setting(base, "nonce", .string("bad-nonce-\(config.seed)-\(n)"))
        var limitedBase = setting(base, "tracking", .string("limited"))
        limitedBase = setting(limitedBase, "token_type", .string("authentication_token"))
        limitedBase = setting(limitedBase, "token_for_business", nil)
        limitedBase = setting(limitedBase, "flow", .string(Flow.loginManager.rawValue))
        limitedBase = setting(limitedBase, "platform", .string(Platform.ios.rawValue))
        limitedBase = setting(limitedBase, "granted_permissions", nil)
        limitedBase = setting(limitedBase, "declined_permissions", nil)
        let encode = { (fields: [(key: String, value: JSONValue)]) in JSONValue.object(fields).serialized() }
        switch code {
        case .malformedJSON:
            switch n % 3 {
            case 0: return Array(encode(base).dropLast(7)) // truncated
            case 1: return Array(#"{"schema":"login-event/v1","event_id":"x"#.utf8) + [0xFF, 0xFE] + Array(#""}"#.utf8) // not UTF-8
            default: return Array("[1,2,3]".utf8) // JSON but not an object
            }
        case .unsupportedSchema:
            return encode(setting(base, "schema", n % 2 == 0 ? .string("login-event/v2") : nil))
        case .missingField:
            return encode(setting(base, ["occurred_at", "app_id", "device_id", "tracking", "event_id"][n % 5], nil))
        case .invalidField:
            let (key, bad): (String, JSONValue) = [
                ("asid", .string("12ab")), ("occurred_at", .string("2026-11-01 noon")), ("email", .string("no-at-sign")),
                ("platform", .string("symbian")), ("app_id", .number("1001")), ("friend_asids", .array([.string("x")])),
            ][n % 6]
            var fields = setting(base, key, bad)
            if key == "email" || key == "friend_asids" { fields = setting(fields, "granted_permissions", nil) }
            return encode(fields)
        case .tokenTypeMismatch:
            return encode(setting(limitedBase, "token_type", .string("access_token")))
        case .permissionOutOfScope:
            return encode(setting(limitedBase, "granted_permissions", .array([.string("public_profile"), .string("email"), .string("user_friends"), .string("user_likes")])))
        case .limitedUnsupported:
            return encode(n % 2 == 0 ? setting(limitedBase, "platform", .string("tvos")) : setting(limitedBase, "flow", .string("device_login")))
        case .claimWithoutPermission:
            let fields = setting(setting(base, "email", .string("someone@example.com")), "granted_permissions", .array([.string("public_profile")]))
            return encode(setting(fields, "friend_asids", nil))
        case .eventIDConflict:
            return encode(setting(event, "device_id", .string("conflicting-device-\(n)")))
        case .nonceReplay:
            // Reuse a nonce already in the log: the event's own, or the last one emitted.
            return encode(setting(base, "nonce", value(event, "nonce") ?? lastNonce(event)))
        case .tokenInvalid:
            return encode(setting(limitedBase, "id_token", .string("not.a-valid.token")))
        }
    }
}
