import IdreconDomain

/// Where a late event's refold starts (schemas/sql.md, "Fold checkpoints"): an entity's fold
/// state at one of its events, `lag` events behind its latest, with the two positions in the log
/// that say which events it holds. The rule is here once; each projection keeps its own state
/// and table (`DevicesProjection.Checkpoint`, `AccessProjection.Checkpoint`).
enum FoldCheckpoint {
    /// How many of an entity's latest events a checkpoint stays behind; a refold that read twice
    /// as many leaves a new one. A late event within the last `lag` events of its entity reads
    /// about `2 * lag` of them, whatever the entity's history.
    static let lag = 64

    /// Every event of the entity with a key after the checkpoint's has a `seq` of `fromSeq` or
    /// more; those with keys up to it and a `seq` up to `writtenSeq` are folded into it. One with a
    /// key up to it and a later `seq` (an event older than the checkpoint, come in since) makes
    /// it void.
    struct Positions {
        var fromSeq: Int64
        var writtenSeq: Int64
    }

    /// The entity's events a refold folds, in key order, each with its `seq`: those after
    /// `checkpoint` (its key and positions) when the log shows it holds (`fromCheckpoint`), else
    /// every one. `seqs` are the entity's events' (ascending; the log's keys are hashes, so
    /// `read` gives nil for another entity's); `key` is an event's key. The projection's tables
    /// hold the log up to `foldedThrough` (the `seq` before the facts being folded): a checkpoint
    /// written past it holds events the tables do not (a replay's catch-up folds its new
    /// generation in chunks behind the live one, whose refolds write checkpoints too), and is not
    /// used, since the spans before it would not be the ones it was folded with.
    static func events<Event>(
        seqs: [Int64], foldedThrough: Int64, checkpoint: (key: EventKey, positions: Positions)?,
        key: (Event) -> EventKey, read: (Int64) throws -> Event?
    ) throws -> (events: [(seq: Int64, event: Event)], fromCheckpoint: Bool) {
        if let checkpoint, checkpoint.positions.writtenSeq <= foldedThrough {
            var events: [(seq: Int64, event: Event)] = []
            var void = false
            for seq in seqs where seq >= checkpoint.positions.fromSeq {
                guard let event = try read(seq) else { continue }
                if checkpoint.key < key(event) {
                    events.append((seq, event))
                } else if seq > checkpoint.positions.writtenSeq {
                    void = true
                    break
                }
            }
            if !void { return (events.sorted { key($0.event) < key($1.event) }, true) }
        }
        var events: [(seq: Int64, event: Event)] = []
        for seq in seqs { if let event = try read(seq) { events.append((seq, event)) } }
        return (events.sorted { key($0.event) < key($1.event) }, false)
    }

    /// Where a refold that folds `events` (key order) leaves a checkpoint: after the event at
    /// `index`, `lag` before the last; nil when it read fewer than `2 * lag`. `seqs` as for `events`.
    static func next<Event>(
        after events: [(seq: Int64, event: Event)], seqs: [Int64]
    ) -> (index: Int, positions: Positions)? {
        guard events.count >= 2 * lag, let written = seqs.last else { return nil }
        let index = events.count - lag - 1
        let from = events[(index + 1)...].lazy.map(\.seq).min()!
        return (index, Positions(fromSeq: from, writtenSeq: written))
    }
}
