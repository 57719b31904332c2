import CRdKafka
import Foundation
import IdreconDomain
import IdreconIngest
import IdreconStore
import Logging

/// Settings of `idrecon consume`.
public struct ConsumeOptions: Sendable {
    public var brokers: String
    public var topic: String
    public var group: String
    /// Extra librdkafka settings (`-X key=value`), applied last.
    public var settings: [(String, String)] = []
    public var batchSize = 64000
    public var batchMilliseconds = 200
    public var exitAtEnd = false
    /// Also commit offsets to Kafka after each SQLite commit (for lag monitoring only).
    public var commitToKafka = true
    /// Verifies `id_token`s of limited logins when set (`--jwks`).
    public var tokens: TokenVerifier?
    /// Longer record values are quarantined as `malformed_json`, only their beginning kept.
    public var maxRecordBytes = RecordSize.defaultLimit
    /// The cluster's identity for the topic's binding; nil reads the cluster ID from the brokers
    /// (the embedded cluster, new on every start, passes a fixed name).
    public var clusterIdentity: String?
    /// Take the topic over from another group or cluster (see `EventStore.bind`).
    public var rebind = false
    /// Called after each committed transaction with its records and duration (on the writer's thread).
    public var onCommit: (@Sendable (_ records: Int, _ seconds: Double) -> Void)?
    /// Ingest at the lowest CPU priority (`ThreadPriority`: the thread that calls `run`, which
    /// polls and validates, librdkafka's threads it starts, and the writer), so that a read API
    /// in the same process answers first when both want the cores.
    public var yieldToReaders = false
    /// Events behind from which a backlog makes the projections be built in bulk
    /// (`PipelinedWriter.expect(events:)`; nil: never).
    public var bulkFrom: Int64? = EventStore.bulkCatchUpFrom

    public init(brokers: String, topic: String, group: String) {
        self.brokers = brokers
        self.topic = topic
        self.group = group
    }
}

/// Totals of one consume run.
public struct ConsumeSummary: Sendable {
    public var records = 0
    public var batches = 0
    public var outcome = BatchOutcome()
    public var rebalances = 0
    /// Records this run could not read because the broker no longer held them (retention).
    public var skipped: Int64 = 0
    /// Partitions assigned now.
    public var assignedPartitions = 0
    /// Each assigned partition's end (high watermark) as last fetched, and the next offset
    /// this consumer reads there.
    public var endOffsets: [Int32: Int64] = [:]
    public var readOffsets: [Int32: Int64] = [:]

    public init() {}
}

/// Kafka → SQLite with exactly-once effect: offsets live in SQLite, written in the same
/// transaction as each batch's events, quarantine entries and projection updates. Each
/// assigned partition starts at its stored offset (or the reset policy when none), never
/// at the broker's committed offset; revocation commits the open batch first.
public final class KafkaIngestor: @unchecked Sendable {
    private let store: EventStore
    private let options: ConsumeOptions
    private let logger: Logger
    private var rk: OpaquePointer?
    private var pending: [(raw: [UInt8], origin: RecordOrigin)] = []
    private var nextOffsets: [Int32: Int64] = [:]
    /// Validation of the next batch overlaps the SQLite commit of this one (one in flight).
    private let writer: PipelinedWriter
    /// Offsets of the batch in flight, committed to Kafka (for lag only) once it is in SQLite.
    private var inFlightOffsets: [Int32: Int64] = [:]
    private var assigned: Set<Int32> = []
    private var atEnd: Set<Int32> = []
    private var failure: (any Error)?
    private var summary = ConsumeSummary()
    private var batchStarted = Date()
    /// Where a partition without a stored offset starts (`auto.offset.reset`, default earliest).
    private var resetOffset = Int64(RD_KAFKA_OFFSET_BEGINNING)
    /// Stored offsets of newly assigned partitions, until their first message (or end) shows
    /// where reading really resumed: a later offset means records were skipped.
    private var resumeOffsets: [Int32: Int64] = [:]

