import Foundation
import Hummingbird
import IdreconDomain
import Logging

/// `/metrics`, `/healthz` and `/readyz` over HTTP/1 (Hummingbird), for a running consumer.
public final class MetricsServer: Sendable {
    private let server: HTTPServer

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
        let (server, address) = try await HTTPServer.start(router: router, host: host, port: port, label: "idrecon.metrics")
        return (MetricsServer(server: server), address)
    }

    private init(server: HTTPServer) { self.server = server }

    /// Stops serving and waits for the server to close.
    public func stop() async { await server.stop() }

    static func json(_ status: HTTPResponse.Status, _ body: JSONValue) -> Response { HTTPServer.json(status, body) }
}
