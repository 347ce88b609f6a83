import GroupMesh
import MeshCore
import MeshCrypto
import MeshTestKit
import Testing

@Suite("Text from members, printed to a terminal")
struct TerminalTextTests {
    @Test(
        "control characters become visible escapes; ordinary text, accents and emoji stay as they are",
        arguments: [
            ("alice", "alice"),
            ("zoë 🎉 C:\\path", "zoë 🎉 C:\\path"),
            ("evil\u{1B}[31mred", "evil\\e[31mred"),
            ("name\nfake-row  alive", "name\\nfake-row  alive"),
            ("\u{1B}]52;c;aGk=\u{07}", "\\e]52;c;aGk=\\x07"),
            ("tab\tcr\r", "tab\\tcr\\r"),
            ("\u{0}\u{7F}", "\\x00\\x7F"),
            ("\u{9B}2J", "\\u{009B}2J"),
            ("abc\u{202E}fdp.exe", "abc\\u{202E}fdp.exe"),
            ("line\u{2028}sep", "line\\u{2028}sep"),
        ])
    func escapes(input: String, expected: String) {
        #expect(TerminalText.escaped(input) == expected)
    }

    @Test(
        "columns: wide characters and emoji take two, combining marks none; padding and cutting keep characters whole",
        arguments: [
            ("alice", 5), ("zoë", 3), ("zoe\u{301}", 3), ("日本語", 6), ("party🎉🎉", 9), ("👍🏽", 2), ("❤️", 2),
            ("a\u{200B}b", 2), ("", 0),
        ])
    func columns(text: String, expected: Int) {
        #expect(TerminalText.columns(text) == expected)
        let padded = TerminalText.padded(text, to: 10)
        #expect(padded.hasPrefix(text) && TerminalText.columns(padded) == max(10, expected))
        #expect(TerminalText.cut(padded, to: expected) == text)
        // Never half of a character: cut one column short, a wide last character goes whole.
        let shorter = TerminalText.cut(text, to: max(0, expected - 1))
        #expect(text.hasPrefix(shorter) && TerminalText.columns(shorter) <= max(0, expected - 1))
    }

    @Test("no output of any input holds a control character", arguments: SimulationSeeds.from(defaultCount: 2))
    func nothingGetsThrough(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        for _ in 0..<2_000 {
            let scalars = (0..<Int.random(in: 0...24, using: &random)).compactMap { _ in
                Unicode.Scalar(UInt32.random(in: 0...0x2100, using: &random))
            }
            var text = ""
            text.unicodeScalars.append(contentsOf: scalars)
            let escaped = TerminalText.escaped(text)
            #expect(
                !escaped.unicodeScalars.contains {
                    $0.value < 0x20 || (0x7F...0x9F).contains($0.value) || $0 == "\u{202E}"
                },
                "\(SimulationSeeds.replay(seed)): \(Array(text.unicodeScalars.map(\.value)))")
        }
    }

    @Test("the protocol gap line names the member, escaped, and both versions, saying which side must upgrade")
    func protocolGapLine() {
        let member = NodeID(high: 0x0123_4567_89ab_cdef, low: 1)
        let newer = ProtocolGapNotice.line(
            member: member, name: "bob\u{1b}[2J", theirs: SpokenVersions(current: 4, oldest: 3), ours: .this)
        #expect(
            newer == "bob\\e[2J (0123456789ab) speaks protocol 4 (oldest 3); this node speaks 2 (oldest 1): "
                + "upgrade groupmesh on this node")
        let older = ProtocolGapNotice.line(
            member: member, name: "", theirs: .unannounced, ours: SpokenVersions(current: 3, oldest: 2))
        #expect(
            older == "0123456789ab speaks protocol 1 (oldest 1); this node speaks 3 (oldest 2): "
                + "that member must upgrade groupmesh")
    }
}
