import GRDB
import IdreconDomain
import IdreconProjections

/// The change feed as a sender sees it (README, "Change feed").
public struct ChangeFeedStatus: Sendable, Equatable {
    public var topic: String
    /// Written into every record, so a sender can tell its own records in the topic.
    public var feedID: String
    /// The log position up to which changes are decided.
    public var decidedSeq: Int64
    /// The last change decided, and the last one known to be delivered.
    public var lastChange: Int64
    public var sentChange: Int64
}

/// One decided change waiting for delivery: its number, Kafka key and JSON value.
public struct PendingChange: Sendable, Equatable {
    public var change: Int64
    public var key: String
    public var body: String
}

extension EventStore {
    /// Starts the change feed to `topic` with the next event the projections fold, or
    /// returns the feed as it is. A database feeds one topic: another is a usage error.
    public func enableChangeFeed(topic: String) throws(IdreconError) -> ChangeFeedStatus {
        let state = try write { db in try ChangeFeedTables.enable(db, topic: topic) }
        guard state.topic.sameBytes(as: topic) else {
            throw IdreconError(.usage, "this database's change feed goes to topic \(state.topic), not \(topic); "
                + "pass --changes-topic \(state.topic)")
        }
        return ChangeFeedStatus(state)
    }

    /// The change feed, if the database has one.
    public func changeFeed() throws(IdreconError) -> ChangeFeedStatus? {
        try read { db in try ChangeFeedTables.state(db).map(ChangeFeedStatus.init) }
    }

    /// Decided changes after `change`, in order, at most `limit`.
    public func pendingChanges(after change: Int64, limit: Int = 10_000) throws(IdreconError) -> [PendingChange] {
        try read { db in
            try ChangeFeedTables.pending(db, after: change, limit: limit).map { PendingChange(change: $0.change, key: $0.key, body: $0.body) }
        }
    }

    /// Records that Kafka has every change up to `change`.
    public func changesDelivered(upTo change: Int64) throws(IdreconError) {
        try write { db in try ChangeFeedTables.delivered(db, upTo: change) }
    }

    /// The feed this log makes from its first event, as a replay decides it (records without
    /// a feed ID, numbered from 1): what a feed started on an empty database sends.
    package func feedFromLog() throws(IdreconError) -> [String] {
        try read { db in
            try FeedFromLog.feed(db).enumerated().map { $1.json(change: Int64($0 + 1), feed: "") }
        }
    }
}

extension ChangeFeedStatus {
    init(_ state: ChangeFeedTables.State) {
        self.init(topic: state.topic, feedID: state.feedID, decidedSeq: state.decidedSeq, lastChange: state.lastChange,
                  sentChange: state.sentChange)
    }
}
