import Foundation

/// `run --relay-budget RATE`: how much this node carries for others, all pairs together
/// (PROTOCOL.md §1d). `off` (or `0`) carries nothing, as `--no-relay` does.
enum RelayBudget: Equatable, CustomStringConvertible {
    case off
    case bytesPerSecond(Int)

    /// Bytes per second of each unit; bit rates are decimal, as line rates are sold.
    static let units: [(name: String, bytes: Double)] = [
        ("B", 1), ("KiB", 1024), ("MiB", 1_048_576), ("GiB", 1_073_741_824),
        ("kB", 1e3), ("KB", 1e3), ("MB", 1e6), ("GB", 1e9),
        ("kbit", 1e3 / 8), ("Kbit", 1e3 / 8), ("Mbit", 1e6 / 8), ("Gbit", 1e9 / 8),
    ]
    /// Less could not carry one pair's membership traffic and a trickle of pieces.
    static let minimum = 64 << 10
    static let maximum = 100 << 30

    init(parsing text: String) throws(RelayBudgetError) {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if trimmed == "off" || trimmed == "0" {
            self = .off
            return
        }
        var body = Substring(trimmed)
        if body.hasSuffix("/s") { body = body.dropLast(2) }
        let numberEnd = body.firstIndex { !($0.isASCII && ($0.isNumber || $0 == ".")) } ?? body.endIndex
        let unitText = body[numberEnd...].trimmingCharacters(in: .whitespaces)
        guard let number = Double(body[..<numberEnd]), number.isFinite, number > 0,
            let unit = Self.units.first(where: { $0.name == unitText })
        else {
            throw RelayBudgetError(
                text: text,
                problem: "is not a rate: give a number and a unit, "
                    + "e.g. 20MiB/s or 100Mbit (B, KiB, MiB, GiB, kB, MB, GB per second, or kbit, Mbit, Gbit), or off")
        }
        let bytes = number * unit.bytes
        guard bytes >= Double(Self.minimum), bytes <= Double(Self.maximum) else {
            throw RelayBudgetError(
                text: text,
                problem: "must be between 64KiB/s and 100GiB/s (or off, which relays nothing)")
        }
        self = .bytesPerSecond(Int(bytes))
    }

    var description: String {
        switch self {
        case .off: "off"
        case let .bytesPerSecond(bytes): Self.format(bytesPerSecond: bytes)
        }
    }

    /// `20.0 MiB/s`, `512 KiB/s`: a rate as status prints it.
    static func format(bytesPerSecond bytes: Int) -> String {
        let value = Double(bytes)
        if value >= Double(1 << 30) { return String(format: "%.1f GiB/s", value / Double(1 << 30)) }
        if value >= Double(1 << 20) { return String(format: "%.1f MiB/s", value / Double(1 << 20)) }
        return String(format: "%.0f KiB/s", value / 1024)
    }
}

/// A `--relay-budget` (or config file "relay-budget") that is no rate: one line saying why.
struct RelayBudgetError: Error, CustomStringConvertible {
    let text: String
    let problem: String
    var description: String { "relay budget \"\(text)\" \(problem)" }
}
