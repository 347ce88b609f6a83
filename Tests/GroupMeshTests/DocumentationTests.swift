import Foundation
import Testing

/// The repository's own documents, read from the checkout: the rules that keep them readable and
/// self-contained (Docs/DESIGN-NOTES.md says where rationale goes instead).
@Suite struct DocumentationTests {
    /// The repository's root: this file is Tests/GroupMeshTests/DocumentationTests.swift.
    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func text(_ path: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
    }

    /// A paragraph: a run of lines of prose, ended by a blank line, a heading, a table or a fenced
    /// code block; each list item (`- `, `* `, `1. `, nested or not) starts one of its own.
    /// Returns the first line (1-based) and the length of every paragraph longer than `limit`.
    static func longParagraphs(in text: String, limit: Int) -> [(line: Int, count: Int)] {
        var long: [(line: Int, count: Int)] = []
        var start = 0
        var count = 0
        var inFence = false
        func close() {
            if count > limit { long.append((start, count)) }
            count = 0
        }
        for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let trimmed = line.drop { $0 == " " || $0 == "\t" }
            if trimmed.hasPrefix("```") {
                close()
                inFence.toggle()
                continue
            }
            if inFence { continue }
            if trimmed.isEmpty || line.hasPrefix("#") || trimmed.hasPrefix("|") {
                close()
                continue
            }
            if isListItem(trimmed) { close() }
            if count == 0 { start = index + 1 }
            count += 1
        }
        close()
        return long
    }

    static func isListItem(_ line: Substring) -> Bool {
        if line.hasPrefix("- ") || line.hasPrefix("* ") || line.hasPrefix("+ ") { return true }
        let digits = line.prefix { $0.isASCII && $0.isNumber }
        return !digits.isEmpty && line.dropFirst(digits.count).hasPrefix(". ")
    }

    @Test("no paragraph or list item of PROTOCOL.md runs over 25 lines")
    func protocolParagraphsAreShort() throws {
        let long = Self.longParagraphs(in: try Self.text("Docs/PROTOCOL.md"), limit: 25)
        #expect(long.isEmpty, "Docs/PROTOCOL.md: \(long.map { "line \($0.line), \($0.count) lines" })")
    }

    @Test("the paragraph check counts what it should: prose, list items apart, not code or tables")
    func paragraphCheckSeesLongParagraphs() {
        let prose = Array(repeating: "words", count: 26).joined(separator: "\n")
        #expect(Self.longParagraphs(in: prose, limit: 25).map(\.count) == [26])
        let items = Array(repeating: "- an item", count: 30).joined(separator: "\n")
        #expect(Self.longParagraphs(in: items, limit: 25).isEmpty)
        let code = "```\n" + prose + "\n```"
        #expect(Self.longParagraphs(in: code, limit: 25).isEmpty)
        let table = Array(repeating: "| a | b |", count: 30).joined(separator: "\n")
        #expect(Self.longParagraphs(in: table, limit: 25).isEmpty)
        #expect(Self.longParagraphs(in: "intro\n\n" + prose, limit: 25).map(\.line) == [3])
    }

    /// Every text file the project writes (not build products, not the git directory).
    static func files(under directories: [String], extensions: Set<String>) -> [String] {
        var paths: [String] = []
        for directory in directories {
            let url = root.appendingPathComponent(directory)
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory) else { continue }
            if !isDirectory.boolValue {
                paths.append(directory)
                continue
            }
            guard let walker = FileManager.default.enumerator(atPath: url.path) else { continue }
            while let relative = walker.nextObject() as? String {
                let ext = (relative as NSString).pathExtension
                if extensions.contains(ext) { paths.append(directory + "/" + relative) }
            }
        }
        return paths.sorted()
    }

    @Test("no document, source or test cites a tracker's issue numbers or files outside the repository")
    func noCitationsOutsideTheRepository() throws {
        // Built from pieces, so that this file does not match what it looks for. Each regex runs
        // only on a file that holds its word (regexes are slow, and most files hold none).
        let issue = "iss" + "ue"
        let patterns: [(word: String, regex: Regex<AnyRegexOutput>)] = [
            (issue, try Regex("(?i)\\b\(issue)\\s*#")),
            (issue, try Regex("(?i)\\b\(issue)\\s+[0-9]")),
            ("DESIGN", try Regex("DESIGN" + "\\.md")),
            ("shared", try Regex("\\.\\./" + "shared")),
        ]
        let paths = Self.files(
            under: ["README.md", "Docs", "Sources", "Tests"],
            extensions: ["md", "swift", "c", "h", "modulemap", "txt", "json"])
        #expect(paths.count > 100, "found only \(paths.count) files under \(Self.root.path)")
        var found: [String] = []
        for path in paths {
            let text = try Self.text(path)
            let lowercased = text.lowercased()
            for pattern in patterns
            where lowercased.contains(pattern.word.lowercased()) && text.contains(pattern.regex) {
                found.append(path)
            }
        }
        #expect(found.isEmpty, "outside citations in: \(found)")
    }

    @Test(
        "the documents stay within their length budgets",
        arguments: [
            ("Docs/BENCHMARKS.md", 400), ("Docs/RELIABILITY.md", 300), ("README.md", 150),
        ])
    func documentLengths(path: String, limit: Int) throws {
        let text = try Self.text(path)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).count - (text.hasSuffix("\n") ? 1 : 0)
        #expect(lines <= limit, "\(path) has \(lines) lines (at most \(limit))")
    }
}
