#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch
import IdreconDomain
import IdreconStore

/// Totals of one ingest run.
public struct IngestSummary: Sendable, Equatable {
    public var lines: Int64 = 0
    public var skippedBlank: Int64 = 0
    public var outcome = BatchOutcome()
    public var resumedAt: Int64 = 0
    public var bytes: Int64 = 0
}

/// Progress after each committed batch.
public struct IngestProgress: Sendable {
    public var bytesDone: Int64
    public var bytesTotal: Int64?
    public var lines: Int64
}

/// Reads JSON lines from a file (or standard input) and appends them to the store in
/// batches; each batch commits its events, quarantine entries and the file position
/// in one transaction, so a killed run resumes exactly where it stopped.
public struct FileIngestor: Sendable {
    public var store: EventStore
    public var batchSize: Int
    /// Records validated and handed to the writer at a time.
    public var chunkSize: Int
    /// Verifies `id_token`s of limited logins when set (`--jwks`).
    public var tokens: TokenVerifier?
    /// Longer lines are quarantined as `malformed_json` without being held in memory.
    public var maxRecordBytes: Int
    /// Events behind the log from which the projections are built in bulk
    /// (`PipelinedWriter.expect(events:)`; nil: never).
    public var bulkFrom: Int64? = EventStore.bulkCatchUpFrom

    public init(store: EventStore, batchSize: Int = 64000, chunkSize: Int = FileIngestor.defaultChunkSize, tokens: TokenVerifier? = nil,
                maxRecordBytes: Int = RecordSize.defaultLimit) {
        self.store = store
        self.batchSize = batchSize
        self.chunkSize = chunkSize
        self.tokens = tokens
        self.maxRecordBytes = maxRecordBytes
    }

    /// Ingests `path`, or standard input when `path` is `-` (no resume for a pipe). A file
    /// that will at least double the log is appended first and the projections are built
    /// from it in bulk at the end (`PipelinedWriter.expect(events:)`; `building` reports
    /// that build's progress: events built, of the log's).
    public func ingest(
        path: String, progress: (IngestProgress) -> Void = { _ in }, building: (@Sendable (Int64, Int64) -> Void)? = nil
    ) throws(IdreconError) -> IngestSummary {
        let isStdin = path == "-"
        let fd: Int32
        var total: Int64?
        let source: String
        if isStdin {
            fd = STDIN_FILENO
            source = "stdin"
        } else {
            guard !EventStore.isDatabaseFile(path, of: store.path) else {
                throw IdreconError(.input, "cannot ingest \(path): it is the database itself; pass a JSON-lines file")
            }
            fd = open(path, O_RDONLY)
            guard fd >= 0 else { throw IdreconError(.input, "cannot read \(path): \(String(cString: strerror(errno)))") }
            var info = stat()
            guard fstat(fd, &info) == 0 else { close(fd); throw IdreconError(.input, "cannot read \(path): \(String(cString: strerror(errno)))") }
            if (info.st_mode & S_IFMT) == S_IFDIR {
                close(fd)
                throw IdreconError(.input, "cannot read \(path): it is a directory; pass a JSON-lines file or '-' for standard input")
            }
            if (info.st_mode & S_IFMT) == S_IFREG { total = Int64(info.st_size) }
            source = "file:" + Self.absolutePath(path)
        }
        defer { if !isStdin { close(fd) } }

        var summary = IngestSummary()
        var startOffset: Int64 = 0
        var lineNumber: Int64 = 0
        if !isStdin, let total {
            let stored: ConsumedPosition?
            do { stored = try store.position(of: source) } catch { throw error }
            if let stored, stored.position <= total {
                startOffset = stored.position
                lineNumber = stored.records
            }
            if startOffset > 0, lseek(fd, off_t(startOffset), SEEK_SET) < 0 {
                throw IdreconError(.input, "cannot seek in \(path): \(String(cString: strerror(errno)))")
            }
        }
        summary.resumedAt = startOffset

        // A regular file is read once: its pages leave the page cache behind the reader.
        var reader = LineReader(
            fd: fd, startOffset: startOffset, maxLineBytes: maxRecordBytes, dropsBehind: total != nil)
        let writer = PipelinedWriter(store: store, transactionRecords: batchSize, bulkFrom: bulkFrom, onBuild: building)
        var expected = false
        // Validation works in chunks; the writer joins waiting chunks into transactions of
        // up to `batchSize` records, so memory does not grow with the transaction size.
        let chunkSize = min(batchSize, self.chunkSize)
        var pending: [(raw: [UInt8], origin: RecordOrigin)] = []
        pending.reserveCapacity(chunkSize)
        // Oversized lines of `pending`, by index: only their beginning is in `pending`.
        var oversized: [Int: (bytes: Int64, eventID: String?)] = [:]
        var lastOffset = startOffset

        func flush() throws(IdreconError) {
            if !expected, let total, lastOffset > startOffset {
                // The rest of the file, at the first chunk's bytes per line.
                expected = true
                let perLine = Double(lastOffset - startOffset) / Double(max(1, pending.count))
                writer.expect(events: Int64(min(Double(total - startOffset) / perLine, 1e15)))
            }
            let records = BatchValidator.validate(pending, tokens: tokens, maxRecordBytes: maxRecordBytes, oversized: oversized)
            oversized.removeAll()
            let position = isStdin ? [] : [ConsumedPosition(source: source, position: lastOffset, records: lineNumber, updatedAt: Self.nowMillis())]
            try writer.submit(records, positions: position)
            pending.removeAll(keepingCapacity: true)
            if let done = writer.lastCommitted {
                progress(IngestProgress(bytesDone: done.position, bytesTotal: total, lines: done.records))
            }
        }

        while let (line, endOffset) = try reader.next() {
            lineNumber += 1
            summary.lines += 1
            lastOffset = endOffset
            switch line {
            case let .text(text):
                if text.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }) {
                    summary.skippedBlank += 1
                    continue
                }
                pending.append((Array(text), RecordOrigin(source: source, position: lineNumber)))
            case let .oversized(prefix, bytes, eventID):
                oversized[pending.count] = (bytes, eventID)
                pending.append((prefix, RecordOrigin(source: source, position: lineNumber)))
            }
            if pending.count >= chunkSize { try flush() }
        }
        // Always commit at the end so blank trailing lines advance the stored position too.
        if !pending.isEmpty || lastOffset != startOffset { try flush() }
        summary.outcome = try writer.finish()
        summary.bytes = lastOffset - startOffset
        return summary
    }

    /// Records validated (and handed to the writer) at a time, by default.
    public static let defaultChunkSize = 8000

    static func absolutePath(_ path: String) -> String {
        guard let resolved = realpath(path, nil) else { return path }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    static func nowMillis() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }
}

