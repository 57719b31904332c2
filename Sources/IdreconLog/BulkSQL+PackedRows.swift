/// What rows' values are added to, in the order of their columns: a statement's parameters
/// (`BulkStatement.Binder`) or rows packed for a later insert (`PackedRows`). A projection binds
/// its rows with one function generic over the sink, so its columns are listed once.
package protocol RowSink {
    mutating func add(_ value: Int64)
    mutating func add(_ value: Int64?)
    mutating func add(_ value: String)
    mutating func add(_ value: String?)
    /// A text given as its UTF-8 bytes.
    mutating func add(utf8 text: UnsafeBufferPointer<UInt8>)
    /// A text of `count` bytes, every one of them written by `write`.
    mutating func addText(count: Int, _ write: (UnsafeMutableRawBufferPointer) -> Void)
}

extension RowSink {
    package mutating func add(_ value: Int) { add(Int64(value)) }
    package mutating func add(_ value: Bool) { add(Int64(value ? 1 : 0)) }

    /// `prefix` followed by `text`, as one text.
    package mutating func add(_ prefix: StaticString, _ text: String) {
        let head = UnsafeRawBufferPointer(start: prefix.utf8Start, count: prefix.utf8CodeUnitCount)
        addText(count: head.count + text.utf8.count) { out in
            out.copyMemory(from: head)
            UnsafeMutableRawBufferPointer(rebasing: out[head.count...]).copyBytes(from: text.utf8)
        }
    }

    /// `texts` joined by `separator`, as one text.
    package mutating func add(joining texts: [String], separator: UInt8) {
        var count = max(0, texts.count - 1)
        for i in texts.indices { count += texts[i].utf8.count }
        addText(count: count) { out in
            var offset = 0
            for i in texts.indices {
                if i > 0 {
                    out[offset] = separator
                    offset += 1
                }
                let utf8 = texts[i].utf8
                UnsafeMutableRawBufferPointer(rebasing: out[offset..<(offset + utf8.count)]).copyBytes(from: utf8)
                offset += utf8.count
            }
        }
    }
}

extension BulkStatement.Binder: RowSink {
    package mutating func add(utf8 text: UnsafeBufferPointer<UInt8>) { add(copying: UnsafeRawBufferPointer(text)) }
}

/// Rows packed for `BulkInsert.insert(_:)`: each value in a fixed-size slot and every text's
/// bytes in one buffer, bound in place (`SQLITE_STATIC`). A bulk load's rows are made by other
/// threads than the writer's; as `String`s, the writer's copies of them for binding (a retain
/// and a release each) and their frees were a seventh of the 10M replay's writer, the load's
/// bottleneck.
package struct PackedRows: RowSink {
    private struct Value {
        /// The integer, or where the text starts in `bytes`.
        var number: Int64
        /// The text's length; -1 an integer, -2 NULL.
        var length: Int
    }

    private var values: [Value] = []
    private var bytes: [UInt8] = []

    package init() {}

    package var isEmpty: Bool { values.isEmpty }

    package mutating func add(_ value: Int64) { values.append(Value(number: value, length: -1)) }

    package mutating func add(_ value: Int64?) {
        values.append(value.map { Value(number: $0, length: -1) } ?? Value(number: 0, length: -2))
    }

    package mutating func add(_ value: String) {
        let start = bytes.count
        bytes += value.utf8
        values.append(Value(number: Int64(start), length: bytes.count - start))
    }

    package mutating func add(_ value: String?) {
        guard let value else { return values.append(Value(number: 0, length: -2)) }
        add(value)
    }

    package mutating func add(utf8 text: UnsafeBufferPointer<UInt8>) {
        let start = bytes.count
        bytes.append(contentsOf: text)
        values.append(Value(number: Int64(start), length: text.count))
    }

    package mutating func addText(count: Int, _ write: (UnsafeMutableRawBufferPointer) -> Void) {
        let start = bytes.count
        bytes.append(contentsOf: repeatElement(0, count: count))
        bytes.withUnsafeMutableBytes { write(UnsafeMutableRawBufferPointer(rebasing: $0[start...])) }
        values.append(Value(number: Int64(start), length: count))
    }

    /// Calls `body` with the rows' count and a function that binds row `i`'s values, valid
    /// within `body`; each row is `columns` values.
    fileprivate func withBinding<T>(
        columns: Int, _ body: (_ count: Int, (_ i: Int, _ binder: inout BulkStatement.Binder) -> Void) throws -> T
    ) rethrows -> T {
        precondition(values.count % columns == 0, "packed rows of another width than the statement's")
        return try values.withUnsafeBufferPointer { values in
            try bytes.withUnsafeBytes { bytes in
                try body(values.count / columns) { i, binder in
                    for value in values[(i * columns)..<((i + 1) * columns)] {
                        switch value.length {
                        case -1: binder.add(value.number)
                        case -2: binder.add(nil as Int64?)
                        default:
                            let start = Int(value.number), text = bytes[start..<(start + value.length)]
                            binder.add(borrowed: UnsafeRawBufferPointer(rebasing: text))
                        }
                    }
                }
            }
        }
    }
}

extension BulkInsert {
    /// Inserts packed rows in order; their values are the statement's columns.
    package func insert(_ rows: PackedRows) throws {
        try rows.withBinding(columns: columns) { count, bind in try insert(count: count, bind) }
    }
}
