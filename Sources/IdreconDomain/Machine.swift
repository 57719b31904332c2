#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The machine as idrecon sizes its threads and heaps by it.
package enum Machine {
    /// The cores online: validation's chunks, SQLite's sort threads, malloc's arenas. Not
    /// `ProcessInfo.activeProcessorCount`, which reads the cgroup's files: a twentieth of every
    /// command's start.
    package static let cores = max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))
}
