import Foundation
import GRDB
import IdreconDomain
import IdreconLog

/// The projections' bookkeeping row: current generation, identity configuration and the
/// last event sequence number applied.
package struct ProjectionState {
    package var generation: Int
    package var config: IdentityConfig
    package var appliedSeq: Int64

    package static func load(_ db: Database) throws -> ProjectionState {
        guard let row = try Row.fetchOne(db, sql: "SELECT generation, config, applied_seq FROM projection_meta WHERE id = 1") else {
            throw IdreconError(.storage, "projection_meta is missing; the database is damaged")
        }
        let config = try JSONDecoder().decode(IdentityConfig.self, from: Data((row["config"] as String).utf8))
        return ProjectionState(generation: row["generation"], config: config, appliedSeq: row["applied_seq"])
    }

    package var tables: ProjectionTables { ProjectionTables(generation: generation) }
}
