import Foundation
import Hummingbird
import IdreconDomain
import IdreconStore
import Logging

/// The read API ("ask before you call"): access states, identities, devices and link chains as
/// JSON over HTTP/1 (Hummingbird), from a database a consumer or ingest writes. Every `/v1`
/// answer carries how far the projections are (`applied_seq`, `projection_lag_events`), so a
/// caller can tell "allowed" from "not yet known". `/healthz` stays open; with bearer tokens
/// everything under `/v1` needs one.
public final class ReadAPI: Sendable {
    private let server: HTTPServer

    /// ASIDs one `POST /v1/access` may ask about; more is 413.
    public static let maxBatch = 10_000
    /// The largest request body read (a full batch of 32-digit ASIDs fits with room).
    static let maxBody = 1 << 20

    /// Starts serving on `host:port` (port 0: any free port); returns once it listens, with the
    /// address it bound. `tokens` nil: no authentication (the caller allows that on loopback only).
    public static func start(host: String, port: Int, store: EventStore, tokens: BearerTokens?) async throws -> (ReadAPI, String) {
        let readers = EventLoopReaders(store: store)
        let router = Router()
        router.add(middleware: MethodNotAllowed<BasicRequestContext>())
        router.get("healthz") { _, _ -> Response in json(.ok, .object([("status", .string("alive"))])) }
        let v1 = router.group("v1").add(middleware: BearerAuthentication(tokens: tokens))
        v1.get("openapi.yaml") { _, _ -> Response in
            Response(status: .ok, headers: [.contentType: "application/yaml"], body: .init(byteBuffer: ByteBuffer(string: OpenAPIDocument.text)))
        }
        v1.get("access/:asid") { request, context -> Response in
            let asid = try context.parameters.require("asid")
            let atText = request.uri.queryParameters.get("at").map { String($0) }
            let at = atText.flatMap(Timestamp.parse)
            if let atText, at == nil { return Self.badTime(atText) }
            guard EventValidator.isASID(asid) else { return Self.error(.badRequest, "'\(asid.prefix(64))' is not an ASID (1-32 digits)") }
            return try await Self.reading { json(.ok, Self.accessBody(try store.access([asid], asOf: at), at: at)) }
        }
        v1.post("access") { request, _ -> Response in
            let body = try await request.body.collect(upTo: maxBody)
            guard let value = try? JSONParser.parse(Array(buffer: body)), case let .array(items)? = value["asids"] else {
                return Self.error(.badRequest, #"expected {"asids": ["…"], "at": optional RFC 3339}"#)
            }
            guard items.count <= maxBatch else {
                return Self.error(.contentTooLarge, "at most \(maxBatch) ASIDs per request, got \(items.count)")
            }
            var asids: [String] = []
            for item in items {
                guard case let .string(asid) = item, EventValidator.isASID(asid) else {
                    return Self.error(.badRequest, "every element of asids must be an ASID (1-32 digits)")
                }
                asids.append(asid)
            }
            var at: Int64?
            switch value["at"] {
            case nil, .null?: break
            case let .string(text)?:
                guard let ms = Timestamp.parse(text) else { return Self.badTime(text) }
                at = ms
            default: return Self.error(.badRequest, "at must be an RFC 3339 string")
            }
            return try await Self.reading { [asids, at] in
                json(.ok, Self.accessBody(try store.access(asids, asOf: at), at: at, list: true))
            }
        }
        v1.get("devices/:app/:device") { _, context -> Response in
            let (app, device) = (try context.parameters.require("app"), try context.parameters.require("device"))
            return try await Self.reading {
                guard let d = try store.device(app: app, device: device) else { return Self.error(.notFound, "no device \(device) in app \(app)") }
                return try Self.answer(store) { [Self.device(d)] }.single()
            }
        }
        v1.get("users/:asid") { _, context -> Response in
            let asid = try context.parameters.require("asid")
            return try await Self.reading {
            guard let user = try store.userID(asid: asid), let identity = try store.identity(user) else {
                return Self.error(.notFound, "no identity for \(asid)")
            }
            return try Self.answer(store) {
                [.object([
                    ("user_id", .string(identity.userID)),
                    ("members", .array(try identity.members.map { m in
                        .object([("asid", .string(m.asid)), ("first_login_at", .string(Timestamp.format(m.firstLoginAt))),
                                 ("access", .string(try store.access(m.asid).state.rawValue))])
                    })),
                    ("keys", .array(identity.keys.filter { $0.ambiguity == nil }.map { .string($0.key) })),
                    ("ambiguous_keys", .array(identity.keys.compactMap { k in k.ambiguity.map { why in
                        .object([("key", .string(k.key)), ("reason", .string(why.label)), ("asids", .number(String(k.asids)))])
                    } })),
                ])]
            }.single()
            }
        }
        v1.get("explain/:a/:b") { _, context -> Response in
            let (a, b) = (try context.parameters.require("a"), try context.parameters.require("b"))
            return try await Self.reading {
                guard let hops = try store.explain(a, b) else { return Self.error(.notFound, "\(a) and \(b) are not linked") }
                return try Self.answer(store) {
                    hops.enumerated().map { i, hop in
                        .object([("step", .number(String(i + 1))), ("from", .string(hop.from)), ("key", .string(hop.key)),
                                 ("to", .string(hop.to)), ("from_event", .string(hop.fromEvent)), ("to_event", .string(hop.toEvent))])
                    }
                }.list("steps")
            }
        }
        EventLoopAffinity.pinSharedLoops()
        // A client that stops sending (a slow or stuck one) is closed after 30 s, so that it
        // cannot hold connections open for ever.
        let (server, address) = try await HTTPServer.start(
            router: router, host: host, port: port, label: "idrecon.api", idleSeconds: 30,
            onEventLoop: { [AccessOnEventLoop(readers: readers, tokens: tokens)] },
            bytesFirst: { idle, logger in
                AccessFromBytes(readers: readers, tokens: tokens, idle: idle, logger: logger)
            })
        return (ReadAPI(server: server), address)
    }

    private init(server: HTTPServer) { self.server = server }

    /// Stops serving and waits for the server to close.
    public func stop() async { await server.stop() }

    // MARK: Answers

    /// Runs a blocking SQLite read off Swift's cooperative threads (two on this machine): a
    /// long batch must not hold up the server's other requests, `/healthz`, or a consumer's
    /// `/metrics` in the same process.
    static func reading(_ work: @escaping @Sendable () throws -> Response) async throws -> Response {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(with: Result { try work() }) }
        }
    }

    /// Rows read after the projections' position, so that the position is never ahead of them.
    struct Answer {
        var rows: [JSONValue]
        var position: [(String, JSONValue)]

        func single() -> Response { json(.ok, merged) }

        func list(_ name: String) -> Response { json(.ok, .object([(name, .array(rows))] + position)) }

        /// The first row with the position.
        var merged: JSONValue {
            guard case let .object(members)? = rows.first else { return rows.first ?? .object(position) }
            return .object(members + position)
        }
    }

    static func answer(_ store: EventStore, _ rows: () throws -> [JSONValue]) throws -> Answer {
        let log = try store.logPosition()
        return Answer(rows: try rows(), position: position(lastSeq: log.lastSeq, appliedSeq: log.appliedSeq))
    }

    static func position(lastSeq: Int64, appliedSeq: Int64) -> [(String, JSONValue)] {
        Array(zip(positionNames, positionValues(lastSeq: lastSeq, appliedSeq: appliedSeq)))
    }

    private static let positionNames = ["applied_seq", "projection_lag_events"]

    private static func positionValues(lastSeq: Int64, appliedSeq: Int64) -> [JSONValue] {
        [.number(String(appliedSeq)), .number(String(max(0, lastSeq - appliedSeq)))]
    }

    /// `GET /v1/access/{asid}`'s body (the answer with the position, merged) or, with `list`,
    /// `POST /v1/access`'s (`results` in request order, and the position): the CLI's `access`
    /// rows (`AccessAnswer.fields`), read with the position in one transaction. Written
    /// straight into bytes through layouts ordered once: building and encoding an object per
    /// answer cost a batch of 1,000 more CPU than its reads.
    static func accessBody(
        _ read: (answers: [AccessAnswer], lastSeq: Int64, appliedSeq: Int64), at: Int64?, list: Bool = false
    ) -> [UInt8] {
        let asOf = AccessAnswer.asOf(at)
        let position = positionValues(lastSeq: read.lastSeq, appliedSeq: read.appliedSeq)
        var out: [UInt8] = []
        out.reserveCapacity(64 + 192 * read.answers.count)
        if !list, read.answers.count == 1 {
            Layouts.single.write(read.answers[0].fields(asOf: asOf) + position, into: &out)
        } else {
            Layouts.list.write(into: &out) { i, out in
                guard i == 0 else { return CanonicalJSON.write(position[i - 1], into: &out) }
                out.append(UInt8(ascii: "["))
                for (n, answer) in read.answers.enumerated() {
                    if n > 0 { out.append(UInt8(ascii: ",")) }
                    Layouts.answer.write(answer.fields(asOf: asOf), into: &out)
                }
                out.append(UInt8(ascii: "]"))
            }
        }
        out.append(UInt8(ascii: "\n"))
        return out
    }

    private enum Layouts {
        static let answer = CanonicalJSON.Layout(AccessAnswer.fieldNames)
        static let single = CanonicalJSON.Layout(AccessAnswer.fieldNames + positionNames)
        static let list = CanonicalJSON.Layout(["results"] + positionNames)
    }

    /// The CLI's `device` row.
    static func device(_ d: DeviceRecord) -> JSONValue { .object(Array(zip(DeviceRecord.fieldNames, d.fields))) }

    /// A time that is not RFC 3339: 400, saying so.
    static func badTime(_ text: String) -> Response {
        error(.badRequest, "at must be RFC 3339, got '\(text.prefix(64))'")
    }

    static func error(_ status: HTTPResponse.Status, _ message: String) -> Response {
        json(status, .object([("error", .string(message)), ("status", .number(String(status.code)))]))
    }

    static func json(_ status: HTTPResponse.Status, _ body: JSONValue) -> Response { HTTPServer.json(status, body) }

    static func json(_ status: HTTPResponse.Status, _ body: [UInt8]) -> Response { HTTPServer.json(status, body) }
}

