import Foundation

/// A size for people: bytes under 1 KiB, else one decimal of KiB, MiB or GiB.
package enum ByteCount {
    package static func text(_ bytes: UInt64) -> String {
        let units = ["B", "KiB", "MiB", "GiB"]
        var value = Double(bytes)
        var unit = 0
        while value >= 1024, unit < units.count - 1 { value /= 1024; unit += 1 }
        return unit == 0 ? "\(bytes) B" : String(format: "%.1f %@", value, units[unit])
    }
}
