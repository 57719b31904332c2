import Foundation
import GRDB
import IdreconDomain
import IdreconLog

/// The projections' bookkeeping: current generation, identity configuration, the last
/// event sequence number applied to every registered projection (`projection_meta`), and
/// each projection's own cursor (`projection_cursors`).
package struct ProjectionState {
    package var generation: Int
    package var config: IdentityConfig
    package var appliedSeq: Int64
    package let registry: ProjectionRegistry
    /// The stored cursors by projection name, registered or not.
    package var cursors: [String: Int64]

    package static func load(_ db: Database, registry: ProjectionRegistry) throws -> ProjectionState {
        guard let row = try Row.fetchOne(db, sql: "SELECT generation, config, applied_seq FROM projection_meta WHERE id = 1") else {
            throw IdreconError(.storage, "projection_meta is missing; the database is damaged")
        }
        let config = try JSONDecoder().decode(IdentityConfig.self, from: Data((row["config"] as String).utf8))
        var cursors: [String: Int64] = [:]
        for cursor in try Row.fetchAll(db, sql: "SELECT name, applied_seq FROM projection_cursors") {
            cursors[cursor["name"]] = cursor["applied_seq"]
        }
        return ProjectionState(
            generation: row["generation"], config: config, appliedSeq: row["applied_seq"], registry: registry, cursors: cursors)
    }

    /// Whether every registered projection has its cursor at `appliedSeq`.
    package var isLevel: Bool { registry.projections.allSatisfy { cursors[$0.name] == appliedSeq } }

    package var tables: ProjectionTables { ProjectionTables(generation: generation, registry: registry) }

    /// Stored projections that `registry` does not know, with their tables' reader names.
    package func unregistered(_ db: Database) throws -> [(name: String, tables: [String])] {
        let known = Set(registry.projections.map { $0.name })
        return try Row.fetchAll(db, sql: "SELECT name, tables FROM projection_cursors ORDER BY name").compactMap { row in
            let name: String = row["name"]
            return known.contains(name) ? nil : (name, (row["tables"] as String).split(separator: ",").map(String.init))
        }
    }
}