    public init(store: EventStore, options: ConsumeOptions, logger: Logger) {
        self.store = store
        self.options = options
        self.logger = logger
        writer = PipelinedWriter(store: store, depth: 2, transactionRecords: options.batchSize,
                                 yielding: options.yieldToReaders, bulkFrom: options.bulkFrom, onCommit: options.onCommit)
    }

    public static func source(topic: String, partition: Int32) -> String { "kafka:\(topic)/\(partition)" }

    /// The partition of `topic` that `source` (as `source(topic:partition:)` names it) is, if any.
    public static func partition(of source: String, topic: String) -> Int32? {
        let prefix = "kafka:\(topic)/"
        guard source.hasPrefix(prefix) else { return nil }
        return Int32(source.dropFirst(prefix.count))
    }

    /// Consumes until `shouldStop` returns true (checked at least every 100 ms) or, with
    /// `exitAtEnd`, until every assigned partition is at its end. Leaves the group cleanly.
    public func run(shouldStop: @escaping () -> Bool, progress: (ConsumeSummary) -> Void = { _ in }) throws -> ConsumeSummary {
        if options.yieldToReaders { ThreadPriority.yieldToOthers() }
        let reset = options.settings.last { $0.0 == "auto.offset.reset" }?.1 ?? "earliest"
        let conf = try makeConfiguration([
            ("bootstrap.servers", options.brokers), ("group.id", options.group),
            ("enable.auto.commit", "false"), ("enable.auto.offset.store", "false"), ("enable.partition.eof", "true"),
            ("auto.offset.reset", "earliest"), ("log_level", "4"), ("fetch.wait.max.ms", "100"),
            // The consumer group forwards every partition's queue to one, so this bounds the messages
            // prefetched in all (`queued.max.messages.kbytes`, 64 MB, bounds their bytes), and the
            // fetcher idles while the queue holds more. A 1M topic of 129 partitions consumed from its
            // start: 35.0 s at 20,000 (idrecon's setting until 2026-11-30), 19.9 s at 40,000, 11.7 s at
            // 100,000 (librdkafka's default), 9.8 s at 200,000; peak 244, 235, 274, 286 MB. Beside a read
            // API (`yieldToReaders`) ingestion keeps the small prefetch, which paces it: at 100,000 it took
            // nearly twice the events during the bench's busy step and the GETs paced at 20,000/s waited
            // p99 6.3-7.6 ms instead of 2.6-3.5 (`schemas/performance.md`, "consume starved by its prefetch cap").
            ("queued.min.messages", options.yieldToReaders ? "20000" : "100000"),
        ] + options.settings)
        resetOffset = ["latest", "largest", "end"].contains(reset) ? Int64(RD_KAFKA_OFFSET_END) : Int64(RD_KAFKA_OFFSET_BEGINNING)
        rd_kafka_conf_set_opaque(conf, Unmanaged.passUnretained(self).toOpaque())
        rd_kafka_conf_set_rebalance_cb(conf) { rk, err, partitions, opaque in
            guard let rk, let opaque else { return }
            Unmanaged<KafkaIngestor>.fromOpaque(opaque).takeUnretainedValue().rebalance(rk, err, partitions)
        }
        rd_kafka_conf_set_error_cb(conf) { _, err, reason, opaque in
            guard let opaque else { return }
            let me = Unmanaged<KafkaIngestor>.fromOpaque(opaque).takeUnretainedValue()
            me.logger.warning("kafka: \(reason.map { String(cString: $0) } ?? "") (\(String(cString: rd_kafka_err2name(rd_kafka_resp_err_t(rawValue: err)))); retrying")
        }
        let rk = try makeClient(RD_KAFKA_CONSUMER, conf)
        self.rk = rk
        var left = false
        defer {
            // A consumer that could not leave the group must not try again here, where nothing bounds it.
            if left {
                rd_kafka_destroy(rk)
            } else {
                rd_kafka_destroy_flags(rk, Int32(RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE))
            }
            self.rk = nil
        }
        rd_kafka_poll_set_consumer(rk)
        guard let cluster = clusterIdentity(rk, shouldStop: shouldStop) else { return summary }
        let binding = try store.bind(topic: options.topic, clusterID: cluster, groupID: options.group, rebind: options.rebind)
        if let replaced = binding {
            logger.warning("topic taken over (--rebind)", metadata: [
                "topic": "\(options.topic)", "from_group": "\(replaced.groupID)", "from_cluster": "\(replaced.clusterID)",
                "offsets": "\(replaced.clusterID.sameBytes(as: cluster) ? "kept" : "dropped: another cluster")"])
        }
        let topics = rd_kafka_topic_partition_list_new(1)!
        rd_kafka_topic_partition_list_add(topics, options.topic, RD_KAFKA_PARTITION_UA)
        let err = rd_kafka_subscribe(rk, topics)
        rd_kafka_topic_partition_list_destroy(topics)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError(err, "subscribe to \(options.topic)") }
        logger.info("consuming", metadata: ["topic": "\(options.topic)", "group": "\(options.group)", "brokers": "\(options.brokers)"])

