import Foundation
import GRDB
import IdreconDomain
import IdreconKafka
import Testing

/// `idrecon serve`: every endpoint over real HTTP against the CLI's own answers, bearer
/// tokens (401 without, re-read on SIGHUP), 413 on a too-large batch, the OpenAPI document.
@Suite(.serialized) struct ReadAPITests {
    static let curl = MetricsTests.curl

    /// Status and body of a request (`-H` headers, optional POST body).
    static func request(_ url: String, token: String? = nil, post: String? = nil) throws -> (Int, String) {
        var arguments = ["-s", "-m", "10", "-w", "\n%{http_code}"]
        if let token { arguments += ["-H", "Authorization: Bearer \(token)"] }
        if let post { arguments += ["-X", "POST", "-H", "Content-Type: application/json", "--data-binary", post] }
        let result = try run(curl!, arguments + [url])
        let lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        return (Int(lines.last ?? "") ?? 0, lines.dropLast().joined(separator: "\n"))
    }

    /// Starts `idrecon arguments` with stderr in `log`; returns it and the API's base URL once
    /// it has printed it (`api: http://…`).
    static func start(_ arguments: [String], log: String) throws -> (Process, String) {
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Binaries.idrecon)
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle(forWritingAtPath: log)
        try process.run()
        var base = ""
        let listening = try MetricsTests.waitFor(30) {
            let text = try String(contentsOfFile: log, encoding: .utf8)
            guard let range = text.range(of: #"http://[0-9.:]+"#, options: .regularExpression) else { return false }
            base = String(text[range])
            return true
        }
        #expect(listening, "never listened: \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
        return (process, base)
    }

    /// A JSON object's members, without the projections' position (which the CLI does not print).
    static func object(_ text: String) -> [String: JSONValue] {
        guard case let .object(members)? = try? JSONParser.parse(Array(text.utf8)) else { return [:] }
        return Dictionary(members.filter { !["applied_seq", "projection_lag_events"].contains($0.key) }, uniquingKeysWith: { a, _ in a })
    }

