import Foundation
import GRDB
import IdreconDomain
import GRDBSQLite

/// A prepared statement driven through SQLite's C API, for the bulk paths (replay's scan
/// and loads) where GRDB's per-row argument arrays and `Row` boxing would dominate.
/// Used only inside a GRDB database access; the C statement never leaves this type.
package struct BulkStatement {
    private let statement: Statement
    private var handle: OpaquePointer { statement.sqliteStatement }
    private let db: Database

    package init(_ db: Database, _ sql: String) throws {
        self.db = db
        statement = try db.makeStatement(sql: sql)
    }

    /// The connection's cached statement for `sql` (hot paths prepare once per connection).
    package init(cached db: Database, _ sql: String) throws {
        self.db = db
        statement = try db.cachedStatement(sql: sql)
    }

    /// Binds the values `bind` adds (in parameter order), runs the statement to completion
    /// and resets it for the next row; returns the rows it changed.
    @discardableResult
    package func run(_ bind: (inout Binder) -> Void) throws -> Int { try run(Binder(handle: handle), bind) }

    /// `run` for values bound in place: texts the caller lends (`Binder.add(borrowed:)`), and,
    /// given `texts`, those bound as copies (`add(copying:)`, `add(_: String?)`), copied there
    /// instead of by SQLite, which frees each parameter's previous copy and allocates the next (a
    /// replay's writer spent a fifth of its time in `malloc` and `free`, most of it binding the
    /// rows `BulkInsert` loads 128 at a time). The bindings are cleared before it returns, so the
    /// statement keeps no pointer into the caller's memory or the buffer.
    @discardableResult
    package func runBorrowing(texts: TextBuffer? = nil, _ bind: (inout Binder) -> Void) throws -> Int {
        defer { sqlite3_clear_bindings(handle) }
        return try run(Binder(handle: handle, texts: texts?.bytes), bind)
    }

    private func run(_ binder: consuming Binder, _ bind: (inout Binder) -> Void) throws -> Int {
        var binder = binder
        bind(&binder)
        let code = sqlite3_step(handle)
        sqlite3_reset(handle)
        guard code == SQLITE_DONE else { throw failure(code) }
        return Int(sqlite3_changes(db.sqliteConnection))
    }

    /// Memory that a statement's texts are copied into for one run (`runBorrowing(texts:_:)`); a
    /// text that does not fit what is left is bound as SQLite's copy. Allocated at its first run:
    /// the live path makes the projections' writers each transaction, and most bind few texts.
    package final class TextBuffer {
        private let count: Int
        private var storage: UnsafeMutableRawBufferPointer?

        package init(bytes count: Int) { self.count = count }

        fileprivate var bytes: UnsafeMutableRawBufferPointer {
            if let storage { return storage }
            let allocated = UnsafeMutableRawBufferPointer.allocate(byteCount: count, alignment: 1)
            storage = allocated
            return allocated
        }

        deinit { storage?.deallocate() }
    }

    /// Runs a query, binding `bind`'s values, and calls `row` for each result row.
    package func each(_ bind: (inout Binder) -> Void = { _ in }, row: (Reader) throws -> Void) throws {
        try eachWhile(bind) { reader in
            try row(reader)
            return true
        }
    }

    /// Runs a query, binding `bind`'s values, and calls `row` for each result row until it
    /// returns false (the rest are not read).
    package func eachWhile(_ bind: (inout Binder) -> Void = { _ in }, _ row: (Reader) throws -> Bool) throws {
        var binder = Binder(handle: handle)
        bind(&binder)
        defer { sqlite3_reset(handle) }
        while true {
            let code = sqlite3_step(handle)
            if code == SQLITE_DONE { return }
            guard code == SQLITE_ROW else { throw failure(code) }
            guard try row(Reader(handle: handle)) else { return }
        }
    }

    /// Runs a query and maps its first row, if any.
    package func first<T>(_ bind: (inout Binder) -> Void, _ map: (Reader) throws -> T) throws -> T? {
        var binder = Binder(handle: handle)
        bind(&binder)
        defer { sqlite3_reset(handle) }
        let code = sqlite3_step(handle)
        if code == SQLITE_DONE { return nil }
        guard code == SQLITE_ROW else { throw failure(code) }
        return try map(Reader(handle: handle))
    }

    private func failure(_ code: Int32) -> DatabaseError {
        DatabaseError(resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(db.sqliteConnection)), sql: statement.sql)
    }

    /// Adds parameter values in order.
    package struct Binder {
        package let handle: OpaquePointer?
        private var index: Int32 = 1
        private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
        /// Where texts bound as copies go (`add(copying:)`, `add(_: String?)`) to be bound in
        /// place, and how much of it they fill; nil: SQLite copies them.
        private let texts: UnsafeMutableRawBufferPointer?
        private var used = 0

        package init(handle: OpaquePointer?) { (self.handle, texts) = (handle, nil) }

        fileprivate init(handle: OpaquePointer?, texts: UnsafeMutableRawBufferPointer?) {
            (self.handle, self.texts) = (handle, texts)
        }

        package mutating func add(_ value: Int64) {
            sqlite3_bind_int64(handle, index, value)
            index += 1
        }

        package mutating func add(_ value: Int) { add(Int64(value)) }

        package mutating func add(_ value: Bool) { add(Int64(value ? 1 : 0)) }

        package mutating func add(_ value: Int64?) {
            if let value { sqlite3_bind_int64(handle, index, value) } else { sqlite3_bind_null(handle, index) }
            index += 1
        }

        /// Text bound without a copy (`SQLITE_STATIC`): valid while the statement runs, so
        /// only through `runBorrowing`; nil binds NULL.
        package mutating func add(borrowed text: UnsafeRawBufferPointer?) {
            guard let text else {
                sqlite3_bind_null(handle, index)
                index += 1
                return
            }
            bindText(text.baseAddress, text.count, nil)
        }

        /// Text bound as a copy, from bytes that need not outlive the call (`addText`).
        package mutating func add(copying text: UnsafeRawBufferPointer) {
            addText(count: text.count) { $0.copyMemory(from: text) }
        }

        /// A text of `count` bytes that `write` fills, bound as a copy: written into the run's
        /// buffer (`runBorrowing(texts:_:)`) while it has room and bound in place, otherwise
        /// written to scratch memory and bound as SQLite's copy (`SQLITE_TRANSIENT`).
        package mutating func addText(count: Int, _ write: (UnsafeMutableRawBufferPointer) -> Void) {
            guard let texts, count <= texts.count - used else {
                return withUnsafeTemporaryAllocation(byteCount: count, alignment: 1) { scratch in
                    write(scratch)
                    bindText(UnsafeRawPointer(scratch.baseAddress), count, Self.transient)
                }
            }
            let target = UnsafeMutableRawBufferPointer(rebasing: texts[used..<(used + count)])
            write(target)
            used += count
            bindText(UnsafeRawPointer(target.baseAddress), count, nil)
        }

        private static let empty: StaticString = ""

        /// Binds `count` bytes at `base` (none: the empty text) as the next parameter; `destructor`
        /// nil is `SQLITE_STATIC`.
        private mutating func bindText(
            _ base: UnsafeRawPointer?, _ count: Int, _ destructor: sqlite3_destructor_type?
        ) {
            let chars = (base ?? UnsafeRawPointer(Self.empty.utf8Start)).assumingMemoryBound(to: CChar.self)
            sqlite3_bind_text(handle, index, chars, Int32(count), destructor)
            index += 1
        }

        /// A blob bound as a copy (`SQLITE_TRANSIENT`).
        package mutating func add(blob bytes: UnsafeRawBufferPointer) {
            sqlite3_bind_blob(handle, index, bytes.baseAddress ?? UnsafeRawPointer(Self.empty.utf8Start), Int32(bytes.count),
                              Self.transient)
            index += 1
        }

        package mutating func add(_ value: String?) {
            guard let value else {
                sqlite3_bind_null(handle, index)
                index += 1
                return
            }
            add(value)
        }

        /// A text bound as a copy (`add(copying:)`), read where it is: no mutable copy of the
        /// `String` (a retain and a release) for `withUTF8`.
        package mutating func add(_ value: String) {
            let copied: Void? = value.utf8.withContiguousStorageIfAvailable { add(copying: UnsafeRawBufferPointer($0)) }
            guard copied == nil else { return }
            var value = copy value
            value.withUTF8 { bytes in add(copying: UnsafeRawBufferPointer(bytes)) }
        }

    }

    /// Column values of the current result row, by position.
    package struct Reader {
        package let handle: OpaquePointer?

        package func isNull(_ column: Int32) -> Bool { sqlite3_column_type(handle, column) == SQLITE_NULL }

        package func int(_ column: Int32) -> Int64 { sqlite3_column_int64(handle, column) }

        package func string(_ column: Int32) -> String {
            guard let text = sqlite3_column_text(handle, column) else { return "" }
            let count = Int(sqlite3_column_bytes(handle, column))
            return String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self)
        }

        package func optionalString(_ column: Int32) -> String? { isNull(column) ? nil : string(column) }

        /// The bytes of a text column, nil when NULL: valid until the statement steps again or the
        /// column is read as another type (no `String` is made of them).
        package func text(_ column: Int32) -> UnsafeBufferPointer<UInt8>? {
            guard let text = sqlite3_column_text(handle, column) else { return nil }
            return UnsafeBufferPointer(start: text, count: Int(sqlite3_column_bytes(handle, column)))
        }

        /// The bytes of a blob column (empty when NULL or empty), valid as `text`'s are.
        package func blob(_ column: Int32) -> UnsafeRawBufferPointer {
            UnsafeRawBufferPointer(start: sqlite3_column_blob(handle, column), count: Int(sqlite3_column_bytes(handle, column)))
        }

        package var columnCount: Int32 { sqlite3_column_count(handle) }

        /// `value` in decimal, as `String(value)` spells it.
        static func appendDecimal(_ value: Int64, to line: inout [UInt8]) {
            if value < 0 { line.append(UInt8(ascii: "-")) }
            let start = line.count
            var rest = value.magnitude
            repeat {
                line.append(UInt8(ascii: "0") + UInt8(rest % 10))
                rest /= 10
            } while rest > 0
            line[start...].reverse()
        }

        /// Appends the value as digests spell it: `null`, decimal, a JSON string, base64.
        package func appendCanonical(_ column: Int32, to line: inout [UInt8]) {
            // Integers and valid UTF-8 texts go from SQLite's buffer to the line without a Swift
            // string (a replay digests every row of the live and of the rebuilt tables); a
            // String of valid UTF-8 holds the same bytes. Invalid UTF-8 takes `string(column)`,
            // which repairs it as before.
            switch sqlite3_column_type(handle, column) {
            case SQLITE_NULL: line.append(contentsOf: "null".utf8)
            case SQLITE_INTEGER: Self.appendDecimal(int(column), to: &line)
            case SQLITE_FLOAT: line.append(contentsOf: String(sqlite3_column_double(handle, column)).utf8)
            case SQLITE_TEXT:
                let text = sqlite3_column_text(handle, column) // before its length, as SQLite asks
                let bytes = UnsafeBufferPointer(start: text, count: Int(sqlite3_column_bytes(handle, column)))
                if JSONParser.isUTF8(bytes) {
                    CanonicalJSON.writeString(bytes, into: &line)
                } else {
                    CanonicalJSON.writeString(string(column), into: &line)
                }
            default:
                let bytes = sqlite3_column_blob(handle, column).map {
                    Data(bytes: $0, count: Int(sqlite3_column_bytes(handle, column)))
                } ?? Data()
                line.append(contentsOf: bytes.base64EncodedString().utf8)
            }
        }
    }
}

