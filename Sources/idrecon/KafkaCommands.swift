import ArgumentParser
import Foundation
import IdreconDomain
import IdreconKafka
import IdreconService
import IdreconStore
import IdreconVersion
import Logging
import Synchronization

/// SIGINT/SIGTERM set this flag; long-running commands poll it and stop cleanly.
enum StopSignal {
    nonisolated(unsafe) static var requested: sig_atomic_t = 0

    static func install() {
        signal(SIGINT) { _ in StopSignal.requested = 1 }
        signal(SIGTERM) { _ in StopSignal.requested = 1 }
    }

    static var isRequested: Bool { requested != 0 }
}

/// `--log-level`, shared by the long-running commands.
/// A `-X key=value` librdkafka setting.
struct KafkaSetting: ExpressibleByArgument {
    var key: String
    var value: String

    init?(argument: String) {
        guard let eq = argument.firstIndex(of: "="), eq != argument.startIndex else { return nil }
        key = String(argument[..<eq])
        value = String(argument[argument.index(after: eq)...])
    }
}

/// A consumer's busy time: from its first record to the last time the count grew. Its rate
/// over that time says how fast it consumes, which its whole life (waiting for a broker,
/// idling at the end of the topic) would not.
final class BusyClock: @unchecked Sendable {
    private let lock = NSLock()
    private var first: Date?, last: Date?, records = 0
    /// The last time no record had been read yet: the first batch was read after it.
    private var idle = Date()

    func observe(records: Int) {
        lock.withLock {
            let now = Date()
            if records == 0 { idle = now }
            guard records > self.records else { return }
            if first == nil { first = idle }
            (last, self.records) = (now, records)
        }
    }

    var seconds: Double { lock.withLock { first.flatMap { f in last.map { $0.timeIntervalSince(f) } } ?? 0 } }

    func rate(_ records: Int) -> Double { Double(records) / max(seconds, 0.001) }
}

/// `IDRECON_BROKERS`, `IDRECON_TOPIC` and `IDRECON_GROUP`: what `consume` and `produce` use
/// when the flag is left out (the deploy example's environment file sets them). Empty is unset.
enum KafkaEnvironment {
    static var brokers: String? { value("IDRECON_BROKERS") }
    static var topic: String { value("IDRECON_TOPIC") ?? "login-events" }
    static var group: String { value("IDRECON_GROUP") ?? "idrecon" }

    private static func value(_ name: String) -> String? {
        ProcessInfo.processInfo.environment[name].flatMap { $0.isEmpty ? nil : $0 }
    }
}

