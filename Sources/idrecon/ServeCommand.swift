import ArgumentParser
import Foundation
import IdreconDomain
import IdreconService
import IdreconStore

/// Where the read API may listen, and with what: shared by `serve` and `consume --api-address`.
struct APIOptions: ParsableArguments {
    @Option(help: ArgumentHelp("Bearer tokens, one per line (# comments); re-read on SIGHUP. Without it the API is open, so it "
                               + "may listen on loopback only.", valueName: "file"))
    var tokenFile: String?
    @Flag(help: "Allow listening on a non-loopback address without --token-file (anyone who can reach it can read).")
    var insecure = false

    /// Refuses an address other than loopback without tokens (unless `--insecure`).
    func check(_ address: String, flag: String) throws {
        guard let (host, _) = ConsumeCommand.hostAndPort(address) else {
            throw ValidationError("\(flag) must be HOST:PORT (e.g. 127.0.0.1:8080, or port 0 for any free port)")
        }
        let loopback = host == "localhost" || host == "::1" || host.hasPrefix("127.")
        if !loopback, tokenFile == nil, !insecure {
            throw ValidationError("\(flag) \(address) is not loopback: give --token-file (or --insecure to serve it open)")
        }
    }

    /// Starts the API on `address` over `store`; SIGHUP re-reads the token file.
    func start(_ address: String, store: EventStore) async throws -> (ReadAPI, String) {
        let (host, port) = ConsumeCommand.hostAndPort(address)!
        let tokens = try tokenFile.map { path throws(IdreconError) in try BearerTokens(path: path) }
        if let tokens { TokenReload.install(tokens) }
        do {
            return try await ReadAPI.start(host: host, port: port, store: store, tokens: tokens)
        } catch {
            throw IdreconError(.configuration, "cannot serve the API on \(address): \(error)")
        }
    }
}

/// SIGHUP: the token file is read again (a bad file keeps the tokens in force).
enum TokenReload {
    nonisolated(unsafe) private static var source: (any DispatchSourceSignal)?

    static func install(_ tokens: BearerTokens) {
        signal(SIGHUP, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: SIGHUP, queue: .global())
        source.setEventHandler {
            do { try tokens.reload() } catch {
                FileHandle.standardError.write(Data("idrecon: \(error); the tokens read before stay in force\n".utf8))
            }
        }
        source.resume()
        Self.source = source
    }
}

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve the read API (access, users, devices, explain) as JSON over HTTP from a database.",
        discussion: """
            GET /v1/access/{asid}[?at=RFC3339], POST /v1/access {"asids": […], "at": …} (up to 10,000), \
            GET /v1/users/{asid}, /v1/devices/{app_id}/{device_id}, /v1/explain/{a}/{b}, /v1/openapi.yaml; \
            /healthz. Every answer gives applied_seq and projection_lag_events. SIGINT/SIGTERM stop it.
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var api: APIOptions
    @Option(help: ArgumentHelp("Listen here; port 0 picks a free port (printed on stderr).", valueName: "host:port"))
    var listen = "127.0.0.1:8080"

    func validate() throws { try api.check(listen, flag: "--listen") }

    func run() async throws {
        let store = try EventStore(path: global.databasePath, readOnly: true)
        let (server, address) = try await api.start(listen, store: store)
        FileHandle.standardError.write(Data("api: http://\(address)/v1 (and /healthz)\n".utf8))
        StopSignal.install()
        while !StopSignal.isRequested { try? await Task.sleep(for: .milliseconds(100)) }
        await server.stop()
    }
}
