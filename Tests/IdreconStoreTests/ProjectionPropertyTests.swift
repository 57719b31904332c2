import EventGenerator
import Foundation
import IdreconDomain
import IdreconIngest
@testable import IdreconStore
import PropertyBased
import Testing

/// Generated streams over a small, dense population (so devices, identities and friend
/// lists interact a lot), with out-of-order arrival and duplicates.
func generatedLines(seed: UInt64, events: Int, bad: Double = 0) -> [String] {
    var config = GeneratorConfig(events: events, seed: seed)
    config.persons = 12
    config.badFraction = bad
    config.duplicateFraction = 0.05
    config.shuffleWindow = 40
    var generator = EventStreamGenerator(config: config)
    var lines: [String] = []
    while let line = generator.next() { lines.append(String(decoding: line, as: UTF8.self)) }
    return lines
}

func ingest(_ lines: [String], into store: EventStore, dir: TempDir, batchSize: Int, chunkSize: Int = FileIngestor.defaultChunkSize) throws {
    _ = try FileIngestor(store: store, batchSize: batchSize, chunkSize: chunkSize).ingest(path: dir.write("in-\(UUID().uuidString).jsonl", lines))
}

/// Appends `lines` in transactions of 1...`atMost` records with the given write-behind lag;
/// returns where each transaction ended.
@discardableResult
func appendInRandomTransactions(_ lines: [String], to store: EventStore, atMost: Int, lag: Int, using rng: inout SeededRandom) -> [Int] {
    let records = BatchValidator.validate(lines.enumerated().map { (Array($1.utf8), RecordOrigin(source: "t", position: Int64($0 + 1))) })
    var boundaries: [Int] = []
    var start = 0
    while start < records.count {
        let end = min(records.count, start + Int.random(in: 1...atMost, using: &rng))
        var taken = false
        _ = try! store.appendBatches(projectionLag: lag) {
            defer { taken = true }
            return taken ? nil : (Array(records[start..<end]), [])
        }
        boundaries.append(end)
        start = end
    }
    return boundaries
}

/// Small limits so the over-merge guard is exercised by a 12-person population.
let denseConfig = IdentityConfig(maxASIDsPerKey: 3)

@Suite struct ProjectionPropertyTests {
    /// Live incremental projections equal a full replay, whatever the batch boundaries (and
    /// validation chunks within one transaction) and however many partitions the replay
    /// folds the log in.
    @Test func liveEqualsReplay() async throws {
        await propertyCheck(
            count: 12, input: Gen.int(in: 0...1_000_000), Gen.int(in: 1...300), Gen.int(in: 1...100), Gen.int(in: 40...1_000)
        ) { seed, batch, chunk, partition in
            let dir = TempDir()
            let store = try! EventStore(path: dir.path("db.sqlite"))
            _ = try! store.replay(config: denseConfig)
            try! ingest(generatedLines(seed: UInt64(seed), events: 600, bad: 0.03), into: store, dir: dir, batchSize: batch, chunkSize: chunk)
            let report = try! store.replay(verifyOnly: true, partitionSize: partition)
            #expect(report.drift.isEmpty, "seed \(seed), batch \(batch), chunk \(chunk), partition \(partition): drift in \(report.drift)")
        }
    }

    /// The engine folding each transaction's events into the stored rows equals a full
    /// replay, for random transaction boundaries and random write-behind lags (0: every
    /// transaction is folded on its own; more: several transactions' events in one fold).
    @Test func perTransactionFoldEqualsReplay() async throws {
        await propertyCheck(count: 12, input: Gen.int(in: 0...1_000_000), Gen.int(in: 0...1_000_000), Gen.int(in: 0...120)) { seed, cuts, lag in
            let lines = generatedLines(seed: UInt64(seed), events: 500, bad: 0.03)
            let dir = TempDir()
            let store = try! EventStore(path: dir.path("db.sqlite"))
            _ = try! store.replay(config: denseConfig)
            var rng = SeededRandom(seed: UInt64(cuts))
            let boundaries = appendInRandomTransactions(lines, to: store, atMost: 60, lag: lag, using: &rng)
            try! store.catchUpProjections()
            let report = try! store.replay(verifyOnly: true, partitionSize: Int.random(in: 40...600, using: &rng))
            #expect(report.drift.isEmpty, "seed \(seed), lag \(lag), transactions ending at \(boundaries): drift in \(report.drift)")
        }
    }

