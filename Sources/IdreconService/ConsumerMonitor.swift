import CoreMetrics
import Foundation
import IdreconDomain
import IdreconVersion
import IdreconKafka
import IdreconStore
import Prometheus

/// What a running `consume` reports: Prometheus metrics (through swift-metrics, into one
/// registry) and the answers of `/healthz` and `/readyz`. Fed by the consumer's progress
/// and commit callbacks; what is cheap to read at scrape time (the log's size, projection
/// lag, stored offsets) is read then.
public final class ConsumerMonitor: @unchecked Sendable {
    public let registry = PrometheusCollectorRegistry()
    private let store: EventStore
    private let topic: String
    /// Longest time without a commit while records wait, before `/readyz` says not ready.
    private let readyWindow: TimeInterval
    private let lock = NSLock()
    private var last = ConsumeSummary()
    private var lastCommit: Date?
    private var failure: String?

    private let read, appended, duplicates, skipped: CoreMetrics.Counter
    private var quarantined: [ReasonCode: CoreMetrics.Counter] = [:]
    private let commitDuration: CoreMetrics.Timer
    private let transactionRecords: CoreMetrics.Recorder
    private let sinceCommit, logEvents, databaseBytes, projectionLag, assigned: Meter
    private let feedPending: Meter
    private var partitionGauges: [Int32: (stored: Meter, lag: Meter)] = [:]

    // swift-metrics objects over handlers made by the registry, so that every metric has
    // its help text (Prometheus' own checker requires one).
    private static func gauge(
        _ registry: PrometheusCollectorRegistry, _ name: String, _ help: String, _ labels: [(String, String)] = []
    ) -> Meter {
        Meter(label: name, dimensions: labels,
              handler: registry.makeGauge(descriptor: Self.described(name, help), labels: labels))
    }

    /// A metric as swift-prometheus describes it: the name whole (its unit is part of it, so the
    /// descriptor's own unit is empty, which its `name` leaves out) and the help text.
    private static func described(_ name: String, _ help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(metricName: name, unitName: "", helpText: help)
    }