struct ConsumeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "consume",
        abstract: "Consume login events from Kafka into the log (offsets stored in SQLite, exactly-once effect).",
        discussion: """
            Joins the consumer group and appends or quarantines every record; each batch commits \
            its events, quarantine entries, projection updates and partition offsets in one SQLite \
            transaction. Partitions start at the offset stored in SQLite. SIGINT/SIGTERM finish the \
            batch, commit, leave the group and exit 0. Any librdkafka setting goes through -X \
            (e.g. -X security.protocol=SASL_SSL -X sasl.mechanisms=PLAIN).
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var logging: LoggingOptions
    @OptionGroup var tokens: TokenOptions
    @OptionGroup var limits: RecordOptions
    @OptionGroup var bulk: BulkOptions
    @Option(help: "Kafka bootstrap servers (host:port,…; default: $IDRECON_BROKERS); not with --embedded.")
    var brokers: String?
    @Option(help: "Topic to consume (default: $IDRECON_TOPIC, else login-events).") var topic: String?
    @Option(help: "Consumer group (default: $IDRECON_GROUP, else idrecon).") var group: String?
    @Option(name: .customShort("X"), help: ArgumentHelp("librdkafka setting key=value (repeatable).", valueName: "key=value"))
    var settings: [KafkaSetting] = []
    @Option(help: ArgumentHelp("A file of librdkafka settings, one key=value per line (# comments).", valueName: "file"))
    var kafkaConfig: String?
    @Option(name: .customLong("config"), help: .hidden) var oldKafkaConfig: String?
    @Option(parsing: .unconditional, help: "Records per transaction (at most; --batch-ms commits sooner).") var batchSize = 64000
    @Option(parsing: .unconditional, help: "Commit a partial batch after this many milliseconds.") var batchMs = 200
    @Flag(help: "Exit once every assigned partition has reached its end: 0, or 1 if records were skipped (retention).")
    var exitAtEnd = false
    @Flag(help: """
        Take the topic over from the group or cluster it is bound to in this database (its offsets are kept for \
        another group of the same cluster, dropped for another cluster).
        """)
    var rebind = false
    @Option(help: ArgumentHelp("Serve /metrics (Prometheus), /healthz and /readyz here; port 0 picks a free port.",
                               valueName: "host:port"))
    var metricsAddress: String?
    @Option(help: ArgumentHelp("Serve the read API (as `idrecon serve` does) from this consumer; port 0 picks a free port.",
                               valueName: "host:port"))
    var apiAddress: String?
    @OptionGroup var api: APIOptions
    @Option(help: ArgumentHelp(
        "Send the change feed (access-state changes, identity merges and splits) to this topic, exactly once in effect.",
        valueName: "topic"))
    var changesTopic: String?
    @Option(parsing: .unconditional, help: "/readyz fails when records wait and nothing was committed for this many seconds.")
    var readyWindow = 60
    @Flag(name: .customLong("embedded"), help: "Start an in-process Kafka cluster (librdkafka's mock) and consume from it; --embedded=N for N partitions (default 16).")
    var embeddedFlag = false
    @Option(name: .customLong("embedded-partitions"), help: .hidden) var embeddedPartitions: Int?

    func validate() throws {
        guard batchSize >= 1, batchMs >= 1 else { throw ValidationError("--batch-size and --batch-ms must be at least 1") }
        guard readyWindow >= 1 else { throw ValidationError("--ready-window must be at least 1") }
        if let metricsAddress, Self.hostAndPort(metricsAddress) == nil {
            throw ValidationError("--metrics-address must be HOST:PORT (e.g. 127.0.0.1:9464, or port 0 for any free port)")
        }
        let embedded = embeddedPartitions != nil || embeddedFlag
        if let apiAddress { try api.check(apiAddress, flag: "--api-address") }
        if let embeddedPartitions, !(1...1024).contains(embeddedPartitions) {
            throw ValidationError("--embedded=N needs 1 to 1024 partitions")
        }
        if embedded, brokers != nil {
            throw ValidationError("--embedded starts its own cluster: leave out --brokers, or drop --embedded to use those brokers")
        }
        if kafkaConfig != nil, oldKafkaConfig != nil { throw ValidationError("give --kafka-config once (--config is its old name)") }
        if !embedded, brokers == nil, KafkaEnvironment.brokers == nil {
            throw ValidationError("give --brokers (or set IDRECON_BROKERS), or --embedded for an in-process cluster")
        }
    }

    func run() async throws {
        let logger = logging.logger("idrecon.consume")
        var kafkaLogger = Logger(label: "librdkafka") // librdkafka's own lines, with its facility as metadata
        kafkaLogger.logLevel = logging.logLevel
        KafkaLog.route(to: kafkaLogger)
        var extra = settings.map { ($0.key, $0.value) }
        if oldKafkaConfig != nil { logger.warning("--config is now --kafka-config (the old name still works)") }
        let topic = topic ?? KafkaEnvironment.topic, group = group ?? KafkaEnvironment.group
        if let config = kafkaConfig ?? oldKafkaConfig {
            try global.checkInput(config, "librdkafka settings")
            guard let text = try? String(contentsOfFile: config, encoding: .utf8) else { throw IdreconError(.input, "cannot read \(config)") }
            for (n, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                let trimmed = line.trimmingCharacters(in: .whitespaces)
                if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
                guard let setting = KafkaSetting(argument: trimmed) else { throw IdreconError(.input, "\(config):\(n + 1): expected key=value") }
                extra.insert((setting.key, setting.value), at: 0)
            }
        }
        var cluster: MockCluster?
        var bootstrap = brokers ?? KafkaEnvironment.brokers ?? ""
        if embeddedPartitions != nil || embeddedFlag {
            do {
                cluster = try MockCluster()
                try cluster!.createTopic(topic, partitions: embeddedPartitions ?? 16)
            } catch { throw IdreconError(error) }
            bootstrap = cluster!.bootstrap
            FileHandle.standardError.write(Data("embedded Kafka cluster at \(bootstrap) (topic \(topic), \(embeddedPartitions ?? 16) partitions)\n".utf8))
        }
        let store = try EventStore(path: global.databasePath)
        var options = ConsumeOptions(brokers: bootstrap, topic: topic, group: group)
        options.settings = extra
        options.batchSize = batchSize
        options.batchMilliseconds = batchMs
        options.exitAtEnd = exitAtEnd
        options.tokens = try tokens.verifier(database: global)
        options.maxRecordBytes = limits.maxRecordBytes
        options.bulkFrom = bulk.threshold
        options.rebind = rebind
        if cluster != nil { options.clusterIdentity = "embedded" }
        logger.info("starting", metadata: ["version": "\(IdreconVersion.number)", "commit": "\(IdreconVersion.commit)"])
        StopSignal.install()
        var monitor: ConsumerMonitor?
        var server: MetricsServer?
        if let metricsAddress, let (host, port) = Self.hostAndPort(metricsAddress) {
            let watcher = ConsumerMonitor(store: store, topic: topic, readyWindow: TimeInterval(readyWindow))
            options.onCommit = { records, seconds in watcher.committed(records: records, seconds: seconds) }
            do {
                let (started, address) = try await MetricsServer.start(host: host, port: port, monitor: watcher)
                server = started
                FileHandle.standardError.write(Data("metrics: http://\(address)/metrics (and /healthz, /readyz)\n".utf8))
            } catch {
                throw IdreconError(.configuration, "cannot serve metrics on \(metricsAddress): \(error)")
            }
            monitor = watcher
        }
        var apiServer: ReadAPI?
        if let apiAddress {
            let (started, address) = try await api.start(apiAddress, store: store)
            apiServer = started
            FileHandle.standardError.write(Data("api: http://\(address)/v1 (and /healthz)\n".utf8))
            // Callers wait on the API before their Graph calls; ingestion can catch up.
            options.yieldToReaders = true
        }
        let feed = try startChangeFeed(store: store, brokers: bootstrap, settings: extra, logger: logger)
        let ingestor = KafkaIngestor(store: store, options: options, logger: logger)
        let busy = BusyClock()
        let outcome = await Self.onThread { [monitor] () -> Result<ConsumeSummary, any Error> in
            var progress = ProgressLine()
            defer { progress.done() }
            return Result {
                try ingestor.run(shouldStop: { StopSignal.isRequested }) { s in
                    monitor?.observe(s)
                    busy.observe(records: s.records)
                    progress.update("consume: \(s.records) records, \(Int(busy.rate(s.records))) records/s")
                }
            }
        }
        if case let .failure(error) = outcome { monitor?.failed("\(error)") }
        let feedFailure = await feed?.stop()
        await server?.stop()
        await apiServer?.stop()
        let summary: ConsumeSummary
        switch outcome {
        case let .success(s):
            summary = s
        case let .failure(error):
            // The database failing under a running consumer (a full disk) may pass: exit 1,
            // so the service manager restarts it; its configuration does not (exit 2).
            let failure = IdreconError(error)
            throw failure.kind == .storage ? IdreconError(.transient, failure.description) : failure
        }
        withExtendedLifetime(cluster) {}
        logger.info("stopped", metadata: [
            "records": "\(summary.records)", "appended": "\(summary.outcome.appended)", "duplicates": "\(summary.outcome.duplicates)",
            "quarantined": "\(summary.outcome.quarantinedTotal)", "records_per_second": "\(Int(busy.rate(summary.records)))",
            "busy_seconds": "\(String(format: "%.1f", busy.seconds))",
            "skipped": "\(summary.skipped)",
        ])
        if let feed {
            logger.info("change feed", metadata: ["topic": "\(feed.sender.feed.topic)", "sent": "\(feed.sender.sentChanges)"])
        }
        if let feedFailure {
            throw IdreconError(.transient, "the change feed could not send every change (they wait in the database and go "
                + "with the next run): \(feedFailure)")
        }
        if summary.skipped > 0 {
            throw IdreconError(.violation, "\(summary.skipped) records were skipped: the broker no longer held them (retention); "
                + "see 'idrecon export skipped'")
        }
    }
}

/// The change feed's sender on a thread of its own, while the consumer runs.
final class RunningChangeFeed: @unchecked Sendable {
    let sender: ChangeFeedSender
    private let stopping = Mutex(false)
    private let finished = DispatchSemaphore(value: 0)

    init(_ sender: ChangeFeedSender) {
        self.sender = sender
        let thread = Thread { [self] in
            sender.run { StopSignal.isRequested || stopping.withLock { $0 } }
            finished.signal()
        }
        thread.start()
    }

    /// Stops the loop and sends what the consumer's last catch-up decided; the failure, if any.
    func stop() async -> (any Error)? {
        stopping.withLock { $0 = true }
        return await ConsumeCommand.onThread { [self] () -> (any Error)? in
            finished.wait()
            do { try sender.drain() } catch { return error }
            return nil
        }
    }
}

extension ConsumeCommand {
    static func feedWaits(_ topic: String) -> String {
        "this database has a change feed to \(topic): its changes wait in the database until a consume with "
            + "--changes-topic \(topic) sends them"
    }

    /// Starts sending the change feed when `--changes-topic` is given; without it, says
    /// that a database with a feed keeps deciding changes for a later run to send.
    func startChangeFeed(store: EventStore, brokers: String, settings: [(String, String)], logger: Logger) throws -> RunningChangeFeed? {
        guard let changesTopic else {
            if let feed = try store.changeFeed() {
                logger.warning("\(Self.feedWaits(feed.topic))")
            }
            return nil
        }
        do {
            return RunningChangeFeed(try ChangeFeedSender(store: store, topic: changesTopic, brokers: brokers, settings: settings,
                                                          logger: logger))
        } catch let error as IdreconError {
            throw error
        } catch let error as KafkaError where error.kind == .client {
            // No broker answered, or one failed: worth a retry (exit 1), unlike a setting.
            throw IdreconError(.transient, "change feed to \(changesTopic): \(error)")
        } catch {
            throw IdreconError(.configuration, "change feed to \(changesTopic): \(error)")
        }
    }

    /// `HOST:PORT` (`[v6]:PORT` for IPv6) with a port in 0...65535.
    static func hostAndPort(_ text: String) -> (String, Int)? {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (0...65535).contains(port)
        else { return nil }
        var host = String(text[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return host.isEmpty ? nil : (host, port)
    }

    /// Runs blocking work (the consumer's poll loop) on a thread of its own, so the
    /// concurrency pool stays free for the metrics server.
    static func onThread<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            let thread = Thread { continuation.resume(returning: work()) }
            thread.stackSize = 8 << 20
            thread.start()
        }
    }
}

struct ProduceCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "produce",
        abstract: "Send JSON lines to a Kafka topic (key = device_id), for tests and demos.")

    @Argument(help: "JSON-lines file, or - for standard input.") var file: String
    @Option(help: "Kafka bootstrap servers (default: $IDRECON_BROKERS).") var brokers: String?
    @Option(help: "Topic (default: $IDRECON_TOPIC, else login-events).") var topic: String?
    @Option(name: .customShort("X"), help: ArgumentHelp("librdkafka setting key=value (repeatable).", valueName: "key=value"))
    var settings: [KafkaSetting] = []

    func validate() throws {
        if brokers == nil, KafkaEnvironment.brokers == nil { throw ValidationError("give --brokers (or set IDRECON_BROKERS)") }
    }

    func run() throws {
        let brokers = brokers ?? KafkaEnvironment.brokers ?? "", topic = topic ?? KafkaEnvironment.topic
        guard let handle = file == "-" ? FileHandle.standardInput : FileHandle(forReadingAtPath: file) else {
            throw IdreconError(.input, "cannot read \(file)")
        }
        let producer: KafkaProducer
        do { producer = try KafkaProducer(brokers: brokers, topic: topic, settings: settings.map { ($0.key, $0.value) }) } catch {
            throw IdreconError(error)
        }
        var sent = 0
        var buffer: [UInt8] = []
        func send(_ line: ArraySlice<UInt8>) throws {
            guard !line.isEmpty else { return }
            let bytes = Array(line)
            var key: [UInt8]?
            if let value = try? JSONParser.parse(bytes), case let .string(device)? = value["device_id"] { key = Array(device.utf8) }
            do { try producer.send(key: key, value: bytes) } catch { throw IdreconError(.transient, error.description) }
            sent += 1
            if sent % 1000 == 0 { producer.poll() }
        }
        while true {
            let chunk = handle.readData(ofLength: 1 << 20)
            if chunk.isEmpty { break }
            buffer.append(contentsOf: chunk)
            var start = buffer.startIndex
            while let newline = buffer[start...].firstIndex(of: 0x0A) {
                try send(buffer[start..<newline])
                start = newline + 1
            }
            buffer.removeSubrange(..<start)
        }
        try send(buffer[...])
        do { try producer.flush() } catch { throw IdreconError(.transient, error.description) }
        FileHandle.standardError.write(Data("produced \(sent) records to \(topic)\n".utf8))
        // A broker with little retention (the mock's ~5 MB per partition) drops the oldest
        // records as new ones arrive: say so, rather than let a consumer miss them unwarned.
        if let watermarks = try? KafkaWatermarks(brokers: brokers, settings: settings.map { ($0.key, $0.value) }),
           let partitions = try? producer.partitionCount() {
            var dropped: [String] = []
            for partition in 0..<partitions {
                if let (low, _) = try? watermarks.range(topic: topic, partition: partition), low > 0 { dropped.append("\(partition)@\(low)") }
            }
            if !dropped.isEmpty {
                FileHandle.standardError.write(Data(("produce: warning: the broker no longer holds the oldest records of \(topic) "
                    + "(retention); partitions start at \(dropped.joined(separator: " ")); a consumer records them as skipped\n").utf8))
            }
        }
    }
}

struct DevBrokerCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dev-broker",
        abstract: "Run an in-process Kafka cluster (librdkafka's mock) in the foreground for other processes.",
        discussion: "Prints the bootstrap address on the first line of standard output; stops on SIGINT/SIGTERM.")

    @Option(help: "Topic to create.") var topic = "login-events"
    @Option(parsing: .unconditional, help: """
        Partitions of the topic. The mock keeps only about 5 MB per partition and silently drops older records \
        (librdkafka 2.0.2 has no setting for it); topics that clients auto-create get 4 partitions.
        """) var partitions = 16
    @Option(parsing: .unconditional, help: "Brokers in the cluster.") var brokers = 1

    func validate() throws {
        guard partitions >= 1, brokers >= 1 else { throw ValidationError("--partitions and --brokers must be at least 1") }
    }

    func run() throws {
        let cluster: MockCluster
        do {
            cluster = try MockCluster(brokers: brokers)
            try cluster.createTopic(topic, partitions: partitions, replicationFactor: min(brokers, 3))
        } catch { throw IdreconError(error) }
        FileHandle.standardOutput.write(Data((cluster.bootstrap + "\n").utf8))
        StopSignal.install()
        while !StopSignal.isRequested { usleep(100_000) }
        withExtendedLifetime(cluster) {}
    }
}
