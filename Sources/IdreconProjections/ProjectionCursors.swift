import GRDB
import IdreconDomain
import IdreconLog

/// Each projection's own position in the log (`projection_cursors`), so that a projection
/// new to a database builds itself from the log while the others stay as they are, and
/// one a writer does not register (an older `idrecon`) is brought level when a writer that
/// registers it catches up. `projection_meta.applied_seq` is where every projection is
/// once level; a projection's tables answer as of its own cursor.
package enum ProjectionCursors {
    /// Brings every registered projection level with `state.appliedSeq` in this
    /// transaction: one the live generation lacks gets its tables, indexes, reader views and
    /// a cursor at 0; one behind is folded alone up to `appliedSeq`, at most `chunks`
    /// catch-up chunks each. Returns whether all are level.
    @discardableResult
    package static func level(_ db: Database, keys: LogKeys, _ state: ProjectionState, chunks: Int = .max) throws -> Bool {
        var level = true
        let tables = state.tables
        for projection in tables.registry.projections {
            var cursor = state.cursors[projection.name] ?? 0
            if state.cursors[projection.name] == nil {
                let names = projection.tables.map(\.name)
                try tables.drop(db, names: names) // leftovers of an interrupted build
                try tables.createTables(db, of: [projection], indexed: true) // folded row by row from here on
                try tables.publish(db, of: [projection])
                try db.execute(sql: "INSERT INTO projection_cursors (name, applied_seq, tables) VALUES (?, 0, ?)",
                               arguments: [projection.name, names.joined(separator: ",")])
            }
            guard cursor < state.appliedSeq else { continue }
            (cursor, _) = try ProjectionEngine.catchUp(
                db, keys: keys, tables: tables, config: state.config, after: cursor, through: state.appliedSeq,
                projections: [projection], chunks: chunks)
            try db.execute(sql: "UPDATE projection_cursors SET applied_seq = ? WHERE name = ?", arguments: [cursor, projection.name])
            if cursor < state.appliedSeq { level = false }
        }
        return level
    }

    /// Moves the cursors of `registry`'s projections (level with each other) to `seq`.
    package static func advance(_ db: Database, _ registry: ProjectionRegistry, to seq: Int64) throws {
        let statement = try db.cachedStatement(sql: "UPDATE projection_cursors SET applied_seq = ? WHERE name = ?")
        for projection in registry.projections { try statement.execute(arguments: [seq, projection.name]) }
    }
}
