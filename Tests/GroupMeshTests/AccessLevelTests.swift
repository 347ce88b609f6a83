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
            for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                let code = line.drop { $0 == " " }
                guard !code.hasPrefix("//") else { continue }
                let words = code.split(separator: " ").prefix { $0.hasPrefix("@") || $0 == "public" }
                if words.contains("public") { found.append("\(path):\(index + 1)") }
            }
        }
        #expect(found.isEmpty, "declared public, but only sibling modules use it (make it package): \(found)")
    }
}
