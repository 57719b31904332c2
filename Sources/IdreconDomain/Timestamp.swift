/// RFC 3339 timestamps as UTC milliseconds since the Unix epoch.
public enum Timestamp {
    /// Parses `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`. `T` may be `t` or a space and `Z`
    /// may be `z` (RFC 3339 §5.6 note). Fractions below a millisecond are truncated.
    /// Leap second 60 is rejected. Returns nil when the text is not such a timestamp, or when
    /// its UTC instant falls outside `range` (it could not be written back as RFC 3339).
    public static func parse(_ text: String) -> Int64? {
        var text = text
        return text.withUTF8 { parse(utf8: $0) }
    }

    /// `parse` of the UTF-8 bytes of a text.
    public static func parse(utf8: UnsafeBufferPointer<UInt8>) -> Int64? {
        guard utf8.count >= 20 else { return nil }
        func num(_ from: Int, _ count: Int) -> Int? {
            var v = 0
            for i in from..<(from + count) {
                let c = utf8[i]
                guard c >= 48, c <= 57 else { return nil }
                v = v * 10 + Int(c - 48)
            }
            return v
        }
        guard let year = num(0, 4), utf8[4] == UInt8(ascii: "-"), let month = num(5, 2), utf8[7] == UInt8(ascii: "-"),
              let day = num(8, 2), [UInt8(ascii: "T"), UInt8(ascii: "t"), UInt8(ascii: " ")].contains(utf8[10]),
              let hour = num(11, 2), utf8[13] == UInt8(ascii: ":"), let minute = num(14, 2), utf8[16] == UInt8(ascii: ":"),
              let second = num(17, 2)
        else { return nil }
        guard (1...12).contains(month), day >= 1, day <= daysIn(month: month, year: year),
              hour < 24, minute < 60, second < 60 else { return nil }
        var i = 19
        var millis = 0
        if utf8[i] == UInt8(ascii: ".") {
            i += 1
            var digits = 0
            while i < utf8.count, utf8[i] >= 48, utf8[i] <= 57 {
                if digits < 3 { millis = millis * 10 + Int(utf8[i] - 48) }
                digits += 1
                i += 1
            }
            guard digits > 0 else { return nil }
            for _ in digits..<max(digits, 3) { millis *= 10 }
        }
        guard i < utf8.count else { return nil }
        var offsetMinutes = 0
        switch utf8[i] {
        case UInt8(ascii: "Z"), UInt8(ascii: "z"):
            i += 1
        case UInt8(ascii: "+"), UInt8(ascii: "-"):
            let sign = utf8[i] == UInt8(ascii: "-") ? -1 : 1
            guard i + 6 == utf8.count, let oh = num(i + 1, 2), utf8[i + 3] == UInt8(ascii: ":"), let om = num(i + 4, 2),
                  oh < 24, om < 60 else { return nil }
            offsetMinutes = sign * (oh * 60 + om)
            i += 6
        default:
            return nil
        }
        guard i == utf8.count else { return nil }
        let days = daysFromCivil(year: year, month: month, day: day)
        let seconds = Int64(days) * 86_400 + Int64(hour * 3600 + minute * 60 + second) - Int64(offsetMinutes * 60)
        let instant = seconds * 1000 + Int64(millis)
        return range.contains(instant) ? instant : nil
    }

    /// The instants whose UTC form has a four-digit year: 0001-01-01T00:00:00.000Z through
    /// 9999-12-31T23:59:59.999Z.
    public static let range: ClosedRange<Int64> =
        Int64(daysFromCivil(year: 1, month: 1, day: 1)) * 86_400_000
        ... Int64(daysFromCivil(year: 9999, month: 12, day: 31) + 1) * 86_400_000 - 1

    /// Formats UTC milliseconds as `YYYY-MM-DDTHH:MM:SS.sssZ`.
    public static func format(_ millis: Int64) -> String {
        let (secondsTotal, ms) = floorDivMod(millis, 1000)
        let (days, secondOfDay) = floorDivMod(secondsTotal, 86_400)
        let (y, m, d) = civilFromDays(Int(days))
        let h = Int(secondOfDay / 3600), mi = Int(secondOfDay % 3600 / 60), s = Int(secondOfDay % 60)
        guard (0...9999).contains(y) else {
            // Outside what `parse` accepts (`range`): only a caller's arbitrary instant gets here.
            func pad(_ v: Int, _ w: Int) -> String {
                let t = String(v)
                return String(repeating: "0", count: max(0, w - t.count)) + t
            }
            return "\(pad(y, 4))-\(pad(m, 2))-\(pad(d, 2))T\(pad(h, 2)):\(pad(mi, 2)):\(pad(s, 2)).\(pad(Int(ms), 3))Z"
        }
        // Written into place: every accepted event's `occurred_at` is formatted once.
        return String(unsafeUninitializedCapacity: 24) { out in
            var i = 0
            func put(_ value: Int, _ width: Int, then separator: UInt8?) {
                var v = value
                for k in stride(from: width - 1, through: 0, by: -1) {
                    out[i + k] = UInt8(48 + v % 10)
                    v /= 10
                }
                i += width
                if let separator { out[i] = separator; i += 1 }
            }
            put(y, 4, then: UInt8(ascii: "-")); put(m, 2, then: UInt8(ascii: "-")); put(d, 2, then: UInt8(ascii: "T"))
            put(h, 2, then: UInt8(ascii: ":")); put(mi, 2, then: UInt8(ascii: ":")); put(s, 2, then: UInt8(ascii: "."))
            put(Int(ms), 3, then: UInt8(ascii: "Z"))
            return i
        }
    }

    static func floorDivMod(_ a: Int64, _ b: Int64) -> (Int64, Int64) {
        var q = a / b, r = a % b
        if r < 0 { q -= 1; r += b }
        return (q, r)
    }

    static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    // Howard Hinnant's days_from_civil / civil_from_days.
    static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    static func civilFromDays(_ days: Int) -> (Int, Int, Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (m <= 2 ? 1 : 0), m, d)
    }
}
