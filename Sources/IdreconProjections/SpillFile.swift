#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch
import IdreconDomain
import IdreconLog

/// A temporary file of records, written once and then read back in order: how the bulk
/// replay hands one scan's facts to the partitions that fold them. The file is unlinked
/// as soon as it is created, so nothing is left behind if the process stops.
final class SpillFile {
    private let descriptor: Int32
    private let directory: String
    /// Records not yet written: each is a 4-byte length followed by its bytes. Only this
    /// object's methods touch it, one at a time: unchecked, a replay's scan is spared two
    /// dynamic exclusivity checks per record (a third of a million per 100,000 events).
    @exclusivity(unchecked) private var pending: SpillRecord.Writer
    /// Bytes buffered before a write (kept small: a replay writes to many files at once)
    /// and read at a time.
    private static let writeBuffer = 1 << 16, readBuffer = 1 << 20
    /// Records appended, and their bytes with their 4-byte lengths: what reading them back
    /// can reserve room for.
    private(set) var records = 0, bytes = 0

    /// Creates an empty file in `directory`.
    init(directory: String) throws {
        var template = Array((directory + "/.idrecon-replay-XXXXXX").utf8CString)
        descriptor = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        self.directory = directory
        guard descriptor >= 0 else { throw Self.failure("create a temporary file in", directory) }
        _ = template.withUnsafeBufferPointer { unlink($0.baseAddress!) }
        pending = SpillRecord.Writer(capacity: Self.writeBuffer + 4096)
    }

    deinit {
        let descriptor = descriptor
        Self.closing.async { close(descriptor) }
        pending.deallocate()
    }

    /// Where the descriptors are closed: closing an unlinked file frees its blocks, and on a file
    /// system mounted with `discard` (this VM's ext4, without a journal) the closing thread waits
    /// for the device to discard them. A 10M replay's spill files (2.5 GB, written back by the
    /// kernel while they are read) held its stages in `blkdev_issue_discard` for seconds, and the
    /// writer waited for the stages. A serial queue: a thread of its own, whatever else runs.
    private static let closing = DispatchQueue(label: "idrecon.replay.spill-close", qos: .utility)

    /// Appends one record, encoded by `encode`.
    func append(_ encode: (inout SpillRecord.Writer) -> Void) throws {
        let start = pending.count
        pending.add(UInt32(0))
        encode(&pending)
        pending.set(UInt32(pending.count - start - 4), at: start)
        records += 1
        bytes += pending.count - start
        if pending.count >= Self.writeBuffer { try flush() }
    }

    /// Reads every record from the start, in the order appended.
    func forEach(_ body: (inout SpillRecord.Reader) throws -> Void) throws {
        try flush()
        guard lseek(descriptor, 0, SEEK_SET) == 0 else { throw Self.failure("rewind a temporary file in", directory) }
        var buffer = [UInt8](repeating: 0, count: Self.readBuffer)
        var filled = 0, offset = 0
        while true {
            // Move the unread tail to the front and fill the rest.
            if offset > 0 {
                buffer.withUnsafeMutableBytes { raw in
                    raw.baseAddress!.copyMemory(from: raw.baseAddress! + offset, byteCount: filled - offset)
                }
                filled -= offset
                offset = 0
            }
            let count = buffer.withUnsafeMutableBytes { raw in read(descriptor, raw.baseAddress! + filled, raw.count - filled) }
            guard count >= 0 else { throw Self.failure("read a temporary file in", directory) }
            filled += count
            if count == 0 && filled == 0 { return }
            var progressed = false
            try buffer.withUnsafeBytes { raw in
                while filled - offset >= 4 {
                    let length = Int(UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: offset, as: UInt32.self)))
                    guard filled - offset - 4 >= length else { break }
                    var reader = SpillRecord.Reader(bytes: UnsafeRawBufferPointer(rebasing: raw[(offset + 4)..<(offset + 4 + length)]))
                    try body(&reader)
                    offset += 4 + length
                    progressed = true
                }
            }
            if count == 0 && !progressed { throw IdreconError(.storage, "replay found a truncated temporary file in \(directory)") }
            if !progressed && offset == 0 && filled == buffer.count {
                buffer.append(contentsOf: [UInt8](repeating: 0, count: buffer.count)) // a record larger than the buffer
            }
        }
    }

    private func flush() throws {
        var written = 0
        while written < pending.count {
            let n = write(descriptor, pending.base + written, pending.count - written)
            guard n > 0 else { throw Self.failure("write a temporary file in", directory) }
            written += n
        }
        pending.count = 0
    }

    private static func failure(_ action: String, _ directory: String) -> IdreconError {
        IdreconError(.storage, "replay could not \(action) \(directory): \(String(cString: strerror(errno))) (replay needs free space next to the database)")
    }
}

