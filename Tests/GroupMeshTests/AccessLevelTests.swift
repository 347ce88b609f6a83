import Foundation
import Testing

/// Only the `GroupMesh` library is a product: what its sibling modules declare for each other is
/// `package`, so that a `public` in them says "part of the library's API" and nothing else.
@Suite struct AccessLevelTests {
    /// The modules no product exports.
    static let packageModules = ["MeshCore", "MeshCrypto", "MeshStore", "MeshTestKit", "MeshBench", "MeshFuzz"]
    /// Public because `@inlinable` readers of `ByteBuffer` (used across modules) name them, and
    /// an inlinable function may name only public declarations.
    static let allowed: Set<String> = [
        "Sources/MeshCore/Wire/WireError.swift", "Sources/MeshCrypto/SHA256Digest.swift",
    ]

    @Test("the modules that are not products declare nothing public, but for the inlinable readers' types")
    func siblingModulesUsePackage() throws {
        let files = DocumentationTests.files(
            under: Self.packageModules.map { "Sources/" + $0 }, extensions: ["swift"])
        #expect(files.count > 100, "the sources were found: \(files.count) files")
        var found: [String] = []
        for path in files where !Self.allowed.contains(path) {
            let text = try DocumentationTests.text(path)
            for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated()
            where Self.declaresPublic(String(line)) {
                found.append("\(path):\(index + 1)")
            }
        }
        #expect(found.isEmpty, "declared public, but only sibling modules use it (make it package): \(found)")
    }

    /// Whether `line` (outside its comment and string literals) makes something `public` or
    /// `open`, wherever the modifier stands among the others.
    static func declaresPublic(_ line: String) -> Bool {
        var code = line
        if let comment = code.range(of: "//") { code = String(code[..<comment.lowerBound]) }
        code = code.replacingOccurrences(of: #""([^"\\]|\\.)*""#, with: "\"\"", options: .regularExpression)
        let pattern =
            #"(^|[\s)])(public|open)(\(set\))?\s+(@|static|class|final|func|var|let|init|struct|enum|"#
            + #"protocol|typealias|extension|subscript|mutating|nonmutating|private|internal|override|"#
            + #"convenience|required|indirect|actor|lazy|nonisolated|dynamic|weak|unowned|case|consuming|borrowing)"#
        return code.range(of: pattern, options: .regularExpression) != nil
    }

    @Test("the check sees public however it is written, and not in comments, strings or other words")
    func theCheckSeesEveryForm() {
        for line in [
            "public struct A {", "\tpublic var b = 1", "    static public func c()", "final public class D {}",
            "@available(macOS 14, *) public func e()", "nonisolated public var f: Int", "open class G {}",
            "    public private(set) var h = 0",
        ] {
            #expect(Self.declaresPublic(line), "\(line)")
        }
        for line in [
            "// public struct A", "let key = publicKey", "let fd = open(path, O_RDONLY)",
            #"print("public var x")"#, "package struct B {}", "/// a public API",
        ] {
            #expect(!Self.declaresPublic(line), "\(line)")
        }
    }
}
