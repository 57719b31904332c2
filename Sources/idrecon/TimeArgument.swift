import ArgumentParser
import IdreconDomain

/// An RFC 3339 timestamp argument (`--as-of`), parsed to UTC milliseconds.
struct TimeArgument: ExpressibleByArgument {
    var millis: Int64

    init?(argument: String) {
        guard let ms = Timestamp.parse(argument) else { return nil }
        millis = ms
    }

    static var defaultCompletionKind: CompletionKind { .default }
}
