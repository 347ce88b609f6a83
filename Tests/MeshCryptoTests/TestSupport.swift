#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import Testing
@testable import MeshCrypto

/// SplitMix64 (Steele, Lea, Flood 2014): a tiny seeded generator, so that every random
/// test can be replayed from the seed it prints.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9e37_79b9_7f4a_7c15
        var z = state
        z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
        z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
        return z ^ (z >> 31)
    }
    mutating func bytes(_ count: Int) -> [UInt8] {
        (0..<count).map { _ in UInt8.random(in: 0...255, using: &self) }
    }
}

/// The seed for randomised tests: `GROUPMESH_TEST_SEED` when set, else a fixed default.
func testSeed(_ fallback: UInt64) -> UInt64 {
    if let text = getenv("GROUPMESH_TEST_SEED"), let value = UInt64(String(cString: text)) { return value }
    return fallback
}

/// Bytes from a hex literal; whitespace between digits is ignored. Traps on bad literals
/// (they are written in the tests, not read from outside).
func hex(_ text: String) -> [UInt8] {
    let compact = String(text.unicodeScalars.filter { !$0.properties.isWhitespace })
    guard let bytes = Hex.decode(compact) else { fatalError("bad hex literal in test: \(text)") }
    return bytes
}

/// A fresh private directory, removed (with its files) by `remove()`.
struct TemporaryDirectory {
    let path: String

    init() throws {
        var template = Array("/tmp/meshcrypto-tests-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw TemporaryDirectoryError() }
        path = String(cString: made)
    }

    func file(_ name: String) -> String { path + "/" + name }

    func remove() {
        if let dir = opendir(path) {
            while let entry = readdir(dir) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                    String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
                }
                if name != "." && name != ".." { unlink(file(name)) }
            }
            closedir(dir)
        }
        rmdir(path)
    }

    func names() -> [String] {
        var out: [String] = []
        guard let dir = opendir(path) else { return out }
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { out.append(name) }
        }
        closedir(dir)
        return out.sorted()
    }
}

struct TemporaryDirectoryError: Error {}

/// The permission bits of a file, or nil when it cannot be stat'ed.
func permissionBits(_ path: String) -> UInt32? {
    var info = stat()
    guard stat(path, &info) == 0 else { return nil }
    return UInt32(info.st_mode) & 0o777
}

/// Writes `bytes` to `path` with the given mode, bypassing KeyFile.
func writeRaw(_ bytes: [UInt8], to path: String, mode: mode_t) throws {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode)
    guard fd >= 0 else { throw TemporaryDirectoryError() }
    defer { close(fd) }
    if !bytes.isEmpty {
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress!, $0.count) }
        guard written == bytes.count else { throw TemporaryDirectoryError() }
    }
    guard fchmod(fd, mode) == 0 else { throw TemporaryDirectoryError() }  // umask may have cut bits
}
