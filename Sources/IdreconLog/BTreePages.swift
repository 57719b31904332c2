#if canImport(Glibc)
import Glibc
#endif
import GRDB

/// The pages of one of the database's B-trees (a table or an index), leaves in key order, and a
/// way to have the kernel read them into its page cache ahead of the reads that need them
/// (`willNeed`).
///
/// Why: the log's `events` pages lie between its payloads' in the file (each append writes
/// both), and a scan that misses the page cache triggers the kernel's readahead, which reads the
/// file's next megabytes whatever they hold (8 MB here): a cold 10M scan read 4.3 GB for its 1.9
/// GB of `events` pages. And SQLite reads a B-tree's pages one at a time, each when it needs it.
/// The leaves' numbers are in the tree's interior pages, about one for 2,000 leaves: a walk of
/// those names every page a scan (or a `DROP TABLE`) will read, and only those, for the kernel to
/// read many at a time.
///
/// The file is SQLite's: this never opens or closes it (closing any descriptor of it drops the
/// process's POSIX locks on it; SQLite's "How To Corrupt An SQLite Database File", §2.2). It
/// borrows a descriptor one of SQLite's connections holds, found by its device and inode in
/// `/proc/self/fd`, and only reads through it (`pread`, `posix_fadvise`). The interior pages are
/// read from the database file, not through SQLite: a page the WAL holds a newer version of
/// may name a leaf that is no longer the tree's. That only misdirects a hint: every read that
/// counts goes through SQLite. A page that is not what a B-tree page must be ends the walk.
package struct BTreePages {
    private let descriptor: Int32
    private let device: UInt64, inode: UInt64
    private let pageSize: Int
    private let root: UInt32

    /// The pages of the table or index `name` of the database at `path`, which `db` (a
    /// connection to it) describes; nil when there is no such B-tree or no descriptor of the
    /// file is found (not Linux, or no connection holds one).
    package init?(_ db: Database, path: String, bTree name: String) throws {
        #if os(Linux)
        guard let root = try Int64.fetchOne(
            db, sql: "SELECT rootpage FROM sqlite_schema WHERE type IN ('table', 'index') AND name = ?",
            arguments: [name]),
            let pageSize = try Int.fetchOne(db, sql: "PRAGMA page_size"),
            let root = UInt32(exactly: root), root > 1, pageSize >= 512
        else { return nil }
        var target = stat()
        guard stat(path, &target) == 0, let descriptor = Self.descriptor(device: target.st_dev, inode: target.st_ino)
        else { return nil }
        (self.descriptor, device, inode) = (descriptor, UInt64(target.st_dev), UInt64(target.st_ino))
        (self.pageSize, self.root) = (pageSize, root)
        #else
        return nil
        #endif
    }

    /// The bytes of `pages`.
    package func bytes(_ pages: Range<UInt32>) -> Int { pages.count * pageSize }

    /// Calls `body` with runs of consecutive leaf pages (at most `maxRun` each), in key order,
    /// with the lowest key the run can hold, until `body` returns false; for a rowid table, only
    /// the runs that can hold keys in `keys` (an index's pages carry no rowids: all of them). The
    /// interior pages are read on the way, by this thread. Returns false when it stopped early at a
    /// page that is not what a B-tree page must be.
    @discardableResult
    package func forEachLeafRun(
        keys: ClosedRange<Int64> = Int64.min...Int64.max, maxRun: Int = 128,
        _ body: (_ lowestKey: Int64, _ pages: Range<UInt32>) throws -> Bool
    ) rethrows -> Bool {
        // The depth of the leaves: the B-tree is balanced, so the leftmost path tells.
        var depth = 0
        var page = root
        while true {
            guard depth < Self.maxDepth, let node = read(page) else { return false }
            if node.isLeaf { break }
            guard let first = node.child(0) else { return false }
            (page, depth) = (first.page, depth + 1)
        }
        if depth == 0 {
            _ = try body(keys.lowerBound, root..<(root + 1))
            return true
        }
        var run: (low: Int64, pages: Range<UInt32>)?
        // Depth-first over the interior pages; each is read once.
        var stack: [(node: Node, next: Int, lower: Int64)] = []
        guard let top = read(root), !top.isLeaf else { return false }
        stack.append((top, 0, Int64.min))
        while let (node, next, start) = stack.popLast() {
            guard next <= node.cells else { continue }
            guard let child = node.child(next) else { return false }
            stack.append((node, next + 1, child.upper == Int64.max ? Int64.max : child.upper &+ 1))
            let upper = child.upper
            if upper < keys.lowerBound { continue }
            if start > keys.upperBound { break }
            let lower = max(start, keys.lowerBound)
            if stack.count < depth {
                guard let inner = read(child.page, upper: upper), !inner.isLeaf, inner.kind == node.kind else {
                    return false
                }
                stack.append((inner, 0, lower))
                continue
            }
            if let current = run, current.pages.upperBound == child.page, current.pages.count < maxRun {
                run!.pages = current.pages.lowerBound..<(child.page + 1)
                continue
            }
            if let current = run, try !body(current.low, current.pages) { return true }
            run = (lower, child.page..<(child.page + 1))
        }
        if let current = run { _ = try body(current.low, current.pages) }
        return true
    }

    /// Asks the kernel to read `pages` into its page cache; it does so beside the caller. False
    /// when the descriptor no longer is the database file's (its connection closed it).
    package func willNeed(_ pages: Range<UInt32>) -> Bool {
        #if os(Linux)
        advise(pages, POSIX_FADV_WILLNEED)
        #else
        false
        #endif
    }

    /// Asks the kernel to drop `pages` from its page cache: those written back go, a dirty one
    /// stays. False when the descriptor no longer is the database file's.
    package func dontNeed(_ pages: Range<UInt32>) -> Bool {
        #if os(Linux)
        advise(pages, POSIX_FADV_DONTNEED)
        #else
        false
        #endif
    }

    #if os(Linux)
    private func advise(_ pages: Range<UInt32>, _ advice: Int32) -> Bool {
        var info = stat()
        guard fstat(descriptor, &info) == 0, UInt64(info.st_dev) == device, UInt64(info.st_ino) == inode else {
            return false
        }
        let offset = off_t(pages.lowerBound - 1) * off_t(pageSize), length = off_t(pages.count) * off_t(pageSize)
        return posix_fadvise(descriptor, offset, length, advice) == 0
    }
    #endif

    /// A page of a B-tree (SQLite's file format, "B-tree Pages"): for an interior page, its
    /// cells' child pages (and, in a rowid table, their highest keys) and the rightmost child
    /// (`child(cells)`).
    private struct Node {
        let bytes: [UInt8]
        let header: Int
        let cells: Int
        let upper: Int64

        /// The page type with the leaf bit cleared: 0x05 a rowid table's page, 0x02 an index's.
        var kind: UInt8 { bytes[header] & ~0x08 }
        var isLeaf: Bool { bytes[header] & 0x08 != 0 }

        /// The child at `index` (0...cells) and the highest key it holds (a rowid table's).
        func child(_ index: Int) -> (page: UInt32, upper: Int64)? {
            guard !isLeaf, index <= cells else { return nil }
            if index == cells {
                let page = Self.uint32(bytes, at: header + 8)
                return page > 1 ? (page, upper) : nil
            }
            let pointer = header + 12 + 2 * index
            let cell = Int(bytes[pointer]) << 8 | Int(bytes[pointer + 1])
            guard cell >= header + 12 + 2 * cells, cell + 4 < bytes.count else { return nil }
            let page = Self.uint32(bytes, at: cell)
            guard page > 1 else { return nil }
            if kind == 0x02 { return (page, upper) } // an index's cells hold keys of their own, not rowids
            guard let key = Self.varint(bytes, at: cell + 4) else { return nil }
            return (page, key)
        }

        static func uint32(_ bytes: [UInt8], at offset: Int) -> UInt32 {
            bytes[offset..<(offset + 4)].reduce(0) { $0 << 8 | UInt32($1) }
        }

        /// SQLite's variable-length integer (big-endian, 7 bits a byte, the ninth byte whole).
        static func varint(_ bytes: [UInt8], at offset: Int) -> Int64? {
            var value: UInt64 = 0
            for i in 0..<9 {
                guard offset + i < bytes.count else { return nil }
                let byte = bytes[offset + i]
                if i == 8 { return Int64(bitPattern: value << 8 | UInt64(byte)) }
                value = value << 7 | UInt64(byte & 0x7F)
                if byte < 0x80 { return Int64(bitPattern: value) }
            }
            return nil
        }
    }

    /// The page, when it is a B-tree page with a plausible header.
    private func read(_ page: UInt32, upper: Int64 = Int64.max) -> Node? {
        guard page > 1 else { return nil }
        var bytes = [UInt8](repeating: 0, count: pageSize)
        let offset = off_t(page - 1) * off_t(pageSize)
        let count = bytes.withUnsafeMutableBytes { buffer in
            var count: Int
            repeat { count = pread(descriptor, buffer.baseAddress, pageSize, offset) } while count < 0 && errno == EINTR
            return count
        }
        guard count == pageSize, [0x02, 0x05, 0x0A, 0x0D].contains(bytes[0]) else { return nil }
        let cells = Int(bytes[3]) << 8 | Int(bytes[4])
        guard 12 + 2 * cells <= pageSize else { return nil }
        return Node(bytes: bytes, header: 0, cells: cells, upper: upper)
    }

    private static let maxDepth = 24

    #if os(Linux)
    /// A descriptor the process holds of the file (`device`, `inode`), without opening it.
    private static func descriptor(device: dev_t, inode: ino_t) -> Int32? {
        guard let directory = opendir("/proc/self/fd") else { return nil }
        defer { closedir(directory) }
        let own = dirfd(directory)
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { bytes in
                String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
            }
            guard let fd = Int32(name), fd != own else { continue }
            var info = stat()
            if fstat(fd, &info) == 0, info.st_dev == device, info.st_ino == inode, info.st_mode & S_IFMT == S_IFREG {
                return fd
            }
        }
        return nil
    }
    #endif
}
