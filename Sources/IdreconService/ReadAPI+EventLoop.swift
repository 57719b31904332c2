import Foundation
import HTTPTypes
import HummingbirdCore
import IdreconDomain
import IdreconStore
import NIOCore
import NIOHTTPTypes

/// `GET /v1/access/{asid}` answered on the connection's event loop, where the request was read:
/// the question callers ask before every Graph call, and a point read of a few cached pages
/// (tens of microseconds). Through the router, the same request hops from the event loop to
/// Swift's executor, to a thread that may block on SQLite and back, and those hops cost more
/// CPU than the read (`perf`: a quarter of the server's samples in the kernel's task switching).
///
/// Only the plain case is taken here: a well-formed ASID, no query or one RFC 3339 `at`, a valid
/// token (or none configured), a connection kept alive. Everything else — errors, 401, other
/// paths, a read that fails — goes on to the router unchanged, which answers it as before, with
/// the same body (`ReadAPI.access`). While a request handed on is unanswered, every request is
/// handed on, so that answers leave in the order asked (HTTP/1 pipelining).
final class AccessOnEventLoop: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let readers: EventLoopReaders
    private var reader: PinnedReader?
    private let tokens: BearerTokens?
    /// Requests handed on to the router whose answer has not ended.
    private var handedOn = 0
    /// The request taken here, answered when its end arrives.
    private var taken: (request: HTTPRequest, asid: String, at: Int64?)?
    private var date = HTTPDate()

    init(readers: EventLoopReaders, tokens: BearerTokens?) {
        self.readers = readers
        self.tokens = tokens
    }

    func handlerAdded(context: ChannelHandlerContext) {
        // Without a connection of its own (it could not be opened), everything goes on.
        reader = readers.reader(for: context.eventLoop)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let request):
            if handedOn == 0, reader != nil, let (asid, at) = Self.plainAccess(request, tokens: tokens) {
                taken = (request, asid, at)
                return
            }
            handedOn += 1
            context.fireChannelRead(data)
        case .body:
            // A GET's body means nothing (the router ignores it too).
            if taken == nil { context.fireChannelRead(data) }
        case .end:
            guard let (request, asid, at) = taken else { return context.fireChannelRead(data) }
            taken = nil
            guard let read = try? reader?.access([asid], asOf: at) else {
                // The router answers the failure, as for any request.
                handedOn += 1
                context.fireChannelRead(wrapInboundOut(.head(request)))
                return context.fireChannelRead(data)
            }
            let bytes = ByteBuffer(bytes: ReadAPI.accessBody(read, at: at))
            let head = HTTPResponse(status: .ok, headerFields: [
                .contentType: "application/json", .contentLength: String(bytes.readableBytes), .date: date.text(),
                .server: "idrecon",
            ])
            context.write(wrapOutboundOut(.head(head)), promise: nil)
            context.write(wrapOutboundOut(.body(bytes)), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) { handedOn -= 1 }
        context.write(data, promise: promise)
    }

    /// The ASID and time of a request this handler answers, or nil to hand it on.
    static func plainAccess(_ request: HTTPRequest, tokens: BearerTokens?) -> (String, Int64?)? {
        guard request.method == .get, let path = request.path, request.headerFields[.connection] == nil else {
            return nil
        }
        return plainAccess(path: path, authorization: request.headerFields[.authorization], tokens: tokens)
    }

    /// The ASID and time of a GET of `path` answered without the router (`AccessFromBytes` too),
    /// or nil to hand it on: a valid token or none configured, a well-formed ASID, no query or
    /// one `at` that needs no decoding.
    static func plainAccess(path: String, authorization: String?, tokens: BearerTokens?) -> (String, Int64?)? {
        guard path.utf8.starts(with: prefix), BearerTokens.allow(authorization, tokens) else { return nil }
        let rest = path.utf8.dropFirst(prefix.count)
        let question = rest.firstIndex(of: UInt8(ascii: "?"))
        let asid = String(Substring(rest[..<(question ?? rest.endIndex)]))
        guard EventValidator.isASID(asid) else { return nil }
        guard let question else { return (asid, nil) }
        // Only `at=` with a value that needs no decoding; the router decodes anything else.
        let query = rest[rest.index(after: question)...]
        guard query.starts(with: "at=".utf8), !query.contains(where: { $0 == UInt8(ascii: "%") || $0 == UInt8(ascii: "+")
                                                                    || $0 == UInt8(ascii: "&") }),
              let at = Timestamp.parse(String(Substring(query.dropFirst(3))))
        else { return nil }
        return (asid, at)
    }

    private static let prefix = "/v1/access/".utf8
}

/// The `Date` header (RFC 9110's IMF-fixdate), formatted once a second.
struct HTTPDate {
    private var second = 0, cached = ""

    mutating func text() -> String {
        var now = time(nil)
        guard Int(now) != second else { return cached }
        var parts = tm()
        gmtime_r(&now, &parts)
        var buffer = [CChar](repeating: 0, count: 40)
        let count = strftime(&buffer, buffer.count, "%a, %d %b %Y %H:%M:%S GMT", &parts)
        (second, cached) = (Int(now), String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self))
        return cached
    }
}

/// One `PinnedReader` per event loop (a connection per core), opened by the first connection
/// the loop serves and kept while the server runs.
final class EventLoopReaders: @unchecked Sendable {
    private let store: EventStore
    private let lock = NSLock()
    private var readers: [ObjectIdentifier: PinnedReader] = [:]

    init(store: EventStore) { self.store = store }

    func reader(for loop: any EventLoop) -> PinnedReader? {
        lock.withLock {
            if let reader = readers[ObjectIdentifier(loop)] { return reader }
            let reader = try? store.pinnedReader()
            readers[ObjectIdentifier(loop)] = reader
            return reader
        }
    }
}
