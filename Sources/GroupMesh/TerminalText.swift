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

    /// The columns a terminal gives `text`: two for a wide character (CJK, Hangul, fullwidth
    /// forms, emoji), none for a combining mark or a zero-width one, one otherwise. Tables pad by
    /// it: padding by UTF-16 units cut emoji in half, and by characters shifted every column after
    /// a wide one.
    public static func columns(_ text: String) -> Int {
        text.reduce(0) { $0 + columns($1) }
    }

    static func columns(_ character: Character) -> Int {
        guard let first = character.unicodeScalars.first else { return 0 }
        // Emoji presentation, by default or asked for with variation selector 16.
        if isWide(first.value)
            || character.unicodeScalars.contains(where: { $0.properties.isEmojiPresentation || $0.value == 0xFE0F })
        {
            return 2
        }
        switch first.properties.generalCategory {
        case .nonspacingMark, .enclosingMark, .format: return 0
        default: return 1
        }
    }

    /// East Asian Wide and Fullwidth blocks (UAX #11), in the large.
    private static func isWide(_ value: UInt32) -> Bool {
        switch value {
        case 0x1100...0x115F, 0x2E80...0x303E, 0x3041...0x33FF, 0x3400...0x4DBF, 0x4E00...0x9FFF, 0xA000...0xA4CF,
            0xAC00...0xD7A3, 0xF900...0xFAFF, 0xFE30...0xFE4F, 0xFF00...0xFF60, 0xFFE0...0xFFE6, 0x1F300...0x1F64F,
            0x1F900...0x1F9FF, 0x20000...0x2FFFD, 0x30000...0x3FFFD:
            return true
        default: return false
        }
    }

    /// The start of `text` that fits in `width` columns (a wide character that would straddle the
    /// edge is left out whole).
    public static func cut(_ text: String, to width: Int) -> String {
        var used = 0
        var end = text.startIndex
        for index in text.indices {
            used += columns(text[index])
            if used > width { break }
            end = text.index(after: index)
        }
        return String(text[..<end])
    }

    /// `text` and spaces up to `width` columns.
    public static func padded(_ text: String, to width: Int) -> String {
        text + String(repeating: " ", count: max(0, width - columns(text)))
    }

    private static func hex(_ value: UInt32, digits: Int) -> String {
        let text = String(value, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, digits - text.count)) + text
    }
}
