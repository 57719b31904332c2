import Foundation
import Hummingbird
import IdreconDomain
import Logging

/// `/metrics`, `/healthz` and `/readyz` over HTTP/1 (Hummingbird), for a running consumer.
public final class MetricsServer: Sendable {
    private let task: Task<Void, any Error>

    /// Starts serving on `host:port` (port 0: any free port); returns once it listens, with
    /// the address it bound.
    public static func start(host: String, port: Int, monitor: ConsumerMonitor) async throws -> (MetricsServer, String) {
        let router = Router()
        router.get("metrics") { _, _ -> Response in
            Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                     body: .init(byteBuffer: ByteBuffer(bytes: monitor.scrape())))
        }
        router.get("healthz") { _, _ -> Response in
            Self.json(.ok, .object([("status", .string("alive"))]))
        }
        router.get("readyz") { _, _ -> Response in
            let (ready, reasons) = monitor.readiness()
            return Self.json(ready ? .ok : .serviceUnavailable,
                             .object([("ready", .bool(ready)), ("reasons", .array(reasons.map(JSONValue.string)))]))
        }
        let (bound, boundContinuation) = AsyncStream<String>.makeStream()
        let app = Application(
            router: router,
            configuration: .init(address: .hostname(host, port: port), serverName: "idrecon"),
            onServerRunning: { channel in
                boundContinuation.yield("\(host):\(channel.localAddress?.port ?? port)")
                boundContinuation.finish()
            },
            logger: { var l = Logger(label: "idrecon.metrics"); l.logLevel = .critical; return l }() // stopping cancels the server: not an error
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
        return (MetricsServer(task: task), address)
    }

    private init(task: Task<Void, any Error>) { self.task = task }

    /// Stops serving and waits for the server to close.
    public func stop() async {
        task.cancel()
        _ = try? await task.value
    }

    static func json(_ status: HTTPResponse.Status, _ body: JSONValue) -> Response {
        Response(status: status, headers: [.contentType: "application/json"],
                 body: .init(byteBuffer: ByteBuffer(string: CanonicalJSON.encode(body) + "\n")))
    }
}