        batchStarted = Date()
        var reported = Date()
        do {
            while !shouldStop() {
                if let message = rd_kafka_consumer_poll(rk, 100) {
                    defer { rd_kafka_message_destroy(message) }
                    try handle(message.pointee)
                }
                if let failure { throw failure }
                if pending.count >= min(options.batchSize, FileIngestor.defaultChunkSize) || (!pending.isEmpty && Date().timeIntervalSince(batchStarted) * 1000 >= Double(options.batchMilliseconds)) {
                    try flush()
                    progress(report(rk))
                    reported = Date()
                } else if Date().timeIntervalSince(reported) >= 1 {
                    progress(report(rk)) // idle: watermarks and assignment still change
                    writer.refresh() // and the projections catch up with the log
                    reported = Date()
                }
                if options.exitAtEnd, !assigned.isEmpty, assigned.isSubset(of: atEnd), pending.isEmpty { break }
            }
            try drain()
        } catch {
            left = leaveGroup(rk)
            throw error
        }
        left = leaveGroup(rk)
        if let failure { throw failure }
        return summary
    }

    /// The longest a consumer waits to leave its group when it stops.
    static let leaveSeconds = 10.0

    /// Revokes the assignment (`rebalance` commits the open batch) and leaves the group; true
    /// once left. A coordinator that does not answer within
    /// `leaveSeconds` is given up on: `rd_kafka_consumer_close` waits for it, and was seen to
    /// wait for ever after the brokers went away while the API was busy. Nothing is lost: the
    /// positions are in the database, and the group gives the partitions to another member
    /// when this one's session times out.
    ///
    /// The close is served as librdkafka's own `rd_kafka_consumer_close` serves it: a queue of its
    /// own, to which the group's queue is forwarded, polled until closed. Polled for events, so
    /// that records fetched meanwhile come back as events and are dropped (serving callbacks
    /// only, librdkafka asserts on them); a rebalance comes back as an event too, and goes to
    /// `rebalance` as the callback would.
    private func leaveGroup(_ rk: OpaquePointer) -> Bool {
        guard let queue = rd_kafka_queue_new(rk) else { return false }
        defer { rd_kafka_queue_destroy(queue) }
        if let error = rd_kafka_consumer_close_queue(rk, queue) {
            logger.warning("leaving the group: \(String(cString: rd_kafka_error_string(error)))")
            rd_kafka_error_destroy(error)
            return false
        }
        let deadline = Date().addingTimeInterval(Self.leaveSeconds)
        while rd_kafka_consumer_closed(rk) == 0 {
            guard Date() < deadline else {
                logger.warning("""
                    the group coordinator did not answer within \(Int(Self.leaveSeconds)) s: \
                    stopped without leaving the group (positions are in the database)
                    """)
                return false
            }
            guard let event = rd_kafka_queue_poll(queue, 100) else { continue }
            defer { rd_kafka_event_destroy(event) }
            if rd_kafka_event_type(event) == RD_KAFKA_EVENT_REBALANCE {
                rebalance(rk, rd_kafka_event_error(event), rd_kafka_event_topic_partition_list(event))
            }
        }
        return true
    }

    /// The summary with the assigned partitions' positions and ends (librdkafka's cached
    /// watermarks: no broker round trip).
    private func report(_ rk: OpaquePointer) -> ConsumeSummary {
        summary.outcome = writer.committedOutcome
        summary.assignedPartitions = assigned.count
        summary.endOffsets.removeAll(keepingCapacity: true)
        for partition in assigned {
            var low: Int64 = 0, high: Int64 = 0
            if rd_kafka_get_watermark_offsets(rk, options.topic, partition, &low, &high) == RD_KAFKA_RESP_ERR_NO_ERROR, high >= 0 {
                summary.endOffsets[partition] = high
            }
        }
        summary.readOffsets = summary.readOffsets.filter { assigned.contains($0.key) }
        return summary
    }

    /// The cluster ID the brokers report, waiting (and logging) while none is reachable.
    private func clusterIdentity(_ rk: OpaquePointer, shouldStop: () -> Bool) -> String? {
        if let fixed = options.clusterIdentity { return fixed }
        while !shouldStop() {
            if let id = rd_kafka_clusterid(rk, 5000) {
                defer { rd_kafka_mem_free(rk, id) }
                return String(cString: id)
            }
            logger.warning("no broker answered with the cluster ID yet; retrying", metadata: ["brokers": "\(options.brokers)"])
        }
        return nil
    }

    private func handle(_ message: rd_kafka_message_t) throws {
        let partition = message.partition
        switch message.err {
        case RD_KAFKA_RESP_ERR_NO_ERROR:
            let topic = message.rkt.map { String(cString: rd_kafka_topic_name($0)) } ?? options.topic
            let key = message.key.map { Array(UnsafeRawBufferPointer(start: $0, count: message.key_len)) }
            let origin = RecordOrigin(source: Self.source(topic: topic, partition: partition), position: message.offset, partition: partition, key: key)
            if pending.isEmpty { batchStarted = Date() }
            // A null value becomes no bytes, which the validator quarantines as such.
            let value = message.payload.map { Array(UnsafeRawBufferPointer(start: $0, count: message.len)) } ?? []
            try checkResume(topic: topic, partition: partition, at: message.offset)
            pending.append((value, origin))
            nextOffsets[partition] = message.offset + 1
            summary.readOffsets[partition] = message.offset + 1
            atEnd.remove(partition)
            summary.records += 1
        case RD_KAFKA_RESP_ERR__PARTITION_EOF:
            summary.readOffsets[partition] = message.offset
            try checkResume(topic: message.rkt.map { String(cString: rd_kafka_topic_name($0)) } ?? options.topic, partition: partition,
                            at: message.offset)
            atEnd.insert(partition)
            logger.debug("partition at end", metadata: ["partition": "\(partition)", "offset": "\(message.offset)"])
        default:
            let description = String(cString: rd_kafka_err2str(message.err))
            if message.err == RD_KAFKA_RESP_ERR__FATAL { throw KafkaError(message.err, "consumer") }
            logger.warning("kafka: \(description); retrying", metadata: ["partition": "\(partition)"])
        }
    }

    /// The first offset read from a partition after its assignment is its stored offset,
    /// unless the broker no longer holds the records there: then librdkafka's reset policy
    /// moved on, and the records in between are gone. That is never silent: it is logged at
    /// error level, recorded in the database (`stats`, `export skipped`) and counted.
    private func checkResume(topic: String, partition: Int32, at offset: Int64) throws {
        guard let stored = resumeOffsets.removeValue(forKey: partition), offset != stored else { return }
        let source = Self.source(topic: topic, partition: partition)
        if offset < stored {
            logger.warning("partition restarts before its stored offset: the topic was recreated or truncated; records read again are duplicates by event_id", metadata: [
                    "partition": "\(partition)", "stored_offset": "\(stored)", "first_offset": "\(offset)"])
            return
        }
        var low: Int64 = 0, high: Int64 = 0
        if let rk, rd_kafka_query_watermark_offsets(rk, topic, partition, &low, &high, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR, low <= stored {
            return // still on the broker: control records or compaction, not a loss
        }
        let range = SkippedRange(source: source, firstPosition: stored, lastPosition: offset - 1,
                                 detectedAt: Int64(Date().timeIntervalSince1970 * 1000))
        logger.error("records skipped: the broker no longer holds them (retention); they were never read", metadata: [
            "partition": "\(partition)", "first_offset": "\(stored)", "last_offset": "\(offset - 1)", "records": "\(range.records)"])
        try store.recordSkipped(range)
        summary.skipped += range.records
    }

    /// Hands the open batch to the writer: its events, quarantine, projections and offsets
    /// commit in one transaction while the next batch is read and validated.
    private func flush() throws {
        guard !pending.isEmpty else { return }
        let records = BatchValidator.validate(
            pending, tokens: options.tokens, maxRecordBytes: options.maxRecordBytes, yielding: options.yieldToReaders)
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let positions = nextOffsets.map { ConsumedPosition(source: Self.source(topic: options.topic, partition: $0.key), position: $0.value, records: $0.value, updatedAt: now) }
        writer.expect(events: backlog)
        try writer.submit(records, positions: positions) // waits for the batch before: it is committed now
        if options.commitToKafka, let rk { commitToKafka(rk, inFlightOffsets) }
        inFlightOffsets = nextOffsets
        summary.batches += 1
        logger.debug("batch submitted", metadata: ["records": "\(pending.count)"])
        pending.removeAll(keepingCapacity: true)
        nextOffsets.removeAll()
    }

    /// Records still to read in the assigned partitions, by the ends last reported; a
    /// partition with no end or position known yet counts nothing.
    private var backlog: Int64 {
        assigned.reduce(0) { sum, partition in
            guard let end = summary.endOffsets[partition], let read = summary.readOffsets[partition] else { return sum }
            return sum + max(0, end - read)
        }
    }

    /// Commits the open batch and waits until everything handed to the writer is in SQLite.
    private func drain() throws {
        try flush()
        summary.outcome = try writer.finish()
        if options.commitToKafka, let rk { commitToKafka(rk, inFlightOffsets) }
        inFlightOffsets.removeAll()
    }

    private func commitToKafka(_ rk: OpaquePointer, _ offsets: [Int32: Int64]) {
        guard !offsets.isEmpty, let list = rd_kafka_topic_partition_list_new(Int32(offsets.count)) else { return }
        defer { rd_kafka_topic_partition_list_destroy(list) }
        for (partition, offset) in offsets {
            rd_kafka_topic_partition_list_add(list, options.topic, partition)!.pointee.offset = offset
        }
        _ = rd_kafka_commit(rk, list, 1)
    }

    /// Called by librdkafka on the polling thread.
    fileprivate func rebalance(_ rk: OpaquePointer, _ err: rd_kafka_resp_err_t, _ partitions: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?) {
        summary.rebalances += 1
        switch err {
        case RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
            guard let partitions else { return }
            var described: [String] = []
            for i in 0..<Int(partitions.pointee.cnt) {
                let element = partitions.pointee.elems + i
                let topic = String(cString: element.pointee.topic)
                do {
                    let stored = try store.position(of: Self.source(topic: topic, partition: element.pointee.partition))
                    element.pointee.offset = stored?.position ?? resetOffset
                    if let stored { resumeOffsets[element.pointee.partition] = stored.position }
                } catch {
                    failure = error
                    element.pointee.offset = Int64(RD_KAFKA_OFFSET_END)
                }
                assigned.insert(element.pointee.partition)
                atEnd.remove(element.pointee.partition)
                described.append("\(element.pointee.partition)@\(element.pointee.offset)")
            }
            logger.info("assigned partitions", metadata: ["partitions": "\(described.joined(separator: " "))"])
            rd_kafka_assign(rk, partitions)
        case RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS:
            do { try drain() } catch { failure = error }
            logger.info("partitions revoked; open batch committed")
            rd_kafka_assign(rk, nil)
            assigned.removeAll()
            atEnd.removeAll()
            resumeOffsets.removeAll()
        default:
            logger.warning("rebalance error: \(String(cString: rd_kafka_err2str(err)))")
            rd_kafka_assign(rk, nil)
            assigned.removeAll()
        }
    }
}