    public init(store: EventStore, topic: String, readyWindow: TimeInterval) {
        self.store = store
        self.topic = topic
        self.readyWindow = readyWindow
        let registry = self.registry
        func counter(_ name: String, _ help: String, _ labels: [(String, String)] = []) -> CoreMetrics.Counter {
            CoreMetrics.Counter(label: name, dimensions: labels,
                                handler: registry.makeCounter(descriptor: Self.described(name, help), labels: labels))
        }
        func gauge(_ name: String, _ help: String) -> Meter { Self.gauge(registry, name, help) }
        read = counter("idrecon_records_read_total", "Records read from Kafka.")
        appended = counter("idrecon_records_appended_total", "Records appended to the event log.")
        duplicates = counter("idrecon_records_duplicate_total", "Records that repeated a logged event (counted, not appended).")
        skipped = counter("idrecon_records_skipped_total", "Records never read: the broker no longer held them (retention).")
        for code in ReasonCode.allCases {
            quarantined[code] = counter("idrecon_records_quarantined_total", "Records quarantined, by reason code.",
                                        [("reason", code.rawValue)])
        }
        commitDuration = CoreMetrics.Timer(
            label: "idrecon_commit_duration_seconds", dimensions: [],
            handler: registry.makeDurationHistogram(
                descriptor: Self.described(
                    "idrecon_commit_duration_seconds",
                    "Duration of one SQLite transaction (events, quarantine, projections and offsets)."),
                buckets: [.milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50),
                          .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1),
                          .milliseconds(2500), .seconds(5), .seconds(10)]))
        transactionRecords = CoreMetrics.Recorder(
            label: "idrecon_transaction_records", dimensions: [], aggregate: true,
            handler: registry.makeValueHistogram(
                descriptor: Self.described("idrecon_transaction_records", "Records committed per transaction."),
                buckets: [1, 10, 100, 500, 1000, 2000, 4000, 8000, 16000, 32000, 64000]))
        sinceCommit = gauge("idrecon_seconds_since_last_commit", "Seconds since the last commit; -1 before the first.")
        logEvents = gauge("idrecon_event_log_events", "Events in the log (its last sequence number).")
        databaseBytes = gauge("idrecon_database_bytes", "Bytes of the database file and its WAL.")
        projectionLag = gauge("idrecon_projection_lag_events", "Logged events the projections have not applied yet.")
        assigned = gauge("idrecon_partitions_assigned", "Kafka partitions assigned to this consumer.")
        feedPending = gauge("idrecon_change_feed_pending_changes",
                            "Changes decided and not yet delivered to the change feed's topic (0 without a feed).")
        // Prometheus' convention for what is running: a constant 1 labelled with the build.
        registry.makeGauge(
            descriptor: Self.described("idrecon_build_info", "The running build: its version and commit (value 1)."),
            labels: [("version", IdreconVersion.number), ("commit", IdreconVersion.commit)]
        ).set(to: 1.0)
    }

    /// The consumer's running totals (called on its polling thread).
    public func observe(_ summary: ConsumeSummary) {
        lock.withLock {
            read.increment(by: Int64(summary.records - last.records))
            appended.increment(by: Int64(summary.outcome.appended - last.outcome.appended))
            duplicates.increment(by: Int64(summary.outcome.duplicates - last.outcome.duplicates))
            skipped.increment(by: summary.skipped - last.skipped)
            for (code, count) in summary.outcome.quarantined {
                let delta = count - (last.outcome.quarantined[code] ?? 0)
                if delta > 0 { quarantined[code]?.increment(by: Int64(delta)) }
            }
            assigned.set(summary.assignedPartitions)
            last = summary
        }
    }

    /// One committed transaction (called on the writer's thread).
    public func committed(records: Int, seconds: Double) {
        commitDuration.recordNanoseconds(Int64(seconds * 1_000_000_000))
        transactionRecords.record(records)
        lock.withLock { lastCommit = Date() }
    }

    /// The consumer stopped on an error: not ready any more.
    public func failed(_ message: String) { lock.withLock { failure = message } }

    /// The metrics in Prometheus' text format, with the scrape-time gauges brought up to date.
    public func scrape() -> [UInt8] {
        let (since, ends) = lock.withLock { (lastCommit.map { Date().timeIntervalSince($0) }, last.endOffsets) }
        sinceCommit.set(since ?? -1)
        if let log = try? store.logPosition() {
            logEvents.set(log.lastSeq)
            databaseBytes.set(log.bytes)
            projectionLag.set(max(0, log.lastSeq - log.appliedSeq))
        }
        let feed = (try? store.changeFeed()) ?? nil
        feedPending.set(feed.map { $0.lastChange - $0.sentChange } ?? 0)
        if let positions = try? store.positions() {
            for position in positions {
                guard let partition = KafkaIngestor.partition(of: position.source, topic: topic) else { continue }
                let gauges = lock.withLock {
                    if let known = partitionGauges[partition] { return known }
                    let labels = [("topic", topic), ("partition", String(partition))]
                    func gauge(_ name: String, _ help: String) -> Meter { Self.gauge(registry, name, help, labels) }
                    let made = (
                        gauge("idrecon_partition_stored_offset", "Next offset to read, as stored in SQLite."),
                        gauge("idrecon_partition_lag_records", "Records on the broker after the stored offset."))
                    partitionGauges[partition] = made
                    return made
                }
                gauges.stored.set(position.position)
                if let end = ends[partition] { gauges.lag.set(max(0, end - position.position)) }
            }
        }
        return registry.emitToBuffer()
    }

    /// `/readyz`: partitions assigned, no failure, a commit within the window whenever records
    /// wait (an idle, caught-up consumer is ready), and a writable database.
    public func readiness() -> (ready: Bool, reasons: [String]) {
        var reasons: [String] = []
        let (summary, lastCommit, failure) = lock.withLock { (last, self.lastCommit, self.failure) }
        if let failure { reasons.append("consumer stopped: \(failure)") }
        if summary.assignedPartitions == 0 { reasons.append("no partitions assigned") }
        let waiting = summary.endOffsets.contains { partition, end in (summary.readOffsets[partition] ?? 0) < end }
        if waiting, let lastCommit, Date().timeIntervalSince(lastCommit) > readyWindow {
            reasons.append("no commit for \(Int(Date().timeIntervalSince(lastCommit))) s while records wait")
        }
        if !store.isWritable() { reasons.append("database \(store.path) is not writable") }
        return (reasons.isEmpty, reasons)
    }
}
