#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import IdreconDomain

/// Reads `\n`-terminated lines from a file descriptor in large chunks, reporting each
/// line's byte range. A final line without a newline is still a line. A line longer than
/// `maxLineBytes` is not buffered whole: its beginning is kept, the rest is read past
/// (looking for its event ID), so memory is bounded by about `maxLineBytes` plus a chunk.
///
/// With `dropsBehind`, the file's pages that have been read are dropped from the kernel's page
/// cache, `dropStep` bytes at a time (16 MiB unless told). Why: an input is read once, and a large
/// one otherwise fills the page cache with pages nothing reads again, taking memory back from the
/// database's pages and everything else on the machine (a heavy 10M stream is 5.3 GB of input
/// beside a 16 GB log on a 24 GB machine). Clean pages only go; a page another process wrote and
/// has not synced is written back first (`POSIX_FADV_DONTNEED`). A hint: when it fails, nothing
/// else changes.
struct LineReader {
    enum Line {
        case text(ArraySlice<UInt8>)
        /// A line of `bytes` bytes over the limit: its first `RecordSize.keptBytes`, and its
        /// event ID when one could be read.
        case oversized(prefix: [UInt8], bytes: Int64, eventID: String?)
    }

    private let fd: Int32
    private let maxLineBytes: Int
    private let chunkSize: Int
    private var buffer: [UInt8]
    private var start = 0
    private var end = 0
    private var eof = false
    /// File offset of `buffer[start]`.
    private(set) var offset: Int64
    private let dropsBehind: Bool
    /// The file's bytes below this offset have been dropped from the page cache (or were read before
    /// this reader started).
    private(set) var droppedBelow: Int64

    /// Bytes of the file dropped from the page cache at a time, a multiple of `dropAlignment`.
    private let dropStep: Int64
    /// The kernel drops a folio of the page cache only when the range covers it whole, and a file's
    /// folios are up to 2 MiB (x86-64's largest, naturally aligned; a file written by one `write` and
    /// read again was held in them, and ranges of 1 MiB dropped none of it): ranges that end on
    /// multiples of 2 MiB split none.
    static let dropAlignment: Int64 = 2 << 20

    init(fd: Int32, startOffset: Int64, maxLineBytes: Int = RecordSize.defaultLimit, chunkSize: Int = 1 << 20,
         dropsBehind: Bool = false, dropStep: Int64 = 16 << 20) {
        self.fd = fd
        self.offset = startOffset
        self.maxLineBytes = maxLineBytes
        self.chunkSize = chunkSize
        self.buffer = [UInt8](repeating: 0, count: chunkSize)
        self.dropsBehind = dropsBehind
        self.dropStep = max(1, (dropStep + Self.dropAlignment - 1) / Self.dropAlignment) * Self.dropAlignment
        self.droppedBelow = startOffset
    }

    /// The next line without its `\n`, and the file offset just past it; nil at EOF.
    mutating func next() throws(IdreconError) -> (line: Line, endOffset: Int64)? {
        while true {
            if let newline = buffer[start..<end].firstIndex(of: UInt8(ascii: "\n")) {
                let line = start..<newline
                offset += Int64(newline + 1 - start)
                start = newline + 1
                return (line.count > maxLineBytes ? try oversized(buffer[line], more: false) : .text(buffer[line]), offset)
            }
            if eof {
                guard start < end else { return nil }
                let line = start..<end
                offset += Int64(end - start)
                start = end
                return (line.count > maxLineBytes ? try oversized(buffer[line], more: false) : .text(buffer[line]), offset)
            }
            if end - start > maxLineBytes {
                let line = start..<end
                offset += Int64(end - start)
                start = end
                return (try oversized(buffer[line], more: true), offset)
            }
            try fill()
        }
    }

    /// An oversized line beginning with `head`; when `more`, the rest is read up to and
    /// including its newline (or EOF), advancing `offset`.
    private mutating func oversized(_ head: ArraySlice<UInt8>, more: Bool) throws(IdreconError) -> Line {
        var scanner = EventIDScanner()
        scanner.feed(head)
        let prefix = Array(head.prefix(RecordSize.keptBytes))
        var bytes = Int64(head.count)
        guard more else { return .oversized(prefix: prefix, bytes: bytes, eventID: scanner.eventID) }
        while true {
            if let newline = buffer[start..<end].firstIndex(of: UInt8(ascii: "\n")) {
                scanner.feed(buffer[start..<newline])
                bytes += Int64(newline - start)
                offset += Int64(newline + 1 - start)
                start = newline + 1
                break
            }
            scanner.feed(buffer[start..<end])
            bytes += Int64(end - start)
            offset += Int64(end - start)
            (start, end) = (0, 0)
            if eof { break }
            try fill()
        }
        return .oversized(prefix: prefix, bytes: bytes, eventID: scanner.eventID)
    }

    private mutating func fill() throws(IdreconError) {
        if start > 0 {
            buffer.withUnsafeMutableBytes { raw in
                _ = memmove(raw.baseAddress!, raw.baseAddress! + start, end - start)
            }
            end -= start
            start = 0
        }
        if end == buffer.count { buffer.append(contentsOf: repeatElement(0, count: min(buffer.count, chunkSize))) }
        let n = buffer.withUnsafeMutableBytes { raw in read(fd, raw.baseAddress! + end, raw.count - end) }
        if n < 0 {
            if errno == EINTR { return }
            throw IdreconError(.input, "read failed: \(String(cString: strerror(errno)))")
        }
        if n == 0 { eof = true }
        end += n
        if dropsBehind { dropConsumed() }
    }

    /// Drops the pages of the bytes already handed out (below `offset`), whole steps at a time.
    private mutating func dropConsumed() {
        #if os(Linux)
        let upTo = offset - offset % dropStep
        guard upTo > droppedBelow else { return }
        _ = posix_fadvise(fd, off_t(droppedBelow), off_t(upTo - droppedBelow), POSIX_FADV_DONTNEED)
        droppedBelow = upTo
        #endif
    }
}
