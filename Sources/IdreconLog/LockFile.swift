#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import IdreconDomain

/// An advisory `flock` on a sidecar file next to the database (`<database>.<name>`), held
/// while the value lives; the system releases it if the process dies.
///
/// Never the database file itself: closing any descriptor of a file drops every POSIX lock
/// the process holds on it, and SQLite's locks are POSIX locks (SQLite's "How To Corrupt An
/// SQLite Database File", §2.2). A sidecar is a different file, so closing it is harmless.
package final class LockFile {
    private let descriptor: Int32
    let path: String

    /// Opens (creating) `<databasePath>.<name>` and takes the lock, calling `waiting` first
    /// when another process holds it.
    package init(databasePath: String, name: String, waiting: () -> Void = {}) throws(IdreconError) {
        path = databasePath + "." + name
        var fd: Int32
        repeat { fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644) } while fd < 0 && errno == EINTR
        guard fd >= 0 else {
            throw IdreconError(.storage, "cannot open the lock file \(path): \(String(cString: strerror(errno))); "
                + "check the directory's permissions")
        }
        descriptor = fd
        if flock(fd, LOCK_EX | LOCK_NB) == 0 { return }
        waiting()
        while flock(fd, LOCK_EX) != 0 {
            guard errno == EINTR else {
                let reason = String(cString: strerror(errno))
                close(fd)
                throw IdreconError(.storage, "cannot lock \(path): \(reason)")
            }
        }
    }

    deinit { close(descriptor) }
}