    @Test func everyEndpointAnswersAsTheCLIDoesAndTokensAreRequired() throws {
        guard Self.curl != nil else {
            print("skipped: everyEndpointAnswersAsTheCLIDoesAndTokensAreRequired needs curl (apt-get install curl)")
            return
        }
        let s = Scratch()
        let db = s.path("db.sqlite"), tokens = s.path("tokens"), log = s.path("serve.txt")
        #expect(try run(Binaries.idrecon, ["ingest", "-", "--db", db], stdin: QueryCLITests.stream).status == 0)
        _ = FileManager.default.createFile(atPath: tokens, contents: Data("# readers\nfirst-token\n".utf8))
        let (server, base) = try Self.start(["serve", "--db", db, "--listen", "127.0.0.1:0", "--token-file", tokens], log: log)
        defer { if server.isRunning { kill(server.processIdentifier, SIGKILL) } }
        let token = "first-token"

        // Authentication: health is open; everything under /v1 needs a valid bearer token.
        #expect(try Self.request(base + "/healthz").0 == 200)
        #expect(try Self.request(base + "/v1/access/300").0 == 401)
        #expect(try Self.request(base + "/v1/access/300", token: "first-toke").0 == 401)
        #expect(try Self.request(base + "/v1/access/300", token: "first-token-and-more").0 == 401)

        // Access, one and many, equal to `access --format json`, with the projections' position.
        for (asid, at) in [("300", nil), ("400", nil), ("99", nil), ("777", nil), ("400", "2026-11-01T07:00:00Z")] as [(String, String?)] {
            let (status, body) = try Self.request(base + "/v1/access/\(asid)" + (at.map { "?at=\($0)" } ?? ""), token: token)
            #expect(status == 200, "\(asid): \(body)")
            let cli = try run(Binaries.idrecon, ["access", asid, "--db", db, "--format", "json"] + (at.map { ["--as-of", $0] } ?? []))
            #expect(Self.object(body) == Self.object(cli.stdout), "\(asid): \(body) vs \(cli.stdout)")
            #expect(body.contains(#""applied_seq":3"#) && body.contains(#""projection_lag_events":0"#), "\(body)")
        }
        let (batchStatus, batch) = try Self.request(base + "/v1/access", token: token, post: #"{"asids":["400","300","777"]}"#)
        #expect(batchStatus == 200)
        if case let .array(results)? = try JSONParser.parse(Array(batch.utf8))["results"] {
            #expect(results.compactMap { if case let .string(a)? = $0["asid"] { a } else { nil } } == ["400", "300", "777"])
        } else { Issue.record("no results: \(batch)") }
        let tooMany = "{\"asids\":[" + Array(repeating: "\"1\"", count: 10_001).joined(separator: ",") + "]}"
        #expect(try Self.request(base + "/v1/access", token: token, post: tooMany).0 == 413)
        #expect(try Self.request(base + "/v1/access", token: token, post: "{nope").0 == 400)
        #expect(try Self.request(base + "/v1/access/12ab", token: token).0 == 400)
        #expect(try Self.request(base + "/v1/access/300?at=yesterday", token: token).0 == 400)

        // Users, devices, explain: the CLI's fields; 404 with a JSON error when not found.
        let (userStatus, user) = try Self.request(base + "/v1/users/300", token: token)
        #expect(userStatus == 200 && user.contains(#""user_id":"u:400""#) && user.contains(#""asid":"300""#), "\(user)")
        let (missingStatus, missing) = try Self.request(base + "/v1/users/777", token: token)
        #expect(missingStatus == 404 && missing.contains(#""error":"#))
        let (deviceStatus, device) = try Self.request(base + "/v1/devices/2/Q", token: token)
        let cliDevice = try run(Binaries.idrecon, ["device", "2", "Q", "--db", db, "--format", "json"]).stdout
        #expect(deviceStatus == 200 && Self.object(device) == Self.object(cliDevice), "\(device) vs \(cliDevice)")
        #expect(try Self.request(base + "/v1/devices/2/nope", token: token).0 == 404)
        let (explainStatus, explain) = try Self.request(base + "/v1/explain/300/400", token: token)
        #expect(explainStatus == 200 && explain.contains(#""from_event":"a""#), "\(explain)")
        #expect(try Self.request(base + "/v1/explain/300/500", token: token).0 == 404)

        // The OpenAPI document served is the one in schemas/.
        let (docStatus, doc) = try Self.request(base + "/v1/openapi.yaml", token: token)
        let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("schemas/openapi.yaml")
        let document = try String(contentsOf: file, encoding: .utf8)
        #expect(docStatus == 200 && doc + "\n" == document)

        // Hostile requests: 4xx, and the server keeps answering.
        #expect(try Self.request(base + "/v1/access/..%2F..%2Fetc%2Fpasswd", token: token).0 == 400)
        #expect(try Self.request(base + "/v1/access/1?at=%00", token: token).0 == 400)
        #expect(try Self.request(base + "/v1/nothing/here", token: token).0 == 404)
        let trace = try run(Self.curl!, ["-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "DELETE", base + "/v1/access/300"])
        #expect(trace.stdout == "405", "a served path asked with another method: \(trace.stdout)")
        #expect(try Self.request(base + "/v1/access", token: token, post: #"{"asids":["300"],"at":7}"#).0 == 400)
        #expect(try Self.request(base + "/v1/access", token: token, post: "[\"not an object\"]").0 == 400)
        let headers = s.path("headers.txt")
        try Data(("X-Big: " + String(repeating: "x", count: 300_000) + "\n").utf8).write(to: URL(fileURLWithPath: headers))
        let big = try run(Self.curl!, ["-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", "@" + headers, base + "/v1/access/300"])
        #expect(["400", "431"].contains(big.stdout), "\(big.stdout)")
        #expect(try Self.request(base + "/v1/access/300", token: token).0 == 200)

        // SIGHUP re-reads the tokens: the new one works, the old one no longer does.
        try Data("second-token\n".utf8).write(to: URL(fileURLWithPath: tokens))
        kill(server.processIdentifier, SIGHUP)
        #expect(try MetricsTests.waitFor(10) { try Self.request(base + "/v1/access/300", token: "second-token").0 == 200 })
        #expect(try Self.request(base + "/v1/access/300", token: token).0 == 401)
        kill(server.processIdentifier, SIGTERM)
        #expect(wait(server, seconds: 30) == 0)
    }

    /// `consume --api-address`: the running consumer answers as `access` does once it has
    /// consumed the topic.
    @Test func theConsumerServesTheAPIWhileItConsumes() throws {
        guard Self.curl != nil else { return print("skipped: theConsumerServesTheAPIWhileItConsumes needs curl") }
        let s = Scratch()
        let lines = kafkaStream(events: 1500, seed: 8)
        let cluster = try MockCluster(brokers: 1)
        try cluster.createTopic("api", partitions: 2, replicationFactor: 1)
        try produce(lines, to: cluster, topic: "api")
        let db = s.path("db.sqlite"), log = s.path("consume.txt")
        let (consumer, base) = try Self.start(["consume", "--brokers", cluster.bootstrap, "--topic", "api", "--group", "g", "--db", db,
                                               "--api-address", "127.0.0.1:0", "--log-level", "error", "-X", "session.timeout.ms=6000"],
                                              log: log)
        defer { if consumer.isRunning { kill(consumer.processIdentifier, SIGKILL) } }
        #expect(MetricsTests.waitFor(60) { storedOffsets(db) == Int64(lines.count) })
        // The consumer's projections trail the log (write-behind) until it is idle a moment.
        var first: String?
        #expect(try MetricsTests.waitFor(60) { first = try DatabaseQueueReader.firstASID(db); return first != nil })
        let asid = try #require(first)
        #expect(try MetricsTests.waitFor(30) {
            let (status, body) = try Self.request(base + "/v1/access/\(asid)")
            let cli = try run(Binaries.idrecon, ["access", asid, "--db", db, "--format", "json"]).stdout
            return status == 200 && Self.object(body) == Self.object(cli) && body.contains(#""projection_lag_events":0"#)
        })
        kill(consumer.processIdentifier, SIGTERM)
        #expect(wait(consumer, seconds: 60) == 0)
    }

    /// Requests pipelined on one connection are answered in the order asked, whether the event
    /// loop answers them (`GET /v1/access/{asid}`) or the router does (everything else).
    @Test func pipelinedRequestsAreAnsweredInOrder() throws {
        let s = Scratch()
        let db = s.path("db.sqlite")
        #expect(try run(Binaries.idrecon, ["ingest", "-", "--db", db], stdin: QueryCLITests.stream).status == 0)
        let (server, base) = try Self.start(["serve", "--db", db, "--listen", "127.0.0.1:0"], log: s.path("serve.txt"))
        defer { if server.isRunning { kill(server.processIdentifier, SIGKILL) } }
        let port = try #require(UInt16(base.split(separator: ":").last ?? ""))
        let post = #"{"asids":["400"]}"#
        let requests = [
            "POST /v1/access HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: \(post.utf8.count)\r\n\r\n\(post)",
            "GET /v1/access/300 HTTP/1.1\r\nHost: t\r\n\r\n",
            "GET /v1/users/300 HTTP/1.1\r\nHost: t\r\n\r\n",
            "GET /v1/access/777?at=2026-11-01T07:00:00Z HTTP/1.1\r\nHost: t\r\n\r\n",
            "GET /v1/access/12ab HTTP/1.1\r\nHost: t\r\n\r\n",
            "GET /v1/access/400 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        ]
        let answer = try Self.exchange(port: port, requests.joined())
        // Each body names what it answers, in request order.
        let marks = [#""results":[{"#, #""asid":"300""#, #""user_id":"u:400""#, #""asid":"777""#, #""status":400"#, #""asid":"400""#]
        var rest = Substring(answer)
        for mark in marks {
            guard let found = rest.range(of: mark) else {
                Issue.record("\(mark) missing or out of order in: \(answer)")
                break
            }
            rest = rest[found.upperBound...]
        }
        #expect(answer.components(separatedBy: "HTTP/1.1 ").count - 1 == requests.count, "\(answer)")
        kill(server.processIdentifier, SIGTERM)
        #expect(wait(server, seconds: 30) == 0)
    }

    /// The plain GET answered from the connection's bytes (`AccessFromBytes`) says what the
    /// router says for it, whatever the header names' case; a head sent in pieces is answered once
    /// whole; a request it does not take (here one without the token: the router's 401) goes with
    /// every later byte to the HTTP decoder, and the answers stay in the order asked, to the
    /// decoder's 400 for a folded header line, which closes the connection.
    @Test func plainGETsFromTheBytesAnswerAsTheRouterDoes() throws {
        let s = Scratch()
        let db = s.path("db.sqlite"), tokens = s.path("tokens")
        #expect(try run(Binaries.idrecon, ["ingest", "-", "--db", db], stdin: QueryCLITests.stream).status == 0)
        _ = FileManager.default.createFile(atPath: tokens, contents: Data("t0k\n".utf8))
        let (server, base) = try Self.start(
            ["serve", "--db", db, "--listen", "127.0.0.1:0", "--token-file", tokens], log: s.path("serve.txt"))
        defer { if server.isRunning { kill(server.processIdentifier, SIGKILL) } }
        let port = try #require(UInt16(base.split(separator: ":").last ?? ""))
        let get = "GET /v1/access/300 HTTP/1.1\r\nHost: t\r\nauthorization:   Bearer t0k \r\n\r\n"
        let requests = [
            get,
            "GET /v1/access/300?at=2026-11-01T07:00:00Z HTTP/1.1\r\nAUTHORIZATION: Bearer t0k\r\n\r\n",
            "GET /v1/access/300 HTTP/1.1\r\nHost: t\r\n\r\n", // no token: the router's 401
            "GET /v1/users/300 HTTP/1.1\r\nAuthorization: Bearer t0k\r\n\r\n",
            get, // handed on: the router answers it
            "GET /v1/access/300 HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer t0k\r\n folded\r\n\r\n",
        ]
        // The first head in three pieces, the rest at once.
        let whole = requests.joined()
        let pieces = [String(whole.prefix(9)), String(whole.dropFirst(9).prefix(20)), String(whole.dropFirst(29))]
        let answer = try Self.exchange(port: port, pieces: pieces)
        let responses = answer.components(separatedBy: "HTTP/1.1 ").dropFirst().map { String($0) }
        #expect(responses.count == requests.count, "\(answer)")
        guard responses.count == requests.count else { return }
        let statuses = responses.map { String($0.prefix(3)) }
        #expect(statuses == ["200", "200", "401", "200", "200", "400"], "\(answer)")
        func body(_ response: String) -> String {
            String(response.split(separator: "\r\n\r\n", maxSplits: 1).last ?? "")
        }
        // From the bytes (first) and from the router (fifth, after the hand-over): the same answer.
        #expect(body(responses[0]) == body(responses[4]))
        #expect(body(responses[0]).contains(#""asid":"300""#))
        #expect(body(responses[1]).contains(#""as_of":"2026-11-01T07:00:00"#))
        #expect(body(responses[3]).contains(#""user_id":"u:"#))
        // Lines ended by a bare LF are the decoder's to judge (a 400), not a head left waiting.
        let bare = try Self.exchange(port: port, "GET /v1/access/300 HTTP/1.1\nAuthorization: Bearer t0k\n\n")
        #expect(bare.hasPrefix("HTTP/1.1 400"), "\(bare)")
        kill(server.processIdentifier, SIGTERM)
        #expect(wait(server, seconds: 30) == 0)
    }

    /// Sends `text` on one TCP connection to 127.0.0.1:`port` and reads until the server closes it.
    static func exchange(port: UInt16, _ text: String) throws -> String { try exchange(port: port, pieces: [text]) }

    /// Sends `pieces` on one TCP connection to 127.0.0.1:`port`, 50 ms apart, and reads until the
    /// server closes it.
    static func exchange(port: UInt16, pieces: [String]) throws -> String {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EIO) }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw POSIXError(.ECONNREFUSED) }
        for (i, piece) in pieces.enumerated() {
            if i > 0 { usleep(50_000) }
            let bytes = Array(piece.utf8)
            let sent = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, 0) }
            guard sent == bytes.count else { throw POSIXError(.EIO) }
        }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count <= 0 { break }
            received += buffer[..<count]
        }
        return String(decoding: received, as: UTF8.self)
    }

    @Test func anOpenAPIOffLoopbackIsRefused() throws {
        let s = Scratch()
        let r = try run(Binaries.idrecon, ["serve", "--db", s.path("db.sqlite"), "--listen", "0.0.0.0:0"])
        #expect(r.status == 2 && r.stderr.contains("--token-file"), "\(r.stderr)")
    }
}

/// The first ASID of a database, read as a data team would.
enum DatabaseQueueReader {
    static func firstASID(_ path: String) throws -> String? {
        try DatabaseQueue(path: path).read { db in try String.fetchOne(db, sql: "SELECT asid FROM asids ORDER BY asid LIMIT 1") }
    }
}
