import Foundation
@testable import IdreconIngest
import Testing

/// A reader that drops the file's pages behind it reads the same lines as one that does not, and
/// drops only what it has handed out, whole steps at a time.
@Suite struct LineReaderTests {
    private static func lines(
        _ path: String, dropsBehind: Bool, step: Int64
    ) throws -> (lines: [[UInt8]], dropped: Int64) {
        let fd = open(path, O_RDONLY)
        try #require(fd >= 0)
        defer { close(fd) }
        var reader = LineReader(fd: fd, startOffset: 0, chunkSize: 64 << 10, dropsBehind: dropsBehind, dropStep: step)
        var lines: [[UInt8]] = []
        while let (line, end) = try reader.next() {
            guard case let .text(text) = line else { Issue.record("no line here is oversized"); continue }
            lines.append(Array(text))
            #expect(reader.droppedBelow <= end, "nothing dropped that was not read")
            #expect(reader.droppedBelow % step == 0)
        }
        return (lines, reader.droppedBelow)
    }

    /// Written and synced, so that its pages are clean: the kernel drops only those.
    private static func write(_ bytes: [UInt8], to path: String) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        try #require(fd >= 0)
        defer { close(fd) }
        #expect(bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) } == bytes.count)
        #expect(fsync(fd) == 0)
    }

    @Test func droppingBehindReadsTheSameLinesAndDropsWhatWasRead() throws {
        let dir = TempDir()
        let path = dir.path("input.jsonl")
        var bytes: [UInt8] = []
        for i in 0..<80_000 {
            bytes += Array("{\"event_id\":\"e\(i)\",\"pad\":\"\(String(repeating: "x", count: i % 301))\"}".utf8)
            bytes += i % 7 == 0 ? Array("\r\n\n".utf8) : [0x0A]
        }
        bytes += Array("{\"last\":\"no newline\"}".utf8)
        try Self.write(bytes, to: path)
        let step: Int64 = LineReader.dropAlignment

        let plain = try Self.lines(path, dropsBehind: false, step: step)
        #expect(plain.dropped == 0)
        let dropping = try Self.lines(path, dropsBehind: true, step: step)
        #expect(dropping.lines == plain.lines)
        #expect(dropping.dropped > 0)
        #expect(Int64(bytes.count) - dropping.dropped < step + (64 << 10), "every whole step read was dropped")

        // A file in memory (tmpfs) is its pages: nothing to drop there. Else the kernel drops a
        // clean file's pages when asked for all of them, as a probe shows.
        let probe = dir.path("probe")
        try Self.write(Array(repeating: 0x41, count: 4 << 20), to: probe)
        let probeDescriptor = open(probe, O_RDONLY)
        try #require(probeDescriptor >= 0)
        _ = posix_fadvise(probeDescriptor, 0, 0, POSIX_FADV_DONTNEED)
        close(probeDescriptor)
        guard try residentPages(probe).contains(false) else { return }
        let resident = try residentPages(path)
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        let droppedPages = resident.prefix(Int(dropping.dropped) / page)
        #expect(droppedPages.filter { $0 }.count <= droppedPages.count / 20, "dropped from the page cache")
    }
}
