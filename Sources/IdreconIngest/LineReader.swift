#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Reads `\n`-terminated lines from a file descriptor in large chunks, reporting each
/// line's byte range. A final line without a newline is still a line. Memory is bounded
/// by the chunk size plus the longest line.
struct LineReader {
    private let fd: Int32
    private var buffer: [UInt8]
    private var start = 0
    private var end = 0
    private var eof = false
    /// File offset of `buffer[start]`.
    private(set) var offset: Int64

    init(fd: Int32, startOffset: Int64, chunkSize: Int = 1 << 20) {
        self.fd = fd
        self.offset = startOffset
        self.buffer = [UInt8](repeating: 0, count: chunkSize)
    }

    /// The next line without its `\n`, and the file offset just past it; nil at EOF.
    mutating func next() throws(IngestError) -> (line: ArraySlice<UInt8>, endOffset: Int64)? {
        while true {
            if let newline = buffer[start..<end].firstIndex(of: UInt8(ascii: "\n")) {
                let line = buffer[start..<newline]
                offset += Int64(newline + 1 - start)
                start = newline + 1
                return (line, offset)
            }
            if eof {
                guard start < end else { return nil }
                let line = buffer[start..<end]
                offset += Int64(end - start)
                start = end
                return (line, offset)
            }
            try fill()
        }
    }

    private mutating func fill() throws(IngestError) {
        if start > 0 {
            buffer.withUnsafeMutableBytes { raw in
                _ = memmove(raw.baseAddress!, raw.baseAddress! + start, end - start)
            }
            end -= start
            start = 0
        }
        if end == buffer.count { buffer.append(contentsOf: repeatElement(0, count: buffer.count)) }
        let n = buffer.withUnsafeMutableBytes { raw in read(fd, raw.baseAddress! + end, raw.count - end) }
        if n < 0 {
            if errno == EINTR { return }
            throw IngestError("read failed: \(String(cString: strerror(errno)))")
        }
        if n == 0 { eof = true }
        end += n
    }
}
