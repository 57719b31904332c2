import Foundation
import GRDB
import IdreconDomain
import IdreconProjections

/// The Kafka cluster and consumer group whose offsets a database stores for a topic.
public struct KafkaBinding: Codable, FetchableRecord, PersistableRecord, Sendable, Equatable {
    public static let databaseTableName = "kafka_bindings"
    public var topic: String
    public var clusterID: String
    public var groupID: String
    public var boundAt: Int64

    public init(topic: String, clusterID: String, groupID: String, boundAt: Int64) {
        self.topic = topic
        self.clusterID = clusterID
        self.groupID = groupID
        self.boundAt = boundAt
    }

    enum CodingKeys: String, CodingKey {
        case topic
        case clusterID = "cluster_id"
        case groupID = "group_id"
        case boundAt = "bound_at"
    }
}

extension EventStore {
    /// Binds `topic` to a cluster and group, or checks that it is bound to them: offsets are
    /// stored per topic and partition, so a second group (or the same topic name on another
    /// cluster) would share — and corrupt — them. `rebind` takes the topic over; when the
    /// cluster changes, the topic's stored offsets (meaningless there) are dropped too, so
    /// reading restarts by the reset policy and re-read events are duplicates by `event_id`.
    /// Returns the binding that was replaced, if any.
    @discardableResult
    public func bind(topic: String, clusterID: String, groupID: String, rebind: Bool = false) throws(IdreconError) -> KafkaBinding? {
        try write { db in
            let bound = try KafkaBinding.fetchOne(db, key: topic)
            if let bound, bound.clusterID.sameBytes(as: clusterID), bound.groupID.sameBytes(as: groupID) { return nil }
            if let bound, !rebind {
                throw IdreconError(.usage, """
                    \(path) stores the offsets of topic \(topic) for group '\(bound.groupID)' on cluster \(bound.clusterID); \
                    group '\(groupID)' on cluster \(clusterID) would share them. Consume into another --db, or pass --rebind \
                    to take the topic over
                    """)
            }
            if let bound, !bound.clusterID.sameBytes(as: clusterID) {
                try ConsumedPosition.filter(sql: "source LIKE ? ESCAPE '\\'", arguments: [Self.likePrefix("kafka:\(topic)/")]).deleteAll(db)
            }
            try KafkaBinding(topic: topic, clusterID: clusterID, groupID: groupID, boundAt: Int64(Date().timeIntervalSince1970 * 1000))
                .save(db)
            return bound
        }
    }

    public func kafkaBindings() throws(IdreconError) -> [KafkaBinding] {
        try read { db in try KafkaBinding.order(Column("topic")).fetchAll(db) }
    }

    static func likePrefix(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "%", with: "\\%")
            .replacingOccurrences(of: "_", with: "\\_") + "%"
    }
}