/// A path the API serves asked with another method: 405 with `Allow`, not a 404 that would
/// say the path does not exist.
struct MethodNotAllowed<Context: RequestContext>: RouterMiddleware {
    /// The API's paths (`*`: one segment) and their methods.
    static var routes: [(path: [Substring], methods: [HTTPRequest.Method])] {
        [(["healthz"], [.get]), (["v1", "openapi.yaml"], [.get]), (["v1", "access"], [.post]), (["v1", "access", "*"], [.get]),
         (["v1", "users", "*"], [.get]), (["v1", "devices", "*", "*"], [.get]), (["v1", "explain", "*", "*"], [.get])]
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let segments = request.uri.path.split(separator: "/")
        guard let route = Self.routes.first(where: { route in
            route.path.count == segments.count && zip(route.path, segments).allSatisfy { $0 == "*" || $0 == $1 }
        }) else { return try await next(request, context) }
        let allowed = route.methods
        guard allowed.contains(request.method) else {
            var response = ReadAPI.error(.methodNotAllowed, "\(request.method) is not served here; allowed: "
                                         + allowed.map(\.rawValue).joined(separator: ", "))
            response.headers[.allow] = allowed.map(\.rawValue).joined(separator: ", ")
            return response
        }
        return try await next(request, context)
    }
}

