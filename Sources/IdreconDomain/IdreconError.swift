/// The one error type of idrecon above its C layers: a stable kind, which says what the
/// caller can do about the failure, and a one-line message that says what to do next. The
/// CLI turns kinds into exit codes in one table (`IdreconError.Kind.exitCode`).
public struct IdreconError: Error, CustomStringConvertible, Sendable {
    public enum Kind: String, Sendable, CaseIterable {
        /// The invocation conflicts with itself or with what the database holds.
        case usage
        /// An input (a file, a JWKS, a configuration file) cannot be read or is not valid.
        case input
        /// A setting is not valid (librdkafka keys and values, a listen address).
        case configuration
        /// The database cannot be opened, read or written (permissions, a full disk, damage).
        case storage
        /// The thing asked about does not exist.
        case notFound = "not_found"
        /// A check ran and found problems (audit violations, projection drift, records lost).
        case violation
        /// A failure outside the request that may pass: the broker, the disk under a running
        /// consumer, an external program. Retrying (or a service manager's restart) may succeed.
        case transient
    }

    public var kind: Kind
    public var description: String

    public init(_ kind: Kind, _ description: String) {
        self.kind = kind
        self.description = description
    }
}
