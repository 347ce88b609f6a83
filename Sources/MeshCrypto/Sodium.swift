import CSodium

/// libsodium must be initialised once before any call; every entry point of this module
/// goes through `Sodium.ensureInitialized()` so callers never have to remember.
enum Sodium {
    private static let initialized: Bool = sodium_init() >= 0

    @inline(__always)
    static func ensureInitialized() {
        // sodium_init only fails when the OS has no usable entropy source; nothing in this
        // process could be kept secret then, so stopping is the only safe answer.
        precondition(initialized, "libsodium could not initialise (no entropy source)")
    }
}

/// The process's cryptographic random source (libsodium's `randombytes_buf`).
/// Only the shell calls it: `MeshCore` receives randomness from an injected generator.
package enum SecureRandom {
    package static func bytes(_ count: Int) -> [UInt8] {
        Sodium.ensureInitialized()
        guard count > 0 else { return [] }
        var out = [UInt8](repeating: 0, count: count)
        out.withUnsafeMutableBytes { randombytes_buf($0.baseAddress!, $0.count) }  // safe: count > 0
        return out
    }

    package static func uint64() -> UInt64 {
        Sodium.ensureInitialized()
        var value: UInt64 = 0
        withUnsafeMutableBytes(of: &value) { randombytes_buf($0.baseAddress!, $0.count) }  // safe: 8 bytes
        return value
    }
}

/// A random generator backed by libsodium, for the shell to hand to the state machines.
package struct SodiumRandomNumberGenerator: RandomNumberGenerator, Sendable {
    package init() {}
    package mutating func next() -> UInt64 { SecureRandom.uint64() }
}