/// `Authorization: Bearer …` against the token file's tokens, compared in constant time; none
/// configured: every request passes (the server then listens on loopback only).
struct BearerAuthentication<Context: RequestContext>: RouterMiddleware {
    let tokens: BearerTokens?

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard BearerTokens.allow(request.headers[.authorization], tokens) else {
            var response = ReadAPI.error(.unauthorized, "a valid Authorization: Bearer token is required")
            response.headers[.wwwAuthenticate] = "Bearer"
            return response
        }
        return try await next(request, context)
    }
}

/// The bearer tokens of a file, one per line (blank lines and `#` comments skipped), read
/// again by `reload()` (the CLI calls it on SIGHUP).
public final class BearerTokens: @unchecked Sendable {
    private let path: String
    private let lock = NSLock()
    private var tokens: [[UInt8]] = []

    public init(path: String) throws(IdreconError) {
        self.path = path
        try reload()
    }

    public func reload() throws(IdreconError) {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw IdreconError(.input, "cannot read the token file \(path)")
        }
        let read = String(decoding: data, as: UTF8.self).split(whereSeparator: \.isNewline)
            .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty && !$0.hasPrefix("#") }.map { Array($0.utf8) }
        guard !read.isEmpty else { throw IdreconError(.input, "the token file \(path) holds no token") }
        lock.withLock { tokens = read }
    }

    public var count: Int { lock.withLock { tokens.count } }

    /// Whether a request with this `Authorization` header may read: any request when no tokens
    /// are configured, else one with `Bearer` and one of the tokens (the middleware's rule and
    /// the event loop's).
    static func allow(_ authorization: String?, _ tokens: BearerTokens?) -> Bool {
        guard let tokens else { return true }
        guard let header = authorization, header.hasPrefix("Bearer ") else { return false }
        return tokens.accepts(String(header.dropFirst(7)))
    }

    /// Whether `candidate` is one of the tokens; every token is compared whole, so the time
    /// does not depend on where a guess first differs.
    func accepts(_ candidate: String) -> Bool {
        let given = Array(candidate.utf8)
        var found = false
        for token in lock.withLock({ tokens }) {
            var difference = UInt8(token.count == given.count ? 0 : 1)
            for i in 0..<token.count { difference |= token[i] ^ (i < given.count ? given[i] : 0) }
            found = found || difference == 0
        }
        return found
    }
}
