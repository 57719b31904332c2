import Foundation
import IdreconKafka
import IdreconStore
import Testing

/// `consume --metrics-address`: Prometheus metrics that grow while records flow and end
/// equal to the database's own counts, health and readiness, all over real HTTP.
@Suite(.serialized) struct MetricsTests {
    static let curl = ["/usr/bin/curl", "/bin/curl"].first { FileManager.default.isExecutableFile(atPath: $0) }
    static let promtool = ["/usr/bin/promtool", "/bin/promtool"].first { FileManager.default.isExecutableFile(atPath: $0) }

    /// Status and body of a GET.
    static func get(_ url: String) throws -> (Int, String) {
        let result = try run(curl!, ["-s", "-m", "5", "-w", "\n%{http_code}", url])
        let lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        return (Int(lines.last ?? "") ?? 0, lines.dropLast().joined(separator: "\n"))
    }

    /// The sum of a metric's samples over its label sets.
    static func value(_ name: String, in text: String) -> Double {
        text.split(separator: "\n").filter { !$0.hasPrefix("#") }.reduce(0) { sum, line in
            let parts = line.split(separator: " ")
            guard parts.count >= 2 else { return sum }
            let metric = parts[0].split(separator: "{", maxSplits: 1)[0]
            return metric == name ? sum + (Double(parts[1]) ?? 0) : sum
        }
    }

    static func waitFor(_ seconds: Double, _ condition: () throws -> Bool) rethrows -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try condition() { return true }
            usleep(200_000)
        }
        return false
    }

    @Test func metricsGrowAndEndEqualToTheDatabase() throws {
        guard Self.curl != nil else {
            print("skipped: metricsGrowAndEndEqualToTheDatabase needs curl (apt-get install curl)")
            return
        }
        let s = Scratch()
        let db = s.path("db.sqlite"), log = s.path("stderr.txt")
        let lines = kafkaStream(events: 6000, seed: 51)
        let half = lines.count / 2
        let cluster = try MockCluster(brokers: 1)
        try cluster.createTopic("m", partitions: 4, replicationFactor: 1)
        try produce(Array(lines[..<half]), to: cluster, topic: "m")

        _ = FileManager.default.createFile(atPath: log, contents: nil)
        let consumer = Process()
        consumer.executableURL = URL(fileURLWithPath: Binaries.idrecon)
        consumer.arguments = ["consume", "--brokers", cluster.bootstrap, "--topic", "m", "--group", "g", "--db", db,
                              "--metrics-address", "127.0.0.1:0", "--log-level", "error", "-X", "session.timeout.ms=6000"]
        consumer.standardOutput = FileHandle.nullDevice
        consumer.standardError = FileHandle(forWritingAtPath: log)
        try consumer.run()
        defer { if consumer.isRunning { kill(consumer.processIdentifier, SIGKILL) } }

        var base = ""
        #expect(try Self.waitFor(30) {
            let text = try String(contentsOfFile: log, encoding: .utf8)
            guard let range = text.range(of: #"http://[0-9.]+:[0-9]+"#, options: .regularExpression) else { return false }
            base = String(text[range])
            return true
        }, "no metrics address on stderr")
        guard !base.isEmpty else { return }
        #expect(try Self.get(base + "/healthz").0 == 200)
        #expect(try Self.waitFor(30) { try Self.get(base + "/readyz").0 == 200 }, "never ready")

        var first = ""
        #expect(try Self.waitFor(60) {
            first = try Self.get(base + "/metrics").1
            return Self.value("idrecon_records_read_total", in: first) >= Double(half)
        })
        try produce(Array(lines[half...]), to: cluster, topic: "m")
        var last = ""
        #expect(try Self.waitFor(60) {
            last = try Self.get(base + "/metrics").1
            let done = Self.value("idrecon_records_appended_total", in: last) + Self.value("idrecon_records_duplicate_total", in: last)
                + Self.value("idrecon_records_quarantined_total", in: last)
            return Self.value("idrecon_records_read_total", in: last) >= Double(lines.count) && done >= Double(lines.count)
                && Self.value("idrecon_partition_lag_records", in: last) == 0
        })
        #expect(Self.value("idrecon_records_read_total", in: last) > Self.value("idrecon_records_read_total", in: first))
        #expect(Self.value("idrecon_commit_duration_seconds_count", in: last) > Self.value("idrecon_commit_duration_seconds_count", in: first))

        kill(consumer.processIdentifier, SIGTERM)
        #expect(wait(consumer) == 0)
        let stats = try EventStore(path: db, readOnly: true).stats()
        #expect(Self.value("idrecon_records_read_total", in: last) == Double(lines.count))
        #expect(Self.value("idrecon_build_info", in: last) == 1 && last.contains(#"commit=""#), "\(last)")
        #expect(Self.value("idrecon_records_appended_total", in: last) == Double(stats.events))
        #expect(Self.value("idrecon_records_duplicate_total", in: last) == Double(stats.duplicates))
        #expect(Self.value("idrecon_records_quarantined_total", in: last) == Double(stats.quarantined))
        #expect(Self.value("idrecon_event_log_events", in: last) >= Double(stats.events))
        #expect(Self.value("idrecon_partitions_assigned", in: last) == 4)

        if let promtool = Self.promtool {
            let metrics = s.path("metrics.txt")
            try last.write(toFile: metrics, atomically: true, encoding: .utf8)
            let check = try run("/bin/sh", ["-c", "\(promtool) check metrics < \(metrics)"])
            #expect(check.status == 0, "promtool: \(check.stdout) \(check.stderr)")
        } else {
            print("skipped: promtool check (apt-get install prometheus)")
        }
    }

    @Test func badMetricsAddressIsUsageError() throws {
        let result = try run(Binaries.idrecon, ["consume", "--embedded", "--metrics-address", "nowhere", "--db", Scratch().path("db.sqlite")])
        #expect(result.status == 2)
        #expect(result.stderr.contains("HOST:PORT"))
    }
}
