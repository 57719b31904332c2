import IdreconDomain

/// Where a late event's refold starts (schemas/sql.md, "Fold checkpoints"): an entity's fold
/// state at one of its events, at one of several depths behind its latest, with the two
/// positions in the log that say which events it holds. The rule is here once; each projection
/// keeps its own state and table (`DevicesProjection.Checkpoint`, `AccessProjection.Checkpoint`).
enum FoldCheckpoint {
    /// How many of an entity's latest events the checkpoint of each level stays behind; a refold
    /// that read twice as many leaves a new one at that level. A late event reads from the
    /// latest checkpoint older than it: one within the last `lags[l]` events of its entity reads
    /// at most about `2 * lags[l]` of them (8 times its lateness, each level being 4 times the one
    /// before) plus those the entity gained since that level was written, whatever the entity's
    /// history. An entity keeps one checkpoint per 4-fold of its history; one older than the
    /// deepest still reads it all.
    static let lags = [64, 256, 1_024, 4_096, 16_384, 65_536, 262_144]

    /// Every event of the entity with a key after the checkpoint's has a `seq` of `fromSeq` or
    /// more; those with keys up to it and a `seq` up to `writtenSeq` are folded into it. One with a
    /// key up to it and a later `seq` (an event older than the checkpoint, come in since) makes
    /// it void.
    struct Positions {
        var fromSeq: Int64
        var writtenSeq: Int64
    }

    /// A stored checkpoint as the refold weighs it: its level (an index of `lags`), the key of
    /// the event it was folded through, and its positions.
    struct Stored {
        var level: Int
        var key: EventKey
        var positions: Positions
    }

    /// What a refold folds and from where.
    struct Plan<Event> {
        /// The entity's events to fold, in key order, each with its `seq`: those after `from`'s
        /// key, or every one when `from` is nil.
        var events: [(seq: Int64, event: Event)]
        /// The index in the `checkpoints` given of the one to fold on from; nil for a refold from
        /// the first event.
        var from: Int?
        /// Levels whose checkpoints the log shows void: the refold drops them (a void one stays
        /// void, since the event that voids it stays in the log) unless it writes them anew.
        var void: [Int]
    }

    /// The refold of an entity: from the latest of `checkpoints` the log shows still holds, else
    /// from the first event. `seqs` are the entity's events' (ascending; the log's keys are
    /// hashes, so `read` gives nil for another entity's); `key` is an event's key. The projection's
    /// tables hold the log up to `foldedThrough` (the `seq` before the facts being folded): a
    /// checkpoint written past it holds events the tables do not (a replay's catch-up folds its
    /// new generation in chunks behind the live one, whose refolds write checkpoints too), and is
    /// not used, since the spans before it would not be the ones it was folded with.
    static func plan<Event>(
        seqs: [Int64], foldedThrough: Int64, checkpoints: [Stored],
        key: (Event) -> EventKey, read: (Int64) throws -> Event?
    ) throws -> Plan<Event> {
        // Each event is read once, whichever checkpoints are tried.
        var cache: [Int64: Event?] = [:]
        func event(_ seq: Int64) throws -> Event? {
            if let cached = cache[seq] { return cached }
            let event = try read(seq)
            cache[seq] = .some(event)
            return event
        }
        var void: [Int] = []
        for index in checkpoints.indices.sorted(by: { checkpoints[$0].key > checkpoints[$1].key })
        where checkpoints[index].positions.writtenSeq <= foldedThrough {
            let checkpoint = checkpoints[index]
            var events: [(seq: Int64, event: Event)] = []
            var holds = true
            for seq in seqs where seq >= checkpoint.positions.fromSeq {
                guard let e = try event(seq) else { continue }
                if checkpoint.key < key(e) {
                    events.append((seq, e))
                } else if seq > checkpoint.positions.writtenSeq {
                    holds = false
                    break
                }
            }
            if holds {
                return Plan(events: events.sorted { key($0.event) < key($1.event) }, from: index, void: void)
            }
            void.append(checkpoint.level)
        }
        var events: [(seq: Int64, event: Event)] = []
        for seq in seqs { if let e = try event(seq) { events.append((seq, e)) } }
        return Plan(events: events.sorted { key($0.event) < key($1.event) }, from: nil, void: void)
    }

    /// Folds `plan`'s events into `fold` (started from the checkpoint it names, or empty) with
    /// `add`, saving the entity's checkpoints anew as it passes them (`save`: the fold there, a
    /// level and its positions) and dropping the void ones it does not write again (`drop`).
    static func fold<Event, Fold>(
        _ plan: Plan<Event>, seqs: [Int64], into fold: inout Fold, add: (inout Fold, Event) -> Void,
        save: (Fold, Int, Positions) throws -> Void, drop: (Int) throws -> Void
    ) throws {
        let next = self.next(after: plan.events, seqs: seqs)
        for level in plan.void where !next.contains(where: { $0.level == level }) { try drop(level) }
        var pending = next[...]
        for (i, (_, event)) in plan.events.enumerated() {
            add(&fold, event)
            while let point = pending.first, point.index == i {
                pending.removeFirst()
                try save(fold, point.level, point.positions)
            }
        }
    }

    /// Where a refold that folds `events` (key order) leaves checkpoints: for each level whose
    /// lag it read twice over, after the event at `index`, `lags[level]` before the last. `seqs`
    /// as for `plan`.
    private static func next<Event>(
        after events: [(seq: Int64, event: Event)], seqs: [Int64]
    ) -> [(level: Int, index: Int, positions: Positions)] {
        guard let written = seqs.last else { return [] }
        var next: [(level: Int, index: Int, positions: Positions)] = []
        // Shallowest first, the least `seq` of the events after each index taken walking back.
        var from = Int64.max
        var index = events.count - 1
        for level in lags.indices where events.count >= 2 * lags[level] {
            let at = events.count - lags[level] - 1
            while index > at { from = min(from, events[index].seq); index -= 1 }
            next.append((level, at, Positions(fromSeq: from, writtenSeq: written)))
        }
        return next.sorted { $0.index < $1.index }
    }
}
