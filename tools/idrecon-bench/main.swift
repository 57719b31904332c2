import CMalloc
import Foundation
import IdreconIngest
import IdreconStore

/// `idrecon-bench raw-append FILE DB`: the storage module's raw append limit. Lines are
/// read and validated outside the clock; only `EventStore.append` (projections off) is
/// timed. Prints `{"events": N, "seconds": S}`.
/// `idrecon-bench validate FILE`: validation alone on one thread (what each record costs
/// before the writer sees it), the file read outside the clock. Prints
/// `{"records": N, "seconds": S}`.
// The allocator `idrecon` runs with (its settings linked in by this call), so that both are measured alike.
_ = idrecon_allocator_arenas()
let arguments = CommandLine.arguments
if arguments.count == 3, arguments[1] == "validate" {
    guard let data = FileManager.default.contents(atPath: arguments[2]) else {
        FileHandle.standardError.write(Data("cannot read \(arguments[2])\n".utf8))
        exit(2)
    }
    let lines = data.split(separator: 0x0A).map { Array($0) }
    let clock = ContinuousClock()
    var accepted = 0
    let elapsed = clock.measure {
        for (i, line) in lines.enumerated() {
            let record = IncomingRecord(raw: line, origin: RecordOrigin(source: "bench", position: Int64(i + 1)))
            if case .success = record.verdict { accepted += 1 }
        }
    }
    let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    print("{\"records\": \(lines.count), \"accepted\": \(accepted), \"seconds\": \(seconds)}")
    exit(0)
}
guard arguments.count == 4, arguments[1] == "raw-append" else {
    FileHandle.standardError.write(Data("usage: idrecon-bench raw-append FILE DB | validate FILE\n".utf8))
    exit(2)
}
guard let handle = FileHandle(forReadingAtPath: arguments[2]) else {
    FileHandle.standardError.write(Data("cannot read \(arguments[2])\n".utf8))
    exit(2)
}
let store: EventStore
do { store = try EventStore(path: arguments[3]) } catch {
    FileHandle.standardError.write(Data("\(error)\n".utf8))
    exit(2)
}
var timed: Duration = .zero
var appended = 0
var lineNumber: Int64 = 0
var buffer: [UInt8] = []
var pending: [(raw: [UInt8], origin: RecordOrigin)] = []
let clock = ContinuousClock()

@MainActor func flush() {
    let records = BatchValidator.validate(pending)
    pending.removeAll(keepingCapacity: true)
    let start = clock.now
    do {
        appended += try store.append(records, positions: [], updateProjections: false).appended
    } catch {
        FileHandle.standardError.write(Data("\(error)\n".utf8))
        exit(1)
    }
    timed += clock.now - start
}

while true {
    let chunk = handle.readData(ofLength: 1 << 20)
    if chunk.isEmpty { break }
    buffer.append(contentsOf: chunk)
    var start = 0
    while let newline = buffer[start...].firstIndex(of: 0x0A) {
        lineNumber += 1
        pending.append((Array(buffer[start..<newline]), RecordOrigin(source: "bench", position: lineNumber)))
        start = newline + 1
        if pending.count == 4000 { flush() }
    }
    buffer.removeSubrange(..<start)
}
if !pending.isEmpty { flush() }
let seconds = Double(timed.components.seconds) + Double(timed.components.attoseconds) / 1e18
print("{\"events\": \(appended), \"seconds\": \(seconds)}")
