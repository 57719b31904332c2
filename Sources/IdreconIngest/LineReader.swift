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

    init(fd: Int32, startOffset: Int64, maxLineBytes: Int = RecordSize.defaultLimit, chunkSize: Int = 1 << 20) {
        self.fd = fd
        self.offset = startOffset
        self.maxLineBytes = maxLineBytes
        self.chunkSize = chunkSize
        self.buffer = [UInt8](repeating: 0, count: chunkSize)
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
    }
}