/// The byte encoding of spilled records: little-endian integers, length-prefixed UTF-8.
enum SpillRecord {
    /// Appends to a buffer it owns (`deallocate` frees it): stores, not `Array` appends, which
    /// checked capacity and uniqueness for each value (a third of the scan's spilling).
    struct Writer {
        private(set) var base: UnsafeMutableRawPointer
        private var capacity: Int
        fileprivate(set) var count = 0

        init(capacity: Int) {
            base = .allocate(byteCount: capacity, alignment: 16)
            self.capacity = capacity
        }

        func deallocate() { base.deallocate() }

        private mutating func reserve(_ bytes: Int) {
            guard count + bytes > capacity else { return }
            let grown = Swift.max(capacity * 2, count + bytes)
            let moved = UnsafeMutableRawPointer.allocate(byteCount: grown, alignment: 16)
            moved.copyMemory(from: base, byteCount: count)
            base.deallocate()
            (base, capacity) = (moved, grown)
        }

        private mutating func store<T: FixedWidthInteger>(_ value: T) {
            reserve(MemoryLayout<T>.size)
            base.storeBytes(of: value.littleEndian, toByteOffset: count, as: T.self)
            count += MemoryLayout<T>.size
        }

        /// Overwrites 4 bytes written before (a record's length).
        fileprivate func set(_ value: UInt32, at offset: Int) {
            base.storeBytes(of: value.littleEndian, toByteOffset: offset, as: UInt32.self)
        }

        mutating func add(_ value: Int64) { store(value) }
        mutating func add(_ value: UInt8) { store(value) }
        fileprivate mutating func add(_ value: UInt32) { store(value) }
        mutating func add(_ value: String) {
            var value = value
            value.withUTF8 { add(text: $0) }
        }
        mutating func add(_ value: String?) {
            if let value { add(UInt8(1)); add(value) } else { add(UInt8(0)) }
        }
        /// A text as `add(_: String)` writes it, from its UTF-8 bytes.
        mutating func add(text: UnsafeBufferPointer<UInt8>) {
            reserve(4 + text.count)
            let length = UInt32(truncatingIfNeeded: text.count).littleEndian
            base.storeBytes(of: length, toByteOffset: count, as: UInt32.self)
            if let address = text.baseAddress { (base + count + 4).copyMemory(from: address, byteCount: text.count) }
            count += 4 + text.count
        }
        /// An optional text as `add(_: String?)` writes it.
        mutating func add(optionalText text: UnsafeBufferPointer<UInt8>?) {
            if let text { add(UInt8(1)); add(text: text) } else { add(UInt8(0)) }
        }
    }

    struct Reader {
        let bytes: UnsafeRawBufferPointer
        private var offset = 0

        init(bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

        mutating func int() -> Int64 {
            defer { offset += 8 }
            return Int64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: Int64.self))
        }
        mutating func byte() -> UInt8 {
            defer { offset += 1 }
            return bytes[offset]
        }
        mutating func string() -> String {
            let count = Int(UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self)))
            defer { offset += 4 + count }
            return String(decoding: UnsafeRawBufferPointer(rebasing: bytes[(offset + 4)..<(offset + 4 + count)]), as: UTF8.self)
        }
        mutating func optionalString() -> String? { byte() == 1 ? string() : nil }
        /// The bytes of the next text, valid while the record is (no `String` made of them).
        mutating func text() -> UnsafeRawBufferPointer {
            let count = Int(UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self)))
            defer { offset += 4 + count }
            return UnsafeRawBufferPointer(rebasing: bytes[(offset + 4)..<(offset + 4 + count)])
        }
    }
}