    /// Files ingested into a database they at least double are appended first and the
    /// projections built in bulk at the end; the result equals folding every transaction,
    /// whatever the files' sizes (a later, smaller file is folded incrementally).
    @Test func bulkBuiltIngestEqualsFolded() async throws {
        await propertyCheck(count: 10, input: Gen.int(in: 0...1_000_000), Gen.int(in: 1...599), Gen.int(in: 1...80)) { seed, cut, batch in
            let lines = generatedLines(seed: UInt64(seed), events: 600, bad: 0.03)
            let files = [Array(lines[..<cut]), Array(lines[cut...])]
            let dir = TempDir()
            let bulk = try! EventStore(path: dir.path("bulk.sqlite")), folded = try! EventStore(path: dir.path("folded.sqlite"))
            func generation(_ store: EventStore) -> Int {
                try! store.read { db in try Int.fetchOne(db, sql: "SELECT generation FROM projection_meta") ?? 0 }
            }
            for (store, from) in [(bulk, Int64?(1)), (folded, nil)] {
                _ = try! store.replay(config: denseConfig)
                for file in files {
                    var ingestor = FileIngestor(store: store, batchSize: batch, chunkSize: 25)
                    ingestor.bulkFrom = from
                    _ = try! ingestor.ingest(path: dir.write("in-\(UUID().uuidString).jsonl", file))
                }
            }
            // At least one of the files doubled the log: built anew, a new generation.
            #expect(generation(bulk) > generation(folded))
            let position = try! bulk.logPosition()
            #expect(position.lastSeq == position.appliedSeq)
            #expect(try! bulk.projectionDigests() == folded.projectionDigests(), "seed \(seed), cut \(cut), batch \(batch)")
            let report = try! bulk.replay(verifyOnly: true)
            #expect(report.drift.isEmpty, "seed \(seed), cut \(cut): drift in \(report.drift)")
        }
    }

    /// The same events in any arrival order give identical projections.
    @Test func arrivalOrderDoesNotMatter() async throws {
        await propertyCheck(count: 10, input: Gen.int(in: 0...1_000_000), Gen.int(in: 0...1_000_000)) { seed, shuffleSeed in
            let lines = generatedLines(seed: UInt64(seed), events: 500)
            var rng = SeededRandom(seed: UInt64(shuffleSeed))
            let shuffled = lines.shuffled(using: &rng)
            let dir = TempDir()
            let a = try! EventStore(path: dir.path("a.sqlite")), b = try! EventStore(path: dir.path("b.sqlite"))
            _ = try! a.replay(config: denseConfig)
            _ = try! b.replay(config: denseConfig)
            try! ingest(lines, into: a, dir: dir, batchSize: 50)
            try! ingest(shuffled, into: b, dir: dir, batchSize: 7)
            #expect(try! a.projectionDigests() == b.projectionDigests(), "seed \(seed), shuffle \(shuffleSeed)")
            for kind in ExportKind.allCases {
                var ea: [String] = [], eb: [String] = []
                try! a.export(kind) { ea.append(CanonicalJSON.encode(.array($0))) }
                try! b.export(kind) { eb.append(CanonicalJSON.encode(.array($0))) }
                #expect(ea == eb, "\(kind) differs for seed \(seed)")
            }
        }
    }

    /// Ingesting the same stream twice changes nothing.
    @Test func ingestingTwiceChangesNothing() async throws {
        await propertyCheck(count: 8, input: Gen.int(in: 0...1_000_000)) { seed in
            let lines = generatedLines(seed: UInt64(seed), events: 400, bad: 0.05)
            let dir = TempDir()
            let store = try! EventStore(path: dir.path("db.sqlite"))
            try! ingest(lines, into: store, dir: dir, batchSize: 64)
            let before = try! store.projectionDigests()
            let events = try! store.eventPayloads().count
            try! ingest(lines, into: store, dir: dir, batchSize: 33) // another file name: no resume, all duplicates
            #expect(try! store.projectionDigests() == before)
            #expect(try! store.eventPayloads().count == events)
        }
    }

