#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// How many files the process may hold open. A replay keeps seven temporary files per
/// partition of 125,000 events (each scan half's devices, logins and mentions, and the
/// friend edges: 5,600 at 100M events), above the soft limit of 1,024 that many systems
/// start processes with; the hard limit is what the administrator allows, so the soft one is
/// raised to it (as the Go runtime does).
enum FileLimit {
    static func raise() {
        #if os(Linux)
        let files = Int32(RLIMIT_NOFILE.rawValue)
        #else
        let files = RLIMIT_NOFILE
        #endif
        var limit = rlimit()
        guard getrlimit(files, &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(files, &limit)
    }
}
