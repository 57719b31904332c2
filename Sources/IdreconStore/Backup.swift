import Foundation
import GRDB
import IdreconDomain
import IdreconProjections

extension EventStore {
    /// Copies the database to `destination` while writers keep running: SQLite's online
    /// backup from one read transaction, so the copy is the database as of one commit. It
    /// is written to `<destination>.partial` and renamed when complete, so `destination`
    /// is never a half-written database. Returns the copy's size in bytes.
    public func backup(to destination: String) throws(IdreconError) -> Int64 {
        if FileManager.default.fileExists(atPath: destination) {
            throw IdreconError(.usage, "\(destination) already exists; choose a new file (a backup never overwrites)")
        }
        if Self.isDatabaseFile(destination, of: path) { throw IdreconError(.usage, "\(destination) is the database itself") }
        let partial = destination + ".partial"
        for suffix in ["", "-wal", "-shm", "-journal"] { try? FileManager.default.removeItem(atPath: partial + suffix) }
        do {
            let copy = try DatabaseQueue(path: partial)
            try reader.backup(to: copy)
            // The copy stands alone: no WAL to carry along, so a plain file copy of it is whole.
            try copy.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA journal_mode = DELETE") }
            try copy.close()
            guard rename(partial, destination) == 0 else {
                throw IdreconError(.storage, "cannot rename \(partial) to \(destination): \(String(cString: strerror(errno)))")
            }
        } catch let error as IdreconError {
            throw error
        } catch {
            for suffix in ["", "-wal", "-shm", "-journal"] { try? FileManager.default.removeItem(atPath: partial + suffix) }
            throw IdreconError(.storage, "backup of \(path) to \(destination) failed: \(IdreconError.describe(error))")
        }
        return ((try? FileManager.default.attributesOfItem(atPath: destination)[.size]) as? Int64) ?? 0
    }
}
