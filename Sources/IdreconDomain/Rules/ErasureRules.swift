/// What `forget ASID` erases from a record of that ASID (SPEC section 5), now and in records
/// that arrive later: the `email` and `id_token` members, and every e-mail-like word in any
/// other string of the payload, unknown fields and nested values included — except the
/// keys the log is built on (`device_id`, `nonce`), whose values are kept as they are, so a
/// scrubbed event is still a valid event of the same device. Everything else (IDs, modes,
/// times, friend lists) is kept: it is not personal beyond the ASID itself.
public enum ErasureRules {
    /// What an erased word becomes.
    public static let placeholder = "[forgotten]"
    /// Members kept verbatim: device state and replay protection are keyed by them, and a
    /// longer placeholder could break their rules.
    static let keys = ["device_id", "nonce"]

    /// The ASID a JSON record names, if it names one as a string.
    public static func asid(of value: JSONValue) -> String? {
        if case let .string(s)? = value["asid"] { return s }
        return nil
    }

    /// The record without its personal data; nil when there was nothing to erase.
    public static func scrub(_ value: JSONValue) -> JSONValue? {
        guard case let .object(members) = value else { return nil }
        var changed = false
        var kept: [(key: String, value: JSONValue)] = []
        for member in members {
            if member.key.sameBytes(as: "email") || member.key.sameBytes(as: "id_token") {
                changed = true
                continue
            }
            let clean = keys.contains(where: { $0.sameBytes(as: member.key) }) ? member.value : redact(member.value)
            changed = changed || clean != member.value
            kept.append((member.key, clean))
        }
        return changed ? .object(kept) : nil
    }

    /// The canonical payload of a validated event, scrubbed; nil when there was nothing to erase.
    public static func scrub(payload: String) -> String? {
        guard let value = try? JSONParser.parse(Array(payload.utf8)), let clean = scrub(value) else { return nil }
        return CanonicalJSON.encode(clean)
    }

    static func redact(_ value: JSONValue) -> JSONValue {
        switch value {
        case let .string(text): return .string(redactEmails(text))
        case let .array(items): return .array(items.map(redact))
        case let .object(members): return .object(members.map { ($0.key, redact($0.value)) })
        default: return value
        }
    }

    /// `text` with every word that contains `@` replaced by the placeholder; words end at
    /// whitespace, quotes, brackets and `,;` (so "mail <a@b.c>," keeps its punctuation).
    public static func redactEmails(_ text: String) -> String {
        guard text.utf8.contains(UInt8(ascii: "@")) else { return text }
        let scalars = Array(text.unicodeScalars)
        var out = String.UnicodeScalarView()
        var word: [Unicode.Scalar] = []
        func flush() {
            if word.contains("@") { out.append(contentsOf: placeholder.unicodeScalars) } else { out.append(contentsOf: word) }
            word.removeAll()
        }
        for scalar in scalars {
            if scalar.properties.isWhitespace || "\"'<>()[]{},;".unicodeScalars.contains(scalar) {
                flush()
                out.append(scalar)
            } else {
                word.append(scalar)
            }
        }
        flush()
        return String(out)
    }
}
