/// Text that came from another member (names, addresses, messages, metadata, errors that name a
/// member), made safe for a terminal: printed raw, a member could move the cursor, set the
/// clipboard (OSC 52), add a fake row with a newline, or turn the rest of the line around with a
/// bidirectional override. Every control character becomes a visible escape (`\e`, `\n`, `\x07`,
/// `\u{202E}`); the rest of the text, backslashes included, is left as it is. JSON output needs
/// none of this: its encoder escapes control characters itself.
public enum TerminalText {
    public static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: needsEscape) else { return text }
        var out = ""
        out.reserveCapacity(text.utf8.count + 8)
        for scalar in text.unicodeScalars {
            guard needsEscape(scalar) else {
                out.unicodeScalars.append(scalar)
                continue
            }
            switch scalar {
            case "\u{1B}": out += "\\e"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x80: out += "\\x" + hex(scalar.value, digits: 2)
            default: out += "\\u{" + hex(scalar.value, digits: 4) + "}"
            }
        }
        return out
    }

    /// C0 and C1 controls, DEL, the line and paragraph separators, and the bidirectional
    /// embeddings, overrides, isolates and marks.
    public static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F: return true
        case 0x061C, 0x200E, 0x200F, 0x2028, 0x2029, 0x202A...0x202E, 0x2066...0x2069: return true
        default: return false
        }
    }

    private static func hex(_ value: UInt32, digits: Int) -> String {
        let text = String(value, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, digits - text.count)) + text
    }
}
