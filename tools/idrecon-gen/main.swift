import ArgumentParser
import EventGenerator
import Foundation
import IdreconVersion

/// `idrecon-gen`: writes a deterministic login-event stream as JSON lines.
struct GenerateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "idrecon-gen",
        abstract: "Generate a deterministic, realistic login-event/v1 stream as JSON lines.",
        discussion: """
            The same flags give the same bytes. The stream holds --events valid unique events, \
            plus duplicates and single-defect bad records (one per reason code in turn). \
            The manifest (JSON) says what an ingest must report. Exit codes: 0 ok, 1 a file \
            could not be written, 2 bad usage.
            """,
        version: IdreconVersion.description
    )

    @Option(help: "Valid, unique events to generate.")
    var events = 10_000

    @Option(help: "Random seed.")
    var seed: UInt64 = 42

    @Option(help: "Fraction of events followed by a bad record (0...1).")
    var badFraction = 0.02

    @Option(help: "Fraction of events re-sent as duplicates (0...1).")
    var duplicateFraction = 0.01

    @Option(help: "Out-of-order window (events).")
    var shuffleWindow = 64

    @Option(name: .customLong("event-ids"), help: "Event IDs: sequential (ev-<seed>-<n>) or uuid (random UUIDs).")
    var eventIDs: IDStyle = .sequential

    @Option(help: "Nonces: sequential (n<seed>x<n>) or uuid (random UUIDs, as the Facebook SDK makes them).")
    var nonces: IDStyle = .sequential

    @Option(help: "Friend lists hold 0 to this many ASIDs.")
    var maxFriends = 7

    @Option(help: "Each person uses 1 to this many devices per app.")
    var maxDevicesPerApp = 3

    @Option(help: ArgumentHelp(
        "Persons in the population (default: events / 20). Fewer persons for as many events is a longer history each.",
        valueName: "count"))
    var persons: Int?

    @Option(help: "Percent of devices (tvOS aside) whose user prefers Limited Login (0...100).")
    var limitedPercent = 30

    @Option(help: "Output file (default: standard output).")
    var output: String?

    @Option(help: "Write the manifest JSON here (default: standard error).")
    var manifest: String?

    func validate() throws {
        guard events >= 0 else { throw ValidationError("--events must be 0 or more") }
        guard (0...1).contains(badFraction), (0...1).contains(duplicateFraction) else {
            throw ValidationError("fractions must be between 0 and 1")
        }
        guard shuffleWindow >= 1 else { throw ValidationError("--shuffle-window must be at least 1") }
        guard maxFriends >= 0, maxFriends <= 5000 else { throw ValidationError("--max-friends must be between 0 and 5000") }
        guard maxDevicesPerApp >= 1, maxDevicesPerApp <= 1000 else {
            throw ValidationError("--max-devices-per-app must be between 1 and 1000")
        }
        if let persons, persons < 10 || persons > 100_000_000 {
            throw ValidationError("--persons must be between 10 and 100000000")
        }
        guard (0...100).contains(limitedPercent) else { throw ValidationError("--limited-percent must be between 0 and 100") }
    }

    func run() throws {
        var config = GeneratorConfig(events: events, seed: seed)
        config.badFraction = badFraction
        config.duplicateFraction = duplicateFraction
        config.shuffleWindow = shuffleWindow
        config.uuidEventIDs = eventIDs == .uuid
        config.uuidNonces = nonces == .uuid
        config.maxFriends = maxFriends
        config.maxDevicesPerApp = maxDevicesPerApp
        config.limitedPercent = limitedPercent
        config.persons = persons
        var generator = EventStreamGenerator(config: config)

        let handle: FileHandle
        if let output {
            guard FileManager.default.createFile(atPath: output, contents: nil), let h = FileHandle(forWritingAtPath: output) else {
                throw GeneratorFailure(message: "cannot write \(output); check the directory exists and is writable")
            }
            handle = h
        } else {
            handle = FileHandle.standardOutput
        }
        var buffer: [UInt8] = []
        buffer.reserveCapacity(1 << 20)
        while let line = generator.next() {
            buffer.append(contentsOf: line)
            buffer.append(UInt8(ascii: "\n"))
            if buffer.count >= 1 << 20 {
                handle.write(Data(buffer))
                buffer.removeAll(keepingCapacity: true)
            }
        }
        handle.write(Data(buffer))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let json = try encoder.encode(generator.manifest) + Data("\n".utf8)
        if let manifest {
            try json.write(to: URL(fileURLWithPath: manifest))
        } else {
            FileHandle.standardError.write(json)
        }
    }
}

/// A failure that is not the caller's usage: exit 1.
struct GeneratorFailure: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}

// Exit codes as `idrecon`'s: usage errors 2 (ArgumentParser's own is EX_USAGE, 64).
do {
    var command = try GenerateCommand.parseAsRoot()
    try command.run()
} catch let failure as GeneratorFailure {
    FileHandle.standardError.write(Data("idrecon-gen: \(failure.message)\n".utf8))
    exit(1)
} catch {
    let code = GenerateCommand.exitCode(for: error)
    if code == .success {
        print(GenerateCommand.fullMessage(for: error))
        exit(0)
    }
    FileHandle.standardError.write(Data((GenerateCommand.fullMessage(for: error) + "\n").utf8))
    exit(code == .validationFailure ? 2 : code.rawValue)
}

/// How `idrecon-gen` makes event IDs and nonces.
enum IDStyle: String, ExpressibleByArgument, CaseIterable {
    case sequential, uuid
}
