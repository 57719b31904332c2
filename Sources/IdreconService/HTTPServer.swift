import Foundation
import Hummingbird
import HummingbirdCore
import IdreconDomain
import Logging
import NIOCore

/// A Hummingbird HTTP/1 server in a task of its own: what the metrics server and the read API
/// run on. `start` returns once it listens, with the address it bound (port 0: any free port).
struct HTTPServer: Sendable {
    private let task: Task<Void, any Error>

    /// `onEventLoop` makes the channel handlers that see each connection's requests on its event
    /// loop before the router does (the read API's single-ASID fast path). `bytesFirst`, when given,
    /// makes a handler that sees each connection's bytes before the HTTP decoder and keeps its idle
    /// timer until it hands the connection on (`AccessFromBytes`).
    static func start(
        router: Router<BasicRequestContext>, host: String, port: Int, label: String, idleSeconds: Int64? = nil,
        onEventLoop: @escaping @Sendable () -> [any RemovableChannelHandler] = { [] },
        bytesFirst: (@Sendable (_ idle: Duration?, _ logger: Logger) -> any ChannelHandler)? = nil
    ) async throws -> (HTTPServer, String) {
        let (bound, boundContinuation) = AsyncStream<String>.makeStream()
        // The idle timer goes before the event-loop handlers, so that it sees the requests they
        // answer (Hummingbird's own comes after them, and would close a busy connection as idle).
        let idle = idleSeconds.map { Duration.seconds($0) }
        // Stopping cancels the server: not an error worth a log line.
        let logger = { var l = Logger(label: label); l.logLevel = .critical; return l }()
        let app = Application(
            router: router,
            server: HTTPServerBuilder { responder in
                // Made for each connection (an autoclosure). With a bytes-first handler, that handler
                // keeps the idle timer until it hands on.
                let timed = bytesFirst == nil
                let http = HTTP1Channel(responder: responder, configuration: .init(additionalChannelHandlers:
                    (timed ? [HTTPConnectionStateHandler(idleTimeout: idle, logger: logger)] : []) + onEventLoop()))
                guard let bytesFirst else { return http }
                return BytesFirst(inner: http, first: { bytesFirst(idle, logger) })
            },
            configuration: .init(address: .hostname(host, port: port), serverName: "idrecon"),
            onServerRunning: { channel in
                boundContinuation.yield("\(host):\(channel.localAddress?.port ?? port)")
                boundContinuation.finish()
            },
            logger: logger
        )
        let task = Task {
            defer { boundContinuation.finish() } // a server that cannot bind ends the wait below
            try await app.runService(gracefulShutdownSignals: [])
        }
        var iterator = bound.makeAsyncIterator()
        guard let address = await iterator.next() else {
            _ = try await task.value
            throw CancellationError()
        }
        return (HTTPServer(task: task), address)
    }

    /// Hummingbird's HTTP/1 channel with one handler before its HTTP decoder.
    private struct BytesFirst: ServerChildChannel {
        let inner: HTTP1Channel
        let first: @Sendable () -> any ChannelHandler

        func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<HTTP1Channel.Value> {
            do {
                try channel.pipeline.syncOperations.addHandler(first())
            } catch {
                return channel.eventLoop.makeFailedFuture(error)
            }
            return inner.setup(channel: channel, logger: logger)
        }

        func handle(value: HTTP1Channel.Value, logger: Logger) async {
            await inner.handle(value: value, logger: logger)
        }
    }

    /// Stops serving and waits for the server to close.
    func stop() async {
        task.cancel()
        _ = try? await task.value
    }

    /// A JSON response (canonical: keys sorted), one line.
    static func json(_ status: HTTPResponse.Status, _ body: JSONValue) -> Response { json(status, jsonBytes(body)) }

    /// A response of JSON already encoded (with its line end).
    static func json(_ status: HTTPResponse.Status, _ body: [UInt8]) -> Response {
        Response(status: status, headers: [.contentType: "application/json"],
                 body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }

    static func jsonBytes(_ body: JSONValue) -> [UInt8] {
        var out: [UInt8] = []
        CanonicalJSON.write(body, into: &out)
        out.append(UInt8(ascii: "\n"))
        return out
    }
}