    /// Access answered from the indexed projections equals a brute-force evaluation of
    /// SPEC section 4 over the raw events, at many times.
    @Test func accessMatchesBruteForce() async throws {
        await propertyCheck(count: 6, input: Gen.int(in: 0...1_000_000)) { seed in
            let lines = generatedLines(seed: UInt64(seed), events: 300)
            let dir = TempDir()
            let store = try! EventStore(path: dir.path("db.sqlite"))
            try! ingest(lines, into: store, dir: dir, batchSize: 25)
            var events: [LoginEvent] = []
            var seenIDs: Set<String> = []
            for line in lines {
                if case let .success(e) = EventValidator.validate(Array(line.utf8)), seenIDs.insert(e.eventID).inserted { events.append(e) }
            }
            let times = events.map(\.occurredAt).sorted()
            let asids = Set(events.compactMap(\.asid) + events.flatMap { $0.friendASIDs ?? [] })
            for t in stride(from: 0, to: times.count, by: max(1, times.count / 15)).map({ times[$0] }) {
                for asid in asids {
                    let expected = bruteForceAccess(asid, at: t, events: events)
                    #expect(try! store.access(asid, asOf: t).state == expected, "seed \(seed) asid \(asid) at \(Timestamp.format(t))")
                }
            }
        }
    }

    /// The access history (per-ASID limited spans, latest logins) answers like the brute
    /// force for any arrival order, transaction boundaries and write-behind lag (late
    /// logins refold an ASID from the log), and a replay's tables answer the same.
    @Test func accessHistoryMatchesBruteForceInAnyArrivalOrder() async throws {
        await propertyCheck(count: 8, input: Gen.int(in: 0...1_000_000), Gen.int(in: 0...1_000_000), Gen.int(in: 0...80)) { seed, shuffle, lag in
            let lines = generatedLines(seed: UInt64(seed), events: 300)
            var rng = SeededRandom(seed: UInt64(shuffle))
            let arrival = shuffle % 2 == 0 ? lines.shuffled(using: &rng) : lines
            let dir = TempDir()
            let store = try! EventStore(path: dir.path("db.sqlite"))
            appendInRandomTransactions(arrival, to: store, atMost: 50, lag: lag, using: &rng)
            try! store.catchUpProjections()
            var events: [LoginEvent] = []
            var seenIDs: Set<String> = []
            for line in arrival {
                if case let .success(e) = EventValidator.validate(Array(line.utf8)), seenIDs.insert(e.eventID).inserted { events.append(e) }
            }
            let times = events.map(\.occurredAt).sorted()
            let asids = Set(events.compactMap(\.asid) + events.flatMap { $0.friendASIDs ?? [] }).sorted()
            let probes = stride(from: 0, to: times.count, by: max(1, times.count / 12)).flatMap { [times[$0] - 1, times[$0]] }
            func answers() -> [AccessState] { probes.flatMap { t in asids.map { try! store.access($0, asOf: t).state } } }
            let live = answers()
            let expected = probes.flatMap { t in asids.map { bruteForceAccess($0, at: t, events: events) } }
            #expect(live == expected, "seed \(seed), shuffle \(shuffle), lag \(lag)")
            _ = try! store.replay()
            #expect(answers() == live, "after replay: seed \(seed), shuffle \(shuffle), lag \(lag)")
        }
    }
}

/// SPEC section 4 "Graph access", evaluated naively from the events.
func bruteForceAccess(_ asid: String, at t: Int64, events: [LoginEvent]) -> AccessState {
    let upTo = events.filter { $0.occurredAt <= t }.sorted { EventKey(at: $0.occurredAt, eventID: $0.eventID) < EventKey(at: $1.occurredAt, eventID: $1.eventID) }
    var deviceLatest: [String: LoginEvent] = [:]
    for e in upTo { deviceLatest[e.appID + "\u{0}" + e.deviceID] = e }
    let held = deviceLatest.values.contains { $0.type == .login && $0.tracking == .limited && $0.asid == asid }
    let latestLogin = upTo.last { $0.type == .login && $0.asid == asid }
    let mentioned = upTo.contains { $0.type == .login && ($0.friendASIDs ?? []).contains(asid) }
    return AccessState.decide(heldLimited: held, latestLoginLimited: latestLogin.map { $0.tracking == .limited }, mentioned: mentioned)
}
