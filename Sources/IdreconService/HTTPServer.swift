import Foundation
import Hummingbird
import IdreconDomain
import Logging

/// A Hummingbird HTTP/1 server in a task of its own: what the metrics server and the read API
/// run on. `start` returns once it listens, with the address it bound (port 0: any free port).
struct HTTPServer: Sendable {
    private let task: Task<Void, any Error>

    static func start(
        router: Router<BasicRequestContext>, host: String, port: Int, label: String, idleSeconds: Int64? = nil
    ) async throws -> (HTTPServer, String) {
        let (bound, boundContinuation) = AsyncStream<String>.makeStream()
        let app = Application(
            router: router,
            server: .http1(configuration: .init(idleTimeout: idleSeconds.map { .seconds($0) })),
            configuration: .init(address: .hostname(host, port: port), serverName: "idrecon"),
            onServerRunning: { channel in
                boundContinuation.yield("\(host):\(channel.localAddress?.port ?? port)")
                boundContinuation.finish()
            },
            // Stopping cancels the server: not an error worth a log line.
            logger: { var l = Logger(label: label); l.logLevel = .critical; return l }()
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

    /// Stops serving and waits for the server to close.
    func stop() async {
        task.cancel()
        _ = try? await task.value
    }

    /// A JSON response (canonical: keys sorted), one line.
    static func json(_ status: HTTPResponse.Status, _ body: JSONValue) -> Response {
        Response(status: status, headers: [.contentType: "application/json"],
                 body: .init(byteBuffer: ByteBuffer(string: CanonicalJSON.encode(body) + "\n")))
    }
}