/// Validation is pure, so a batch is validated on all cores.
public enum BatchValidator {
    /// `oversized` marks, by index, records of which `pending` holds only the beginning (a
    /// line the reader did not buffer whole): they are quarantined without being parsed.
    /// `yielding`: validated on the calling thread alone, which the caller has lowered to the
    /// lowest CPU priority (`ThreadPriority`) because a read API shares the process. GCD's
    /// workers also run the API's handlers: lowering them would slow the API for good.
    public static func validate(
        _ pending: [(raw: [UInt8], origin: RecordOrigin)], tokens: TokenVerifier? = nil, maxRecordBytes: Int = RecordSize.defaultLimit,
        oversized: [Int: (bytes: Int64, eventID: String?)] = [:], yielding: Bool = false
    ) -> [IncomingRecord] {
        let chunks = yielding ? 1 : max(1, min(pending.count / 256, Machine.cores * 2))
        return [IncomingRecord](unsafeUninitializedCapacity: pending.count) { buffer, initialized in
            nonisolated(unsafe) let out = buffer
            @Sendable func validate(chunk: Int) {
                let lower = pending.count * chunk / chunks, upper = pending.count * (chunk + 1) / chunks
                for i in lower..<upper {
                    ThreadPriority.pause() // nothing unless this thread was lowered
                    if !oversized.isEmpty, let line = oversized[i] {
                        (out.baseAddress! + i).initialize(to: IncomingRecord(
                            oversized: pending[i].raw, bytes: line.bytes, limit: maxRecordBytes, eventID: line.eventID,
                            origin: pending[i].origin))
                        continue
                    }
                    (out.baseAddress! + i).initialize(to: IncomingRecord(
                        raw: pending[i].raw, origin: pending[i].origin, maxBytes: maxRecordBytes, tokens: tokens))
                }
            }
            if chunks == 1 { validate(chunk: 0) } else { DispatchQueue.concurrentPerform(iterations: chunks, execute: validate) }
            initialized = pending.count
        }
    }
}
