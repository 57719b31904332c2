import GRDB
import IdreconDomain
import IdreconProjections

/// Daily active identities per app, as a projection added from outside the built-in four:
/// which ASIDs logged in to each app on each UTC day (`daily_active_asids`). Identities are
/// counted when read, through `asids.user_id` (`dailyActiveIdentities`), so two ASIDs that
/// a later login merges count once on every day. This file and its registration
/// (`ProjectionRegistry.standard.adding(DailyActiveProjection.self)`) are all it takes.
enum DailyActiveProjection: Projection {
    static let name = "daily_active"
    static let tables = [(name: "daily_active_asids", primaryKey: "app_id, day, asid")]

    static func createTables(generation g: Int) -> String {
        """
        CREATE TABLE daily_active_asids_g\(g) (
            app_id TEXT NOT NULL,
            day    TEXT NOT NULL CHECK (day GLOB '[0-9][0-9][0-9][0-9]-[0-1][0-9]-[0-3][0-9]'),
            asid   TEXT NOT NULL,
            PRIMARY KEY (app_id, day, asid)
        ) STRICT, WITHOUT ROWID;
        """
    }

    static func createIndexes(generation g: Int) -> String {
        "CREATE INDEX daily_active_asids_g\(g)_asid ON daily_active_asids_g\(g)(asid);"
    }

    static func apply(_ facts: [ProjectionFact], in context: ProjectionContext) throws {
        let insert = try context.db.cachedStatement(
            sql: "INSERT OR IGNORE INTO \(context.tables.name("daily_active_asids")) (app_id, day, asid) VALUES (?, ?, ?)")
        for fact in facts where fact.type == .login {
            guard let asid = fact.asid else { continue }
            try insert.execute(arguments: [fact.appID, String(Timestamp.format(fact.key.at).prefix(10)), asid])
        }
    }

    /// Identities active per app and day, from the reader views.
    static func dailyActiveIdentities(_ db: Database) throws -> [String] {
        try Row.fetchAll(db, sql: """
            SELECT d.app_id, d.day, count(DISTINCT a.user_id) AS identities
            FROM daily_active_asids d JOIN asids a ON a.asid = d.asid
            GROUP BY d.app_id, d.day ORDER BY d.app_id, d.day
            """).map { "\($0["app_id"] as String) \($0["day"] as String) \($0["identities"] as Int)" }
    }
}