/// Inserts into one table, many rows to a statement, for loads in key order (a bulk build's
/// tables, the log's keys). SQLite keeps one cursor through a statement's rows, and a row that
/// goes after the last one on the cursor's leaf is inserted there without a seek from the root:
/// 300,000 rows of `devices` in key order took 0.39 s at 128 to a statement against 0.61 s one to
/// a statement (Python's `sqlite3`, the same bindings either way).
///
/// The statements are `INSERT OR IGNORE`: SQLite journals each statement of several rows that
/// could fail halfway, for a rollback of that statement alone, and one that ignores conflicts
/// cannot fail. A `checked` insert then fails when a row was left out (a duplicate key, a NULL
/// or a value its `CHECK` refuses), as a plain `INSERT` would.
package struct BulkInsert {
    private static let rowsPerStatement = 128
    private let many, one: BulkStatement
    private let checked: Bool
    private let table: String
    /// How many values a row has.
    let columns: Int
    /// The texts of a statement's rows (`BulkStatement.runBorrowing(texts:_:)`): 128 rows of the
    /// widest loads fit.
    private let texts = BulkStatement.TextBuffer(bytes: 64 * 1024)

    /// `columns`: the names, comma-separated, in the order `insert`'s `bind` adds values.
    package init(cached db: Database, into table: String, _ columns: String, checked: Bool = true) throws {
        let count = columns.split(separator: ",").count
        let row = "(" + Array(repeating: "?", count: count).joined(separator: ", ") + ")"
        let insert = "INSERT OR IGNORE INTO \(table) (\(columns)) VALUES "
        many = try BulkStatement(cached: db, insert + Array(repeating: row, count: Self.rowsPerStatement).joined(separator: ", "))
        one = try BulkStatement(cached: db, insert + row)
        self.checked = checked
        self.table = table
        self.columns = count
    }

    /// Inserts `count` rows in order; `bind` adds the values of row `i` (0 ..< count). Rows by
    /// index, not a generic collection: Swift does not specialize a generic method of a
    /// `package` type for callers in other modules, and the unspecialized iteration and copies
    /// of each row took more of a 1M build's writer than SQLite did.
    package func insert(count: Int, _ bind: (_ i: Int, inout BulkStatement.Binder) -> Void) throws {
        var start = 0
        while start < count {
            let rows = count - start >= Self.rowsPerStatement ? Self.rowsPerStatement : 1
            let inserted = try (rows == 1 ? one : many).runBorrowing(texts: texts) { binder in
                for i in start..<(start + rows) { bind(i, &binder) }
            }
            if checked && inserted != rows {
                throw DatabaseError(resultCode: .SQLITE_CONSTRAINT, message: "\(rows - inserted) of \(rows) rows conflicted in \(table)")
            }
            start += rows
        }
    }

    /// Inserts one row.
    package func insert(_ bind: (inout BulkStatement.Binder) -> Void) throws {
        try insert(count: 1) { _, binder in bind(&binder) }
    }
}

extension Database {
    /// Runs `body` with this connection's page cache at `kibibytes` (SQLite's sorter, which
    /// `CREATE INDEX` and `ORDER BY` use, holds about that much too), then restores it: one
    /// pass over a table needs little, and two sorts side by side each held the whole cache.
    package func withPageCache<T>(kibibytes: Int, _ body: () throws -> T) throws -> T {
        let previous = try Int.fetchOne(self, sql: "PRAGMA cache_size") ?? -2000
        try execute(sql: "PRAGMA cache_size = -\(kibibytes)")
        defer { try? execute(sql: "PRAGMA cache_size = \(previous)") }
        return try body()
    }
}
